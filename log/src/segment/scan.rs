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
use crate::format::{align_up, BatchHeader, Salt, BATCH_HEADER_BYTES, BATCH_MAGIC};
use crate::segment::index::SparseIndex;
use crate::segment::walk::{self, DataEnd, FileSource, Slot, Source};

const CHUNK_BYTES: usize = 1 << 20;

/// Why a scan stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Reached the end of the file exactly after a batch.
    EndOfFile,
    /// Reached the position limit given to the scan, after a batch.
    Limit,
    /// A zeroed region where the next batch would start: the normal end of
    /// data in a preallocated segment (or a tear that wrote nothing).
    Zeros,
    /// Bytes that are not a valid batch continuing the log.
    Invalid {
        /// Where the invalid bytes start (after any padding).
        position: u64,
        /// What is wrong.
        kind: CorruptionKind,
        /// The epoch in the batch header, if one could be parsed.
        epoch: Option<Epoch>,
    },
}

/// What a scan found.
#[derive(Debug, Clone)]
pub(crate) struct ScanOutcome {
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

/// Where a scan starts: a position of a segment, the offset that must start
/// there, and the epoch of the batch before it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScanFrom {
    /// The segment's base offset.
    pub segment: Offset,
    /// The byte position to start at (a batch start or padding before one).
    pub position: u64,
    /// The offset the next batch must start with.
    pub offset: Offset,
    /// The epoch of the batch before, if known.
    pub prev_epoch: Option<Epoch>,
}

/// Verifies batches of `file` from `from` until the first thing that is not
/// a valid continuation, or until a batch would start at or after `limit`;
/// notes each batch in `index`.
///
/// # Errors
/// `Io` only: invalid bytes end the scan and are described in the outcome.
pub(crate) fn scan(
    file: &dyn File,
    salt: Salt,
    from: ScanFrom,
    limit: u64,
    index: &mut SparseIndex,
) -> Result<ScanOutcome> {
    let file_len = file.len()?;
    let mut src = FileSource::new(file, file_len, CHUNK_BYTES);
    let mut out = ScanOutcome {
        end_position: from.position,
        end_offset: from.offset,
        last_epoch: from.prev_epoch,
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
        let (position, header) = match walk::slot(&mut src, pos, DataEnd(file_len))? {
            // What lies at or after the limit is not this scan's business.
            Slot::Header { position, .. } | Slot::Invalid { position, .. } if position >= limit => {
                out.stop = Stop::Limit;
                return Ok(out);
            }
            Slot::Header { position, header } => (position, header),
            Slot::End | Slot::NeedMore => {
                out.stop = Stop::Zeros;
                return Ok(out);
            }
            Slot::Invalid { position, kind } => {
                out.stop = Stop::Invalid {
                    position,
                    kind,
                    epoch: None,
                };
                return Ok(out);
            }
        };
        let len = match check_batch(&mut src, position, &header, &out, (file_len, salt))? {
            Ok(len) => len,
            Err(kind) => {
                out.stop = Stop::Invalid {
                    position,
                    kind,
                    epoch: Some(header.epoch),
                };
                return Ok(out);
            }
        };
        if out.last_epoch != Some(header.epoch) {
            out.epoch_starts.push((header.epoch, header.base_offset));
        }
        index.observe(
            crate::segment::relative(from.segment, header.base_offset),
            crate::segment::position_u32(position),
        );
        out.last_epoch = Some(header.epoch);
        out.end_offset = header.next_offset();
        out.end_position = position + len;
        out.bytes_scanned += len;
    }
}

