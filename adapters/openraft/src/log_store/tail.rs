//! The adapter's tail cache: the most recent entries, decoded.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's private items, as it sees them"
)]
use super::*;

/// The most recent entries, decoded, as written: what a leader's
/// replication reads (right after the append, before or after its sync
/// round). Sync-round writes go to the device directly (`O_DIRECT`), so
/// reading them back from the log would be a device read each time.
/// Bounded by [`TAIL_ENTRIES`] and [`TAIL_BYTES`]; always a contiguous
/// suffix of the log (cleared when it would not be).
pub(super) struct Tail<C: RaftTypeConfig> {
    pub(super) entries: std::collections::VecDeque<(Entry<C>, usize)>,
    pub(super) bytes: usize,
}

/// Entries kept in the tail cache at most.
pub const TAIL_ENTRIES: usize = 16_384;
/// Record bytes kept in the tail cache at most.
pub const TAIL_BYTES: usize = 16 << 20;

impl<C: RaftTypeConfig<Entry = Entry<C>>> Tail<C>
where
    Entry<C>: Clone,
{
    pub(super) fn first(&self) -> Option<u64> {
        self.entries.front().map(|(e, _)| e.log_id.index)
    }

    pub(super) fn next(&self) -> Option<u64> {
        self.entries.back().map(|(e, _)| e.log_id.index + 1)
    }

    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    pub(super) fn push(&mut self, entry: Entry<C>, size: usize) {
        if self.next().is_some_and(|n| n != entry.log_id.index) {
            self.clear();
        }
        self.bytes += size;
        self.entries.push_back((entry, size));
        while self.entries.len() > TAIL_ENTRIES || self.bytes > TAIL_BYTES {
            match self.entries.pop_front() {
                Some((_, n)) => self.bytes -= n,
                None => break,
            }
        }
    }

    /// Drops the entries at `index` and after.
    pub(super) fn truncate(&mut self, index: u64) {
        while self.next().is_some_and(|n| n > index) {
            if let Some((_, n)) = self.entries.pop_back() {
                self.bytes -= n;
            }
        }
    }

    /// Drops the entries at `index` and before.
    pub(super) fn purge(&mut self, index: u64) {
        while self.first().is_some_and(|f| f <= index) {
            if let Some((_, n)) = self.entries.pop_front() {
                self.bytes -= n;
            }
        }
    }

    /// `[from, to)` if the cache holds all of it.
    pub(super) fn get(&self, from: u64, to: u64) -> Option<Vec<Entry<C>>> {
        let (first, next) = (self.first()?, self.next()?);
        if from < first || to > next || from >= to {
            return None;
        }
        let skip = usize::try_from(from - first).ok()?;
        let take = usize::try_from(to - from).ok()?;
        Some(
            self.entries
                .iter()
                .skip(skip)
                .take(take)
                .map(|(e, _)| e.clone())
                .collect(),
        )
    }
}
