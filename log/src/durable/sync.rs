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

mod completions;
mod flusher;
mod round;

pub(crate) use completions::{claim_firing, has_due, to_wake, unpark};
pub(crate) use flusher::flusher;

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
    /// the service.)
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
