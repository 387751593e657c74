//! [`AsyncPersister`]: raft-rs's asynchronous persistence over the shared
//! log's group commit. A Ready loop hands it each region's `Ready`; it
//! queues the entries (readable at once), applies the hard state and any
//! snapshot, and returns the messages that may leave at once. Once the
//! round holding the Ready's entries is durable, the loop gets an
//! [`Event::Persisted`] with the Ready's number and its persisted
//! messages: it calls `on_persist_ready(number)` and only then sends them.
//! No thread waits for a sync per Ready: one round covers every region's
//! Readies queued before it. The loop leads the rounds, on its own thread
//! (the node opened with `SyncPolicy::CallerLed`): [`AsyncPersister::lead_round`]
//! before it sleeps, and a pass that needs a sync right after another
//! that did leads the round of both at its finish (a loop that never
//! sleeps). No round is handed to the log's flusher: at one proposal in
//! flight that hand-off was six of the sixteen context switches per
//! proposal. A pass whose Readies need no sync (raft-rs's
//! `must_sync()` false: a new commit index at most) starts no round: it
//! is reported right after the passes before it, as raft-rs allows (its
//! commit record rides the next round; an append response it releases
//! acknowledges only entries of those earlier, durable Readies).
//!
//! ```text
//! loop {
//!     persister.lead_round();                     // before it may sleep
//!     wait for mail or a tick;
//!     let mut pass = persister.pass();            // one write per pass
//!     for each region with has_ready():
//!         let mut rd = raw.ready();
//!         let written = pass.persist(&storage, &mut rd)?;
//!         send(written.messages);                 // at once
//!         apply(written.snapshot, rd.take_committed_entries());
//!         raw.advance_append_async(rd);
//!     pass.finish();                              // one completion
//!     for event in persister.try_events():
//!         Persisted { region, number, messages } =>
//!             raw.on_persist_ready(number); send(messages);
//!         Fetched { region, context } => raw.on_entries_fetched(context);
//!         Failed { .. } => stop the region (its store is poisoned)
//! }
//! ```

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryIter};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use raft::eraftpb::Message;
use raft::Ready;

use quorumlog_raft::{Group, Offset};

use crate::error::Result;
use crate::event::{wake, Event, Fetcher, Job, Waker};
use crate::storage::RegionStorage;

/// What [`AsyncPersister::persist`] leaves to the loop.
#[derive(Debug, Default)]
pub struct Written {
    /// The Ready's `messages()`: they may leave at once.
    pub messages: Vec<Message>,
    /// The state bytes of the snapshot the Ready installed, if it did.
    pub snapshot: Option<Vec<u8>>,
}

/// The asynchronous persistence of one node's regions (one shared log, or
/// several stores).
pub struct AsyncPersister {
    events_tx: Sender<Event>,
    events: Receiver<Event>,
    jobs: Option<Sender<Job>>,
    early: AtomicBool,
    waker: Arc<Mutex<Option<Waker>>>,
    /// Set when the waker ran and the loop has not looked since: one
    /// wake-up for a round's many completions.
    wake_pending: Arc<AtomicBool>,
    /// Makes the latest Ready's round durable on the calling thread.
    lead: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// Passes that need no sync, held behind the passes before them.
    order: Arc<Mutex<Order>>,
    /// Each region's last Ready reported persisted: reports go out in
    /// Ready order per region (asserted as they are sent).
    reported: Arc<Mutex<std::collections::HashMap<u64, u64>>>,
}

/// A pass's report: its events, sent in its Readies' order.
type Report = Box<dyn FnOnce(std::result::Result<(), crate::Error>) + Send>;

/// The order of reports across passes. A pass whose Readies need no sync
/// (raft-rs's `must_sync()` false for each: no entries, no snapshot, no
/// new term or vote; a commit index at most) starts no round: it is
/// reported as soon as every pass registered before it that needs one
/// is, never before (its persisted messages, an append response for
/// example, may acknowledge entries of those earlier Readies).
#[derive(Default)]
struct Order {
    /// The number the next pass that needs a sync gets.
    next: u64,
    /// Passes that need a sync, registered and not yet reported.
    outstanding: BTreeSet<u64>,
    /// Passes that need none, with the `next` at their finish.
    held: VecDeque<(u64, Report)>,
    /// A pass before failed: every pass held after it fails too.
    failed: Option<String>,
}

impl Order {
    /// Registers a pass that needs a sync; returns its number.
    fn register(&mut self) -> u64 {
        let n = self.next;
        self.next += 1;
        self.outstanding.insert(n);
        n
    }

