//! The flushes openraft waits for, completed in submission order.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

/// The flushes not yet completed, each with its sequence number, in
/// submission order; the next number; how many truncations there were.
///
/// A completion names the flushes it completes by sequence number, never
/// by log offset: after a truncation, a later append's entries can end
/// below an earlier append's end, and a completion of that earlier append
/// (due at once, as the truncation's sync made it durable, but run a
/// moment later on the log's thread) must not complete the later one
/// before its entries are durable: a follower would then acknowledge
/// entries a power cut takes back, and openraft's leader would see its
/// log revert.
pub(super) struct Flushes<C: RaftTypeConfig> {
    pub(super) queue: VecDeque<(u64, IOFlushed<C>)>,
    pub(super) next: u64,
    pub(super) cuts: u64,
    /// The number of the last flush completed (`None`: none yet).
    pub(super) done: Option<u64>,
}

impl<C: RaftTypeConfig> Default for Flushes<C> {
    fn default() -> Self {
        Flushes {
            queue: VecDeque::new(),
            next: 0,
            cuts: 0,
            done: None,
        }
    }
}

/// Completes, in order, the flushes numbered up to `through` (all of them
/// with the error once the store failed); prunes the tail below the
/// durable offset unless a truncation came since the completion was
/// registered (`cuts` then differs: the offset may be past entries
/// appended since, not yet durable).
pub(super) fn complete<C: RaftTypeConfig>(
    pending: &Mutex<Flushes<C>>,
    tail: &Mutex<RecentEntries<C::Entry>>,
    r: &quorumlog_raft::Result<Offset>,
    through: u64,
    cuts: u64,
) {
    // Under the lock: two threads completing at once keep the order
    // (`io_completed` only sends).
    let mut q = pending.lock().unwrap_or_else(PoisonError::into_inner);
    match r {
        Ok(durable) => {
            if q.cuts == cuts {
                // Everything below the flushed offset is written: the
                // store serves it from now on, but for the cache's last.
                tail.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .trim(durable.0);
            }
            while q.queue.front().is_some_and(|(seq, _)| *seq <= through) {
                if let Some((seq, f)) = q.queue.pop_front() {
                    // Completions are a prefix of submissions: each one
                    // after the last, never one skipped.
                    assert!(
                        q.done.is_none_or(|d| seq == d + 1),
                        "flush {seq} completed after {:?}",
                        q.done
                    );
                    q.done = Some(seq);
                    f.io_completed(Ok(()));
                }
            }
        }
        Err(e) => {
            let failed: Vec<(u64, IOFlushed<C>)> = q.queue.drain(..).collect();
            for (seq, f) in failed {
                q.done = Some(seq);
                f.io_completed(Err(io::Error::other(e.to_string())));
            }
        }
    }
}
