//! Group commit: sync rounds, the durable watermark, waiters, completions,
//! and the background flusher.
//!
//! A *sync round* captures the log end (under the log's write lock, which
//! also moves the next append to a fresh page), then runs one data sync with
//! no lock held, so writers keep appending while it is in flight; when it
//! returns, the flushed offset advances to the captured end and every waiter
//! and completion it covers is released. One round runs at a time
//! ([`MAX_ROUNDS`]; two in flight were built, measured slower on this
//! project's disk, and removed: docs/decisions.md "The write path"):
//! writers arriving during a round queue for the next, whose leader starts
//! it once the round in flight is done. A round also writes the queued appends
//! first: appends that wait for durability take their offsets under the
//! state lock, encoded beforehand with no lock held, and one leader writes
//! the whole group with one write before its sync.
//!
//! Who runs a round depends on the policy: with `GroupCommit`, a writer that
//! waits for durability runs it itself when no round is in flight (no thread
//! hand-off on the latency path), and the flusher thread runs rounds for data
//! nobody waits on (completions, polling); with `Interval`, only the flusher
//! runs rounds, at most once per interval; with `CallerLed`, only the
//! writers that wait run rounds (the flusher is a backstop for data left
//! unled: within 5 ms once it has seen data queued, 250 ms after an idle
//! spell); with `Never`, only explicit flushes sync.
//!
//! With `TailWrites::DirectPipelined` a round whose direct write is done
//! submits the next round's write (what is queued) through `io_uring`
//! before it wakes anyone, and leaves it in flight ([`SyncState::inflight`],
//! counted in `rounds`); the first thread woken for it, or the flusher,
//! reaps it. It is submitted only once the round before it is durable, so
//! rounds still become durable in offset order. Every other writer of the
//! tail finishes a write in flight before it writes ([`Shared::gate`]).
//!
//! Invariants:
//! - `flushed` only grows, except that a truncation sets it to the new log
//!   end (everything below which its own sync made durable);
//! - a completion fires `Ok` only once `flushed` covers its offset, which
//!   only a successful sync of that data sets (docs/design.md invariant 1);
//! - after a failed sync the state is poisoned for good: no round runs
//!   again, nothing more is acknowledged, every waiter and completion gets
//!   `Poisoned` (invariant 6). A failed sync is never retried.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockWriteGuard};
use std::thread::Thread;
use std::time::{Duration, Instant};

use quorumlog_checkpoint::{Epoch, Offset};

use quorumlog_io::Failure;

use crate::batch::Unplaced;
use crate::error::{Error, Result};
use crate::format::BatchHeader;
use crate::log::{AppendInfo, Log, PreparedWrite, StartedWrite};
use crate::meters::{Facade, Meters};

/// When the log syncs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncPolicy {
    /// Every write is made durable as soon as possible, concurrent writers
    /// sharing syncs. Default.
    #[default]
    GroupCommit,
    /// Sync at most once per interval: fewer syncs, bounded staleness.
    Interval {
        /// The interval between syncs, in microseconds.
        interval_us: u64,
    },
    /// Group commit led by the callers: a thread that waits for
    /// durability runs the round itself when none is in flight, as under
    /// `GroupCommit`, but nothing else starts one. An append or a
    /// registered completion wakes no thread; the flusher runs a round only
    /// for data left unled through a check (every 5 ms while data is
    /// queued when it looks, else 250 ms), and fires due completions. For
    /// a loop that leads each of its rounds (raft-rs's `AsyncPersister`):
    /// no hand-off to the flusher per round.
    CallerLed,
    /// Never sync on its own (explicit `flush` and `close` only).
    /// **Unsafe**: acknowledged-looking appends can be lost. For tests and
    /// bulk loads.
    Never,
}

impl SyncPolicy {
    /// Whether a thread that waits for durability runs the round itself.
    pub(crate) fn writers_lead(self) -> bool {
        matches!(self, SyncPolicy::GroupCommit | SyncPolicy::CallerLed)
    }
}

