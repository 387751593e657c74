//! [`DurableLog`]: the segmented log shared by many threads, with group
//! commit.
//!
//! Appends return before their records are durable. Durability is reported
//! three ways, chosen per call: block until an offset is durable
//! ([`DurableLog::wait_durable`], or [`DurableLog::append_durable`]),
//! register a completion ([`DurableLog::on_durable`]), or poll the
//! watermark ([`DurableLog::flushed_offset`]). A completion never fires for a
//! record that is not durable. The policy ([`SyncPolicy`]) decides when syncs
//! happen; see `sync.rs` for how rounds are shared.

mod append;
mod raw;
mod sync;
mod truncate;

use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLockReadGuard};
use std::thread::JoinHandle;

use quorumlog_checkpoint::{DataDir, Epoch, Offset};
use quorumlog_io::Failure;

use crate::error::{Error, Result};
use crate::log::{AppendInfo, FollowerBatch, Log, ReadBatches};
use crate::meters::{Facade, LogStats, Meters};
use crate::options::LogOptions;
use crate::recovery::RecoveryReport;
use sync::{flusher, Shared, SyncState};

pub use sync::{Completion, SyncPolicy};

/// A batch encoded (checksummed, compressed) but not yet placed in the
/// log: [`DurableLog::encode`], then [`DurableLog::enqueue`].
#[derive(Debug)]
pub struct EncodedBatch(crate::batch::Unplaced);

impl EncodedBatch {
    /// The encoded size, header included.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the batch is empty (never: a batch has a header).
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }
}

/// A log shared by concurrent writers and readers, with group commit.
#[derive(Debug)]
pub struct DurableLog {
    shared: Arc<Shared>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    options: LogOptions,
}

impl DurableLog {
    /// Opens (and recovers) the log of `dd` and starts its flusher.
    ///
    /// # Errors
    /// As [`Log::open`]; `Io` if the flusher thread cannot start.
    pub fn open(dd: Arc<DataDir>, options: LogOptions, policy: SyncPolicy) -> Result<DurableLog> {
        let t0 = std::time::Instant::now();
        let log = Log::open(dd, options)?;
        Self::wrap(log, policy, t0.elapsed())
    }

    /// [`DurableLog::open`], `check` seeing what recovery will leave
    /// before it changes a byte ([`Log::open_checked`]).
    ///
    /// # Errors
    /// As [`DurableLog::open`]; what `check` returns.
    pub fn open_checked(
        dd: Arc<DataDir>,
        options: LogOptions,
        policy: SyncPolicy,
        check: crate::recovery::PlanCheck<'_>,
    ) -> Result<DurableLog> {
        let t0 = std::time::Instant::now();
        let log = Log::open_checked(dd, options, check)?;
        Self::wrap(log, policy, t0.elapsed())
    }

    /// Wraps an open log.
    ///
    /// # Errors
    /// `Io` if the flusher thread cannot start.
    pub fn from_log(log: Log, policy: SyncPolicy) -> Result<DurableLog> {
        Self::wrap(log, policy, std::time::Duration::ZERO)
    }

    /// [`DurableLog::from_log`] of a log whose open's recovery took
    /// `recovery`.
    fn wrap(log: Log, policy: SyncPolicy, recovery: std::time::Duration) -> Result<DurableLog> {
        let report = log.recovery_report();
        let verified = report.bytes_scanned;
        let dir = log.data_dir_path().display().to_string();
        tracing::info!(
            target: "quorumlog::log",
            dir = %dir,
            clean = report.clean,
            scan_start = ?report.scan_start,
            bytes_verified = verified,
            torn_tail = ?report.torn_tail,
            dropped = ?report.dropped,
            indexes_rebuilt = report.indexes_rebuilt.len(),
            segments_removed = report.segments_removed.len(),
            recovery_ms = recovery.as_secs_f64() * 1e3,
            "log opened"
        );
        if report.dropped.is_some() || report.torn_tail.is_some() {
            tracing::warn!(target: "quorumlog::log", dir = %dir, torn_tail = ?report.torn_tail, dropped = ?report.dropped, "recovery cut the log");
        }
        let facade = Facade::new(&dir, recovery, verified);
        let meters = Meters::opened(recovery, verified);
        let end = log.log_end_offset();
        let flushed = log.flushed_offset();
        let space_short = log.space_short();
        let options = log.options().clone();
        let shared = Arc::new(Shared {
            gate: Mutex::new(()),
            state: Mutex::new(SyncState {
                written: end,
                flushed,
                next_offset: end,
                last_epoch: log.last_epoch(),
                meters,
                ..SyncState::default()
            }),
            log: std::sync::RwLock::new(log),
            wake_flusher: Condvar::new(),
            policy,
            pipelined: options.tail_writes == crate::TailWrites::DirectPipelined,
            facade,
            overdue_after: options.sync_overdue_after,
            space_short: std::sync::atomic::AtomicBool::new(space_short),
        });
        let handle = if policy == SyncPolicy::Never {
            None
        } else {
            let s = Arc::clone(&shared);
            Some(
                std::thread::Builder::new()
                    .name("quorumlog-flusher".into())
                    .spawn(move || flusher(&s))?,
            )
        };
        Ok(DurableLog {
            shared,
            flusher: Mutex::new(handle),
            options,
        })
    }

