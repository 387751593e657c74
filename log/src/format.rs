//! The on-disk format of the log: segment files, batches, index files.
//!
//! Segment file `<base offset, 20 digits>.log`:
//! ```text
//!  0        4         6          8              16         24          28         32
//!  +--------+---------+----------+--------------+----------+-----------+----------+---------
//!  | magic  | version | reserved | base_offset  | salt     | reserved  | crc32c   | batches…
//!  | "QLSG" | u16 = 2 | u16 = 0  | u64          | u64 ≠ 0  | 4 B = 0   | of 0..28 |
//!  +--------+---------+----------+--------------+----------+-----------+----------+---------
//! ```
//! The file is preallocated to the segment size. A batch never spans
//! segments. Batches follow each other directly, except that after a sync
//! the next batch starts at the next 4 KiB page boundary
//! (`WriteAlignment::Page`): the bytes skipped are zeros, written with the
//! data before the sync.
//!
//! Segment files are recycled: a file a prefix truncation frees becomes the
//! next segment, its old bytes left in place. So the bytes after the last
//! batch are zeros, or **stale batches** of the file's earlier life. The
//! `salt` (random, new for every life of a file) makes those harmless: every
//! batch's stored CRC is `XOR`ed with the salt's mask, so a stale batch fails
//! verification in its new segment and reads as the end of the data, never
//! as data or as corruption.
//!
//! Batch:
//! ```text
//!  0       4        8           12       13      14         16           24      32             36          40
//!  +-------+--------+-----------+--------+-------+----------+------------+-------+--------------+-----------+---------
//!  | magic | crc32c | batch_len | version| flags | reserved | base_offset| epoch | record_count | records_len| payload…
//!  |"QLBA" | u32    | u32       | u8 = 3 | u8    | u16 = 0  | u64        | u64   | u32          | u32       |
//!  +-------+--------+-----------+--------+-------+----------+------------+-------+--------------+-----------+---------
//!  crc32c covers the payload [40, batch_len), then bytes [8, 40): every
//!  field that identifies the batch (length, version, flags, base offset,
//!  epoch, count). The header goes last so a batch can be encoded before
//!  its offset is known and placed in constant time. Stored XORed with the
//!  segment's salt mask (`Salt::mask`).
//! ```
//! `batch_len` counts the whole batch, header included. `flags` bits 0–1 are
//! the compression (0 none, 1 zstd); bit 2 marks a control batch (leader
//! change, voter set, snapshot markers: never user records); other bits
//! must be 0. The payload is the
//! records section, zstd-compressed when flagged; uncompressed it is
//! `records_len` bytes of `record_count × (len u32, bytes)`.
//!
//! A batch copied to a place where another belongs fails verification: its
//! base offset is checksummed, and readers check it against the offset the
//! position must hold (segment base, previous batch's end, index entry).
//!
//! Index file `<base offset, 20 digits>.index` (sparse offset index):
//! ```text
//!  0       4         6          8             16           24             32            36       40
//!  +-------+---------+----------+-------------+------------+--------------+-------------+--------+---------
//!  | magic | version | reserved | base_offset | end_offset | end_position | entry_count | crc32c | entries…
//!  |"QLIX" | u16     | u16 = 0  | u64         | u64        | u64          | u32         | u32    |
//!  +-------+---------+----------+-------------+------------+--------------+-------------+--------+---------
//!  entries: entry_count × (relative_offset u32, position u32)
//!  crc32c covers bytes [0, 36) and the entries.
//! ```
//! It describes the segment's batches up to `end_position`, whose next offset
//! is `end_offset`. It is trusted only when those match what the log knows.

use std::mem::size_of;

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::codec::{Reader, Writer};

use crate::error::CorruptionKind;

/// The page size writes are aligned to after a sync: bytes of a page that
/// holds acknowledged data are never written again.
pub(crate) const PAGE_BYTES: u64 = 4096;

/// `pos` rounded up to a page boundary.
pub(crate) fn align_up(pos: u64) -> u64 {
    pos.div_ceil(PAGE_BYTES) * PAGE_BYTES
}