/// A callback fired once an offset is durable, or with the error that
/// means it never will be.
pub type Completion = Box<dyn FnOnce(Result<Offset>) + Send>;

#[derive(Default)]
pub(crate) struct SyncState {
    /// The offset the next queued append gets (≥ `written`).
    pub next_offset: Offset,
    /// The epoch of the last queued (or written) record.
    pub last_epoch: Option<Epoch>,
    /// Leader appends placed and queued, not yet written (offset order).
    pub pending: Vec<(BatchHeader, Vec<u8>)>,
    /// Offset after the last record written.
    pub written: Offset,
    /// Everything below is durable.
    pub flushed: Offset,
    /// Bumped by truncations: a round captured before one is void.
    pub generation: u64,
    /// Sync rounds in flight (at most [`MAX_ROUNDS`]).
    pub rounds: u8,
    /// The highest end a round in flight (or done) captured: a new round
    /// needs data beyond it.
    pub captured: Offset,
    /// Threads blocked in `wait_durable` (they run rounds themselves under
    /// `GroupCommit`, so the flusher stays out of their way).
    pub waiters: usize,
    /// Parked waiters by (offset awaited, sequence): a round wakes exactly
    /// those it covers, and one more to lead the next round — no herd.
    pub parked: BTreeMap<(Offset, u64), std::thread::Thread>,
    pub next_parked: u64,
    pub poisoned: Option<Failure>,
    pub shutdown: bool,
    /// Registered completions by (offset, sequence).
    pub completions: BTreeMap<(Offset, u64), Completion>,
    /// A thread is running due completions ([`Shared::fire_due`]): every
    /// other leaves its due ones to it, so completions run in offset order.
    pub firing: bool,
    pub next_completion: u64,
    /// Successful sync rounds.
    pub syncs: u64,
    /// The next round's direct write, submitted by the round before it
    /// (before that round's waiters were woken) and not yet reaped: at most
    /// one, counted in `rounds`. Whoever holds the gate next finishes it
    /// first ([`Shared::gate`]).
    pub inflight: Option<InFlight>,
    /// A thread has taken on reaping `inflight` (no other is woken for it).
    pub reaper: bool,
    /// Rounds whose write was submitted by the round before them.
    pub pipelined: u64,
    /// What the log counts ([`crate::LogStats`]).
    pub meters: Meters,
}

/// A sync round whose write is in flight ([`SyncState::inflight`]).
#[derive(Debug)]
pub(crate) struct InFlight {
    write: StartedWrite,
    /// When it was submitted, and the oldest append it covers.
    started: Round,
    /// The batches it writes, for [`Log::publish_direct`].
    batches: Vec<(BatchHeader, Vec<u8>)>,
}

/// When a round started, and when the oldest append it covers was
/// queued (for the latency histograms).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Round {
    started: Instant,
    oldest: Option<Instant>,
}

impl Round {
    /// A round starting now (the caller holds the state lock).
    fn start(st: &mut SyncState) -> Round {
        let started = Instant::now();
        let oldest = st.meters.round_start(started);
        Round { started, oldest }
    }
}

/// Sync rounds that may be in flight at once. A round's `fdatasync` makes
/// everything written before it durable, so a second round could start
/// while the first is in flight (its waiters would then wait for their own
/// round only). Measured on this project's test disk (virtio, ext4):
/// two rounds in flight lost 15–20 % on 8 writers and 5–25 % on 64 (the
/// device serialises the flushes, and the second adds one), so one.
pub(crate) const MAX_ROUNDS: u8 = 1;

impl SyncState {
    /// Whether a new round may start: room for it, and queued or written
    /// data that no round in flight has captured.
    pub(crate) fn may_lead(&self) -> bool {
        self.poisoned.is_none()
            && self.rounds < MAX_ROUNDS
            && self.next_offset > self.flushed.max(self.captured)
    }

    /// Whether a round's write is in flight and nobody has taken on
    /// reaping it.
    pub(crate) fn may_reap(&self) -> bool {
        self.inflight.is_some() && !self.reaper
    }
}

