//! Reading a snapshot: the whole file is verified (streaming, one chunk in
//! memory) before any byte is handed out; then the state is yielded chunk by
//! chunk, each chunk checked again.

use std::path::{Path, PathBuf};

use quorumlog_io::{File, FileSystem, OpenMode};

use crate::error::{CorruptionKind, Error, Location, Result};
use crate::format::{
    ChunkHeader, Footer, Header, CHUNK_HEADER_BYTES, FLAG_ZSTD, FOOTER_BYTES, HEADER_BYTES,
};

/// A verified snapshot, read chunk by chunk.
#[derive(Debug)]
pub struct SnapshotReader {
    file: Box<dyn File>,
    path: PathBuf,
    header: Header,
    footer: Footer,
    data_start: u64,
    pos: u64,
}

/// What a whole-file verification found.
#[derive(Debug)]
pub(crate) struct Verified {
    pub header: Header,
    pub footer: Footer,
    pub data_start: u64,
}

fn bad(path: &Path, position: u64, kind: CorruptionKind) -> Error {
    Error::Corruption {
        at: Location::File {
            path: path.to_path_buf(),
            position,
        },
        kind,
    }
}

/// `Truncated`: `len` bytes where `needed` are required.
fn truncated(len: u64, needed: u64) -> CorruptionKind {
    CorruptionKind::Truncated { len, needed }
}

/// Verifies the file at `path` of length `len` end to end: footer, header,
/// every chunk's checksum and bounds, the totals, and the whole-file
/// checksum. Memory: one chunk.
pub(crate) fn verify(file: &dyn File, path: &Path, len: u64) -> Result<Verified> {
    if len < (HEADER_BYTES + FOOTER_BYTES) as u64 {
        return Err(bad(
            path,
            len,
            truncated(len, (HEADER_BYTES + FOOTER_BYTES) as u64),
        ));
    }
    let mut fbuf = [0u8; FOOTER_BYTES];
    let footer_at = len - FOOTER_BYTES as u64;
    file.read_exact_at(&mut fbuf, footer_at)?;
    let footer = Footer::decode(&fbuf).map_err(|k| bad(path, footer_at, k))?;
    if footer.total_len != len {
        return Err(bad(
            path,
            footer_at,
            CorruptionKind::Malformed("length differs from the footer"),
        ));
    }
    let mut fixed = [0u8; HEADER_BYTES];
    file.read_exact_at(&mut fixed, 0)?;
    let meta_len = Header::metadata_len(&fixed).map_err(|k| bad(path, 0, k))?;
    let data_start = (HEADER_BYTES + meta_len) as u64;
    if data_start > footer_at {
        return Err(bad(path, 0, truncated(footer_at, data_start)));
    }
    let mut hbuf = vec![0u8; HEADER_BYTES + meta_len];
    file.read_exact_at(&mut hbuf, 0)?;
    let header = Header::decode(&hbuf).map_err(|k| bad(path, 0, k))?;
    let mut crc = crc32c::crc32c(&hbuf);
    let mut pos = data_start;
    let mut chunks = 0u32;
    let mut data_len = 0u64;
    let mut buf = Vec::new();
    while pos < footer_at {
        let (ch, stored) = read_chunk_at(file, path, pos, footer_at, &mut buf)?;
        crc = crc32c::crc32c_append(crc, &ch.encode());
        crc = crc32c::crc32c_append(crc, stored);
        if header.flags & FLAG_ZSTD == 0 && ch.raw_len != ch.stored_len {
            return Err(bad(
                path,
                pos,
                CorruptionKind::Malformed("raw length of a stored chunk"),
            ));
        }
        data_len += u64::from(ch.raw_len);
        chunks += 1;
        pos += (CHUNK_HEADER_BYTES as u64) + u64::from(ch.stored_len);
    }
    if crc != footer.file_crc {
        let mismatch = CorruptionKind::ChecksumMismatch {
            stored: footer.file_crc,
            computed: crc,
        };
        return Err(bad(path, footer_at, mismatch));
    }
    if chunks != footer.chunk_count || data_len != footer.data_len {
        return Err(bad(
            path,
            footer_at,
            CorruptionKind::Malformed("totals differ from the footer"),
        ));
    }
    Ok(Verified {
        header,
        footer,
        data_start,
    })
}

