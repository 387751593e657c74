//! Sequential verification of a segment's batches, used by recovery and by
//! index rebuilds, and the search for valid data after an invalid batch that
//! tells a torn tail from corruption.
//!
//! Invariants: every batch the scan accepts has a valid CRC and structure,
//! the base offset its place requires, and an epoch not older than the batch
//! before it. The scan never reads a batch longer than the file or than
//! `MAX_BATCH_BYTES`.

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::File;

use crate::batch::{verify_batch, MAX_BATCH_BYTES};
use crate::error::{CorruptionKind, Result};
use crate::format::{align_up, BatchHeader, BATCH_HEADER_BYTES, BATCH_MAGIC};
use crate::segment::index::SparseIndex;

const CHUNK_BYTES: usize = 1 << 20;

/// Why a scan stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Reached the end of the file exactly after a batch.
    EndOfFile,
    /// Reached the position limit given to the scan, after a batch.
    Limit,
    /// A zeroed region where the next batch would start: the normal end of
    /// data in a preallocated segment (or a tear that wrote nothing).
    Zeros,
    /// Bytes that are not a valid batch continuing the log.
    Invalid {
        /// What is wrong.
        kind: CorruptionKind,
        /// The epoch in the batch header, if one could be parsed.
        epoch: Option<Epoch>,
    },
}

/// What a scan found.
#[derive(Debug, Clone)]
pub struct ScanOutcome {
    /// Byte position after the last valid batch.
    pub end_position: u64,
    /// Offset after the last valid batch.
    pub end_offset: Offset,
    /// Epoch of the last valid batch (or the epoch passed in).
    pub last_epoch: Option<Epoch>,
    /// Each batch whose epoch differs from the one before it: (epoch, base).
    pub epoch_starts: Vec<(Epoch, Offset)>,
    /// Why the scan stopped at `end_position`.
    pub stop: Stop,
    /// Bytes read and verified.
    pub bytes_scanned: u64,
}

/// A window of file bytes read ahead in large chunks.
struct Window<'a> {
    file: &'a dyn File,
    file_len: u64,
    start: u64,
    buf: Vec<u8>,
}

impl<'a> Window<'a> {
    fn new(file: &'a dyn File, file_len: u64) -> Self {
        Window {
            file,
            file_len,
            start: 0,
            buf: Vec::new(),
        }
    }

    /// The bytes `[pos, pos + len)`, clipped to the file's end.
    fn get(&mut self, pos: u64, len: usize) -> Result<&[u8]> {
        let end = (pos + len as u64).min(self.file_len);
        let have = pos >= self.start && end <= self.start + self.buf.len() as u64;
        if !have {
            let want = usize::try_from(self.file_len - pos)
                .unwrap_or(usize::MAX)
                .min(len.max(CHUNK_BYTES));
            self.buf.resize(want, 0);
            self.file.read_exact_at(&mut self.buf, pos)?;
            self.start = pos;
        }
        // Lossless: both are within the buffer, which fits in memory.
        let from = usize::try_from(pos - self.start).unwrap_or(0);
        let to = usize::try_from(end - self.start).unwrap_or(0);
        Ok(&self.buf[from..to])
    }
}