impl std::fmt::Debug for SyncState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncState")
            .field("next_offset", &self.next_offset)
            .field("pending", &self.pending.len())
            .field("written", &self.written)
            .field("flushed", &self.flushed)
            .field("generation", &self.generation)
            .field("rounds", &self.rounds)
            .field("captured", &self.captured)
            .field("poisoned", &self.poisoned)
            .field("completions", &self.completions.len())
            .field("syncs", &self.syncs)
            .field("inflight", &self.inflight.is_some())
            .finish_non_exhaustive()
    }
}

/// What the log and the sync machinery share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Taken (before the log's lock) by everything that writes the log's
    /// tail: a sync round keeps it while its direct write runs without the
    /// log's lock, so readers never wait behind the device and no other
    /// writer touches the tail meanwhile.
    pub gate: Mutex<()>,
    pub log: RwLock<Log>,
    pub state: Mutex<SyncState>,
    /// Wakes the flusher: data written, or shutdown.
    pub wake_flusher: Condvar,
    pub policy: SyncPolicy,
    /// `TailWrites::DirectPipelined`: a round that ends submits the next
    /// round's write before it wakes anyone ([`Shared::submit_next`]).
    pub pipelined: bool,
    /// The `metrics` facade's handles.
    pub facade: Facade,
    /// A round older than this is overdue.
    pub overdue_after: Duration,
    /// Opened on a full disk: writes wait for space (`Log::reserve_space`).
    pub space_short: std::sync::atomic::AtomicBool,
}