    fn log(&self) -> RwLockReadGuard<'_, Log> {
        self.shared
            .log
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The options the log was opened with.
    pub fn options(&self) -> &LogOptions {
        &self.options
    }

    /// The failure that poisoned the log, if one did (every later write
    /// and sync is refused with it).
    pub fn poisoned(&self) -> Option<quorumlog_io::Failure> {
        self.shared.state().poisoned
    }

    /// After an open on a full disk: refuses a write with `NoSpace` until
    /// the space it needs is there (then reserves it, once).
    fn check_space(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        if !self.shared.space_short.load(Ordering::Acquire) {
            return Ok(());
        }
        let _gate = self.shared.gate();
        let mut log = self.shared.log_write();
        if log.space_short() {
            log.reserve_space()?;
            tracing::info!(target: "quorumlog::log", "space is free again: writes are taken");
        }
        self.shared.space_short.store(false, Ordering::Release);
        Ok(())
    }

    fn check_poisoned(&self) -> Result<()> {
        match self.shared.state().poisoned {
            Some(cause) => Err(Shared::poisoned_error(cause)),
            None => Ok(()),
        }
    }

    /// Blocks until every record below `offset` is durable; returns the
    /// flushed offset (which may be further).
    ///
    /// # Errors
    /// `Poisoned` if a sync failed (the records may never be durable);
    /// `SyncDisabled` under `SyncPolicy::Never` unless already durable.
    pub fn wait_durable(&self, offset: Offset) -> Result<Offset> {
        self.shared.wait_durable(offset)
    }

    /// Registers `completion`, called once every record below `offset` is
    /// durable (with the flushed offset), or with `Poisoned` if that can no
    /// longer happen. Called at once if already durable. Completions run on
    /// the thread that finished the sync: keep them short.
    pub fn on_durable(&self, offset: Offset, completion: Completion) {
        // Registered even when due already: it runs after every completion
        // due before it (a round that just moved the flushed offset may
        // not have run its own yet), in offset order.
        let firer = {
            let mut st = self.shared.state();
            let seq = st.next_completion;
            st.next_completion += 1;
            st.completions.insert((offset, seq), completion);
            let due = st.poisoned.is_some() || st.flushed >= offset;
            due && sync::claim_firing(&mut st)
        };
        if firer {
            self.shared.fire_due();
        }
    }

    /// Everything below this offset is durable.
    pub fn flushed_offset(&self) -> Offset {
        self.shared.state().flushed
    }

    /// The base offsets of the segments, oldest first.
    pub fn segment_bases(&self) -> Vec<Offset> {
        self.log().segment_bases()
    }

    /// See [`Log::segment_sizes`].
    pub fn segment_sizes(&self) -> Vec<(Offset, u64)> {
        self.log().segment_sizes()
    }

    /// See [`Log::segments_recycled`].
    pub fn segments_recycled(&self) -> u64 {
        self.log().segments_recycled()
    }

    /// See [`Log::index_memory_bytes`].
    pub fn index_memory_bytes(&self) -> usize {
        self.log().index_memory_bytes()
    }

    /// What the log has done since it was opened, and its queue now
    /// ([`LogStats`]): for embedders who want the figures without a
    /// metrics library.
    ///
    /// Never waits for the device: a round that hangs holds the log, not
    /// the counts (the recycled segments are as of the last round).
    pub fn stats(&self) -> LogStats {
        let st = self.shared.state();
        let mut s = st.meters.stats.clone();
        s.queue_depth = st.next_offset.0.saturating_sub(st.flushed.0);
        s.sync_overdue = st.meters.overdue(self.shared.overdue_after);
        if s.sync_overdue {
            self.shared.facade.overdue.set(1.0);
        }
        s
    }

    /// Whether a sync round has run longer than
    /// `LogOptions::sync_overdue_after`; sets the `sync_overdue` gauge if
    /// so. The flusher checks while it is idle; a caller with a timer of
    /// its own (a node's background worker) calls this so that a round
    /// the flusher itself leads is watched too.
    pub fn check_overdue(&self) -> bool {
        let overdue = self
            .shared
            .state()
            .meters
            .overdue(self.shared.overdue_after);
        if overdue {
            self.shared.facade.overdue.set(1.0);
        }
        overdue
    }

    /// Successful sync rounds so far.
    pub fn sync_count(&self) -> u64 {
        self.shared.state().syncs
    }

