//! The on-disk envelope shared by every small file of a data directory.
//!
//! ```text
//!  0        4         6          8            12                 12+n       16+n
//!  +--------+---------+----------+------------+------------------+----------+
//!  | magic  | version | reserved | body_len n | body             | crc32c   |
//!  | 4 B    | u16 LE  | u16 LE=0 | u32 LE     | n bytes          | u32 LE   |
//!  +--------+---------+----------+------------+------------------+----------+
//!  crc32c (Castagnoli) covers bytes [0, 12+n): magic, version, length, body.
//! ```
//!
//! The file must be exactly `16 + n` bytes long: a shorter file is
//! truncated, a longer one has trailing bytes; both are corruption. Each kind
//! of file has its own magic, so a file copied over another is detected.
//! Bodies are little-endian with explicit widths and are canonical: a decoded
//! body re-encodes to the same bytes.

use std::mem::size_of;

use crate::error::CorruptionKind;

/// The magic of each kind of file.
pub(crate) mod magic {
    /// `meta`: the data directory's identity.
    pub(crate) const META: [u8; 4] = *b"QLMT";
    /// `quorum-state`: epoch, leader, vote and voters.
    pub(crate) const QUORUM_STATE: [u8; 4] = *b"QLQS";
    /// `checkpoints/recovery-point`.
    pub(crate) const RECOVERY_POINT: [u8; 4] = *b"QLRP";
    /// `checkpoints/high-watermark`.
    pub(crate) const HIGH_WATERMARK: [u8; 4] = *b"QLHW";
    /// `checkpoints/log-start-offset`.
    pub(crate) const LOG_START_OFFSET: [u8; 4] = *b"QLLS";
    /// `checkpoints/epoch-map`.
    pub(crate) const EPOCH_MAP: [u8; 4] = *b"QLEM";
    /// `app-metadata`: the Raft library's own durable bytes.
    pub(crate) const APP_METADATA: [u8; 4] = *b"QLAM";
    /// `voter-history`: the Raft layer's voter-set records by offset.
    pub(crate) const VOTER_HISTORY: [u8; 4] = *b"QLVH";
}

/// The version every small file is written with, and the only one read.
pub(crate) const VERSION: u16 = 1;

const MAGIC_BYTES: usize = 4;
/// Bytes before the body.
pub(crate) const HEADER_BYTES: usize =
    MAGIC_BYTES + size_of::<u16>() + size_of::<u16>() + size_of::<u32>();
/// Bytes after the body.
pub(crate) const TRAILER_BYTES: usize = size_of::<u32>();
/// The largest body any small file may carry (a quorum state with thousands
/// of voters fits); larger claims are corruption, never an allocation.
pub(crate) const MAX_BODY_BYTES: usize = 1 << 20;
/// The largest small file, for callers that check a length before reading.
pub(crate) const MAX_FILE_BYTES: usize = HEADER_BYTES + MAX_BODY_BYTES + TRAILER_BYTES;

/// Wraps `body` in the envelope.
///
/// # Panics
/// If `body` exceeds [`MAX_BODY_BYTES`]: callers bound what they encode.
pub(crate) fn encode(magic: [u8; 4], body: &[u8]) -> Vec<u8> {
    assert!(body.len() <= MAX_BODY_BYTES, "small-file body too large");
    let len = u32::try_from(body.len()).ok();
    assert!(len.is_some(), "bounded by MAX_BODY_BYTES");
    let mut w = Writer::with_capacity(HEADER_BYTES + body.len() + TRAILER_BYTES);
    w.bytes(&magic)
        .u16(VERSION)
        .u16(0)
        .u32(len.unwrap_or(0))
        .bytes(body);
    let crc = crc32c::crc32c(w.as_slice());
    w.u32(crc);
    w.finish()
}