/// Segment file magic.
pub(crate) const SEGMENT_MAGIC: [u8; 4] = *b"QLSG";
/// Batch magic.
pub(crate) const BATCH_MAGIC: [u8; 4] = *b"QLBA";
/// Index file magic.
pub(crate) const INDEX_MAGIC: [u8; 4] = *b"QLIX";
/// Version of the segment format (2: salted batch checksums, recycled
/// files).
pub(crate) const VERSION: u16 = 2;
/// Version of the index format.
pub(crate) const INDEX_VERSION: u16 = 1;
/// Batch format version (one byte in the batch header; 2: the stored CRC is
/// salted; 3: flag bit 2 marks control batches).
pub(crate) const BATCH_VERSION: u8 = 3;

/// A segment file's salt: chosen at random for each life of the file, so
/// the batches of an earlier life (left in a recycled file) never verify in
/// the new one. A batch's stored CRC is its CRC32C XOR [`Salt::mask`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Salt(pub u64);

impl Salt {
    /// No salt: how batches are encoded before they have a place
    /// ([`Salt::restamp`] moves them into a segment).
    pub(crate) const NONE: Salt = Salt(0);

    /// A fresh random salt whose mask is not zero.
    pub(crate) fn fresh() -> Salt {
        use std::hash::{BuildHasher, Hasher};
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        loop {
            // Random keys per `RandomState`, plus a counter and the clock:
            // distinct across files, lives and processes.
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            h.write_u128(now);
            let salt = Salt(h.finish());
            if salt.mask() != 0 {
                return salt;
            }
        }
    }

    /// The 32 bits `XOR`ed into every stored batch CRC: the salt's two
    /// halves folded.
    pub(crate) fn mask(self) -> u32 {
        let low = u32::try_from(self.0 & u64::from(u32::MAX)).unwrap_or(0);
        let high = u32::try_from(self.0 >> 32).unwrap_or(0);
        low ^ high
    }

    /// Re-salts an encoded batch from `from` to `self`: patches its stored
    /// CRC (bytes 4..8) and the header's copy.
    pub(crate) fn restamp(self, from: Salt, header: &mut BatchHeader, bytes: &mut [u8]) {
        header.crc ^= from.mask() ^ self.mask();
        quorumlog_io::codec::copy_into(bytes, 4, &header.crc.to_le_bytes());
    }
}

/// Bytes of the segment header; the first batch starts here.
pub(crate) const SEGMENT_HEADER_BYTES: usize = 32;
/// Bytes of a batch header.
pub(crate) const BATCH_HEADER_BYTES: usize = 4 + 4 + 4 + 1 + 1 + 2 + 8 + 8 + 4 + 4;
/// Bytes of a record's length prefix.
pub(crate) const RECORD_PREFIX_BYTES: usize = size_of::<u32>();
/// Bytes of an index file header.
pub(crate) const INDEX_HEADER_BYTES: usize = 40;
/// Bytes of one index entry.
pub(crate) const INDEX_ENTRY_BYTES: usize = 8;

/// Compression flag values (bits 0–1 of `flags`).
pub(crate) const COMPRESSION_NONE: u8 = 0;
/// zstd-compressed payload.
pub(crate) const COMPRESSION_ZSTD: u8 = 1;
/// The compression bits of `flags`.
const COMPRESSION_BITS: u8 = 0b11;
/// Flag bit 2: a control batch (leader change, voter set, snapshot
/// markers), never a user record.
pub(crate) const FLAG_CONTROL: u8 = 0b100;
const FLAGS_KNOWN: u8 = COMPRESSION_BITS | FLAG_CONTROL;

/// The file name of the segment with base offset `base`.
pub(crate) fn segment_file_name(base: Offset) -> String {
    format!("{:020}.log", base.0)
}

/// The file name of the index of the segment with base offset `base`.
pub(crate) fn index_file_name(base: Offset) -> String {
    format!("{:020}.index", base.0)
}