/// Verifies the batch of `header` at `position` as the continuation of
/// what `out` verified so far: intact, in its place, epochs not going back.
/// Returns its length, or what is wrong.
fn check_batch(
    src: &mut FileSource<'_>,
    position: u64,
    header: &BatchHeader,
    out: &ScanOutcome,
    (file_len, salt): (u64, Salt),
) -> Result<std::result::Result<u64, CorruptionKind>> {
    let len = match walk::batch(
        src,
        position,
        header,
        out.end_offset,
        DataEnd(file_len),
        salt,
    )? {
        Ok(bytes) => bytes.len() as u64,
        Err(kind) => return Ok(Err(kind)),
    };
    if let Some(prev) = out.last_epoch {
        if header.epoch < prev {
            return Ok(Err(CorruptionKind::EpochOrder {
                previous: prev,
                found: header.epoch,
            }));
        }
    }
    Ok(Ok(len))
}

/// What lies after the end of a segment's valid data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tail {
    /// Where the first batch valid under the segment's salt starts after
    /// it, if any (stale batches of another salt never count).
    pub valid_at: Option<u64>,
    /// The position after the last non-zero byte of the torn window, if
    /// any: the bytes a torn-tail cut zeroes and reports.
    pub torn_end: Option<u64>,
}

/// Where the data of the last segment ends, for [`inspect_tail`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct TailAt {
    /// The byte position after the last valid batch.
    pub end: u64,
    /// Where the walker stopped (after any padding): `end`, or later.
    pub stop: u64,
    /// The offset the next batch would start with.
    pub offset: Offset,
}

/// Inspects a segment (salted `salt`) after its data: searches for any
/// batch valid under the salt, and measures the **torn window**: from the
/// end of the data to the end of the page where the walker stopped, or to
/// the end of the batch that starts there if its header names the next
/// offset (a batch of this log torn by a crash). Bytes after the window
/// are zeros or stale: nothing of this life that was acknowledged, and no
/// batch the log would ever read, so they stay as they are (a recycled
/// file is never rewritten in full).
///
/// # Errors
/// `Io` on read failure.
pub(crate) fn inspect_tail(file: &dyn File, salt: Salt, at: TailAt) -> Result<Tail> {
    let file_len = file.len()?;
    let mut src = FileSource::new(file, file_len, CHUNK_BYTES);
    let tail = inspect_tail_in(&mut src, file_len, salt, at)?;
    // What was read after the data will be overwritten by small appends:
    // drop the read-ahead's (large) pages, a hint only.
    let _ = file.drop_cache(at.end, file_len - at.end.min(file_len));
    Ok(tail)
}

/// [`inspect_tail`] over any source of the segment's bytes (`file_len` of
/// them): recovery reads the file, the read-only inspectors a buffer.
///
/// # Errors
/// `Io` on read failure.
pub(crate) fn inspect_tail_in(
    src: &mut impl Source,
    file_len: u64,
    salt: Salt,
    at: TailAt,
) -> Result<Tail> {
    let mut tail = Tail {
        valid_at: None,
        torn_end: None,
    };
    let mut window_end = align_up(at.stop + 1);
    if at.stop + BATCH_HEADER_BYTES as u64 <= file_len {
        if let Ok(h) = BatchHeader::parse(src.bytes(at.stop, BATCH_HEADER_BYTES)?) {
            let len = u64::from(h.batch_len).min(MAX_BATCH_BYTES + BATCH_HEADER_BYTES as u64);
            if h.base_offset == at.offset {
                window_end = window_end.max(at.stop + len);
            }
        }
    }
    let window_end = window_end.min(file_len);
    // First pass, borrowing the window: where the last non-zero byte is,
    // in the torn window and in the whole rest of the file. After a crash
    // in a fresh file the tail is all zeros, and this is the whole cost.
    let mut nonzero_end = None;
    let mut chunk_start = at.end;
    while chunk_start < file_len {
        let chunk = src.bytes(chunk_start, CHUNK_BYTES)?;
        if chunk.is_empty() {
            break;
        }
        if let Some(last) = super::last_nonzero(chunk) {
            nonzero_end = Some(chunk_start + last as u64 + 1);
        }
        if chunk_start < window_end {
            let n = usize::try_from(window_end - chunk_start).unwrap_or(usize::MAX);
            let part = chunk.get(..n.min(chunk.len())).unwrap_or_default();
            if let Some(last) = super::last_nonzero(part) {
                tail.torn_end = Some(chunk_start + last as u64 + 1);
            }
        }
        chunk_start += chunk.len() as u64;
    }
    // Second pass, only over bytes that are not all zero: any batch valid
    // under this segment's salt.
    let nonzero_end = nonzero_end.unwrap_or(at.end);
    let mut chunk_start = at.end;
    while chunk_start < nonzero_end && tail.valid_at.is_none() {
        let chunk = src.bytes(chunk_start, CHUNK_BYTES)?.to_vec();
        if chunk.is_empty() {
            break;
        }
        tail.valid_at = valid_batch_in(src, &chunk, chunk_start, (at.end, file_len, salt))?;
        chunk_start += chunk.len() as u64;
    }
    Ok(tail)
}

