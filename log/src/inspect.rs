//! A read-only reading of a log directory's segment files, for the
//! inspectors (`quorumlog dump`, `verify`, `info`, `repair`): it takes no
//! lock, repairs nothing and writes nothing, so it may look at a directory
//! a crashed node left, exactly as the crash left it.
//!
//! It reads the bytes as recovery reads them, with recovery's own code:
//! the one batch walker (`segment::walk`: a batch, sync padding, the end
//! of the data, or invalid bytes), the scan's rules (the offset a position
//! must hold, epochs that never go back) and the tail inspection that tells
//! a torn tail or a recycled file's stale bytes from damage (a batch of
//! this segment's life that verifies after the stop). What recovery trusts
//! without reading, the inspector checks: a sealed segment must reach the
//! next one's base, and the last one the recovery point and, after a clean
//! close, the end its index names; data that stops short of either is
//! damage, not an end.
//!
//! [`Walk::Raw`] goes on after damage from the next batch that verifies,
//! marking the gap; [`Walk::Stop`] stops at the first damage.

mod files;
mod index;

pub use files::walk_segments;
pub use index::{check_index, IndexCheck};

use std::path::{Path, PathBuf};

use quorumlog_checkpoint::{CorruptionKind, Epoch, Offset};
use quorumlog_io::{FileSystem, OpenMode};

use quorumlog_checkpoint::{read_small_file, RecoveryPoint};

use crate::batch::BatchRef;
use crate::dir::{CLEAN_CONTENT, CLEAN_FILE};
use crate::error::Result;
use crate::format::{
    decode_index, decode_segment_header, index_file_name, parse_file_name, BatchHeader, Salt,
    BATCH_HEADER_BYTES, COMPRESSION_ZSTD, SEGMENT_HEADER_BYTES,
};
use crate::intent::INTENT_FILE;
use crate::options::RecoveryMode;
use crate::recovery::decide::{decide, Finding, Outcome};
use crate::segment::scan::{inspect_tail_in, TailAt};
use crate::segment::walk::{self, BufSource, DataEnd, Slot};

/// How far a walk goes past damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// Stop a segment's walk at its first damaged batch.
    Stop,
    /// Go on from the next batch that verifies (like etcd-dump-logs
    /// `-raw`), marking what was skipped.
    Raw,
}

/// One verified batch as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchInfo {
    /// Its byte position in the segment file.
    pub position: u64,
    /// The offset of its first record.
    pub base_offset: Offset,
    /// Its records.
    pub record_count: u32,
    /// The epoch it was written in.
    pub epoch: Epoch,
    /// Its length in bytes, header included.
    pub bytes: u32,
    /// Its stored checksum (CRC32C, salted).
    pub checksum: u32,
    /// `"none"` or `"zstd"`.
    pub compression: &'static str,
    /// Whether it is a control batch.
    pub control: bool,
}

/// Damage found: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub file: PathBuf,
    /// The byte position of the damage.
    pub position: u64,
    /// The offset that position must hold, if known.
    pub offset: Option<Offset>,
    /// What is wrong.
    pub kind: CorruptionKind,
    /// Bytes skipped to the next batch that verifies (a [`Walk::Raw`]
    /// walk goes on after them; 0 where the walk stopped).
    pub skipped: u64,
}

/// What a walk of one segment file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentReport {
    /// The file.
    pub file: PathBuf,
    /// The base offset its name gives.
    pub base_offset: Offset,
    /// Its size in bytes (preallocated: the data usually ends before).
    pub size: u64,
    /// Where its data ends.
    pub data_end: u64,
    /// The offset after its last batch.
    pub end_offset: Offset,
    /// The epoch of its last batch.
    pub last_epoch: Option<Epoch>,
    /// Its batches, in order.
    pub batches: Vec<BatchInfo>,
    /// Its damage.
    pub problems: Vec<Problem>,
}

