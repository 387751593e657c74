//! The segmented log: the state every operation shares, reads, watermarks
//! and clean close. Appends are in `append.rs`, truncations in
//! `truncate.rs`, open and recovery in `crate::recovery`.
//!
//! Invariants:
//! - `segments` is never empty, sorted by base, contiguous: each segment's
//!   `end_offset` is the next one's base; the last one is active.
//! - `log_start <= flushed <= log_end` is not required (a log start can be
//!   ahead of what was flushed after a snapshot install), but
//!   `flushed <= log_end` and `log_start <= log_end` always hold.
//! - the epoch map holds every epoch in `[log_start, log_end)`; epochs never
//!   decrease with offsets.
//! - after a failed write or sync (`poisoned`), every call fails with
//!   `Poisoned` (docs/design.md invariant 6).

mod append;
mod checkpoints;
mod read;
mod truncate;

use std::sync::{Arc, Mutex, PoisonError};

use quorumlog_checkpoint::{DataDir, Epoch, EpochMap, LogClaim, Offset, RecoveryPoint};
use quorumlog_io::{Failure, File, OpenMode};

use crate::batch::BatchRef;
use crate::dir::LogDir;
use crate::error::{Error, Result};
use crate::format::{
    index_file_name, segment_file_name, truncated, BatchHeader, Salt, BATCH_HEADER_BYTES,
};
use crate::options::{LogOptions, Preallocation, WriteAlignment};
use crate::recovery::{recover, RecoveryReport};
use crate::segment::walk::{self, BufSource, DataEnd, Slot};
use crate::segment::Location;
use crate::segment::Segment;

pub use append::{AppendInfo, FollowerBatch};
pub(crate) use append::{NextSegment, PreparedWrite, StartedWrite};

/// A segmented append log over one data directory.
///
/// Its fields are private to this module and its children (appends,
/// truncations): they alone keep the invariants above.
#[derive(Debug)]
pub struct Log {
    dir: LogDir,
    segments: Vec<Segment>,
    start_offset: Offset,
    high_watermark: Option<Offset>,
    epochs: EpochMap,
    flushed: Offset,
    poisoned: Option<Failure>,
    scratch: Vec<u8>,
    prepared: Option<NextSegment>,
    report: RecoveryReport,
    /// Syncs of the active segment since it was opened (for `Adaptive`
    /// preallocation).
    syncs_in_segment: u64,
    /// Rolls that reused a recycled segment file since open.
    recycled: u64,
    /// The aligned staging buffer of direct tail writes.
    direct_buf: Vec<u8>,
    /// The file system refused `O_DIRECT`: tail writes stay buffered.
    direct_refused: bool,
    /// Where the last read ended: (next offset, segment index, position).
    read_hint: Mutex<Option<(Offset, Offset, u64)>>,
    /// Opened on a full disk: writes wait for space ([`Log::reserve_space`]).
    space_short: bool,
    /// This log's claim on its data directory (released on drop).
    _claim: LogClaim,
}

/// Whole batches returned by [`Log::read`], in one buffer.
#[derive(Debug, Default)]
pub struct ReadBatches {
    buf: Vec<u8>,
    batches: Vec<(usize, BatchHeader)>,
}

impl ReadBatches {
    /// The verified batches, in offset order.
    pub fn iter(&self) -> impl Iterator<Item = BatchRef<'_>> {
        self.batches.iter().filter_map(|(start, h)| {
            // Every entry was verified inside the buffer.
            let bytes = self.buf.get(*start..*start + h.batch_len as usize)?;
            Some(BatchRef::new(*h, bytes))
        })
    }

    /// Whether no batch was returned.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Number of batches.
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    /// The offset after the last batch returned.
    pub fn next_offset(&self) -> Option<Offset> {
        self.batches.last().map(|(_, h)| h.next_offset())
    }

    /// The raw bytes of all batches, back to back as stored.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

impl Log {
    /// Opens the log of data directory `dd`, recovering from a crash if one
    /// happened (see the decision table in docs/format.md). Only one log may
    /// hold a data directory at a time.
    ///
    /// # Errors
    /// `InvalidOptions`; `Checkpoint(LogAlreadyOpen)`; `Corruption` (Strict
    /// mode) naming segment, position, offset and epoch; `Io`; `Checkpoint`.
    ///
    /// # Panics
    /// If recovery left the log start or the flushed offset outside the log
    /// (a bug).
    pub fn open(dd: Arc<DataDir>, options: LogOptions) -> Result<Log> {
        Self::open_checked(dd, options, &mut |_| Ok(()))
    }

