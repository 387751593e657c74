//! Suffix truncation, prefix truncation, and the full truncation used to
//! install a snapshot.
//!
//! Crash safety, step by step (each step leaves a state recovery accepts):
//! - suffix (`truncate_to`): [intent if a batch is cut] → lower the recovery
//!   point below the cut → remove later segments, newest first → directory
//!   sync → cut and zero-fill the segment (+ replacement batch) → sync →
//!   [remove intent]. Before the final sync a crash may leave the records
//!   (the truncation was not acknowledged); after it they never come back.
//! - prefix (`truncate_prefix_to`): log start offset → recovery point off
//!   the doomed segments → remove whole segments below, oldest first →
//!   directory sync. Recovery removes segments wholly below the log start.
//! - full (`truncate_fully_and_start_at`): intent → log start, empty epoch
//!   map → remove every segment → new segment → recovery point → remove
//!   intent. Recovery redoes it from the intent.

use std::io;
use std::path::Path;

use quorumlog_checkpoint::{DataDir, EpochMap, Offset, RecoveryPoint};
use quorumlog_io::{FileSystem, OpenMode};

use crate::batch::{encode_into, BatchRef};
use crate::error::{Error, Result};
use crate::format::{
    index_file_name, parse_file_name, segment_file_name, PAGE_BYTES, SEGMENT_HEADER_BYTES,
};
use crate::intent::{self, Intent};
use crate::log::{Log, PREPARED_FILE};
use crate::options::LogOptions;
use crate::segment::{preallocate, Segment};

/// Removes `path`, treating "already gone" as done (redo is idempotent).
pub(crate) fn remove_if_present(fs: &dyn FileSystem, path: &Path) -> Result<bool> {
    match fs.remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Lowers the recovery point to `(cut_offset, segment, position)` if it is
/// above it. Everything below the old recovery point was durable, so the
/// lower one is true as well.
fn lower_recovery_point(
    dd: &DataDir,
    cut_offset: Offset,
    segment: Offset,
    position: u64,
) -> Result<()> {
    if let Some(rp) = dd.checkpoints().recovery_point {
        let beyond = rp.offset > cut_offset
            || rp.segment > segment
            || (rp.segment == segment && rp.position > position);
        if beyond {
            dd.write_recovery_point(RecoveryPoint {
                offset: cut_offset,
                segment,
                position,
            })?;
        }
    }
    Ok(())
}

/// Where a suffix truncation cuts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cut<'a> {
    /// The segment cut.
    pub segment: Offset,
    /// The byte position of the cut.
    pub position: u64,
    /// A batch written at the cut (the kept part of a cut batch).
    pub replacement: Option<&'a [u8]>,
    /// The offset at the cut (the replacement's base, if any).
    pub offset: Offset,
}

/// The idempotent part of a suffix truncation: lower the recovery point,
/// remove every segment after the cut's, cut it at its position, zero-fill,
/// write the replacement there, sync.
pub(crate) fn redo_cut(
    fs: &dyn FileSystem,
    dd: &DataDir,
    dir: &Path,
    options: &LogOptions,
    cut: Cut<'_>,
) -> Result<()> {
    let Cut {
        segment,
        position,
        replacement,
        offset: cut_offset,
    } = cut;
    let end = position + replacement.map_or(0, |r| r.len() as u64);
    lower_recovery_point(dd, cut_offset, segment, end)?;
    let mut later: Vec<Offset> = fs
        .list(dir)?
        .iter()
        .filter_map(|e| parse_file_name(&e.name, "log"))
        .filter(|&b| b > segment)
        .collect();
    later.sort_unstable();
    for base in later.iter().rev() {
        remove_if_present(fs, &dir.join(segment_file_name(*base)))?;
        remove_if_present(fs, &dir.join(index_file_name(*base)))?;
    }
    remove_if_present(fs, &dir.join(index_file_name(segment)))?;
    fs.sync_dir(dir)?;
    let file = fs.open(&dir.join(segment_file_name(segment)), OpenMode::ReadWrite)?;
    file.set_len(position)?;
    preallocate(
        file.as_ref(),
        options.segment_size_bytes,
        options.preallocation,
    )?;
    if let Some(batch) = replacement {
        file.write_all_at(batch, position)?;
    }
    file.sync_data()?;
    Ok(())
}