impl Shared {
    pub(super) fn state(&self) -> MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn log_write(&self) -> RwLockWriteGuard<'_, Log> {
        self.log.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The tail gate (see [`Shared::gate`]), once no round's write is in
    /// flight: one that is is finished first (its batches published, its
    /// waiters released), as its reaper would, but without submitting the
    /// next (its completions are left to the flusher: the caller may hold
    /// locks a completion takes).
    pub(super) fn gate(&self) -> MutexGuard<'_, ()> {
        loop {
            let gate = self.gate_raw();
            if self.state().inflight.is_none() {
                return gate;
            }
            self.reap_round(gate, false);
        }
    }

    /// The tail gate, whatever is in flight (sync rounds only).
    fn gate_raw(&self) -> MutexGuard<'_, ()> {
        self.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn poisoned_error(failure: Failure) -> Error {
        Error::poisoned(failure)
    }

    /// Queues a leader append: checks its epoch, gives it the next offsets
    /// (stamping its header: constant time), under the state lock only,
    /// which it returns (still held). At `at` if given, which must be the
    /// next offset (`NonContiguous` otherwise).
    pub(super) fn enqueue_at(
        &self,
        at: Option<Offset>,
        unplaced: Unplaced,
    ) -> Result<(AppendInfo, MutexGuard<'_, SyncState>)> {
        let mut st = self.state();
        if let Some(at) = at {
            if at != st.next_offset {
                return Err(Error::NonContiguous {
                    expected: st.next_offset,
                    found: at,
                });
            }
        }
        if let Some(cause) = st.poisoned {
            return Err(Self::poisoned_error(cause));
        }
        let epoch = unplaced.epoch();
        if let Some(last) = st.last_epoch {
            if epoch < last {
                return Err(Error::EpochRegression {
                    current: last,
                    proposed: epoch,
                });
            }
        }
        let base = st.next_offset;
        let (header, bytes) = unplaced.place(base)?;
        let info = AppendInfo {
            base_offset: base,
            next_offset: header.next_offset(),
        };
        st.next_offset = info.next_offset;
        st.last_epoch = Some(epoch);
        st.meters
            .appended(info.next_offset.0 - base.0, bytes.len() as u64);
        st.pending.push((header, bytes));
        Ok((info, st))
    }

    /// Queues batches already placed and verified (a follower's raw
    /// batches): they must continue the queue exactly, with epochs that
    /// never decrease; all are checked before any is queued.
    pub(super) fn enqueue_placed(
        &self,
        batches: Vec<(BatchHeader, Vec<u8>)>,
    ) -> Result<AppendInfo> {
        let mut st = self.state();
        if let Some(cause) = st.poisoned {
            return Err(Self::poisoned_error(cause));
        }
        let start = st.next_offset;
        let (mut next, mut last) = (start, st.last_epoch);
        for (h, _) in &batches {
            if h.base_offset != next {
                return Err(Error::NonContiguous {
                    expected: next,
                    found: h.base_offset,
                });
            }
            if let Some(l) = last {
                if h.epoch < l {
                    return Err(Error::EpochRegression {
                        current: l,
                        proposed: h.epoch,
                    });
                }
            }
            next = h.next_offset();
            last = Some(h.epoch);
        }
        st.next_offset = next;
        st.last_epoch = last;
        for (h, b) in &batches {
            st.meters
                .appended(h.next_offset().0 - h.base_offset.0, b.len() as u64);
        }
        st.pending.extend(batches);
        Ok(AppendInfo {
            base_offset: start,
            next_offset: next,
        })
    }

    /// Writes the queued appends to `log` (whose write lock the caller
    /// holds: the queue is taken and written in one critical section, so
    /// batches reach the log in offset order). `direct`: a sync follows at
    /// once, so the write may go straight to the device
    /// (`TailWrites::Direct`).
    pub(super) fn drain(&self, log: &mut Log, direct: bool) -> Result<()> {
        let mut batches = std::mem::take(&mut self.state().pending);
        if batches.is_empty() {
            return Ok(());
        }
        let r = log.append_encoded(&mut batches, direct);
        self.note_log_end(log);
        r
    }

    /// A sync round's write of the queue (the caller holds the gate):
    /// straight to the device without the log's lock when it can go out
    /// directly in one write ([`Log::prepare_direct`]), else through
    /// [`Log::append_encoded`]. Returns the log, locked for the capture,
    /// and how the write went (a failure fails the round).
    fn write_queue_for_sync(&self) -> (RwLockWriteGuard<'_, Log>, Result<()>) {
        let mut log = self.log_write();
        let mut batches = std::mem::take(&mut self.state().pending);
        let prepared = match log.prepare_direct(&mut batches) {
            Ok(Some(p)) => p,
            Ok(None) => {
                let r = log.append_encoded(&mut batches, true);
                self.note_log_end(&log);
                return (log, r);
            }
            Err(e) => return (log, Err(e)),
        };
        drop(log);
        let written = prepared.write();
        self.publish(prepared, written, &batches)
    }

    /// Publishes a direct write once done: part of the log if it went
    /// well, else the log is poisoned. Returns the log, locked for the
    /// capture.
    fn publish(
        &self,
        prepared: PreparedWrite,
        written: std::io::Result<()>,
        batches: &[(BatchHeader, Vec<u8>)],
    ) -> (RwLockWriteGuard<'_, Log>, Result<()>) {
        let mut log = self.log_write();
        let r = match written {
            Ok(()) => log.publish_direct(prepared, batches),
            Err(e) => {
                log.poison(Failure::of(&e));
                Err(e.into())
            }
        };
        self.note_log_end(&log);
        (log, r)
    }

    /// Starts the next round's write now, while the caller (a round that
    /// just ended, holding the gate and the log) has not yet woken anyone:
    /// the device is busy again at once instead of idling while the next
    /// leader is scheduled. Only for a queue that goes out in one direct
    /// write ([`Log::prepare_direct`]); anything else stays queued for the
    /// next leader.
    fn submit_next(&self, log: &mut Log) {
        let mut batches = std::mem::take(&mut self.state().pending);
        if batches.is_empty() {
            return;
        }
        let Ok(Some(prepared)) = log.prepare_direct(&mut batches) else {
            // Back at the head of the queue, before what was queued since
            // (a failure has poisoned the log: the next round reports it).
            let mut st = self.state();
            batches.append(&mut st.pending);
            st.pending = batches;
            return;
        };
        let write = prepared.start();
        let mut st = self.state();
        st.rounds += 1;
        st.reaper = false;
        let started = Round::start(&mut st);
        st.inflight = Some(InFlight {
            write,
            started,
            batches,
        });
        st.pipelined += 1;
    }

    /// Records that everything below the log's end is written.
    fn note_log_end(&self, log: &Log) {
        let end = log.log_end_offset();
        let mut st = self.state();
        st.written = st.written.max(end);
    }

    /// [`Shared::drain`] with the state lock already held.
    pub(super) fn drain_locked(st: &mut SyncState, log: &mut Log) -> Result<()> {
        let mut batches = std::mem::take(&mut st.pending);
        if batches.is_empty() {
            return Ok(());
        }
        let r = log.append_encoded(&mut batches, false);
        st.written = st.written.max(log.log_end_offset());
        r
    }

    /// After the log changed under its write lock (truncation, follower
    /// append): the queue continues at its end.
    pub(super) fn resync(st: &mut SyncState, log: &Log) {
        st.pending.clear();
        st.next_offset = log.log_end_offset();
        st.last_epoch = log.last_epoch();
        st.written = st.next_offset;
    }

    /// Runs one sync round if one may start ([`SyncState::may_lead`]), or
    /// reaps the round in flight if nobody has taken it on
    /// ([`SyncState::may_reap`]): writes the queued appends (or waits for
    /// the write in flight), captures the end, submits the next round's
    /// write if one is queued, syncs with no lock held if anything was
    /// written buffered, then releases what became durable (the next
    /// round's reaper or leader first). Returns whether this call ran one.
    ///
    /// The leader hands on: it never waits for the next round itself
    /// (measured: a leader that ran one more round while more was queued
    /// lost 10–25 % on 8 and 64 writers, its own next append waiting
    /// meanwhile); it only submits it.
    pub(super) fn sync_round(&self) -> bool {
        let lead = {
            let mut st = self.state();
            if st.may_reap() {
                st.reaper = true;
                None
            } else if st.may_lead() {
                st.rounds += 1;
                Some(Round::start(&mut st))
            } else {
                return false;
            }
        };
        let gate = self.gate_raw();
        match lead {
            None => self.reap_round(gate, true),
            Some(round) => {
                let (log, written) = self.write_queue_for_sync();
                self.close_round(gate, log, written, true, round);
            }
        }
        true
    }

    /// Finishes the round in flight, if it still is (another thread may
    /// have finished it before this one had the gate).
    fn reap_round(&self, gate: MutexGuard<'_, ()>, pipeline: bool) {
        let inflight = {
            let mut st = self.state();
            st.reaper = false;
            st.inflight.take()
        };
        let Some(InFlight {
            write,
            started,
            batches,
        }) = inflight
        else {
            return;
        };
        let (prepared, written) = write.finish();
        let (log, r) = self.publish(prepared, written, &batches);
        self.close_round(gate, log, r, pipeline, started);
    }

    /// The rest of a round once its write is done: capture, submit the
    /// next (`pipeline`, under `GroupCommit`, when this one needs no data
    /// sync), sync, release.
    fn close_round(
        &self,
        gate: MutexGuard<'_, ()>,
        mut log: RwLockWriteGuard<'_, Log>,
        written: Result<()>,
        pipeline: bool,
        round: Round,
    ) {
        // Capture: the end to make durable, the file holding it, and the
        // generation; move later appends to a fresh page.
        let r = written.and_then(|()| log.capture_sync_target());
        let captured = {
            // Read under the log lock: a truncation (which bumps it) waits.
            let mut st = self.state();
            let generation = st.generation;
            r.map(|(target, file)| {
                st.captured = st.captured.max(target);
                (target, file, generation)
            })
        };
        if pipeline
            && self.pipelined
            && self.policy.writers_lead()
            && matches!(captured, Ok((_, None, _)))
        {
            // Durable already (a direct write): the next may go now.
            self.submit_next(&mut log);
        }
        let recycled = log.segments_recycled();
        drop(log);
        drop(gate);
        let (target, generation, result) = match captured {
            Ok((target, file, generation)) => (
                target,
                generation,
                // Nothing to sync when every write since the last one was
                // a direct write (durable on return).
                file.map_or(Ok(()), |f| f.sync_data().map_err(|e| Failure::of(&e))),
            ),
            // The padding write failed (the log is poisoned): a failed round.
            Err(e) => (Offset(0), 0, Err(e.failure())),
        };
        if let Err(f) = result {
            // The log and its data directory refuse everything from now on
            // (invariant 6), marked before any waiter wakes: a call that
            // does not go through the log (a vote) sees the failure too.
            self.log_write().poison(f);
        }
        let (fired, wake) = {
            let mut st = self.state();
            st.rounds -= 1;
            st.meters.stats.segments_recycled = recycled;
            match &result {
                Ok(()) if st.generation == generation => {
                    // The watermark only moves forward (a concurrent
                    // explicit flush may have passed this round's target).
                    let before = st.flushed;
                    st.flushed = before.max(target);
                    assert!(st.flushed >= before, "the flushed offset never moves back");
                    st.syncs += 1;
                    let depth = st.next_offset.0.saturating_sub(st.flushed.0);
                    let made = st.flushed.0 - before.0;
                    st.meters
                        .round_done(&self.facade, made, round.started, round.oldest, depth);
                }
                // A truncation intervened: the round is void (its appends
                // are counted by the round that makes them durable).
                Ok(()) => {}
                Err(f) => {
                    if st.poisoned.is_none() {
                        st.meters.poisoned(&self.facade);
                        tracing::error!(target: "quorumlog::log", failure = ?f, "a sync round failed: the log is poisoned");
                    }
                    st.poisoned = Some(*f);
                }
            }
            st.meters.round_started = st.inflight.as_ref().map(|f| f.started.started);
            // A round finished by a gate-taker leaves its completions to
            // the flusher (the gate-taker may hold locks they take).
            let firer = pipeline && claim_firing(&mut st);
            let unled = st.next_offset > st.flushed && st.waiters == 0;
            if unled && self.policy != SyncPolicy::CallerLed || !pipeline && has_due(&st) {
                self.wake_flusher.notify_one();
            }
            (firer, to_wake(&mut st))
        };
        // Unparked after the lock is released: a woken thread's first act
        // is to take it.
        unpark(wake);
        if fired {
            self.fire_due();
        }
    }

    /// Blocks until `offset` is durable; with `GroupCommit`, runs the sync
    /// round itself when none is in flight.
    pub(super) fn wait_durable(&self, offset: Offset) -> Result<Offset> {
        self.wait_locked(self.state(), offset)
    }

    /// [`Shared::wait_durable`] with the state lock already held (an
    /// append queues and starts waiting in one critical section).
    pub(super) fn wait_locked<'a>(
        &'a self,
        mut st: MutexGuard<'a, SyncState>,
        offset: Offset,
    ) -> Result<Offset> {
        st.waiters += 1;
        let result = loop {
            if let Some(f) = st.poisoned {
                break Err(Self::poisoned_error(f));
            }
            if st.flushed >= offset {
                break Ok(st.flushed);
            }
            if self.policy == SyncPolicy::Never {
                break Err(Error::SyncDisabled);
            }
            if self.policy.writers_lead() && (st.may_lead() || st.may_reap()) {
                drop(st);
                self.sync_round();
                st = self.state();
                continue;
            }
            let key = (offset, st.next_parked);
            st.next_parked += 1;
            st.parked.insert(key, std::thread::current());
            if !self.policy.writers_lead() {
                // Only the flusher runs rounds: it must know someone waits,
                // even if it went idle before this data was written.
                self.wake_flusher.notify_one();
            }
            drop(st);
            std::thread::park();
            st = self.state();
            // Gone already if a round woke this thread; there after a
            // spurious wake-up.
            st.parked.remove(&key);
        };
        st.waiters -= 1;
        let flusher_runs = !matches!(self.policy, SyncPolicy::Never | SyncPolicy::CallerLed);
        if st.waiters == 0 && st.next_offset > st.flushed && flusher_runs {
            // Data nobody waits for any more: the flusher's.
            self.wake_flusher.notify_one();
        }
        result
    }

    /// Notes that the log now ends at `end`; wakes the flusher unless
    /// someone else will start the round that covers it under
    /// `GroupCommit`: the writer itself (it waits next) or the round in
    /// flight (its close wakes the flusher for data nobody waits on, and
    /// a waiter it leaves uncovered is woken to lead). A wake-up the
    /// flusher answers by going back to sleep costs two context switches;
    /// with many writers it came once per append. (Skipping it also while
    /// a thread waits saved a little more on W6 and measured slower on
    /// the service: the measurements listed in docs/history.md, issue 40.)
    pub(super) fn note_written(&self, end: Offset, wake_flusher: bool) {
        let mut st = self.state();
        if end > st.written {
            st.written = end;
        }
        let covered = match self.policy {
            SyncPolicy::GroupCommit => !wake_flusher || st.rounds > 0,
            SyncPolicy::CallerLed | SyncPolicy::Never => true,
            SyncPolicy::Interval { .. } => false,
        };
        if !covered {
            self.wake_flusher.notify_one();
        }
    }
}