    /// Sync rounds whose write the round before them submitted
    /// (`TailWrites::DirectPipelined`; always 0 otherwise).
    pub fn pipelined_rounds(&self) -> u64 {
        self.shared.state().pipelined
    }

    /// Makes everything written so far durable now, whatever the policy.
    ///
    /// # Errors
    /// `Io` (which poisons); `Poisoned`.
    pub fn flush(&self) -> Result<Offset> {
        self.check_poisoned()?;
        let result = {
            let _gate = self.shared.gate();
            let mut log = self.shared.log_write();
            let started = std::time::Instant::now();
            let r = self.shared.drain(&mut log, true).and_then(|()| log.flush());
            if r.is_ok() {
                let mut st = self.shared.state();
                let before = st.flushed;
                st.flushed = st.flushed.max(log.log_end_offset());
                let oldest = st.meters.oldest_queued.take();
                let depth = st.next_offset.0.saturating_sub(st.flushed.0);
                let made = st.flushed.0 - before.0;
                st.meters
                    .round_done(&self.shared.facade, made, started, oldest, depth);
            }
            r
        };
        self.after_log_change(&result);
        result
    }

    /// Reads whole verified batches (see [`Log::read`]).
    ///
    /// # Errors
    /// As [`Log::read`].
    pub fn read(&self, from: Offset, max_bytes: u64) -> Result<ReadBatches> {
        self.log().read(from, max_bytes)
    }

    /// See [`Log::prefetch`].
    pub fn prefetch(&self, from: Offset, to: Offset) {
        self.log().prefetch(from, to);
    }

    /// See [`Log::read_range`].
    ///
    /// # Errors
    /// As [`Log::read_range`].
    pub fn read_range(&self, from: Offset, to: Offset, max_bytes: u64) -> Result<ReadBatches> {
        self.log().read_range(from, to, max_bytes)
    }

    /// The next offset to be written.
    pub fn log_end_offset(&self) -> Offset {
        self.log().log_end_offset()
    }

    /// The first offset in the log.
    pub fn log_start_offset(&self) -> Offset {
        self.log().log_start_offset()
    }

    /// The epoch of the last record.
    pub fn last_epoch(&self) -> Option<Epoch> {
        self.log().last_epoch()
    }

    /// The epoch the log's epoch map starts with (the epoch of the record
    /// at the log start, or of the last one when the log is empty).
    pub fn first_epoch(&self) -> Option<Epoch> {
        self.log().epochs().entries().first().map(|e| e.epoch)
    }

    /// The epoch of the record at `offset`, if it is in the log.
    pub fn epoch_at(&self, offset: Offset) -> Option<Epoch> {
        let log = self.log();
        if offset < log.log_start_offset() || offset >= log.log_end_offset() {
            return None;
        }
        log.epochs().epoch_at(offset)
    }

    /// See [`Log::end_offset_for_epoch`].
    pub fn end_offset_for_epoch(&self, epoch: Epoch) -> Option<(Epoch, Offset)> {
        self.log().end_offset_for_epoch(epoch)
    }

    /// The high watermark, if known.
    pub fn high_watermark(&self) -> Option<Offset> {
        self.log().high_watermark()
    }

    /// What open found and did.
    pub fn recovery_report(&self) -> RecoveryReport {
        self.log().recovery_report().clone()
    }

    /// See [`Log::set_high_watermark`].
    ///
    /// # Errors
    /// As [`Log::set_high_watermark`].
    pub fn set_high_watermark(&self, offset: Offset) -> Result<()> {
        self.shared.log_write().set_high_watermark(offset)
    }

    /// The id of the entry just below the log start (see
    /// [`Log::last_purged`]).
    pub fn last_purged(&self) -> Option<(Offset, Epoch)> {
        self.log().last_purged()
    }

    fn stop_flusher(&self) {
        {
            let mut st = self.shared.state();
            st.shutdown = true;
            self.shared.wake_flusher.notify_all();
        }
        let handle = self
            .flusher
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    /// Stops the flusher, flushes, writes the clean-close checkpoints, and
    /// completes every registered completion.
    ///
    /// # Errors
    /// As [`Log::close`].
    pub fn close(self) -> Result<()> {
        self.stop_flusher();
        let r = self.flush().map(|_| ());
        let leftover = {
            let mut st = self.shared.state();
            if st.poisoned.is_none() {
                st.poisoned = Some(Failure {
                    op: "close",
                    kind: std::io::ErrorKind::Other,
                });
            }
            sync::claim_firing(&mut st)
        };
        if leftover {
            self.shared.fire_due();
        }
        r?;
        let shared = Arc::clone(&self.shared);
        drop(self);
        let lock = Arc::try_unwrap(shared).map_err(|_| Error::StillShared)?;
        let log = lock
            .log
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        log.close()
    }
}

impl Drop for DurableLog {
    fn drop(&mut self) {
        self.stop_flusher();
    }
}