    /// [`Log::open`], `check` seeing what recovery will leave before it
    /// changes a byte: a refusal leaves the directory as it was (the one
    /// exception: a truncation decided before a crash is finished first).
    ///
    /// # Errors
    /// As [`Log::open`]; what `check` returns.
    ///
    /// # Panics
    /// As [`Log::open`].
    pub fn open_checked(
        dd: Arc<DataDir>,
        options: LogOptions,
        check: crate::recovery::PlanCheck<'_>,
    ) -> Result<Log> {
        options.validate()?;
        // Before anything is read or repaired: one log per data directory.
        let claim = dd.claim_log()?;
        let dir = LogDir::new(dd, options);
        let r = recover(&dir, check)?;
        let end = r.segments.last().map_or(r.log_start, |s| s.end_offset);
        let clean = r.report.clean;
        let mut segments = r.segments;
        if let Some(last) = segments.last_mut() {
            // Recovery leaves zeros from the end of the data to the page
            // boundary (sync padding it verified, or a torn tail it zeroed):
            // never written again, as that page may hold acknowledged bytes.
            last.zeros_to = crate::format::align_up(last.end_position);
        }
        let mut log = Log {
            dir,
            segments,
            start_offset: r.log_start,
            high_watermark: r.high_watermark,
            epochs: r.epochs,
            flushed: end,
            poisoned: None,
            scratch: Vec::new(),
            prepared: None,
            report: r.report,
            syncs_in_segment: 0,
            recycled: 0,
            direct_buf: Vec::new(),
            direct_refused: false,
            read_hint: Mutex::new(None),
            space_short: false,
            _claim: claim,
        };
        assert!(
            log.start_offset <= end && log.flushed == end,
            "recovery leaves the log start and the flushed offset within the log"
        );
        if !clean {
            log.checkpoint_after_recovery()?;
        }
        log.align_end();
        Ok(log)
    }

    /// How many rolls since open reused a segment file a prefix truncation
    /// had freed (instead of preparing a new one).
    pub fn segments_recycled(&self) -> u64 {
        self.recycled
    }

    /// The options the log was opened with.
    pub(crate) fn options(&self) -> &LogOptions {
        self.dir.options()
    }

    /// For a sync round: the end to make durable and the file holding it
    /// (its sync padding written); later appends move to a fresh page.
    ///
    /// # Errors
    /// `Io` writing the padding (which poisons the log); `Poisoned`.
    ///
    /// The file is `None` when nothing was written through the page cache
    /// since the last sync (direct tail writes are durable already).
    pub(crate) fn capture_sync_target(&mut self) -> Result<(Offset, Option<Arc<dyn File>>)> {
        self.guard(|log| {
            log.pad_for_sync()?;
            let target = log.log_end_offset();
            let seg = log.active_mut();
            let file = seg.buffered_since_sync.then(|| Arc::clone(&seg.file));
            seg.buffered_since_sync = false;
            log.align_end();
            Ok((target, file))
        })
    }