/// Parses `<20 digits>.<ext>` into a base offset.
pub(crate) fn parse_file_name(name: &str, ext: &str) -> Option<Offset> {
    let stem = name.strip_suffix(ext)?.strip_suffix('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok().map(Offset)
}

/// `Truncated`: `len` bytes where `needed` are required.
pub(crate) fn truncated(len: usize, needed: usize) -> CorruptionKind {
    CorruptionKind::Truncated {
        len: len as u64,
        needed: needed as u64,
    }
}

/// `UnsupportedVersion`.
fn unsupported(found: u16, supported: u16) -> CorruptionKind {
    CorruptionKind::UnsupportedVersion { found, supported }
}

/// Encodes a segment header.
pub(crate) fn encode_segment_header(base: Offset, salt: Salt) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut w = Writer::with_capacity(SEGMENT_HEADER_BYTES);
    w.bytes(&SEGMENT_MAGIC)
        .u16(VERSION)
        .u16(0)
        .u64(base.0)
        .u64(salt.0)
        .bytes(&[0; 4]);
    let crc = crc32c::crc32c(w.as_slice());
    w.u32(crc);
    let mut h = [0u8; SEGMENT_HEADER_BYTES];
    h.copy_from_slice(&w.finish());
    h
}

/// Verifies a segment header and returns its base offset and salt.
///
/// # Errors
/// The [`CorruptionKind`] found.
pub(crate) fn decode_segment_header(h: &[u8]) -> Result<(Offset, Salt), CorruptionKind> {
    let mut r = Reader::new(h);
    let magic = r.array::<4>()?;
    let version = r.u16()?;
    let reserved = r.u16()?;
    let base = r.u64()?;
    let salt = Salt(r.u64()?);
    let reserved_tail = r.array::<4>()?;
    let stored = r.u32()?;
    if magic != SEGMENT_MAGIC {
        return Err(CorruptionKind::BadMagic {
            expected: SEGMENT_MAGIC,
            found: magic,
        });
    }
    let computed = crc32c::crc32c(h.get(..28).unwrap_or_default());
    if stored != computed {
        return Err(CorruptionKind::ChecksumMismatch { stored, computed });
    }
    if version != VERSION {
        return Err(unsupported(version, VERSION));
    }
    if reserved != 0 || reserved_tail != [0; 4] {
        return Err(CorruptionKind::Malformed("reserved segment header bytes"));
    }
    if salt.mask() == 0 {
        return Err(CorruptionKind::Malformed("segment salt without a mask"));
    }
    Ok((Offset(base), salt))
}

/// A batch header, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchHeader {
    /// Stored CRC32C of the payload then bytes `[8, 40)`, XOR the segment's
    /// salt mask.
    pub crc: u32,
    /// Length of the whole batch in bytes.
    pub batch_len: u32,
    /// Compression (bits 0–1).
    pub flags: u8,
    /// Offset of the first record.
    pub base_offset: Offset,
    /// Leader epoch of every record in the batch.
    pub epoch: Epoch,
    /// Number of records (≥ 1).
    pub record_count: u32,
    /// Length of the uncompressed records section.
    pub records_len: u32,
}

impl BatchHeader {
    /// The offset after the batch's last record. Never overflows for a
    /// parsed or encoded header (both reject offsets past `u64::MAX`).
    pub(crate) fn next_offset(&self) -> Offset {
        Offset(self.base_offset.0 + u64::from(self.record_count))
    }

    /// The compression bits.
    pub(crate) fn compression(&self) -> u8 {
        self.flags & COMPRESSION_BITS
    }

    /// Whether this is a control batch.
    pub(crate) fn is_control(&self) -> bool {
        self.flags & FLAG_CONTROL != 0
    }

    /// The header's bytes (with `crc` as given).
    pub(crate) fn to_bytes(self) -> [u8; BATCH_HEADER_BYTES] {
        let mut w = Writer::with_capacity(BATCH_HEADER_BYTES);
        w.bytes(&BATCH_MAGIC)
            .u32(self.crc)
            .u32(self.batch_len)
            .u8(BATCH_VERSION)
            .u8(self.flags)
            .u16(0)
            .u64(self.base_offset.0)
            .u64(self.epoch.0)
            .u32(self.record_count)
            .u32(self.records_len);
        let mut out = [0u8; BATCH_HEADER_BYTES];
        out.copy_from_slice(&w.finish());
        out
    }