/// The parked waiters to wake: those `flushed` covers (all, once
/// poisoned), and the lowest uncovered one if no round is in flight and
/// data awaits a sync, so it leads the next round. The next leader comes
/// first, so the device is busy again before the others are woken. The
/// caller unparks them after releasing the state lock ([`unpark`]).
pub(crate) fn to_wake(st: &mut SyncState) -> Vec<Thread> {
    if st.poisoned.is_some() {
        return std::mem::take(&mut st.parked).into_values().collect();
    }
    // Each is taken out of `parked`: a thread is woken once, however many
    // rounds end before it runs (it re-parks under a new key if needed).
    let later = match st.flushed.0.checked_add(1) {
        Some(next) => st.parked.split_off(&(Offset(next), 0)),
        None => BTreeMap::new(),
    };
    let covered = std::mem::replace(&mut st.parked, later);
    let mut wake = Vec::with_capacity(covered.len() + 1);
    if st.may_lead() || st.may_reap() {
        if let Some((_, t)) = st.parked.pop_first() {
            wake.push(t);
        }
    }
    wake.extend(covered.into_values());
    wake
}

/// Unparks `threads` (never under a lock).
pub(crate) fn unpark(threads: Vec<Thread>) {
    for t in threads {
        t.unpark();
    }
}

