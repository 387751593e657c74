//! The one little-endian codec of quorumlog: a bounds-checked [`Reader`]
//! that every decoder of every crate uses (a short or hostile input is an
//! error, never a panic, and nothing is allocated beyond what the input
//! holds), and a [`Writer`] for encoders.

/// The input ended before a field could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Short {
    /// Bytes the field needed.
    pub needed: usize,
    /// Bytes that were left.
    pub remaining: usize,
}

impl std::fmt::Display for Short {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "input ends early: {} bytes needed, {} left",
            self.needed, self.remaining
        )
    }
}

impl std::error::Error for Short {}

/// `n` as the `u32` a format stores for a length or a count.
///
/// # Panics
/// If `n` does not fit: every caller bounds what it encodes far below
/// 4 GiB (a batch, a chunk, a small file), so this is a bug, never
/// silently a wrong value on disk.
pub fn u32_len(n: usize) -> u32 {
    let v = u32::try_from(n).ok();
    assert!(v.is_some(), "length {n} does not fit the format's u32");
    v.unwrap_or(u32::MAX)
}

/// Reads little-endian fields from a byte slice, front to back.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads from `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.rest.len()
    }

    /// The bytes not yet read.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// Takes the next `n` bytes.
    ///
    /// # Errors
    /// [`Short`] if fewer remain.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Short> {
        if n > self.rest.len() {
            return Err(Short {
                needed: n,
                remaining: self.rest.len(),
            });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    /// Takes the next `N` bytes as an array.
    ///
    /// # Errors
    /// [`Short`] if fewer remain.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        let (head, tail) = self.rest.split_first_chunk::<N>().ok_or(Short {
            needed: N,
            remaining: self.rest.len(),
        })?;
        self.rest = tail;
        Ok(*head)
    }

    /// Reads a `u8`.
    ///
    /// # Errors
    /// [`Short`] at the end of the input.
    pub fn u8(&mut self) -> Result<u8, Short> {
        let [b] = self.array::<1>()?;
        Ok(b)
    }

    /// Reads a little-endian `u16`.
    ///
    /// # Errors
    /// [`Short`] if fewer than 2 bytes remain.
    pub fn u16(&mut self) -> Result<u16, Short> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// Reads a little-endian `u32`.
    ///
    /// # Errors
    /// [`Short`] if fewer than 4 bytes remain.
    pub fn u32(&mut self) -> Result<u32, Short> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// Reads a little-endian `u64`.
    ///
    /// # Errors
    /// [`Short`] if fewer than 8 bytes remain.
    pub fn u64(&mut self) -> Result<u64, Short> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Reads a little-endian `u128`.
    ///
    /// # Errors
    /// [`Short`] if fewer than 16 bytes remain.
    pub fn u128(&mut self) -> Result<u128, Short> {
        Ok(u128::from_le_bytes(self.array()?))
    }
}

/// The bytes `range` of `buf`, asserted to be inside it: for the write
/// path, where a wrong length is a bug and a panic the safe failure (a
/// silent skip would write a wrong batch).
///
/// # Panics
/// If `range` is not inside `buf`.
pub fn slice_mut(buf: &mut [u8], range: std::ops::Range<usize>) -> &mut [u8] {
    let len = buf.len();
    let (start, end) = (range.start, range.end);
    let window = buf.get_mut(range);
    assert!(
        window.is_some(),
        "bytes {start}..{end} outside a {len}-byte buffer"
    );
    window.unwrap_or_default()
}

/// Copies `src` into `dst` at `at`, asserted to fit ([`slice_mut`]).
///
/// # Panics
/// If `src` does not fit in `dst` at `at`.
pub fn copy_into(dst: &mut [u8], at: usize, src: &[u8]) {
    slice_mut(dst, at..at.saturating_add(src.len())).copy_from_slice(src);
}

/// Writes little-endian fields to a growing buffer.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty buffer.
    #[inline]
    pub fn new() -> Self {
        Writer::default()
    }

    /// An empty buffer with room for `n` bytes.
    #[inline]
    pub fn with_capacity(n: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }

    /// Appends raw bytes.
    #[inline]
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }

    /// Appends a `u8`.
    #[inline]
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    /// Appends a little-endian `u16`.
    #[inline]
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends a little-endian `u32`.
    #[inline]
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends a little-endian `u64`.
    #[inline]
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends a little-endian `u128`.
    #[inline]
    pub fn u128(&mut self, v: u128) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Bytes written so far.
    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing was written.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes written so far.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    /// The encoded bytes.
    #[inline]
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_short_inputs() {
        let mut w = Writer::new();
        w.u8(1).u16(2).u32(3).u64(4).u128(5).bytes(b"xy");
        let bytes = w.finish();
        let mut r = Reader::new(&bytes);
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.u16(), Ok(2));
        assert_eq!(r.u32(), Ok(3));
        assert_eq!(r.u64(), Ok(4));
        assert_eq!(r.u128(), Ok(5));
        assert_eq!(r.bytes(2), Ok(&b"xy"[..]));
        assert_eq!(r.remaining(), 0);
        // Every prefix fails cleanly at the field it cuts.
        for cut in 0..bytes.len() {
            let mut r = Reader::new(&bytes[..cut]);
            let all = (|| {
                r.u8()?;
                r.u16()?;
                r.u32()?;
                r.u64()?;
                r.u128()?;
                r.bytes(2)?;
                Ok::<(), Short>(())
            })();
            assert!(all.is_err(), "cut {cut}");
        }
        assert_eq!(
            Reader::new(&[1, 2]).u32(),
            Err(Short {
                needed: 4,
                remaining: 2
            })
        );
    }
}
