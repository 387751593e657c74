//! Who is woken and what fires once a round makes offsets durable: parked
//! waiters, the next round's leader first, and completions in registration
//! order, one thread at a time.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

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
