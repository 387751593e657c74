//! Suffix truncation, prefix truncation, and the full truncation used to
//! install a snapshot. The crash-safe file steps live in `crate::dir`.
//!
//! Crash safety, step by step (each step leaves a state recovery accepts):
//! - suffix (`truncate_to`): [flush, intent if the cut rewrites a page] →
//!   `LogDir::redo_cut` → [remove intent]. Before the final sync a crash may
//!   leave the records (the truncation was not acknowledged); after it they
//!   never come back.
//! - prefix (`truncate_prefix_to`): log start offset → recovery point off
//!   the doomed segments → remove whole segments below, oldest first →
//!   directory sync. Recovery removes segments wholly below the log start.
//! - full (`truncate_fully_and_start_at`): intent → `LogDir::redo_full` →
//!   remove intent. Recovery redoes it from the intent.

use quorumlog_checkpoint::{Epoch, EpochMap, Offset, RecoveryPoint};

use crate::batch::{BatchEncoder, BatchRef};
use crate::dir::Cut;
use crate::error::{Error, Result};
use crate::format::{Salt, PAGE_BYTES, SEGMENT_HEADER_BYTES};
use crate::intent::{self, Intent};
use crate::log::Log;
use crate::segment::relative;
use crate::segment::Location;

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
            // Nothing to remove, but the caller is told the log ends here
            // durably: what it holds must be synced before that is said.
            if self.flushed < end {
                self.flush()?;
            }
            return Ok(());
        }
        self.guard(|log| log.truncate_suffix(offset))
    }

    fn truncate_suffix(&mut self, offset: Offset) -> Result<()> {
        let i = self.segment_index(offset);
        let seg = self.segments.get(i).unwrap_or_else(|| self.active());
        let (position, replacement) = {
            let (pos, h) = seg.locate(offset)?;
            if h.base_offset == offset {
                (pos, None)
            } else {
                let (h, bytes) = seg.read_batch_at(pos, Some(h.base_offset))?;
                let records = BatchRef::new(h, &bytes).to_vecs().map_err(|kind| {
                    crate::segment::corruption(
                        Location {
                            segment: seg.base,
                            position: pos,
                            offset: h.base_offset,
                        },
                        Some(h.epoch),
                        kind,
                    )
                })?;
                let keep = usize::try_from(offset.0 - h.base_offset.0).unwrap_or(0);
                let mut out = Vec::new();
                let mut header = BatchEncoder {
                    compression: self.options().compression,
                    threshold_bytes: self.options().compression_threshold_bytes,
                    max_bytes: u64::MAX,
                    // A cut control batch stays a control batch.
                    control: h.is_control(),
                }
                .encode(
                    &mut out,
                    h.base_offset,
                    h.epoch,
                    records.get(..keep).unwrap_or_default(),
                )?;
                seg.salt.restamp(Salt::NONE, &mut header, &mut out);
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
        self.dir.cut_page_safe(Cut {
            segment: seg_base,
            position,
            replacement: replacement.as_ref().map(|(_, b)| b.as_slice()),
            offset: cut_offset,
        })?;
        self.segments.truncate(i + 1);
        let seg = self.active_mut();
        seg.end_position = position;
        seg.zeros_to = position;
        seg.end_offset = replacement
            .as_ref()
            .map_or(cut_offset, |(h, _)| h.base_offset);
        seg.index.truncate(relative(seg.base, seg.end_offset));
        if let Some((h, bytes)) = &replacement {
            seg.note_appended(bytes.len() as u64, h);
        }
        debug_assert_eq!(seg.end_offset, offset);
        self.epochs.truncate_from_end(offset);
        // The watermark moves down with a truncation, never above the end.
        assert!(offset <= self.log_end_offset(), "flushed within the log");
        self.flushed = offset;
        self.align_end();
        self.clear_read_hint();
        Ok(())
    }

    /// Advances the log start offset to `offset` and retires every segment
    /// wholly below it: up to `LogOptions::recycled_segments` files go to
    /// the recycling pool for later rolls, the rest are deleted. The caller guarantees a durable snapshot covers
    /// everything below `offset` (docs/design.md invariant 7).
    ///
    /// # Errors
    /// `OffsetOutOfRange` beyond the log end; `Io`/`Checkpoint` (which
    /// poison the log); `Poisoned`.
    ///
    /// # Panics
    /// If the log start would move backwards (a bug).
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
            let dd = log.dir.dd();
            // Lossless: `offset > start`, so `offset - 1` is in the log.
            let purged = log.epochs.epoch_at(Offset(offset.0 - 1));
            dd.write_log_start_offset(offset, purged)?;
            log.epochs.truncate_from_start(offset);
            let doomed = log
                .segments
                .windows(2)
                .take_while(|w| w.get(1).is_some_and(|next| next.base <= offset))
                .count();
            if let (true, Some(first_kept)) = (doomed > 0, log.segments.get(doomed)) {
                let keep = first_kept.base;
                if dd
                    .checkpoints()
                    .recovery_point
                    .is_none_or(|rp| rp.segment < keep)
                {
                    dd.write_epoch_map(&log.epochs)?;
                    dd.write_recovery_point(RecoveryPoint {
                        offset: keep,
                        segment: keep,
                        position: SEGMENT_HEADER_BYTES as u64,
                    })?;
                }
                for seg in log.segments.drain(..doomed) {
                    log.dir.retire_segment(seg.base)?;
                }
                log.dir.sync()?;
            }
            assert!(
                offset > log.start_offset && offset <= log.log_end_offset(),
                "the log start moves forward, within the log"
            );
            log.start_offset = offset;
            log.clear_read_hint();
            Ok(())
        })
    }

    /// Removes every record and restarts the log, empty, at `offset` (to
    /// install a snapshot ending there, whose epoch `purged_epoch` is, so
    /// [`Log::last_purged`] knows it). Durable when it returns; a crash
    /// during it is completed by recovery.
    ///
    /// # Errors
    /// `BelowHighWatermark` when `offset` is below the high watermark
    /// (committed entries would go; nothing changed); `Io`/`Checkpoint`
    /// (which poison the log); `Poisoned`.
    pub fn truncate_fully_and_start_at(
        &mut self,
        offset: Offset,
        purged_epoch: Option<Epoch>,
    ) -> Result<()> {
        self.check_poisoned()?;
        if let Some(hw) = self.high_watermark.filter(|h| *h > offset) {
            return Err(Error::BelowHighWatermark {
                offset,
                high_watermark: hw,
            });
        }
        self.guard(|log| {
            log.finish_preparation();
            let (fs, path) = (log.dir.fs().clone(), log.dir.path().to_path_buf());
            let purged_epoch = purged_epoch.filter(|_| offset > Offset(0));
            let intent = Intent::Full {
                start: offset,
                purged_epoch,
            };
            intent::write(fs.as_ref(), &path, &intent)?;
            log.dir.redo_full(offset, purged_epoch)?;
            intent::remove(fs.as_ref(), &path)?;
            let seg = log.dir.open_segment(offset)?;
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