/// A cut that never loses kept bytes: if the cut is not on a page boundary
/// (or a batch is cut), the page's kept bytes and the replacement are saved
/// in an intent first, the cut is made at the page boundary and the bytes
/// written back, then the intent is removed. A crash or a torn page in
/// between is repaired by recovery redoing the intent.
pub(crate) fn cut_page_safe(
    fs: &dyn FileSystem,
    dd: &DataDir,
    dir: &Path,
    options: &LogOptions,
    cut: Cut<'_>,
) -> Result<()> {
    let page_start = cut.position / PAGE_BYTES * PAGE_BYTES;
    if page_start == cut.position && cut.replacement.is_none() {
        return redo_cut(fs, dd, dir, options, cut);
    }
    let file = fs.open(&dir.join(segment_file_name(cut.segment)), OpenMode::Read)?;
    let mut bytes = vec![0u8; usize::try_from(cut.position - page_start).unwrap_or(0)];
    file.read_exact_at(&mut bytes, page_start)?;
    drop(file);
    if let Some(r) = cut.replacement {
        bytes.extend_from_slice(r);
    }
    intent::write(
        fs,
        dir,
        &Intent::Cut {
            segment: cut.segment,
            position: page_start,
            bytes: bytes.clone(),
            offset: cut.offset,
        },
    )?;
    redo_cut(
        fs,
        dd,
        dir,
        options,
        Cut {
            segment: cut.segment,
            position: page_start,
            replacement: Some(&bytes),
            offset: cut.offset,
        },
    )?;
    intent::remove(fs, dir)
}

/// The idempotent part of a full truncation: the log restarts, empty, at
/// `start`.
pub(crate) fn redo_full(
    fs: &dyn FileSystem,
    dd: &DataDir,
    dir: &Path,
    options: &LogOptions,
    start: Offset,
) -> Result<()> {
    dd.write_log_start_offset(start)?;
    dd.write_epoch_map(&EpochMap::new())?;
    for e in fs.list(dir)? {
        let ours = parse_file_name(&e.name, "log").is_some()
            || parse_file_name(&e.name, "index").is_some()
            || e.name == PREPARED_FILE;
        if ours {
            remove_if_present(fs, &dir.join(&e.name))?;
        }
    }
    fs.sync_dir(dir)?;
    create_segment_file(fs, dir, options, start)?;
    dd.write_recovery_point(RecoveryPoint {
        offset: start,
        segment: start,
        position: SEGMENT_HEADER_BYTES as u64,
    })?;
    // Nothing below `start` is left to commit; nothing above it exists.
    dd.write_high_watermark(start)?;
    Ok(())
}

/// Creates segment `base` (header written and synced, directory synced).
pub(crate) fn create_segment_file(
    fs: &dyn FileSystem,
    dir: &Path,
    options: &LogOptions,
    base: Offset,
) -> Result<()> {
    let prepared = dir.join(PREPARED_FILE);
    let f = fs.open(&prepared, OpenMode::CreateOrTruncate)?;
    Segment::init_file(
        f.as_ref(),
        base,
        options.segment_size_bytes,
        options.preallocation,
    )?;
    drop(f);
    fs.rename(&prepared, &dir.join(segment_file_name(base)))?;
    fs.sync_dir(dir)?;
    Ok(())
}

impl Log {
    /// Removes every record at or after `offset` (suffix truncation). When
    /// this returns, the removed records never come back, even after a
    /// crash. A batch holding `offset` is cut in two safely.
    ///
    /// # Errors
    /// `OffsetOutOfRange` outside `[log start, log end]`;
    /// `BelowHighWatermark` below the high watermark (nothing changed);
    /// `Corruption` if the batch to cut fails verification; `Io` (which
    /// poisons the log); `Poisoned`.
    pub fn truncate_to(&mut self, offset: Offset) -> Result<()> {
        self.check_poisoned()?;
        let end = self.log_end_offset();
        if offset < self.start_offset || offset > end {
            return Err(Error::OffsetOutOfRange {
                offset,
                start: self.start_offset,
                end,
            });
        }
        if let Some(hw) = self.high_watermark {
            if offset < hw {
                return Err(Error::BelowHighWatermark {
                    offset,
                    high_watermark: hw,
                });
            }
        }
        if offset == end {
            return Ok(());
        }
        self.guard(|log| log.truncate_suffix(offset))
    }

