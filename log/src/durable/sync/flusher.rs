//! The background flusher: the rounds nobody leads.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

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