/// Whether a registered completion is due (`flushed` covers it, or the
/// state is poisoned).
pub(crate) fn has_due(st: &SyncState) -> bool {
    st.completions
        .first_key_value()
        .is_some_and(|((at, _), _)| st.poisoned.is_some() || *at <= st.flushed)
}

/// Removes the completions `flushed` covers (all of them, with an error,
/// once poisoned).
pub(crate) fn take_due(st: &mut SyncState) -> Vec<(Completion, Result<Offset>)> {
    let mut out = Vec::new();
    if let Some(cause) = st.poisoned {
        for (_, c) in std::mem::take(&mut st.completions) {
            out.push((c, Err(Shared::poisoned_error(cause))));
        }
        return out;
    }
    // Everything at or below `flushed` is due (all of it at the very end of
    // the offset space).
    let later = match st.flushed.0.checked_add(1) {
        Some(next) => st.completions.split_off(&(Offset(next), 0)),
        None => std::collections::BTreeMap::new(),
    };
    // In registration order: a completion registered once its offset was
    // already durable runs after those registered before it (each
    // submitter's completions in its order).
    let mut due: Vec<_> = std::mem::replace(&mut st.completions, later)
        .into_iter()
        .collect();
    due.sort_by_key(|((_, seq), _)| *seq);
    for (_, c) in due {
        out.push((c, Ok(st.flushed)));
    }
    out
}