    /// Whether a pass finished when `next` was `before` may be reported.
    fn clear(&self, before: u64) -> bool {
        self.outstanding.range(..before).next().is_none()
    }

    fn result(&self) -> std::result::Result<(), crate::Error> {
        self.failed
            .as_ref()
            .map_or(Ok(()), |e| Err(crate::Error::PassFailed(e.clone())))
    }

    /// A pass that needs no sync: reported now if nothing is before it.
    fn hold(&mut self, report: Report) {
        let before = self.next;
        if self.held.is_empty() && self.clear(before) {
            report(self.result());
        } else {
            self.held.push_back((before, report));
        }
    }

    /// Pass `n` was reported (`failure`: with this error): the passes
    /// held behind it and nothing else follow.
    fn done(&mut self, n: u64, failure: Option<String>) {
        self.outstanding.remove(&n);
        if failure.is_some() && self.failed.is_none() {
            self.failed = failure;
        }
        while self
            .held
            .front()
            .is_some_and(|&(before, _)| self.clear(before))
        {
            if let Some((_, report)) = self.held.pop_front() {
                report(self.result());
            }
        }
    }
}

impl std::fmt::Debug for AsyncPersister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncPersister").finish_non_exhaustive()
    }
}

impl Default for AsyncPersister {
    fn default() -> Self {
        Self::new()
    }
}

impl AsyncPersister {
    /// A persister with its thread for asynchronous fetches (a region's
    /// commit index needs none: its group queues it for the Ready's
    /// round).
    pub fn new() -> Self {
        let (events_tx, events) = mpsc::channel();
        let (jobs, job_rx) = mpsc::channel::<Job>();
        // Detached: it ends when the last storage holding its sender goes.
        let _ = std::thread::Builder::new()
            .name("raftrs-fetch".into())
            .spawn(move || {
                while let Ok(job) = job_rx.recv() {
                    job();
                }
            });
        AsyncPersister {
            events_tx,
            events,
            jobs: Some(jobs),
            early: AtomicBool::new(false),
            waker: Arc::default(),
            wake_pending: Arc::default(),
            lead: Mutex::new(None),
            order: Arc::default(),
            reported: Arc::default(),
        }
    }

    /// Lets `storage`'s `entries` answer `LogTemporarilyUnavailable` to a
    /// caller that can wait (`context.can_async()`) when the range is not
    /// in memory, and read it on this persister's fetch thread; the Ready
    /// loop then gets [`Event::Fetched`] and calls `on_entries_fetched`.
    pub fn enable_async_fetch(&self, storage: &RegionStorage) {
        storage.set_fetcher(self.fetcher());
    }

    fn fetcher(&self) -> Fetcher {
        Fetcher {
            jobs: self.jobs.clone().unwrap_or_else(|| mpsc::channel().0),
            events: self.events_tx.clone(),
            waker: Arc::clone(&self.waker),
            wake_pending: Arc::clone(&self.wake_pending),
        }
    }

    /// Persists one region's Ready, asynchronously: a snapshot is
    /// installed (durable on return), the entries queued for the next
    /// round (readable at once), the hard state applied (a new term or
    /// vote durable on return). Returns the messages that may leave now;
    /// the persisted messages come back with [`Event::Persisted`] once the
    /// round is durable. Call `advance_append_async(rd)` after it.
    ///
    /// One completion per Ready: a loop over many regions does better
    /// with [`AsyncPersister::pass`], one completion per loop pass.
    ///
    /// # Errors
    /// The storage's: nothing is reported persisted for this Ready.
    pub fn persist(&self, storage: &RegionStorage, rd: &mut Ready) -> Result<Written> {
        let mut pass = self.pass();
        let out = pass.persist(storage, rd)?;
        pass.finish();
        Ok(out)
    }

