//! [`RecentEntries`]: the most recent entries of a group's log, decoded,
//! for the Raft library's storage adapter to read without going to the
//! log: a leader's replication reads what was just appended, before and
//! just after its sync round (which writes straight to the device, so a
//! read of it from the log would be a device read each time), and an
//! appended entry is not readable from the group until its round has
//! written it. One cache for every adapter (openraft 0.9, 0.10, raft-rs),
//! generic over the library's entry type.
//!
//! Invariants (asserted): the entries are a contiguous run of indexes
//! (`push` of another index clears it first); the byte count is the sum of
//! the sizes pushed and not dropped; an entry at or above the durable
//! point given to [`RecentEntries::trim`] is never dropped by it (the log
//! may not serve it yet).

use std::collections::VecDeque;

/// The most recent entries, decoded (see the module documentation).
#[derive(Debug, Clone)]
pub struct RecentEntries<T> {
    /// The index of the first entry.
    first: u64,
    entries: VecDeque<(T, usize)>,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl<T> RecentEntries<T> {
    /// An empty cache keeping, once entries are durable, at most
    /// `max_entries` entries and `max_bytes` bytes of them.
    pub fn new(max_entries: usize, max_bytes: usize) -> RecentEntries<T> {
        RecentEntries {
            first: 0,
            entries: VecDeque::new(),
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    /// The index of the first entry, if any.
    pub fn first(&self) -> Option<u64> {
        (!self.entries.is_empty()).then_some(self.first)
    }

    /// Entry `index`, if the cache holds it.
    pub fn at(&self, index: u64) -> Option<&T> {
        let i = usize::try_from(index.checked_sub(self.first)?).ok()?;
        self.entries.get(i).map(|(e, _)| e)
    }

    /// The entries from `index` on (none if the cache starts above it).
    pub fn iter_from(&self, index: u64) -> impl Iterator<Item = &T> {
        let skip = match index.checked_sub(self.first) {
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => usize::MAX,
        };
        self.entries.iter().skip(skip).map(|(e, _)| e)
    }

    /// The index after the last entry, if any.
    pub fn next(&self) -> Option<u64> {
        (!self.entries.is_empty()).then(|| self.first + self.entries.len() as u64)
    }

    /// The last entry, if any.
    pub fn last(&self) -> Option<&T> {
        self.entries.back().map(|(e, _)| e)
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops every entry.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// Adds entry `index` of `size` bytes; an index that does not follow
    /// the last one clears the cache first (it holds one contiguous run).
    ///
    /// # Panics
    /// If the cache's invariants (module documentation) break: a bug.
    pub fn push(&mut self, index: u64, entry: T, size: usize) {
        if self.next() != Some(index) {
            self.clear();
            self.first = index;
        }
        self.bytes += size;
        self.entries.push_back((entry, size));
        assert_eq!(self.next(), Some(index + 1), "the entries run contiguously");
    }

    /// Drops the entries from the front, below `durable` only, while the
    /// cache holds more than its bounds.
    ///
    /// # Panics
    /// If the cache's invariants (module documentation) break: a bug.
    pub fn trim(&mut self, durable: u64) {
        let first = self.first;
        while (self.entries.len() > self.max_entries || self.bytes > self.max_bytes)
            && self.first < durable
        {
            self.pop_front();
        }
        assert!(
            self.first <= first.max(durable),
            "no entry at or above the durable point is trimmed"
        );
    }

    /// Drops the entries at `index` and after (a suffix truncation).
    ///
    /// # Panics
    /// If the cache's invariants (module documentation) break: a bug.
    pub fn truncate(&mut self, index: u64) {
        while self.next().is_some_and(|n| n > index) {
            if let Some((_, n)) = self.entries.pop_back() {
                self.bytes -= n;
            }
        }
        assert!(
            self.next().is_none_or(|n| n <= index) && (!self.entries.is_empty() || self.bytes == 0),
            "nothing at or after a truncation point is kept"
        );
    }

    /// Drops the entries below `index` (a purge).
    pub fn purge(&mut self, index: u64) {
        while !self.entries.is_empty() && self.first < index {
            self.pop_front();
        }
    }

    fn pop_front(&mut self) {
        if let Some((_, n)) = self.entries.pop_front() {
            self.bytes -= n;
            self.first += 1;
        }
        assert!(
            !self.entries.is_empty() || self.bytes == 0,
            "the byte count is the sum of the sizes held"
        );
    }
}

impl<T: Clone> RecentEntries<T> {
    /// The part of `[lo, hi)` the cache holds, which is always a suffix of
    /// what it holds up to `hi`: its first index (`hi` when none) and the
    /// entries from there to `hi`. The caller reads `[lo, first)` from the
    /// log.
    ///
    /// # Panics
    /// If the cache's invariants (module documentation) break: a bug.
    pub fn suffix(&self, lo: u64, hi: u64) -> (u64, Vec<T>) {
        let Some(next) = self.next() else {
            return (hi, Vec::new());
        };
        let from = lo.max(self.first);
        let to = hi.min(next);
        if from >= to {
            return (if lo >= next { hi } else { hi.min(from) }, Vec::new());
        }
        let skip = usize::try_from(from - self.first).unwrap_or(usize::MAX);
        let take = usize::try_from(to - from).unwrap_or(0);
        let got = self
            .entries
            .iter()
            .skip(skip)
            .take(take)
            .map(|(e, _)| e.clone())
            .collect::<Vec<T>>();
        assert_eq!(
            got.len(),
            take,
            "a read of the cache is contiguous from its start"
        );
        (from, got)
    }

    /// `[lo, hi)` if the cache holds all of it.
    pub fn get(&self, lo: u64, hi: u64) -> Option<Vec<T>> {
        let next = self.next()?;
        if lo < self.first || hi > next || lo >= hi {
            return None;
        }
        Some(self.suffix(lo, hi).1)
    }
}

#[cfg(test)]
mod tests {
    use super::RecentEntries;

    #[test]
    fn it_keeps_a_contiguous_run_within_its_bounds_and_never_drops_what_is_not_durable() {
        let mut c = RecentEntries::new(3, 1000);
        for i in 5..10u64 {
            c.push(i, i * 10, 10);
        }
        assert_eq!(c.get(5, 10), Some(vec![50, 60, 70, 80, 90]));
        // Nothing durable yet: nothing dropped, whatever the bounds.
        c.trim(5);
        assert_eq!(c.len(), 5);
        c.trim(7);
        assert_eq!(c.suffix(0, 10), (7, vec![70, 80, 90]));
        c.truncate(9);
        assert_eq!(c.next(), Some(9));
        // A gap clears it.
        c.push(12, 120, 10);
        assert_eq!(c.suffix(0, 20), (12, vec![120]));
        assert_eq!(c.get(11, 13), None);
        c.purge(13);
        assert!(c.is_empty());
        assert_eq!(c.suffix(0, 20), (20, Vec::new()));
    }

    #[test]
    fn the_suffix_of_a_range_is_what_the_log_does_not_serve() {
        let mut c = RecentEntries::new(100, 1 << 20);
        for i in 10..20u64 {
            c.push(i, i, 1);
        }
        assert_eq!(
            c.suffix(0, 5),
            (5, Vec::new()),
            "below it: all from the log"
        );
        assert_eq!(c.suffix(0, 12), (10, vec![10, 11]));
        assert_eq!(c.suffix(15, 30), (15, (15..20).collect()));
        assert_eq!(c.suffix(25, 30), (30, Vec::new()), "past it: nothing");
    }
}