/// Makes the caller the one thread running due completions, unless one
/// is (then that one runs them): returns whether it is. The flushed offset
/// and this claim change in one critical section, so no completion
/// registered later can run before one that was due earlier.
pub(crate) fn claim_firing(st: &mut SyncState) -> bool {
    if st.firing {
        return false;
    }
    st.firing = true;
    true
}

impl Shared {
    /// Runs every due completion, in offset order, until none is left
    /// (those that become due meanwhile too); the caller claimed the
    /// firing ([`claim_firing`]).
    pub(crate) fn fire_due(&self) {
        // A completion that panics must not leave the claim held (every
        // later completion would wait for a firer that is gone).
        struct Release<'a>(&'a Shared);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0.state().firing = false;
                }
            }
        }
        let _release = Release(self);
        loop {
            let due = {
                let mut st = self.state();
                let due = take_due(&mut st);
                if due.is_empty() {
                    st.firing = false;
                }
                due
            };
            if due.is_empty() {
                return;
            }
            fire(due);
        }
    }
}

/// Runs completions (never under a lock: they are user code).
pub(crate) fn fire(fired: Vec<(Completion, Result<Offset>)>) {
    for (c, r) in fired {
        c(r);
    }
}

/// How often the flusher looks at a running round's age.
const OVERDUE_CHECK: Duration = Duration::from_millis(250);

