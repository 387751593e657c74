//! The snapshot file format.
//!
//! ```text
//! header (40 B + metadata):
//!  0       4         6       8            16      24            32             36           40
//!  +-------+---------+-------+------------+-------+-------------+--------------+------------+-----------
//!  | magic | version | flags | end_offset | epoch | created_ms  | metadata_len | header_crc | metadata…
//!  |"QLSN" | u16 = 1 | u16   | u64        | u64   | u64 (Unix)  | u32          | u32        |
//!  +-------+---------+-------+------------+-------+-------------+--------------+------------+-----------
//!  header_crc: crc32c of bytes [0, 36) and the metadata. flags bits 0-1: compression (0 none, 1 zstd).
//!
//! chunk (repeated):
//!  0            4          8        12
//!  +------------+----------+--------+-------
//!  | stored_len | raw_len  | crc32c | data…      crc32c of the stored bytes; raw_len = stored_len
//!  | u32        | u32      | u32    |            unless compressed; stored_len ≥ 1
//!  +------------+----------+--------+-------
//!
//! footer (40 B, the last bytes of the file):
//!  0       4         6           8             16          24            28         32           36       40
//!  +-------+---------+-----------+-------------+-----------+-------------+----------+------------+--------+
//!  | magic | version | reserved  | total_len   | data_len  | chunk_count | file_crc | reserved   | crc32c |
//!  |"QLSF" | u16 = 1 | u16 = 0   | u64         | u64       | u32         | u32      | u32 = 0    | u32    |
//!  +-------+---------+-----------+-------------+-----------+-------------+----------+------------+--------+
//!  total_len: the whole file, footer included. data_len: the bytes the state machine wrote.
//!  file_crc: crc32c of every byte before the footer. crc32c: of footer bytes [0, 36).
//! ```
//!
//! A file is a snapshot only if its footer is valid and its length is
//! `total_len`; readers verify `file_crc` over the whole file before handing
//! out any byte.

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::codec::{Reader, Writer};

use crate::error::CorruptionKind;
pub(crate) use crate::id::SnapshotId;

/// Header magic.
pub(crate) const HEADER_MAGIC: [u8; 4] = *b"QLSN";
/// Footer magic.
pub(crate) const FOOTER_MAGIC: [u8; 4] = *b"QLSF";
/// Format version.
pub(crate) const VERSION: u16 = 1;
/// Fixed header bytes (before the metadata).
pub(crate) const HEADER_BYTES: usize = 40;
/// Chunk header bytes.
pub(crate) const CHUNK_HEADER_BYTES: usize = 12;
/// Footer bytes.
pub(crate) const FOOTER_BYTES: usize = 40;
/// The largest metadata accepted.
pub(crate) const MAX_METADATA_BYTES: usize = 1 << 20;
/// The largest chunk (stored or raw) accepted.
pub(crate) const MAX_CHUNK_BYTES: usize = 16 << 20;
/// Compression flag: zstd.
pub(crate) const FLAG_ZSTD: u16 = 1;

/// `Truncated`: `len` bytes where `needed` are required.
fn truncated(len: usize, needed: usize) -> CorruptionKind {
    CorruptionKind::Truncated {
        len: len as u64,
        needed: needed as u64,
    }
}

/// `UnsupportedVersion`.
fn unsupported(found: u16) -> CorruptionKind {
    CorruptionKind::UnsupportedVersion {
        found,
        supported: VERSION,
    }
}

/// A decoded header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The snapshot's id.
    pub id: SnapshotId,
    /// Compression flags.
    pub flags: u16,
    /// Creation time, Unix milliseconds.
    pub created_ms: u64,
    /// Caller-supplied metadata (such as the voter set).
    pub metadata: Vec<u8>,
}