/// Reads and checks the chunk at `pos` (which must end by `limit`); returns
/// its header and stored bytes (borrowed from `buf`).
pub(crate) fn read_chunk_at<'b>(
    file: &dyn File,
    path: &Path,
    pos: u64,
    limit: u64,
    buf: &'b mut Vec<u8>,
) -> Result<(ChunkHeader, &'b [u8])> {
    if pos + CHUNK_HEADER_BYTES as u64 > limit {
        let room = limit.saturating_sub(pos);
        return Err(bad(path, pos, truncated(room, CHUNK_HEADER_BYTES as u64)));
    }
    let mut h = [0u8; CHUNK_HEADER_BYTES];
    file.read_exact_at(&mut h, pos)?;
    let ch = ChunkHeader::decode(&h).map_err(|k| bad(path, pos, k))?;
    let end = pos + CHUNK_HEADER_BYTES as u64 + u64::from(ch.stored_len);
    if end > limit {
        return Err(bad(path, pos, truncated(limit - pos, end - pos)));
    }
    buf.resize(ch.stored_len as usize, 0);
    file.read_exact_at(buf, pos + CHUNK_HEADER_BYTES as u64)?;
    let computed = crc32c::crc32c(buf);
    if computed != ch.crc {
        let mismatch = CorruptionKind::ChecksumMismatch {
            stored: ch.crc,
            computed,
        };
        return Err(bad(path, pos, mismatch));
    }
    Ok((ch, buf.as_slice()))
}

impl SnapshotReader {
    /// Opens and verifies the snapshot file at `path`.
    ///
    /// # Errors
    /// `Corruption` naming the file and position; `Io`.
    pub fn open(fs: &dyn FileSystem, path: &Path) -> Result<SnapshotReader> {
        let file = fs.open(path, OpenMode::Read)?;
        let len = file.len()?;
        let v = verify(file.as_ref(), path, len)?;
        Ok(SnapshotReader {
            file,
            path: path.to_path_buf(),
            header: v.header,
            footer: v.footer,
            data_start: v.data_start,
            pos: v.data_start,
        })
    }

    /// The snapshot's header (id, creation time, metadata).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Bytes of state in the snapshot.
    pub fn data_len(&self) -> u64 {
        self.footer.data_len
    }

    /// The next chunk of state, or `None` at the end.
    ///
    /// # Errors
    /// `Corruption` if the file changed since it was verified; `Io`.
    pub fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        let limit = self.footer.total_len - FOOTER_BYTES as u64;
        if self.pos >= limit {
            return Ok(None);
        }
        let mut buf = Vec::new();
        let (ch, stored) =
            read_chunk_at(self.file.as_ref(), &self.path, self.pos, limit, &mut buf)?;
        let out = if self.header.flags & FLAG_ZSTD != 0 {
            let raw = zstd::bulk::decompress(stored, ch.raw_len as usize).map_err(|_| {
                bad(
                    &self.path,
                    self.pos,
                    CorruptionKind::Malformed("chunk does not decompress"),
                )
            })?;
            if raw.len() != ch.raw_len as usize {
                return Err(bad(
                    &self.path,
                    self.pos,
                    CorruptionKind::Malformed("chunk length"),
                ));
            }
            raw
        } else {
            stored.to_vec()
        };
        self.pos += CHUNK_HEADER_BYTES as u64 + u64::from(ch.stored_len);
        metrics::counter!("quorumlog_snapshot_bytes_read_total").increment(out.len() as u64);
        Ok(Some(out))
    }

    /// Reads all the state into memory (for small snapshots and tests).
    ///
    /// # Errors
    /// As [`SnapshotReader::next_chunk`].
    pub fn read_to_end(&mut self) -> Result<Vec<u8>> {
        self.pos = self.data_start;
        let mut out = Vec::new();
        while let Some(c) = self.next_chunk()? {
            out.extend_from_slice(&c);
        }
        Ok(out)
    }
}