    /// The active segment's direct handle (`TailWrites::Direct`), opened
    /// on first use; `None` when buffered (or refused by the file system,
    /// which is then remembered).
    pub(crate) fn direct_handle(&mut self) -> Result<Option<Arc<dyn File>>> {
        if !self.options().tail_writes.is_direct() || self.direct_refused {
            return Ok(None);
        }
        if let Some(d) = &self.active().direct {
            return Ok(Some(Arc::clone(d)));
        }
        let path = self.dir.path().join(segment_file_name(self.active().base));
        match self.dir.fs().open(&path, OpenMode::DirectWrite) {
            Ok(f) => {
                let f: Arc<dyn File> = Arc::from(f);
                self.active_mut().direct = Some(Arc::clone(&f));
                Ok(Some(f))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::InvalidInput | std::io::ErrorKind::Unsupported
                ) =>
            {
                self.direct_refused = true;
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Takes the aligned staging buffer for direct writes (given back with
    /// [`Log::give_direct_buf`]).
    pub(crate) fn take_direct_buf(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.direct_buf)
    }

    /// See [`Log::take_direct_buf`].
    pub(crate) fn give_direct_buf(&mut self, buf: Vec<u8>) {
        self.direct_buf = buf;
    }

    /// With `WriteAlignment::Page`, writes the active segment's sync
    /// padding (if not written with the data), so the sync that follows
    /// makes it durable.
    fn pad_for_sync(&mut self) -> Result<()> {
        if self.options().write_alignment != WriteAlignment::Page {
            return Ok(());
        }
        let size = self.options().segment_size_bytes;
        self.active_mut().pad(size)
    }

    pub(crate) fn check_poisoned(&self) -> Result<()> {
        match self.poisoned {
            Some(f) => Err(Error::poisoned(f)),
            None => Ok(()),
        }
    }

    /// Refuses everything from now on (a sync failed elsewhere).
    /// The data directory is poisoned with it at once, so every other
    /// part of the store refuses from the same moment (one poisoned state).
    pub(crate) fn poison(&mut self, failure: Failure) {
        if self.poisoned.is_none() {
            self.poisoned = Some(self.dir.dd().poison(failure));
        }
    }

    /// Runs `f`; if it fails with an I/O error, poisons the log.
    pub(crate) fn guard<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.check_poisoned()?;
        let r = f(self);
        if let Err(e) = &r {
            if e.is_io() {
                self.poison(e.failure());
            }
        }
        r
    }

    #[expect(
        clippy::indexing_slicing,
        reason = "the segment list is never empty (module invariant)"
    )]
    pub(crate) fn active(&self) -> &Segment {
        &self.segments[self.segments.len() - 1]
    }

