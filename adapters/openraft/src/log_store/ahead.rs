//! The adapter's read-ahead window: entries read past what openraft asked
//! for, decoded, for its next small read.
//!
//! openraft 0.9 reads the log in ranges of 64 entries: forward when it
//! re-applies committed entries at startup, backward when it scans for the
//! last membership entries, and forward again when a follower catches up.
//! Each range is a store read (an index lookup and a walk to its end);
//! serving 64 ranges from one read of 4,096 entries cut a restart with
//! 100,000 entries since the last snapshot from 860 ms to 344–449 ms (as
//! measured when it was built).
//!
//! 0.9 only: 0.9 rereads its log in 64-entry ranges; 0.10 reads what it
//! replicates from the adapter's tail.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's private items, as it sees them"
)]
use super::*;

/// Entries read ahead at most.
pub const READ_AHEAD_ENTRIES: u64 = 4_096;
/// Reads shorter than this are served exactly, never read ahead.
pub const READ_AHEAD_MIN: u64 = 16;
/// Record bytes read ahead at most.
pub const READ_AHEAD_BYTES: u64 = 4 << 20;

/// A contiguous run of decoded entries from `first`.
pub(super) struct Ahead<C: RaftTypeConfig> {
    pub(super) first: u64,
    pub(super) entries: Vec<Entry<C>>,
}

impl<C: RaftTypeConfig<Entry = Entry<C>>> Ahead<C>
where
    Entry<C>: Clone,
{
    pub(super) fn empty() -> Self {
        Ahead {
            first: 0,
            entries: Vec::new(),
        }
    }

    fn end(&self) -> u64 {
        self.first + self.entries.len() as u64
    }

    /// `[from, to)` if the window holds all of it.
    pub(super) fn get(&self, from: u64, to: u64) -> Option<Vec<Entry<C>>> {
        if from < self.first || to > self.end() || from >= to {
            return None;
        }
        let skip = usize::try_from(from - self.first).ok()?;
        let take = usize::try_from(to - from).ok()?;
        self.entries.get(skip..skip + take).map(<[_]>::to_vec)
    }

    /// Whether a read of `[_, to)` continues a backward scan (it ends where
    /// the window starts).
    pub(super) fn backward(&self, to: u64) -> bool {
        !self.entries.is_empty() && to == self.first
    }

    /// Drops the entries at `index` and after (a truncation, an append
    /// that overwrites them).
    pub(super) fn cut_from(&mut self, index: u64) {
        if index < self.end() {
            let keep = usize::try_from(index.saturating_sub(self.first)).unwrap_or(0);
            self.entries.truncate(keep);
        }
    }
}