/// Verifies batches of `file` from `position` (which must hold
/// `offset`) until the first thing that is not a valid continuation, or
/// until `limit` is reached; notes each batch in `index`.
///
/// # Errors
/// `Io` only: invalid bytes end the scan and are described in the outcome.
pub fn scan(
    file: &dyn File,
    segment_base: Offset,
    position: u64,
    offset: Offset,
    prev_epoch: Option<Epoch>,
    limit: u64,
    index: &mut SparseIndex,
) -> Result<ScanOutcome> {
    let file_len = file.len()?;
    let mut w = Window::new(file, file_len);
    let mut out = ScanOutcome {
        end_position: position,
        end_offset: offset,
        last_epoch: prev_epoch,
        epoch_starts: Vec::new(),
        stop: Stop::EndOfFile,
        bytes_scanned: 0,
    };
    loop {
        let pos = out.end_position;
        if pos >= limit {
            out.stop = Stop::Limit;
            return Ok(out);
        }
        if pos >= file_len {
            out.stop = Stop::EndOfFile;
            return Ok(out);
        }
        let head = w.get(pos, BATCH_HEADER_BYTES)?;
        if head.iter().all(|&b| b == 0) {
            // Padding after a sync, if the next page starts the next batch.
            let next = align_up(pos);
            if next != pos && next < limit && continues_at(&mut w, next, out.end_offset)? {
                out.end_position = next;
                continue;
            }
            out.stop = Stop::Zeros;
            return Ok(out);
        }
        let header = match BatchHeader::parse(head) {
            Ok(h) => h,
            Err(kind) => {
                out.stop = Stop::Invalid { kind, epoch: None };
                return Ok(out);
            }
        };
        let len = u64::from(header.batch_len);
        if len > MAX_BATCH_BYTES + BATCH_HEADER_BYTES as u64 || pos + len > file_len {
            out.stop = Stop::Invalid {
                kind: CorruptionKind::Truncated,
                epoch: None,
            };
            return Ok(out);
        }
        // Lossless: bounded by MAX_BATCH_BYTES above.
        let bytes = w.get(pos, usize::try_from(len).unwrap_or(0))?;
        let stop = |kind| Stop::Invalid {
            kind,
            epoch: Some(header.epoch),
        };
        if let Err(kind) = verify_batch(bytes) {
            out.stop = stop(kind);
            return Ok(out);
        }
        if header.base_offset != out.end_offset {
            out.stop = stop(CorruptionKind::Misplaced {
                expected: out.end_offset,
                found: header.base_offset,
            });
            return Ok(out);
        }
        if let Some(prev) = out.last_epoch {
            if header.epoch < prev {
                out.stop = stop(CorruptionKind::EpochOrder {
                    previous: prev,
                    found: header.epoch,
                });
                return Ok(out);
            }
        }
        if out.last_epoch != Some(header.epoch) {
            out.epoch_starts.push((header.epoch, header.base_offset));
        }
        let rel = header.base_offset.0 - segment_base.0;
        index.observe(
            u32::try_from(rel).unwrap_or(u32::MAX),
            u32::try_from(pos).unwrap_or(u32::MAX),
        );
        out.last_epoch = Some(header.epoch);
        out.end_offset = header.next_offset();
        out.end_position = pos + len;
        out.bytes_scanned += len;
    }
}

/// Whether an intact batch holding `offset` first starts at `pos`.
fn continues_at(w: &mut Window<'_>, pos: u64, offset: Offset) -> Result<bool> {
    if pos + BATCH_HEADER_BYTES as u64 > w.file_len {
        return Ok(false);
    }
    let Ok(header) = BatchHeader::parse(w.get(pos, BATCH_HEADER_BYTES)?) else {
        return Ok(false);
    };
    let len = u64::from(header.batch_len);
    if header.base_offset != offset
        || len > MAX_BATCH_BYTES + BATCH_HEADER_BYTES as u64
        || pos + len > w.file_len
    {
        return Ok(false);
    }
    let bytes = w.get(pos, usize::try_from(len).unwrap_or(0))?;
    Ok(verify_batch(bytes).is_ok())
}

/// What lies after the end of a segment's valid data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tail {
    /// Where the first intact batch after it starts, if any.
    pub valid_at: Option<u64>,
    /// Whether every byte after it is zero (nothing to clean up).
    pub all_zero: bool,
}

/// Searches `file` after `position` for any intact batch (of any offset),
/// and notes whether everything from `position` on is zeros.
///
/// # Errors
/// `Io` on read failure.
pub fn inspect_tail(file: &dyn File, position: u64) -> Result<Tail> {
    let file_len = file.len()?;
    let mut w = Window::new(file, file_len);
    let all_zero = {
        let mut pos = position;
        let mut zero = true;
        while zero && pos < file_len {
            let chunk = w.get(pos, CHUNK_BYTES)?;
            zero = chunk.iter().all(|&b| b == 0);
            pos += chunk.len() as u64;
        }
        zero
    };
    if all_zero {
        return Ok(Tail {
            valid_at: None,
            all_zero,
        });
    }
    Ok(Tail {
        valid_at: find_valid_batch_after(file, position)?,
        all_zero,
    })
}