/// The segment files of the log directory `dir` (a data directory's
/// `log/`), in offset order, each walked. Other files are ignored.
///
/// # Errors
/// `Io` listing or reading the directory.
pub fn inspect_log_dir(fs: &dyn FileSystem, dir: &Path, walk: Walk) -> Result<Vec<SegmentReport>> {
    let mut out = Vec::new();
    walk_segments::<_, crate::Error>(fs, dir, walk, |report, _, _| {
        out.push(report);
        Ok(true)
    })?;
    Ok(out)
}

/// The segment files of the log directory `dir`, by base offset. Other
/// files are ignored.
///
/// # Errors
/// `Io` listing the directory.
pub fn segment_files(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<(Offset, PathBuf)>> {
    let mut files: Vec<(Offset, PathBuf)> = fs
        .list(dir)?
        .into_iter()
        .filter(|e| !e.is_dir)
        .filter_map(|e| parse_file_name(&e.name, "log").map(|base| (base, dir.join(&e.name))))
        .collect();
    files.sort();
    Ok(files)
}

/// What the directory says durably about where the last segment's data
/// ends: the walk must reach it, or what is missing is damage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Claims {
    /// The recovery point (its segment's base, and the offset the data
    /// reaches durably).
    pub recovery_point: Option<(Offset, Offset)>,
    /// After a clean close, the end offset the last segment's index names.
    pub clean_end: Option<Offset>,
}

impl Claims {
    /// What `log_dir` (a data directory's `log/`) claims. Nothing is
    /// claimed while a truncation intent is pending (the open redoes it
    /// first, and the points may describe the log before it).
    ///
    /// # Errors
    /// `Io` reading the files (a damaged one claims nothing: `verify`
    /// reports it on its own).
    pub fn read(fs: &dyn FileSystem, log_dir: &Path, last_base: Option<Offset>) -> Result<Self> {
        let mut claims = Claims::default();
        if fs.exists(&log_dir.join(INTENT_FILE))? {
            return Ok(claims);
        }
        let data_dir = quorumlog_io::parent_dir(log_dir);
        if let Ok(Some(rp)) = read_small_file::<RecoveryPoint>(fs, data_dir) {
            claims.recovery_point = Some((rp.segment, rp.offset));
        }
        let clean = match fs.open(&log_dir.join(CLEAN_FILE), OpenMode::Read) {
            Ok(f) => f.read_to_end()? == CLEAN_CONTENT,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(e.into()),
        };
        if let (true, Some(base)) = (clean, last_base) {
            let path = log_dir.join(index_file_name(base));
            if let Ok(f) = fs.open(&path, OpenMode::Read) {
                if let Ok((h, _)) = decode_index(&f.read_to_end()?) {
                    claims.clean_end = (h.base_offset == base).then_some(h.end_offset);
                }
            }
        }
        Ok(claims)
    }