/// Under `CallerLed`, how long data may stay queued and unled, once the
/// flusher has seen it, before the flusher runs its round.
const LED_BACKSTOP: Duration = Duration::from_millis(5);

/// The background flusher: runs rounds for data nobody waits on
/// (`GroupCommit`), at most once per interval (`Interval`), or for data
/// left unled at its check (`CallerLed`).
pub(crate) fn flusher(shared: &Arc<Shared>) {
    let led = shared.policy == SyncPolicy::CallerLed;
    loop {
        {
            let mut st = shared.state();
            // Under GroupCommit, waiting writers run their own rounds;
            // under CallerLed, the callers run every round but a backstop's.
            let mut backstop = false;
            let writers_lead = |st: &SyncState, backstop: bool| {
                shared.policy == SyncPolicy::GroupCommit && st.waiters > 0 || led && !backstop
            };
            let work = |st: &SyncState, backstop: bool| {
                (st.may_lead() || st.may_reap()) && !writers_lead(st, backstop)
                    || has_due(st) && !st.firing
            };
            while !st.shutdown && st.poisoned.is_none() && !work(&st, backstop) {
                // Timed, to notice a round that hangs (a writer leading
                // it does not wake the flusher: no wake-up per round).
                if st.meters.overdue(shared.overdue_after) {
                    shared.facade.overdue.set(1.0);
                }
                // Under CallerLed, data queued and not yet durable is
                // looked at again soon: a caller busy for long (an async
                // runtime that never parks) has its rounds run anyway.
                let queued_before = st.next_offset;
                let check = if led && queued_before > st.flushed {
                    LED_BACKSTOP
                } else {
                    OVERDUE_CHECK
                };
                let (next, waited) = shared
                    .wake_flusher
                    .wait_timeout(st, check)
                    .unwrap_or_else(PoisonError::into_inner);
                st = next;
                // Data queued before this whole interval and still not
                // durable, with nobody waiting: nobody led it, so the
                // flusher does.
                backstop = waited.timed_out() && st.waiters == 0 && st.flushed < queued_before;
            }
            if st.shutdown || st.poisoned.is_some() {
                return;
            }
        }
        if !shared.sync_round() {
            // Completions a gate-taker's round left due.
            let fire = claim_firing(&mut shared.state());
            if fire {
                shared.fire_due();
            }
        }
        if let SyncPolicy::Interval { interval_us } = shared.policy {
            let st = shared.state();
            let _ = shared
                .wake_flusher
                .wait_timeout_while(st, Duration::from_micros(interval_us), |s| !s.shutdown)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}