    #[expect(
        clippy::indexing_slicing,
        reason = "the segment list is never empty (module invariant)"
    )]
    pub(crate) fn active_mut(&mut self) -> &mut Segment {
        let n = self.segments.len();
        &mut self.segments[n - 1]
    }

    /// The index of the segment holding `offset` (at or after the first
    /// segment's base).
    fn segment_index(&self, offset: Offset) -> usize {
        self.segments
            .partition_point(|s| s.base <= offset)
            .saturating_sub(1)
    }

    /// The next offset to be written.
    pub fn log_end_offset(&self) -> Offset {
        self.active().end_offset
    }

    /// The first offset still in the log.
    pub fn log_start_offset(&self) -> Offset {
        self.start_offset
    }

    /// The offset and epoch of the entry just below the log start, when it
    /// was deleted with a known epoch: a prefix truncation records it with
    /// the log start (`checkpoints/log-start-offset`), at any purge point,
    /// and a full truncation records the epoch it is given. `None` when
    /// nothing was deleted, or the epoch was never known (a log start
    /// written by format version 1 of that file, or rebuilt after damage).
    pub fn last_purged(&self) -> Option<(Offset, Epoch)> {
        let ls = self.dir.dd().checkpoints().log_start_offset?;
        let below = Offset(self.start_offset.0.checked_sub(1)?);
        (ls.offset == self.start_offset)
            .then_some(ls.purged_epoch)
            .flatten()
            .map(|e| (below, e))
    }

    /// Everything below this offset is durable (fsynced).
    pub fn flushed_offset(&self) -> Offset {
        self.flushed
    }

    /// The high watermark, if known.
    pub fn high_watermark(&self) -> Option<Offset> {
        self.high_watermark
    }

    /// The epoch of the last record, if the log has any epoch.
    ///
    /// In an empty log restarted at a snapshot, the epoch of the entry
    /// below its start ([`Log::last_purged`]): appends continue the
    /// snapshot, so an older epoch is refused (`EpochRegression`).
    pub fn last_epoch(&self) -> Option<Epoch> {
        self.epochs
            .latest()
            .map(|e| e.epoch)
            .or_else(|| self.last_purged().map(|(_, e)| e))
    }

    /// The epoch map (epoch → start offset) of the records in the log.
    pub fn epochs(&self) -> &EpochMap {
        &self.epochs
    }

    /// For Raft's log matching: the largest epoch `<= epoch` in the log and
    /// the offset where it ends (the next epoch's start, or the log end).
    /// `None` if every epoch in the log is newer.
    pub fn end_offset_for_epoch(&self, epoch: Epoch) -> Option<(Epoch, Offset)> {
        self.epochs
            .end_offset_for_epoch(epoch, self.log_end_offset())
    }

    /// The data directory this log lives in.
    pub fn data_dir_path(&self) -> &std::path::Path {
        self.dir.dd().path()
    }

    /// What open found and did.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.report
    }

    /// Memory used by the sparse indexes, in bytes.
    pub fn index_memory_bytes(&self) -> usize {
        self.segments.iter().map(|s| s.index.memory_bytes()).sum()
    }

    /// The base offsets of the segments, oldest first.
    pub fn segment_bases(&self) -> Vec<Offset> {
        self.segments.iter().map(|s| s.base).collect()
    }

    /// Each segment's base offset and the bytes it holds (its header and
    /// batches), oldest first: what a retention cap in bytes measures.
    pub fn segment_sizes(&self) -> Vec<(Offset, u64)> {
        self.segments
            .iter()
            .map(|s| (s.base, s.end_position))
            .collect()
    }

    /// Sets the high watermark (the commit offset, supplied by the Raft
    /// layer). It is kept in memory and made durable at the next roll or
    /// clean close; after a crash the durable value is a lower bound.
    /// It never moves back (committed entries stay committed); a value
    /// below the log start is raised to it (everything below is covered
    /// by a snapshot, so committed).
    ///
    /// # Errors
    /// `HighWatermarkBeyondEnd` if `offset` is past the log end;
    /// `HighWatermarkBackwards` below the current one (nothing changes);
    /// `Poisoned`.
    pub fn set_high_watermark(&mut self, offset: Offset) -> Result<()> {
        self.check_poisoned()?;
        let end = self.log_end_offset();
        if offset > end {
            return Err(Error::HighWatermarkBeyondEnd { offset, end });
        }
        if let Some(current) = self.high_watermark {
            if offset < current {
                return Err(Error::HighWatermarkBackwards {
                    offset,
                    high_watermark: current,
                });
            }
        }
        // Everything below the log start is committed (a snapshot holds it).
        self.high_watermark = Some(offset.max(self.start_offset));
        Ok(())
    }

    /// Makes every record written so far durable; returns the new flushed
    /// offset.
    ///
    /// # Errors
    /// `Io` (which poisons the log); `Poisoned`.
    ///
    /// # Panics
    /// If the flushed offset would move backwards (a bug).
    pub fn flush(&mut self) -> Result<Offset> {
        self.guard(|log| {
            log.pad_for_sync()?;
            log.active().file.sync_data()?;
            log.active_mut().buffered_since_sync = false;
            let end = log.log_end_offset();
            assert!(end >= log.flushed, "flushed offset moves forward only");
            log.flushed = end;
            log.align_end();
            Ok(end)
        })
    }

    /// Flushes and writes the checkpoints so the next open scans nothing.
    ///
    /// # Errors
    /// `Io` or `Checkpoint` failures (the log is then poisoned, and the next
    /// open recovers from the last durable checkpoint); `Poisoned`.
    pub fn close(mut self) -> Result<()> {
        self.write_clean_checkpoint()?;
        self.guard(|log| log.dir.write_clean_marker())
    }
}

/// What [`verified_batches`] found: the batches (place in the buffer,
/// header), the offset after them, the position after them.
type Walked = (Vec<(usize, BatchHeader)>, Offset, u64);

impl Drop for Log {
    fn drop(&mut self) {
        // A background preparation must not outlive the log: it writes the
        // file the next roll (or the next open) uses.
        self.finish_preparation();
    }
}

impl Log {
    /// The preallocation for the next segment: `Adaptive` resolved from the
    /// active segment's average bytes per sync.
    pub(crate) fn next_preallocation(&self) -> Preallocation {
        const SMALL_SYNC_BYTES: u64 = 64 << 10;
        match self.options().preallocation {
            Preallocation::Adaptive => {
                let bytes = self.active().end_position;
                if self.syncs_in_segment == 0 || bytes / self.syncs_in_segment < SMALL_SYNC_BYTES {
                    Preallocation::ZeroFill
                } else {
                    Preallocation::Fallocate
                }
            }
            fixed => fixed,
        }
    }

    /// Waits for a background segment preparation, discarding its result.
    pub(crate) fn finish_preparation(&mut self) {
        if let Some(NextSegment::Preparing(job)) = self.prepared.take() {
            let _ = job.join();
        }
    }
}