impl Header {
    /// Encodes the header with its metadata.
    ///
    /// # Panics
    /// If the metadata exceeds [`MAX_METADATA_BYTES`].
    pub fn encode(&self) -> Vec<u8> {
        assert!(
            self.metadata.len() <= MAX_METADATA_BYTES,
            "metadata too large"
        );
        let len = u32::try_from(self.metadata.len()).ok();
        assert!(len.is_some(), "bounded by MAX_METADATA_BYTES");
        let mut w = Writer::with_capacity(HEADER_BYTES + self.metadata.len());
        w.bytes(&HEADER_MAGIC)
            .u16(VERSION)
            .u16(self.flags)
            .u64(self.id.end_offset.0)
            .u64(self.id.epoch.0)
            .u64(self.created_ms)
            .u32(len.unwrap_or(0));
        let crc = crc32c::crc32c_append(crc32c::crc32c(w.as_slice()), &self.metadata);
        w.u32(crc).bytes(&self.metadata);
        w.finish()
    }

    /// The metadata length a fixed header declares (to know how much to
    /// read), bounded.
    ///
    /// # Errors
    /// `BadMagic`, `Truncated` or `Malformed`.
    pub fn metadata_len(fixed: &[u8]) -> Result<usize, CorruptionKind> {
        if fixed.len() < HEADER_BYTES {
            return Err(truncated(fixed.len(), HEADER_BYTES));
        }
        let mut r = Reader::new(fixed);
        let magic = r.array::<4>()?;
        if magic != HEADER_MAGIC {
            return Err(CorruptionKind::BadMagic {
                expected: HEADER_MAGIC,
                found: magic,
            });
        }
        r.bytes(28)?;
        let len = r.u32()? as usize;
        if len > MAX_METADATA_BYTES {
            return Err(CorruptionKind::Malformed("metadata too large"));
        }
        Ok(len)
    }

    /// Decodes and verifies a header (fixed part and metadata).
    ///
    /// # Errors
    /// The [`CorruptionKind`] found.
    pub fn decode(bytes: &[u8]) -> Result<Header, CorruptionKind> {
        let len = Self::metadata_len(bytes)?;
        if bytes.len() != HEADER_BYTES + len {
            return Err(truncated(bytes.len(), HEADER_BYTES + len));
        }
        let mut r = Reader::new(bytes);
        let _magic = r.array::<4>()?;
        let version = r.u16()?;
        let flags = r.u16()?;
        let end_offset = Offset(r.u64()?);
        let epoch = Epoch(r.u64()?);
        let created_ms = r.u64()?;
        let _len = r.u32()?;
        let stored = r.u32()?;
        let metadata = r.rest();
        let head = bytes.get(..36).ok_or(truncated(bytes.len(), 36))?;
        let computed = crc32c::crc32c_append(crc32c::crc32c(head), metadata);
        if computed != stored {
            return Err(CorruptionKind::ChecksumMismatch { stored, computed });
        }
        if version != VERSION {
            return Err(unsupported(version));
        }
        if flags & !FLAG_ZSTD != 0 {
            return Err(CorruptionKind::Malformed("unknown flags"));
        }
        Ok(Header {
            id: SnapshotId { end_offset, epoch },
            flags,
            created_ms,
            metadata: metadata.to_vec(),
        })
    }
}

/// A chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkHeader {
    /// Bytes stored after the header.
    pub stored_len: u32,
    /// Bytes after decompression.
    pub raw_len: u32,
    /// crc32c of the stored bytes.
    pub crc: u32,
}

impl ChunkHeader {
    /// Encodes a chunk header.
    pub(crate) fn encode(&self) -> [u8; CHUNK_HEADER_BYTES] {
        let mut w = Writer::with_capacity(CHUNK_HEADER_BYTES);
        w.u32(self.stored_len).u32(self.raw_len).u32(self.crc);
        let mut h = [0u8; CHUNK_HEADER_BYTES];
        h.copy_from_slice(w.as_slice());
        h
    }