    /// Parses the fixed header fields without checking the CRC (the caller
    /// checks it once the whole batch is read).
    ///
    /// # Errors
    /// `Truncated`, `BadMagic`, `UnsupportedVersion` or `Malformed`: nothing
    /// in these bytes can be the start of a valid batch.
    pub(crate) fn parse(h: &[u8]) -> Result<BatchHeader, CorruptionKind> {
        let mut r = Reader::new(h);
        let magic = r.array::<4>()?;
        if magic != BATCH_MAGIC {
            return Err(CorruptionKind::BadMagic {
                expected: BATCH_MAGIC,
                found: magic,
            });
        }
        let crc = r.u32()?;
        let batch_len = r.u32()?;
        let version = r.u8()?;
        let flags = r.u8()?;
        let _reserved = r.u16()?;
        let header = BatchHeader {
            crc,
            batch_len,
            flags,
            base_offset: Offset(r.u64()?),
            epoch: Epoch(r.u64()?),
            record_count: r.u32()?,
            records_len: r.u32()?,
        };
        if version != BATCH_VERSION {
            return Err(unsupported(version.into(), BATCH_VERSION.into()));
        }
        if (header.batch_len as usize) < BATCH_HEADER_BYTES {
            return Err(CorruptionKind::Malformed("batch length below its header"));
        }
        if header
            .base_offset
            .0
            .checked_add(u64::from(header.record_count))
            .is_none()
        {
            return Err(CorruptionKind::Malformed("batch offsets overflow"));
        }
        Ok(header)
    }

    /// Checks the CRC of a whole batch `bytes` (header included), salted
    /// with `salt`, and the fields that only make sense once it is known to
    /// be intact.
    ///
    /// # Errors
    /// `ChecksumMismatch` (also for a stale batch of another salt) or
    /// `Malformed`.
    pub(crate) fn verify(&self, bytes: &[u8], salt: Salt) -> Result<(), CorruptionKind> {
        debug_assert_eq!(bytes.len(), self.batch_len as usize);
        let fields = bytes
            .get(8..BATCH_HEADER_BYTES)
            .ok_or(truncated(bytes.len(), BATCH_HEADER_BYTES))?;
        let payload = bytes.get(BATCH_HEADER_BYTES..).unwrap_or_default();
        let computed = crc32c::crc32c_append(crc32c::crc32c(payload), fields) ^ salt.mask();
        if computed != self.crc {
            return Err(CorruptionKind::ChecksumMismatch {
                stored: self.crc,
                computed,
            });
        }
        if self.flags & !FLAGS_KNOWN != 0 || self.compression() > COMPRESSION_ZSTD {
            return Err(CorruptionKind::Malformed("unknown batch flags"));
        }
        if bytes.get(14..16) != Some(&[0, 0][..]) {
            return Err(CorruptionKind::Malformed("reserved batch header bytes"));
        }
        if self.record_count == 0 {
            return Err(CorruptionKind::Malformed("empty batch"));
        }
        let payload = self.batch_len as usize - BATCH_HEADER_BYTES;
        if self.compression() == COMPRESSION_NONE && payload != self.records_len as usize {
            return Err(CorruptionKind::Malformed(
                "records length differs from payload",
            ));
        }
        Ok(())
    }
}

/// An index file's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexHeader {
    /// The segment's base offset.
    pub base_offset: Offset,
    /// The offset after the last batch the index describes.
    pub end_offset: Offset,
    /// The byte position after that batch.
    pub end_position: u64,
}