    /// Starts one pass of a Ready loop: every region's Ready persisted
    /// through [`Pass::persist`] is reported with one completion of the
    /// shared log (the round that holds the last of them), not one per
    /// Ready. [`Pass::finish`] (or dropping the pass) registers it.
    ///
    /// ```text
    /// let mut pass = persister.pass();
    /// for each region with has_ready():
    ///     let mut rd = raw.ready();
    ///     let written = pass.persist(&storage, &mut rd)?;
    ///     send(written.messages);
    ///     apply(rd.take_committed_entries());
    ///     raw.advance_append_async(rd);
    /// pass.finish();
    /// ```
    pub fn pass(&self) -> Pass<'_> {
        Pass {
            persister: self,
            readies: Vec::new(),
            anchor: None,
            sync: false,
        }
    }

    /// Sets what is called after each event is queued: a Ready loop that
    /// sleeps on its own channel (its network's) wakes from it, instead
    /// of polling [`AsyncPersister::try_events`].
    pub fn set_waker(&self, waker: Waker) {
        *self.waker.lock().unwrap_or_else(PoisonError::into_inner) = Some(waker);
    }

    fn waker(&self) -> Option<Waker> {
        self.waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A fault for tests of the tests: report each Ready persisted as
    /// soon as it is queued, before its round is durable. A crash test
    /// must catch it.
    #[doc(hidden)]
    pub fn report_before_durable(&self, on: bool) {
        self.early.store(on, Ordering::Relaxed);
    }

    /// For a Ready loop with nothing else to do, before it sleeps: makes
    /// the rounds of the Readies persisted so far durable on this thread
    /// (it leads the shared log's group commit, or waits for the round
    /// under way). Under `SyncPolicy::CallerLed` nothing else starts
    /// them (but the flusher's backstop, 5 ms to 250 ms): a loop that
    /// sleeps without it delays its reports. Returns at once when
    /// nothing is outstanding. Their events follow (and the waker).
    pub fn lead_round(&self) {
        let lead = self
            .lead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(l) = lead {
            l();
        }
    }

    /// The events so far, without waiting. The waker is called again
    /// for events after this call.
    pub fn try_events(&self) -> TryIter<'_, Event> {
        self.wake_pending.store(false, Ordering::Release);
        self.events.try_iter()
    }

    /// The next event, waiting up to `timeout`.
    ///
    /// # Errors
    /// `Timeout` when none came.
    pub fn recv_timeout(&self, timeout: Duration) -> std::result::Result<Event, RecvTimeoutError> {
        self.events.recv_timeout(timeout)
    }
}

impl Drop for AsyncPersister {
    fn drop(&mut self) {
        // The fetch thread ends with the last sender of its jobs.
        self.jobs = None;
    }
}

/// One Ready loop pass ([`AsyncPersister::pass`]): the Readies persisted
/// through it are reported persisted together, in the order they were
/// persisted (so in Ready order per region), once the shared log's round
/// holding the last of them is durable.
pub struct Pass<'p> {
    persister: &'p AsyncPersister,
    /// (region, Ready number, persisted messages), in persist order.
    readies: Vec<(u64, u64, Vec<Message>)>,
    /// A group of the node the pass wrote to (the last with entries): its
    /// node-wide completion covers every record the pass queued (one
    /// shared log).
    anchor: Option<Arc<Group>>,
    /// A Ready of the pass must be durable before it is reported
    /// (raft-rs's `must_sync()`).
    sync: bool,
}

impl std::fmt::Debug for Pass<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pass")
            .field("readies", &self.readies.len())
            .finish_non_exhaustive()
    }
}

impl Pass<'_> {
    /// Persists one region's Ready as [`AsyncPersister::persist`] does,
    /// its report deferred to the pass's completion. Every region must be
    /// a group of the same node (one shared log).
    ///
    /// # Errors
    /// The storage's: nothing is reported persisted for this Ready (the
    /// pass's other Readies are).
    pub fn persist(&mut self, storage: &RegionStorage, rd: &mut Ready) -> Result<Written> {
        if let Some(a) = &self.anchor {
            // One completion covers one shared log only.
            let (pass, region) = (a.identity(), storage.store().identity());
            if pass != region {
                return Err(crate::Error::PassAcrossNodes {
                    region: storage.region(),
                });
            }
        }
        self.sync |= rd.must_sync();
        let mut out = Written::default();
        if !rd.snapshot().is_empty() {
            out.snapshot = Some(storage.apply_snapshot(rd.snapshot())?);
        }
        storage.append(rd.entries())?;
        if let Some(hs) = rd.hs() {
            // The commit index rides the Ready's round (the group queues
            // it for the shared log's next round).
            storage.set_hard_state(hs)?;
        }
        out.messages = rd.take_messages();
        self.readies
            .push((storage.region(), rd.number(), rd.take_persisted_messages()));
        if self.anchor.is_none() || !rd.entries().is_empty() {
            // The last group with entries leads the round (`lead_round`).
            self.anchor = Some(Arc::clone(storage.store()));
        }
        Ok(out)
    }

    /// Registers the pass's one completion (dropping the pass does too).
    pub fn finish(self) {}

    fn complete(&mut self) {
        let Some(anchor) = self.anchor.take() else {
            return;
        };
        let readies = std::mem::take(&mut self.readies);
        let p = self.persister;
        let tx = p.events_tx.clone();
        let waker = p.waker();
        let pending = Arc::clone(&p.wake_pending);
        let reported = Arc::clone(&p.reported);
        let report: Report = Box::new(move |r| {
            send_reports(readies, r, &tx, &reported);
            wake(waker.as_ref(), &pending);
        });
        if p.early.load(Ordering::Relaxed) {
            report(Ok(()));
            return;
        }
        let order = Arc::clone(&p.order);
        if !self.sync {
            // No round for it: after the passes before it (its records,
            // a commit index, ride the next round anyone starts).
            order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .hold(report);
            return;
        }
        let n = order
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .register();
        let lead = Arc::clone(&anchor);
        // At or past the group's end: after every record it queued,
        // which came after every other record of the pass.
        anchor.on_node_durable(Box::new(move |r| {
            let failure = r.as_ref().err().map(ToString::to_string);
            report(r.map(|_| ()).map_err(crate::Error::from));
            order
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .done(n, failure);
        }));
        // Leads a round (it captures everything queued) if the group's
        // records wait for one. A failure poisons the store; the
        // completion reports it.
        let round = move || {
            let _ = lead.wait_durable(Offset(u64::MAX));
        };
        let mut slot = p.lead.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.take().is_some() {
            // The pass before was not led either (the loop found more to
            // do): one round for both, now. A busy loop leads every other
            // pass's round; under `SyncPolicy::CallerLed` nobody else does.
            drop(slot);
            round();
        } else {
            *slot = Some(Box::new(round));
        }
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.complete();
    }
}