/// Searches `file` after `position` for any intact batch (of any offset).
/// Returns where the first one starts.
///
/// # Errors
/// `Io` on read failure.
pub fn find_valid_batch_after(file: &dyn File, position: u64) -> Result<Option<u64>> {
    let file_len = file.len()?;
    let mut w = Window::new(file, file_len);
    let mut chunk_start = position + 1;
    while chunk_start + (BATCH_HEADER_BYTES as u64) <= file_len {
        let chunk = w.get(chunk_start, CHUNK_BYTES)?.to_vec();
        let mut i = 0;
        while let Some(found) = chunk[i..].iter().position(|&b| b == BATCH_MAGIC[0]) {
            let at = i + found;
            i = at + 1;
            let pos = chunk_start + at as u64;
            if pos + BATCH_HEADER_BYTES as u64 > file_len {
                break;
            }
            let head = w.get(pos, BATCH_HEADER_BYTES)?;
            let Ok(header) = BatchHeader::parse(head) else {
                continue;
            };
            let len = u64::from(header.batch_len);
            if len > MAX_BATCH_BYTES + BATCH_HEADER_BYTES as u64 || pos + len > file_len {
                continue;
            }
            let bytes = w.get(pos, usize::try_from(len).unwrap_or(0))?;
            if verify_batch(bytes).is_ok() {
                return Ok(Some(pos));
            }
        }
        // Overlap so a magic straddling two chunks is still found.
        chunk_start += (CHUNK_BYTES as u64).saturating_sub(BATCH_MAGIC.len() as u64);
        if chunk.len() < CHUNK_BYTES {
            break;
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use quorumlog_io::{FileSystem, OpenMode, SimFs};

    use super::*;
    use crate::batch::encode_into;
    use crate::format::SEGMENT_HEADER_BYTES;
    use crate::options::Compression;

    /// A file with a 32-byte header and batches of `counts` records at
    /// epochs `epochs`, then zeros; returns it and the batch positions.
    fn file(bases: &[(u64, u64, usize)]) -> (Box<dyn File>, Vec<u64>) {
        let fs = SimFs::new(1);
        let f = fs.open(Path::new("/seg"), OpenMode::CreateNew).unwrap();
        f.allocate(4096).unwrap();
        let mut pos = SEGMENT_HEADER_BYTES as u64;
        let mut positions = Vec::new();
        let mut buf = Vec::new();
        for &(base, epoch, n) in bases {
            let recs: Vec<Vec<u8>> = (0..n).map(|i| vec![u8::try_from(i).unwrap(); 10]).collect();
            encode_into(
                &mut buf,
                Offset(base),
                Epoch(epoch),
                &recs,
                Compression::None,
                0,
                1 << 20,
            )
            .unwrap();
            f.write_all_at(&buf, pos).unwrap();
            positions.push(pos);
            pos += buf.len() as u64;
        }
        (f, positions)
    }

    #[test]
    fn scan_stops_cleanly_at_zeros_and_collects_epochs() {
        let (f, pos) = file(&[(10, 1, 2), (12, 1, 3), (15, 4, 1)]);
        let mut ix = SparseIndex::new(1);
        let out = scan(
            f.as_ref(),
            Offset(10),
            pos[0],
            Offset(10),
            None,
            u64::MAX,
            &mut ix,
        )
        .unwrap();
        assert_eq!(out.stop, Stop::Zeros);
        assert_eq!(out.end_offset, Offset(16));
        assert_eq!(
            out.epoch_starts,
            vec![(Epoch(1), Offset(10)), (Epoch(4), Offset(15))]
        );
        assert_eq!(ix.entries().len(), 3);
        assert_eq!(
            find_valid_batch_after(f.as_ref(), out.end_position).unwrap(),
            None
        );
    }

    #[test]
    fn scan_flags_misplaced_and_older_epochs_and_finds_valid_data_after_garbage() {
        let (f, pos) = file(&[(10, 2, 2), (99, 2, 1)]);
        let mut ix = SparseIndex::new(1);
        let out = scan(
            f.as_ref(),
            Offset(10),
            pos[0],
            Offset(10),
            None,
            u64::MAX,
            &mut ix,
        )
        .unwrap();
        assert!(matches!(
            out.stop,
            Stop::Invalid {
                kind: CorruptionKind::Misplaced { .. },
                ..
            }
        ));
        let (f, pos) = file(&[(10, 2, 2), (12, 1, 1)]);
        let mut ix = SparseIndex::new(1);
        let out = scan(
            f.as_ref(),
            Offset(10),
            pos[0],
            Offset(10),
            None,
            u64::MAX,
            &mut ix,
        )
        .unwrap();
        assert!(matches!(
            out.stop,
            Stop::Invalid {
                kind: CorruptionKind::EpochOrder { .. },
                ..
            }
        ));
        // Garbage over the first batch: the second is still found.
        let (f, pos) = file(&[(10, 2, 2), (12, 2, 1)]);
        f.write_all_at(&[0xEE; 8], pos[0] + 20).unwrap();
        let mut ix = SparseIndex::new(1);
        let out = scan(
            f.as_ref(),
            Offset(10),
            pos[0],
            Offset(10),
            None,
            u64::MAX,
            &mut ix,
        )
        .unwrap();
        assert_eq!(out.end_position, pos[0]);
        assert_eq!(
            find_valid_batch_after(f.as_ref(), pos[0]).unwrap(),
            Some(pos[1])
        );
    }

    #[test]
    fn scan_honours_its_limit() {
        let (f, pos) = file(&[(0, 1, 1), (1, 1, 1), (2, 1, 1)]);
        let mut ix = SparseIndex::new(1);
        let out = scan(
            f.as_ref(),
            Offset(0),
            pos[0],
            Offset(0),
            None,
            pos[2],
            &mut ix,
        )
        .unwrap();
        assert_eq!((out.stop, out.end_offset), (Stop::Limit, Offset(2)));
    }
}
