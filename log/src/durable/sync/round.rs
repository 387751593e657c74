//! A sync round: the queue drained into the log, written and made durable,
//! published, and (pipelined) the next round's write submitted.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

impl Shared {
    /// Writes the queued appends to `log` (whose write lock the caller
    /// holds: the queue is taken and written in one critical section, so
    /// batches reach the log in offset order). `direct`: a sync follows at
    /// once, so the write may go straight to the device
    /// (`TailWrites::Direct`).
    pub(in crate::durable) fn drain(&self, log: &mut Log, direct: bool) -> Result<()> {
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
    pub(super) fn write_queue_for_sync(&self) -> (RwLockWriteGuard<'_, Log>, Result<()>) {
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
    pub(super) fn publish(
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
    pub(super) fn submit_next(&self, log: &mut Log) {
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
    pub(super) fn note_log_end(&self, log: &Log) {
        let end = log.log_end_offset();
        let mut st = self.state();
        st.written = st.written.max(end);
    }

    /// [`Shared::drain`] with the state lock already held.
    pub(in crate::durable) fn drain_locked(st: &mut SyncState, log: &mut Log) -> Result<()> {
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
    pub(in crate::durable) fn resync(st: &mut SyncState, log: &Log) {
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
    pub(in crate::durable) fn sync_round(&self) -> bool {
        let lead = {
            let mut st = self.state();
            if st.may_reap() {
                st.reaper = true;
                None
            } else if st.may_lead() {
                st.rounds += 1;
                assert!(
                    st.rounds <= MAX_ROUNDS && st.inflight.is_none(),
                    "a round starts only with room for it and no write in flight"
                );
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
    pub(super) fn reap_round(&self, gate: MutexGuard<'_, ()>, pipeline: bool) {
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

    /// A round's sync succeeded with no truncation since its capture: the
    /// flushed offset moves to its target.
    fn advance(&self, st: &mut SyncState, target: Offset, round: &Round) {
        // A round makes durable only what was written before its capture,
        // and appended before that.
        assert!(
            target <= st.written && st.written <= st.next_offset,
            "a round's target {target:?} is written ({:?}) and appended ({:?})",
            st.written,
            st.next_offset
        );
        // The watermark only moves forward (a concurrent explicit flush
        // may have passed this round's target).
        let before = st.flushed;
        st.flushed = before.max(target);
        st.syncs += 1;
        let depth = st.next_offset.0.saturating_sub(st.flushed.0);
        let made = st.flushed.0 - before.0;
        st.meters
            .round_done(&self.facade, made, round.started, round.oldest, depth);
    }

    /// The rest of a round once its write is done: capture, submit the
    /// next (`pipeline`, under `GroupCommit`, when this one needs no data
    /// sync), sync, release.
    pub(super) fn close_round(
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
            assert!(st.rounds >= 1, "a round closes only once it was counted");
            st.rounds -= 1;
            st.meters.stats.segments_recycled = recycled;
            match &result {
                Ok(()) if st.generation == generation => self.advance(&mut st, target, &round),
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
}