/// The first position in `chunk` (at file position `chunk_start`, strictly
/// after `after`) where an intact batch of any offset starts.
fn valid_batch_in(
    src: &mut impl Source,
    chunk: &[u8],
    chunk_start: u64,
    (after, file_len, salt): (u64, u64, Salt),
) -> Result<Option<u64>> {
    let mut i = 0;
    while let Some(found) = chunk
        .get(i..)
        .and_then(|rest| rest.iter().position(|&b| b == BATCH_MAGIC[0]))
    {
        let at = i + found;
        i = at + 1;
        let pos = chunk_start + at as u64;
        if pos <= after {
            continue;
        }
        if pos + BATCH_HEADER_BYTES as u64 > file_len {
            break;
        }
        let Ok(header) = BatchHeader::parse(src.bytes(pos, BATCH_HEADER_BYTES)?) else {
            continue;
        };
        let len = u64::from(header.batch_len);
        if len > MAX_BATCH_BYTES + BATCH_HEADER_BYTES as u64 || pos + len > file_len {
            continue;
        }
        // Lossless: bounded by MAX_BATCH_BYTES above.
        let bytes = src.bytes(pos, usize::try_from(len).unwrap_or(0))?;
        if verify_batch(bytes, salt).is_ok() {
            return Ok(Some(pos));
        }
    }
    Ok(None)
}

/// Searches `file` after `position` for any intact batch (of any offset).
/// Returns where the first one starts.
///
/// # Errors
/// `Io` on read failure.
#[cfg(test)]
pub(crate) fn find_valid_batch_after(file: &dyn File, position: u64) -> Result<Option<u64>> {
    let at = TailAt {
        end: position,
        stop: position,
        offset: Offset(u64::MAX),
    };
    Ok(inspect_tail(file, Salt::NONE, at)?.valid_at)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use quorumlog_io::{FileSystem, OpenMode, SimFs};

    use super::*;
    use crate::batch::BatchEncoder;
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
            BatchEncoder {
                compression: Compression::None,
                threshold_bytes: 0,
                max_bytes: 1 << 20,
                control: false,
            }
            .encode(&mut buf, Offset(base), Epoch(epoch), &recs)
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
            Salt::NONE,
            ScanFrom {
                segment: Offset(10),
                position: pos[0],
                offset: Offset(10),
                prev_epoch: None,
            },
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
            Salt::NONE,
            ScanFrom {
                segment: Offset(10),
                position: pos[0],
                offset: Offset(10),
                prev_epoch: None,
            },
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
            Salt::NONE,
            ScanFrom {
                segment: Offset(10),
                position: pos[0],
                offset: Offset(10),
                prev_epoch: None,
            },
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
            Salt::NONE,
            ScanFrom {
                segment: Offset(10),
                position: pos[0],
                offset: Offset(10),
                prev_epoch: None,
            },
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
            Salt::NONE,
            ScanFrom {
                segment: Offset(0),
                position: pos[0],
                offset: Offset(0),
                prev_epoch: None,
            },
            pos[2],
            &mut ix,
        )
        .unwrap();
        assert_eq!((out.stop, out.end_offset), (Stop::Limit, Offset(2)));
    }
}
