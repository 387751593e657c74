//! What a snapshot file holds, for inspectors (`quorumlog dump-snapshot`,
//! `quorumlog verify`): the file is verified whole first, as a reader
//! verifies it, and only then described.

use std::path::Path;

use quorumlog_io::{FileSystem, OpenMode};

use crate::error::Result;
use crate::format::{ChunkHeader, CHUNK_HEADER_BYTES, FLAG_ZSTD, FOOTER_BYTES};
use crate::id::SnapshotId;
use crate::reader::verify;

/// One chunk as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkInfo {
    /// Its byte position in the file (its header's).
    pub position: u64,
    /// Bytes stored after its header.
    pub stored_len: u32,
    /// Bytes of state once decompressed.
    pub raw_len: u32,
    /// CRC32C of the stored bytes.
    pub crc: u32,
}

/// A verified snapshot file, described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotDescription {
    /// The id its header carries.
    pub id: SnapshotId,
    /// `"none"` or `"zstd"` (per chunk).
    pub compression: &'static str,
    /// Creation time, Unix milliseconds.
    pub created_ms: u64,
    /// The caller's metadata (such as the voter set).
    pub metadata: Vec<u8>,
    /// Bytes of state.
    pub data_len: u64,
    /// The file's length.
    pub total_len: u64,
    /// CRC32C of every byte before the footer.
    pub file_crc: u32,
    /// The chunks, in order.
    pub chunks: Vec<ChunkInfo>,
}

/// Verifies the snapshot file at `path` end to end (footer, header, every
/// chunk, totals, whole-file checksum) and describes it. Reads the file
/// twice (the second time only the chunk headers); writes nothing.
///
/// # Errors
/// `Corruption` naming the file and the position of the first problem;
/// `Io`.
pub fn describe_snapshot(fs: &dyn FileSystem, path: &Path) -> Result<SnapshotDescription> {
    let file = fs.open(path, OpenMode::Read)?;
    let len = file.len()?;
    let v = verify(file.as_ref(), path, len)?;
    let limit = len - FOOTER_BYTES as u64;
    let mut chunks = Vec::with_capacity(v.footer.chunk_count as usize);
    let mut pos = v.data_start;
    let mut h = [0u8; CHUNK_HEADER_BYTES];
    while pos < limit {
        file.read_exact_at(&mut h, pos)?;
        // Verified above: every chunk header decodes and fits.
        let ch = ChunkHeader::decode(&h).map_err(|kind| crate::error::Error::Corruption {
            at: crate::error::Location::File {
                path: path.to_path_buf(),
                position: pos,
            },
            kind,
        })?;
        chunks.push(ChunkInfo {
            position: pos,
            stored_len: ch.stored_len,
            raw_len: ch.raw_len,
            crc: ch.crc,
        });
        pos += CHUNK_HEADER_BYTES as u64 + u64::from(ch.stored_len);
    }
    Ok(SnapshotDescription {
        id: v.header.id,
        compression: if v.header.flags & FLAG_ZSTD == 0 {
            "none"
        } else {
            "zstd"
        },
        created_ms: v.header.created_ms,
        metadata: v.header.metadata,
        data_len: v.footer.data_len,
        total_len: v.footer.total_len,
        file_crc: v.footer.file_crc,
        chunks,
    })
}