    fn truncate_suffix(&mut self, offset: Offset) -> Result<()> {
        let i = self.segments.partition_point(|s| s.base <= offset) - 1;
        let seg = &self.segments[i];
        let (position, replacement) = {
            let (pos, h) = seg.locate(offset)?;
            if h.base_offset == offset {
                (pos, None)
            } else {
                let (h, bytes) = seg.read_batch_at(pos, Some(h.base_offset))?;
                let records = BatchRef::new(h, &bytes).to_vecs().map_err(|kind| {
                    crate::segment::corruption(seg.base, pos, h.base_offset, Some(h.epoch), kind)
                })?;
                let keep = usize::try_from(offset.0 - h.base_offset.0).unwrap_or(0);
                let mut out = Vec::new();
                let header = encode_into(
                    &mut out,
                    h.base_offset,
                    h.epoch,
                    &records[..keep],
                    self.options.compression,
                    self.options.compression_threshold_bytes,
                    u64::MAX,
                )?;
                (pos, Some((header, out)))
            }
        };
        let seg_base = seg.base;
        let cut_offset = offset;
        if replacement.is_some() || position % PAGE_BYTES != 0 {
            // The cut rewrites a page of kept bytes, saved in an intent from
            // the file: they must be durable first.
            self.flush()?;
        }
        cut_page_safe(
            self.fs.as_ref(),
            &self.dd,
            &self.dir,
            &self.options,
            Cut {
                segment: seg_base,
                position,
                replacement: replacement.as_ref().map(|(_, b)| b.as_slice()),
                offset: cut_offset,
            },
        )?;
        self.segments.truncate(i + 1);
        let seg = self.active_mut();
        seg.end_position = position;
        seg.end_offset = replacement
            .as_ref()
            .map_or(cut_offset, |(h, _)| h.base_offset);
        seg.index
            .truncate(u32::try_from(seg.end_offset.0 - seg.base.0).unwrap_or(u32::MAX));
        if let Some((h, bytes)) = &replacement {
            seg.note_appended(bytes.len() as u64, h);
        }
        debug_assert_eq!(seg.end_offset, offset);
        self.epochs.truncate_from_end(offset);
        self.flushed = offset;
        self.align_end();
        self.clear_read_hint();
        Ok(())
    }

    /// Advances the log start offset to `offset` and deletes every segment
    /// wholly below it. The caller guarantees a durable snapshot covers
    /// everything below `offset` (docs/design.md invariant 7).
    ///
    /// # Errors
    /// `OffsetOutOfRange` beyond the log end; `Io`/`Checkpoint` (which
    /// poison the log); `Poisoned`.
    pub fn truncate_prefix_to(&mut self, offset: Offset) -> Result<()> {
        self.check_poisoned()?;
        let end = self.log_end_offset();
        if offset > end {
            return Err(Error::OffsetOutOfRange {
                offset,
                start: self.start_offset,
                end,
            });
        }
        if offset <= self.start_offset {
            return Ok(());
        }
        self.guard(|log| {
            log.dd.write_log_start_offset(offset)?;
            log.epochs.truncate_from_start(offset);
            let doomed = log
                .segments
                .windows(2)
                .take_while(|w| w[1].base <= offset)
                .count();
            if doomed > 0 {
                let keep = log.segments[doomed].base;
                if log
                    .dd
                    .checkpoints()
                    .recovery_point
                    .is_none_or(|rp| rp.segment < keep)
                {
                    log.dd.write_epoch_map(&log.epochs)?;
                    log.dd.write_recovery_point(RecoveryPoint {
                        offset: keep,
                        segment: keep,
                        position: SEGMENT_HEADER_BYTES as u64,
                    })?;
                }
                for seg in log.segments.drain(..doomed) {
                    log.fs.remove_file(&seg.path)?;
                    remove_if_present(log.fs.as_ref(), &log.dir.join(index_file_name(seg.base)))?;
                }
                log.fs.sync_dir(&log.dir)?;
            }
            log.start_offset = offset;
            log.clear_read_hint();
            Ok(())
        })
    }

    /// Removes every record and restarts the log, empty, at `offset` (to
    /// install a snapshot ending there). Durable when it returns; a crash
    /// during it is completed by recovery.
    ///
    /// # Errors
    /// `Io`/`Checkpoint` (which poison the log); `Poisoned`.
    pub fn truncate_fully_and_start_at(&mut self, offset: Offset) -> Result<()> {
        self.guard(|log| {
            log.finish_preparation();
            intent::write(log.fs.as_ref(), &log.dir, &Intent::Full { start: offset })?;
            redo_full(log.fs.as_ref(), &log.dd, &log.dir, &log.options, offset)?;
            intent::remove(log.fs.as_ref(), &log.dir)?;
            let seg = Segment::open(
                log.fs.as_ref(),
                &log.dir,
                offset,
                log.options.index_interval_bytes,
            )?;
            log.segments = vec![seg];
            log.align_end();
            log.start_offset = offset;
            log.epochs = EpochMap::new();
            log.flushed = offset;
            log.high_watermark = Some(offset);
            log.clear_read_hint();
            Ok(())
        })
    }

    pub(crate) fn clear_read_hint(&self) {
        *self
            .read_hint
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}