/// Sends a pass's events, in its Readies' order: each region's Ready
/// persisted, or (after a failed round) failed; asserts each region's
/// Readies are reported in order.
fn send_reports(
    readies: Vec<(u64, u64, Vec<Message>)>,
    r: std::result::Result<(), crate::Error>,
    tx: &Sender<Event>,
    reported: &Mutex<std::collections::HashMap<u64, u64>>,
) {
    let mut error = r.err();
    let mut last = reported.lock().unwrap_or_else(PoisonError::into_inner);
    for (region, number, messages) in readies {
        if error.is_none() {
            let before = last.insert(region, number);
            assert!(
                before.is_none_or(|b| b < number),
                "region {region}: Ready {number} reported persisted after {before:?}"
            );
        }
        let _ = tx.send(match error.take() {
            None => Event::Persisted {
                region,
                number,
                messages,
            },
            Some(e) => {
                // A failed round poisons the node: every region
                // of the pass gets it (the others as `Poisoned`).
                error = Some(match &e {
                    crate::Error::Store(quorumlog_raft::Error::Poisoned(f)) => {
                        crate::Error::Store(quorumlog_raft::Error::Poisoned(*f))
                    }
                    other => crate::Error::PassFailed(other.to_string()),
                });
                Event::Failed { region, error: e }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report that logs `name` and whether it failed.
    fn report(log: &Arc<Mutex<Vec<String>>>, name: &str) -> Report {
        let (log, name) = (Arc::clone(log), name.to_owned());
        Box::new(move |r| {
            let tag = if r.is_ok() { "ok" } else { "failed" };
            log.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(format!("{name} {tag}"));
        })
    }

    fn taken(log: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
        std::mem::take(&mut *log.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Invariants: a pass that needs no sync is reported at once when no
    /// pass before it is outstanding, else right after the last of those
    /// (in finish order, however the earlier ones complete), and never
    /// ahead of a pass registered before it; after a failed pass, every
    /// pass held behind it fails.
    #[test]
    fn held_passes_follow_the_passes_before_them() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut o = Order::default();
        o.hold(report(&log, "h0"));
        assert_eq!(taken(&log), ["h0 ok"], "nothing before it: at once");

        let a = o.register();
        o.hold(report(&log, "h1"));
        let b = o.register();
        o.hold(report(&log, "h2"));
        o.hold(report(&log, "h3"));
        assert!(taken(&log).is_empty(), "held behind a and b");
        // b completes first (another store): h1 still waits for a.
        o.done(b, None);
        assert!(
            taken(&log).is_empty(),
            "h1 waits for a; h2 and h3 behind h1"
        );
        o.done(a, None);
        assert_eq!(taken(&log), ["h1 ok", "h2 ok", "h3 ok"]);

        let c = o.register();
        o.hold(report(&log, "h4"));
        o.done(c, Some("disk".into()));
        o.hold(report(&log, "h5"));
        assert_eq!(taken(&log), ["h4 failed", "h5 failed"]);
    }
}