/// Encodes an index file.
///
/// # Panics
/// With more entries than a `u32` counts (an index has at most one entry per
/// 4 KiB of a segment of at most 2 GiB).
pub(crate) fn encode_index(header: &IndexHeader, entries: &[(u32, u32)]) -> Vec<u8> {
    let count = u32::try_from(entries.len()).ok();
    assert!(count.is_some(), "index entry count fits a u32");
    let mut w = Writer::with_capacity(INDEX_HEADER_BYTES + entries.len() * INDEX_ENTRY_BYTES);
    w.bytes(&INDEX_MAGIC)
        .u16(INDEX_VERSION)
        .u16(0)
        .u64(header.base_offset.0)
        .u64(header.end_offset.0)
        .u64(header.end_position)
        .u32(count.unwrap_or(0));
    let mut crc = crc32c::crc32c(w.as_slice());
    let mut body = Writer::with_capacity(entries.len() * INDEX_ENTRY_BYTES);
    for (rel, pos) in entries {
        body.u32(*rel).u32(*pos);
    }
    crc = crc32c::crc32c_append(crc, body.as_slice());
    w.u32(crc).bytes(body.as_slice());
    w.finish()
}

/// Decodes and verifies an index file.
///
/// # Errors
/// The [`CorruptionKind`] found.
pub(crate) fn decode_index(bytes: &[u8]) -> Result<(IndexHeader, Vec<(u32, u32)>), CorruptionKind> {
    let mut r = Reader::new(bytes);
    let magic = r.array::<4>()?;
    if magic != INDEX_MAGIC {
        return Err(CorruptionKind::BadMagic {
            expected: INDEX_MAGIC,
            found: magic,
        });
    }
    let version = r.u16()?;
    let reserved = r.u16()?;
    let header = IndexHeader {
        base_offset: Offset(r.u64()?),
        end_offset: Offset(r.u64()?),
        end_position: r.u64()?,
    };
    let count = r.u32()? as usize;
    let stored = r.u32()?;
    let body = r.rest();
    if count.checked_mul(INDEX_ENTRY_BYTES) != Some(body.len()) {
        return Err(CorruptionKind::Malformed(
            "index entry count does not match the file",
        ));
    }
    let head = bytes.get(..36).ok_or(truncated(bytes.len(), 36))?;
    let computed = crc32c::crc32c_append(crc32c::crc32c(head), body);
    if stored != computed {
        return Err(CorruptionKind::ChecksumMismatch { stored, computed });
    }
    if version != INDEX_VERSION {
        return Err(unsupported(version, INDEX_VERSION));
    }
    if reserved != 0 {
        return Err(CorruptionKind::Malformed("reserved index header bytes"));
    }
    let mut entries = Vec::with_capacity(count);
    let mut e = Reader::new(body);
    for _ in 0..count {
        entries.push((e.u32()?, e.u32()?));
    }
    if entries
        .windows(2)
        .any(|w| matches!(w, [a, b] if b.0 <= a.0 || b.1 <= a.1))
    {
        return Err(CorruptionKind::Malformed("index entries out of order"));
    }
    Ok((header, entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(segment_file_name(Offset(42)), "00000000000000000042.log");
        assert_eq!(
            parse_file_name("00000000000000000042.log", "log"),
            Some(Offset(42))
        );
        assert_eq!(parse_file_name("42.log", "log"), None);
        assert_eq!(parse_file_name("0000000000000000004x.log", "log"), None);
        assert_eq!(
            parse_file_name(&index_file_name(Offset(7)), "index"),
            Some(Offset(7))
        );
    }

    #[test]
    fn segment_header_round_trip_and_flips() {
        let salt = Salt::fresh();
        let h = encode_segment_header(Offset(1234), salt);
        assert_eq!(decode_segment_header(&h), Ok((Offset(1234), salt)));
        for bit in 0..h.len() * 8 {
            let mut bad = h;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_segment_header(&bad).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn index_round_trip_and_flips() {
        let header = IndexHeader {
            base_offset: Offset(100),
            end_offset: Offset(160),
            end_position: 9000,
        };
        let entries = vec![(0, 32), (20, 4200), (41, 8300)];
        let bytes = encode_index(&header, &entries);
        assert_eq!(decode_index(&bytes).unwrap(), (header, entries));
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_index(&bad).is_err(), "bit {bit}");
        }
    }
}