/// Checks the envelope and returns the body.
///
/// # Errors
/// The [`CorruptionKind`] that describes the first thing found wrong.
pub(crate) fn decode(magic: [u8; 4], bytes: &[u8]) -> Result<&[u8], CorruptionKind> {
    let truncated = |needed: usize| CorruptionKind::Truncated {
        len: bytes.len() as u64,
        needed: needed as u64,
    };
    if bytes.len() < HEADER_BYTES + TRAILER_BYTES {
        return Err(truncated(HEADER_BYTES + TRAILER_BYTES));
    }
    let mut r = Reader::new(bytes);
    let found = r.array::<4>()?;
    if found != magic {
        return Err(CorruptionKind::BadMagic {
            expected: magic,
            found,
        });
    }
    let version = r.u16()?;
    let reserved = r.u16()?;
    let body_len = usize::try_from(r.u32()?).unwrap_or(usize::MAX);
    if body_len > MAX_BODY_BYTES {
        return Err(CorruptionKind::Malformed("body length over the maximum"));
    }
    let total = HEADER_BYTES + body_len + TRAILER_BYTES;
    if bytes.len() < total {
        return Err(truncated(total));
    }
    if bytes.len() > total {
        return Err(CorruptionKind::TrailingBytes {
            len: bytes.len() as u64,
            expected: total as u64,
        });
    }
    let body = r.bytes(body_len)?;
    let stored = r.u32()?;
    let covered = bytes
        .get(..HEADER_BYTES + body_len)
        .ok_or_else(|| truncated(total))?;
    let actual = crc32c::crc32c(covered);
    if stored != actual {
        return Err(CorruptionKind::ChecksumMismatch {
            stored,
            computed: actual,
        });
    }
    if version != VERSION {
        return Err(CorruptionKind::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    if reserved != 0 {
        return Err(CorruptionKind::Malformed(
            "reserved header bytes are not zero",
        ));
    }
    Ok(body)
}

/// The shared little-endian writer (`quorumlog_io::codec`).
pub(crate) use quorumlog_io::codec::Writer;

impl From<quorumlog_io::codec::Short> for CorruptionKind {
    fn from(s: quorumlog_io::codec::Short) -> Self {
        CorruptionKind::short(s)
    }
}

/// Little-endian reader for bodies over the shared bounds-checked cursor
/// (`quorumlog_io::codec::Reader`): a short input is a
/// [`CorruptionKind::Malformed`] error, never a panic.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    inner: quorumlog_io::codec::Reader<'a>,
}

impl<'a> Reader<'a> {
    /// Reads from `bytes`.
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Reader {
            inner: quorumlog_io::codec::Reader::new(bytes),
        }
    }

    /// Bytes not yet read.
    pub(crate) fn remaining(&self) -> usize {
        self.inner.remaining()
    }

    /// Takes the next `n` bytes.
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], CorruptionKind> {
        Ok(self.inner.bytes(n)?)
    }

    /// Takes the next `N` bytes.
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], CorruptionKind> {
        Ok(self.inner.array()?)
    }

    /// Reads a `u8`.
    pub(crate) fn u8(&mut self) -> Result<u8, CorruptionKind> {
        Ok(self.inner.u8()?)
    }

    /// Reads a little-endian `u16`.
    pub(crate) fn u16(&mut self) -> Result<u16, CorruptionKind> {
        Ok(self.inner.u16()?)
    }

    /// Reads a little-endian `u32`.
    pub(crate) fn u32(&mut self) -> Result<u32, CorruptionKind> {
        Ok(self.inner.u32()?)
    }

    /// Reads a little-endian `u64`.
    pub(crate) fn u64(&mut self) -> Result<u64, CorruptionKind> {
        Ok(self.inner.u64()?)
    }

    /// Reads a little-endian `u128`.
    pub(crate) fn u128(&mut self) -> Result<u128, CorruptionKind> {
        Ok(self.inner.u128()?)
    }

    /// Reads a presence flag (0 or 1).
    pub(crate) fn flag(&mut self) -> Result<bool, CorruptionKind> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(CorruptionKind::Malformed(
                "presence flag is neither 0 nor 1",
            )),
        }
    }

    /// Succeeds only if every byte was read.
    pub(crate) fn finish(self) -> Result<(), CorruptionKind> {
        if self.inner.remaining() == 0 {
            Ok(())
        } else {
            Err(CorruptionKind::Malformed("unexpected bytes after the body"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let bytes = encode(magic::META, b"body");
        assert_eq!(bytes.len(), HEADER_BYTES + 4 + TRAILER_BYTES);
        assert_eq!(decode(magic::META, &bytes).unwrap(), b"body");
        assert_eq!(decode(magic::META, &encode(magic::META, b"")).unwrap(), b"");
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let bytes = encode(magic::EPOCH_MAP, b"some body bytes");
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(magic::EPOCH_MAP, &bad).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn wrong_magic_version_length_are_typed() {
        let bytes = encode(magic::META, b"x");
        assert!(matches!(
            decode(magic::QUORUM_STATE, &bytes),
            Err(CorruptionKind::BadMagic { .. })
        ));
        assert!(matches!(
            decode(magic::META, &bytes[..bytes.len() - 1]),
            Err(CorruptionKind::Truncated { .. })
        ));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            decode(magic::META, &longer),
            Err(CorruptionKind::TrailingBytes { .. })
        ));
        // A validly checksummed file of a future version.
        let mut v2 = bytes[..=HEADER_BYTES].to_vec();
        v2[4..6].copy_from_slice(&2u16.to_le_bytes());
        let crc = crc32c::crc32c(&v2);
        v2.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode(magic::META, &v2),
            Err(CorruptionKind::UnsupportedVersion {
                found: 2,
                supported: VERSION
            })
        );
    }

    #[test]
    fn huge_length_claim_is_rejected_without_allocating() {
        let mut bytes = encode(magic::META, b"x");
        bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode(magic::META, &bytes),
            Err(CorruptionKind::Malformed(_))
        ));
    }

    #[test]
    fn reader_never_panics_on_short_input() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert!(r.u64().is_err());
        assert_eq!(r.u8().unwrap(), 1);
        assert!(Reader::new(&[2]).flag().is_err());
        assert!(Reader::new(&[0]).finish().is_err());
    }
}