    /// Decodes a chunk header, checking its bounds.
    ///
    /// # Errors
    /// `Truncated` or `Malformed`.
    pub(crate) fn decode(h: &[u8]) -> Result<ChunkHeader, CorruptionKind> {
        let mut r = Reader::new(h);
        let c = ChunkHeader {
            stored_len: r.u32()?,
            raw_len: r.u32()?,
            crc: r.u32()?,
        };
        if c.stored_len == 0
            || c.stored_len as usize > MAX_CHUNK_BYTES
            || c.raw_len as usize > MAX_CHUNK_BYTES
        {
            return Err(CorruptionKind::Malformed("chunk length out of bounds"));
        }
        Ok(c)
    }
}

/// A decoded footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Footer {
    /// The whole file's length.
    pub total_len: u64,
    /// The bytes the state machine wrote.
    pub data_len: u64,
    /// Chunks in the file.
    pub chunk_count: u32,
    /// crc32c of every byte before the footer.
    pub file_crc: u32,
}

impl Footer {
    /// Encodes the footer.
    pub(crate) fn encode(&self) -> [u8; FOOTER_BYTES] {
        let mut w = Writer::with_capacity(FOOTER_BYTES);
        w.bytes(&FOOTER_MAGIC)
            .u16(VERSION)
            .u16(0)
            .u64(self.total_len)
            .u64(self.data_len)
            .u32(self.chunk_count)
            .u32(self.file_crc)
            .u32(0);
        let crc = crc32c::crc32c(w.as_slice());
        w.u32(crc);
        let mut f = [0u8; FOOTER_BYTES];
        f.copy_from_slice(w.as_slice());
        f
    }

    /// Decodes and verifies a footer.
    ///
    /// # Errors
    /// The [`CorruptionKind`] found.
    pub(crate) fn decode(f: &[u8]) -> Result<Footer, CorruptionKind> {
        if f.len() != FOOTER_BYTES {
            return Err(truncated(f.len(), FOOTER_BYTES));
        }
        let mut r = Reader::new(f);
        if r.array::<4>()? != FOOTER_MAGIC {
            return Err(CorruptionKind::NoFooter);
        }
        let version = r.u16()?;
        let reserved = r.u16()?;
        let footer = Footer {
            total_len: r.u64()?,
            data_len: r.u64()?,
            chunk_count: r.u32()?,
            file_crc: r.u32()?,
        };
        let reserved_tail = r.u32()?;
        let stored = r.u32()?;
        let computed = crc32c::crc32c(f.get(..36).unwrap_or_default());
        if computed != stored {
            return Err(CorruptionKind::ChecksumMismatch { stored, computed });
        }
        if version != VERSION {
            return Err(unsupported(version));
        }
        if reserved != 0 || reserved_tail != 0 {
            return Err(CorruptionKind::Malformed("reserved footer bytes"));
        }
        Ok(footer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            id: SnapshotId {
                end_offset: Offset(100),
                epoch: Epoch(3),
            },
            flags: FLAG_ZSTD,
            created_ms: 1_700_000_000_000,
            metadata: b"voters: 1,2,3".to_vec(),
        }
    }

    #[test]
    fn round_trips() {
        let h = header();
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        let f = Footer {
            total_len: 999,
            data_len: 500,
            chunk_count: 3,
            file_crc: 0xDEAD_BEEF,
        };
        assert_eq!(Footer::decode(&f.encode()).unwrap(), f);
        let c = ChunkHeader {
            stored_len: 10,
            raw_len: 20,
            crc: 7,
        };
        assert_eq!(ChunkHeader::decode(&c.encode()).unwrap(), c);
        let id = header().id;
        assert_eq!(SnapshotId::parse_stem(&id.stem()), Some(id));
        assert_eq!(SnapshotId::parse_stem("1-2"), None);
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let h = header().encode();
        for bit in 0..h.len() * 8 {
            let mut bad = h.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(Header::decode(&bad).is_err(), "header bit {bit}");
        }
        let f = Footer {
            total_len: 999,
            data_len: 500,
            chunk_count: 3,
            file_crc: 1,
        }
        .encode();
        for bit in 0..f.len() * 8 {
            let mut bad = f;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(Footer::decode(&bad).is_err(), "footer bit {bit}");
        }
    }
}