    /// The offset segment `base` (the last one) must reach, and who says so.
    #[must_use]
    pub fn required_end(&self, base: Offset) -> Option<(Offset, &'static str)> {
        let rp = self
            .recovery_point
            .filter(|(segment, offset)| *segment == base && *offset > base)
            .map(|(_, offset)| (offset, "the recovery point"));
        let clean = self
            .clean_end
            .map(|end| (end, "the index written by the clean close"));
        match (rp, clean) {
            (Some(a), Some(b)) => Some(if b.0 > a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// Where a segment's data must end.
#[derive(Debug, Clone, Copy)]
pub enum SegmentEnd {
    /// A sealed segment: exactly at the next segment's base offset.
    Sealed(Offset),
    /// The last segment: at the first batch that does not verify, if that
    /// is a torn tail (no batch of this life verifies after it) and no
    /// [`Claims`] says the data goes on.
    Last(Claims),
}

/// Reads one segment file's bytes (`path` and `base` name it) as
/// recovery reads them; `end` says where its data must end, `prev_epoch` is
/// the epoch of the batch before it (in the previous segment).
pub fn inspect_segment(
    path: &Path,
    base: Offset,
    bytes: &[u8],
    walk: Walk,
    end: SegmentEnd,
    prev_epoch: Option<Epoch>,
) -> SegmentReport {
    let mut report = SegmentReport {
        file: path.to_path_buf(),
        base_offset: base,
        size: bytes.len() as u64,
        data_end: SEGMENT_HEADER_BYTES as u64,
        end_offset: base,
        last_epoch: None,
        batches: Vec::new(),
        problems: Vec::new(),
    };
    let salt = match decode_segment_header(bytes.get(..SEGMENT_HEADER_BYTES).unwrap_or(bytes)) {
        Ok((b, salt)) if b == base => salt,
        Ok(_) => {
            let kind = CorruptionKind::Malformed(
                "the segment header names another base offset than the file name",
            );
            report.problems.push(problem(path, 0, Some(base), kind));
            return report;
        }
        Err(kind) => {
            report.problems.push(problem(path, 0, Some(base), kind));
            return report;
        }
    };
    let len = bytes.len() as u64;
    let mut src = BufSource {
        buf: bytes,
        start: 0,
    };
    let mut from = SEGMENT_HEADER_BYTES as u64;
    let mut epoch = prev_epoch;
    loop {
        let stop = walk_from(&mut src, len, salt, from, &mut epoch, &mut report);
        let (at, kind) = match stop {
            Some((at, kind)) => (at, Some(kind)),
            None => (report.data_end, None),
        };
        if matches!(end, SegmentEnd::Sealed(next) if report.end_offset == next) {
            // The data is complete: what follows it is not data.
            return report;
        }
        let tail = TailAt {
            end: report.data_end,
            stop: at,
            offset: report.end_offset,
        };
        // A buffer source cannot fail.
        let valid_at = inspect_tail_in(&mut src, len, salt, tail)
            .ok()
            .and_then(|t| t.valid_at);
        let damage = judge(end, kind, valid_at, report.end_offset, base);
        let Some(kind) = damage else {
            return report;
        };
        let mut p = problem(path, at, Some(report.end_offset), kind);
        let resume = match (walk, valid_at) {
            (Walk::Raw, Some(next)) if next > from => next,
            _ => {
                report.problems.push(p);
                return report;
            }
        };
        p.skipped = resume - at;
        report.problems.push(p);
        // The walk goes on from the batch that verifies, whatever its
        // offset and epoch (a new start after the gap).
        if let Ok(h) = BatchHeader::parse(bytes.get(offset_range(resume)).unwrap_or_default()) {
            report.end_offset = h.base_offset;
        }
        epoch = None;
        from = resume;
    }
}

/// Whether the walk's stop is damage, and what is wrong if so: the finding
/// recovery would make there, judged by recovery's decision table
/// (damage is what a strict open refuses; a torn tail it cuts is not).
/// `stopped` is what the walk stopped at (`None`: zeros), `valid_at` a
/// later batch of this segment's life that verifies.
fn judge(
    end: SegmentEnd,
    stopped: Option<CorruptionKind>,
    valid_at: Option<u64>,
    end_offset: Offset,
    base: Offset,
) -> Option<CorruptionKind> {
    let (finding, kind) = match (end, stopped) {
        (SegmentEnd::Sealed(_), Some(kind)) => (Finding::InSealedSegment, kind),
        (SegmentEnd::Sealed(next), None) => (
            Finding::SealedEndsShort,
            CorruptionKind::Gap {
                end: end_offset,
                next_base: next,
            },
        ),
        // Zeros where a batch should start, and valid data after them.
        (SegmentEnd::Last(_), None) if valid_at.is_some() => (
            Finding::ValidDataFollows,
            CorruptionKind::ValidDataFollows {
                valid_at: valid_at.unwrap_or_default(),
            },
        ),
        (SegmentEnd::Last(_), Some(kind)) if valid_at.is_some() => {
            (Finding::ValidDataFollows, kind)
        }
        (
            SegmentEnd::Last(_),
            Some(kind @ (CorruptionKind::Misplaced { .. } | CorruptionKind::EpochOrder { .. })),
        ) => (Finding::Misplaced, kind),
        (SegmentEnd::Last(claims), stopped) => match claims.required_end(base) {
            // Recovery would trust what the claim vouches for unread.
            Some((claimed, by)) if claimed > end_offset => (
                Finding::BeforeRecoveryPoint,
                CorruptionKind::DataEndsEarly {
                    end: end_offset,
                    claimed,
                    by,
                },
            ),
            _ => (
                Finding::TornTail,
                stopped.unwrap_or(CorruptionKind::Malformed("the end of the data")),
            ),
        },
    };
    (decide(finding, RecoveryMode::Strict) == Outcome::Refuse).then_some(kind)
}

/// The header bytes at `pos`.
fn offset_range(pos: u64) -> std::ops::Range<usize> {
    let start = usize::try_from(pos).unwrap_or(usize::MAX);
    start..start.saturating_add(BATCH_HEADER_BYTES)
}

/// Walks batches from `pos` as the recovery scan does, noting each in
/// `report`, until the end of the data (`None`) or bytes that do not
/// continue the log (where they start, and what is wrong).
fn walk_from(
    src: &mut BufSource<'_>,
    len: u64,
    salt: Salt,
    mut pos: u64,
    epoch: &mut Option<Epoch>,
    report: &mut SegmentReport,
) -> Option<(u64, CorruptionKind)> {
    let limit = DataEnd(len);
    loop {
        // A buffer source cannot fail: treat a failure as the end.
        let (position, header) = match walk::slot(src, pos, limit).ok()? {
            Slot::Header { position, header } => (position, header),
            Slot::End | Slot::NeedMore => return None,
            Slot::Invalid { position, kind } => return Some((position, kind)),
        };
        let expected = report.end_offset;
        let bytes = match walk::batch(src, position, &header, expected, limit, salt).ok()? {
            Ok(bytes) => bytes.len() as u64,
            Err(kind) => return Some((position, kind)),
        };
        if let Some(previous) = *epoch {
            if header.epoch < previous {
                let kind = CorruptionKind::EpochOrder {
                    previous,
                    found: header.epoch,
                };
                return Some((position, kind));
            }
        }
        report.batches.push(info(position, &header));
        *epoch = Some(header.epoch);
        report.last_epoch = Some(header.epoch);
        pos = position + bytes;
        report.data_end = pos;
        report.end_offset = header.next_offset();
    }
}

/// The first record of the batch whose header starts at `position` of a
/// segment's bytes, read **without** verifying its checksum: for naming
/// what a damaged batch belonged to (a node's record header names its
/// group), never for data. `None` where the header or the record do not
/// parse.
#[must_use]
pub fn first_record_unverified(bytes: &[u8], position: u64) -> Option<Vec<u8>> {
    let start = usize::try_from(position).ok()?;
    let head = bytes.get(start..start.checked_add(BATCH_HEADER_BYTES)?)?;
    let header = BatchHeader::parse(head).ok()?;
    let end = start
        .saturating_add(header.batch_len as usize)
        .min(bytes.len());
    let raw = bytes.get(start..end)?;
    let mut records = BatchRef::new(header, raw).records().ok()?;
    records.next_record().map(<[u8]>::to_vec)
}

/// The records of a verified batch (decompressed).
///
/// # Errors
/// What does not decode.
pub fn batch_records(bytes: &[u8]) -> std::result::Result<Vec<Vec<u8>>, CorruptionKind> {
    BatchRef::from_verified_raw(bytes)?.to_vecs()
}

fn info(position: u64, h: &BatchHeader) -> BatchInfo {
    BatchInfo {
        position,
        base_offset: h.base_offset,
        record_count: h.record_count,
        epoch: h.epoch,
        bytes: h.batch_len,
        checksum: h.crc,
        compression: if h.compression() == COMPRESSION_ZSTD {
            "zstd"
        } else {
            "none"
        },
        control: h.is_control(),
    }
}

fn problem(file: &Path, position: u64, offset: Option<Offset>, kind: CorruptionKind) -> Problem {
    Problem {
        file: file.to_path_buf(),
        position,
        offset,
        kind,
        skipped: 0,
    }
}
