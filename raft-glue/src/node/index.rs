//! One group's state in a node: its extent, its index runs into the
//! shared log, its election state, watermark and metadata, and which of
//! its appends are not yet known durable.
//!
//! The index is a run per batch: group offsets `offset..offset+count`
//! live at shared offsets `shared..shared+count`, all in `epoch`. Runs are
//! sorted by group offset and cover `[start, end)` without gaps (the first
//! may begin below `start` after a purge inside it). A read of the group
//! goes from a run straight to its batch: it never walks another group's
//! records. Memory: [`RUN_BYTES`] per batch of live log, and
//! [`GroupState::memory_bytes`] in all (tested in `tests/node_memory.rs`).

use std::collections::VecDeque;

use quorumlog_checkpoint::{Epoch, Offset, QuorumState};

/// A batch of one group in the shared log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    /// The group offset of its first entry.
    pub(crate) offset: u64,
    /// The shared offset of its first entry (its batch begins one before,
    /// with the node record header).
    pub(crate) shared: u64,
    /// The group epoch of its entries.
    pub(crate) epoch: u64,
    /// How many entries.
    pub(crate) count: u32,
    /// Its batch's encoded size, for the garbage accounting, and in the
    /// top bit ([`CONTROL_RUN`]) whether its entries are control records:
    /// a run stays 32 bytes.
    pub(crate) bytes: u32,
}

/// The bit of [`Run::bytes`] that marks a run of control records (a batch
/// is far below 2 GiB: `LogOptions::max_batch_bytes` is a `u32` size).
pub(crate) const CONTROL_RUN: u32 = 1 << 31;

/// Bytes of memory one run takes.
pub const RUN_BYTES: usize = std::mem::size_of::<Run>();

impl Run {
    /// Its batch's encoded size.
    pub(crate) fn size(&self) -> u64 {
        u64::from(self.bytes & !CONTROL_RUN)
    }

    /// Whether its entries are control records.
    pub(crate) fn control(&self) -> bool {
        self.bytes & CONTROL_RUN != 0
    }

    /// The `bytes` field of a run of a `size`-byte batch.
    pub(crate) fn bytes_field(size: u64, control: bool) -> u32 {
        let size = u32::try_from(size).unwrap_or(u32::MAX) & !CONTROL_RUN;
        if control {
            size | CONTROL_RUN
        } else {
            size
        }
    }

    pub(crate) fn end(&self) -> u64 {
        self.offset + u64::from(self.count)
    }

    /// The shared offset of group offset `o` (which it holds).
    pub(crate) fn shared_at(&self, o: u64) -> u64 {
        self.shared + (o - self.offset)
    }

    /// The shared offset after the run's batch.
    pub(crate) fn shared_end(&self) -> u64 {
        self.shared + u64::from(self.count)
    }
}

/// One group's state.
#[derive(Debug, Clone, Default)]
pub(crate) struct GroupState {
    pub(crate) start: u64,
    /// The end, appends queued for the next round included.
    pub(crate) end: u64,
    pub(crate) last_purged: Option<(Offset, Epoch)>,
    pub(crate) runs: VecDeque<Run>,
    /// The high watermark in memory (never above `end`).
    pub(crate) hw: Option<u64>,
    /// The high watermark as the log holds it durably (records and
    /// checkpoints).
    pub(crate) durable_hw: Option<u64>,
    pub(crate) vote: QuorumState,
    pub(crate) app_meta: Option<Vec<u8>>,
    /// Appends not yet known durable: (group end after it, shared end
    /// after its batch), in order.
    pub(crate) pending: VecDeque<(u64, u64)>,
    /// Every entry below it is durable.
    pub(crate) durable_end: u64,
    /// A handle is open on it.
    pub(crate) owned: bool,
}

impl GroupState {
    /// A new group, empty at `start`.
    pub(crate) fn new(start: u64) -> GroupState {
        GroupState {
            start,
            end: start,
            durable_end: start,
            ..GroupState::default()
        }
    }

    /// The bounds every change keeps, asserted after each (constant time):
    /// `start <= durable_end <= end`; the runs end at `end` and the first
    /// begins at or below `start`; no pending append ends past `end`.
    fn assert_bounds(&self) {
        assert!(
            self.start <= self.durable_end && self.durable_end <= self.end,
            "a group's start {} <= durable end {} <= end {}",
            self.start,
            self.durable_end,
            self.end
        );
        assert!(
            self.runs.back().is_none_or(|r| r.end() == self.end)
                && self.runs.front().is_none_or(|r| r.offset <= self.start),
            "a group's runs cover [{}, {}) and end there",
            self.start,
            self.end
        );
        assert!(
            self.pending.back().is_none_or(|&(g, _)| g <= self.end),
            "no pending append ends past the group's end"
        );
    }

    /// Adds the run of an `Entries` batch. An empty log restarts at
    /// `offset` if it is beyond its end.
    ///
    /// # Errors
    /// The expected offset, unless `offset` is the end (or such a restart).
    pub(crate) fn append(&mut self, run: Run) -> Result<(), u64> {
        if run.offset != self.end {
            if self.start == self.end && run.offset > self.end {
                self.reset(run.offset, None);
            } else {
                return Err(self.end);
            }
        }
        if self.last_epoch().is_some_and(|e| run.epoch < e) {
            return Err(self.end);
        }
        assert!(
            self.runs.back().is_none_or(|p| p.end() == run.offset),
            "a group's runs are contiguous"
        );
        self.end = run.end();
        self.pending.push_back((self.end, run.shared_end()));
        self.runs.push_back(run);
        self.assert_bounds();
        Ok(())
    }

    /// The epoch of the last entry; of an empty log, the purged entry's
    /// before it (a log restarted at a snapshot continues its epoch).
    pub(crate) fn last_epoch(&self) -> Option<u64> {
        self.runs
            .back()
            .filter(|r| r.end() > self.start)
            .map(|r| r.epoch)
            .or_else(|| {
                self.last_purged
                    .filter(|(o, _)| o.0 == self.start)
                    .map(|(_, e)| e.0)
            })
    }

    /// Suffix truncation: the log ends at `to` (clamped into the log).
    pub(crate) fn truncate(&mut self, to: u64) {
        let to = to.clamp(self.start, self.end);
        while let Some(last) = self.runs.back_mut() {
            if last.offset >= to {
                self.runs.pop_back();
            } else {
                if last.end() > to {
                    // Lossless: `to - offset` < count, a u32.
                    last.count = u32::try_from(to - last.offset).unwrap_or(last.count);
                }
                break;
            }
        }
        self.end = to;
        // The first pending append past `to` now ends at `to`.
        if let Some(i) = self.pending.iter().position(|&(g, _)| g >= to) {
            if let Some(p) = self.pending.get_mut(i) {
                p.0 = to;
            }
            self.pending.truncate(i + 1);
        }
        self.durable_end = self.durable_end.min(to);
        if let Some(h) = self.hw {
            self.hw = Some(h.min(to));
        }
        self.assert_bounds();
    }

    /// Prefix purge to `to`, the entry before it in `epoch`; past the end
    /// the log restarts there.
    pub(crate) fn purge(&mut self, to: u64, epoch: Epoch) {
        if to <= self.start {
            return;
        }
        if to > self.end {
            self.reset(to, Some(epoch));
            return;
        }
        while self.runs.front().is_some_and(|r| r.end() <= to) {
            self.runs.pop_front();
        }
        self.start = to;
        self.last_purged = Some((Offset(to), epoch));
        self.durable_end = self.durable_end.max(to);
        if self.hw.is_some_and(|h| h < to) {
            self.hw = Some(to);
        }
        self.assert_bounds();
    }

    /// The log restarts, empty, at `at`.
    pub(crate) fn reset(&mut self, at: u64, epoch: Option<Epoch>) {
        self.runs.clear();
        self.pending.clear();
        self.start = at;
        self.end = at;
        self.durable_end = at;
        if let Some(epoch) = epoch {
            self.last_purged = Some((Offset(at), epoch));
        }
        if let Some(h) = self.hw {
            self.hw = Some(h.max(at));
        } else if epoch.is_some() {
            self.hw = Some(at);
        }
    }

    /// The index of the run holding `o`.
    pub(crate) fn run_index(&self, o: u64) -> Option<usize> {
        if o < self.start || o >= self.end {
            return None;
        }
        let i = self.runs.partition_point(|r| r.offset <= o);
        i.checked_sub(1)
    }

    /// The epoch of the entry at `o`.
    /// For Raft's log matching: the largest epoch `<= epoch` of the log
    /// (of an empty log, the purged entry's before it) and where its
    /// entries end; `None` if every epoch the log knows is newer.
    pub(crate) fn end_for_epoch(&self, epoch: u64) -> Option<(u64, u64)> {
        let mut found = self
            .last_purged
            .filter(|(o, e)| o.0 == self.start && e.0 <= epoch)
            .map(|(_, e)| (e.0, self.start));
        for r in self.runs.iter().filter(|r| r.end() > self.start) {
            if r.epoch > epoch {
                break;
            }
            found = Some((r.epoch, r.end()));
        }
        found
    }

    pub(crate) fn epoch_at(&self, o: u64) -> Option<u64> {
        self.run_index(o)
            .and_then(|i| self.runs.get(i))
            .map(|r| r.epoch)
    }

    /// Replaces where `[a, b)` lives with `run` (a rewrite: same offsets,
    /// same epoch, a new batch). Returns false, changing nothing, unless
    /// `[a, b)` is in the log in `run.epoch` throughout.
    pub(crate) fn relocate(&mut self, run: Run) -> bool {
        let (a, b) = (run.offset, run.end());
        if a < self.start || b > self.end || a >= b {
            return false;
        }
        let covered: Vec<&Run> = self
            .runs
            .iter()
            .filter(|r| r.end() > a && r.offset < b)
            .collect();
        if covered.iter().any(|r| r.epoch != run.epoch) {
            return false;
        }
        let mut next = VecDeque::with_capacity(self.runs.len() + 2);
        let mut placed = false;
        for r in self.runs.drain(..) {
            if r.end() <= a || r.offset >= b {
                if r.offset >= b && !placed {
                    next.push_back(run);
                    placed = true;
                }
                next.push_back(r);
                continue;
            }
            if r.offset < a {
                let mut head = r;
                head.count = u32::try_from(a - r.offset).unwrap_or(0);
                next.push_back(head);
            }
            if !placed {
                next.push_back(run);
                placed = true;
            }
            if r.end() > b {
                let mut tail = r;
                tail.shared = r.shared_at(b);
                tail.offset = b;
                tail.count = u32::try_from(r.end() - b).unwrap_or(0);
                next.push_back(tail);
            }
        }
        if !placed {
            next.push_back(run);
        }
        self.runs = next;
        self.assert_bounds();
        true
    }

    /// The group's durable end: pops the appends the log made durable.
    pub(crate) fn flushed(&mut self, log_flushed: u64) -> u64 {
        while let Some(&(g, s)) = self.pending.front() {
            if s > log_flushed {
                break;
            }
            self.durable_end = self.durable_end.max(g);
            self.pending.pop_front();
        }
        if self.pending.is_empty() {
            self.durable_end = self.end;
        }
        self.assert_bounds();
        self.durable_end
    }

    /// The shared offset the log must make durable for every entry below
    /// `o` to be; none if they already are.
    pub(crate) fn durable_point(&self, o: u64) -> Option<u64> {
        if o <= self.durable_end {
            return None;
        }
        // Group ends only grow along the queue (a truncation cuts it):
        // the first append ending at or past `o`, found by bisection.
        let i = self.pending.partition_point(|&(g, _)| g < o);
        self.pending.get(i).or(self.pending.back()).map(|&(_, s)| s)
    }

    /// The smallest shared offset any live run needs (its batch's start).
    pub(crate) fn min_shared(&self) -> Option<u64> {
        self.live_runs().map(|r| r.shared - 1).min()
    }

    /// The runs the group still serves: those holding an entry at or
    /// above its start. The one rule of what is live in the shared log,
    /// for reclamation, for the inspectors' classification of damage and
    /// for repair.
    pub(crate) fn live_runs(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(|r| r.end() > self.start)
    }

    /// Live bytes: the sizes of the batches its runs live in.
    pub(crate) fn live_bytes(&self) -> u64 {
        self.runs.iter().map(Run::size).sum()
    }

    /// Bytes of memory this state takes (its struct, its runs, its
    /// pending queue, its metadata).
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<GroupState>()
            + self.runs.capacity() * RUN_BYTES
            + self.pending.capacity() * std::mem::size_of::<(u64, u64)>()
            + self.app_meta.as_ref().map_or(0, Vec::capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(offset: u64, shared: u64, count: u32, epoch: u64) -> Run {
        Run {
            offset,
            shared,
            epoch,
            count,
            bytes: 100,
        }
    }

    #[test]
    fn truncation_cuts_runs_and_pending_appends_at_the_offset() {
        let mut g = GroupState::new(1);
        g.append(run(1, 10, 3, 1)).unwrap();
        g.append(run(4, 20, 3, 1)).unwrap();
        assert_eq!(g.append(run(9, 30, 1, 1)), Err(7));
        g.truncate(5);
        assert_eq!((g.start, g.end), (1, 5));
        assert_eq!(g.runs.back().unwrap().count, 1);
        // The second batch (shared 20..23) now ends the group at 5.
        assert_eq!(g.durable_point(5), Some(23));
        assert_eq!(g.flushed(13), 4);
        assert_eq!(g.flushed(23), 5);
        // An epoch never goes back within the log.
        g.append(run(5, 40, 1, 3)).unwrap();
        assert_eq!(g.append(run(6, 50, 1, 2)), Err(6));
    }

    #[test]
    fn purge_drops_whole_runs_and_restarts_past_the_end() {
        let mut g = GroupState::new(0);
        g.append(run(0, 1, 4, 1)).unwrap();
        g.append(run(4, 9, 4, 2)).unwrap();
        g.purge(5, Epoch(2));
        assert_eq!(g.runs.len(), 1);
        assert_eq!(g.epoch_at(4), None);
        assert_eq!(g.epoch_at(5), Some(2));
        assert_eq!(g.min_shared(), Some(8));
        g.purge(20, Epoch(3));
        assert_eq!((g.start, g.end, g.runs.len()), (20, 20, 0));
        assert_eq!(g.last_purged, Some((Offset(20), Epoch(3))));
        g.append(run(25, 30, 1, 3)).unwrap();
        assert_eq!((g.start, g.end), (25, 26));
    }

    #[test]
    fn relocation_splits_runs_and_refuses_another_epoch() {
        let mut g = GroupState::new(0);
        g.append(run(0, 1, 10, 1)).unwrap();
        g.append(run(10, 20, 10, 2)).unwrap();
        assert!(!g.relocate(run(8, 100, 4, 1)), "spans two epochs");
        assert!(g.relocate(run(3, 100, 4, 1)));
        let shape: Vec<(u64, u64, u32)> = g
            .runs
            .iter()
            .map(|r| (r.offset, r.shared, r.count))
            .collect();
        assert_eq!(shape, vec![(0, 1, 3), (3, 100, 4), (7, 8, 3), (10, 20, 10)]);
        assert_eq!(g.run_index(5).map(|i| g.runs[i].shared_at(5)), Some(102));
        assert_eq!(g.run_index(8).map(|i| g.runs[i].shared_at(8)), Some(9));
        assert!(g.relocate(run(0, 200, 10, 1)));
        assert_eq!(g.runs.len(), 2);
        assert_eq!(g.min_shared(), Some(19));
    }
}

/// A map keyed by group id, hashed with [`IdHasher`].
pub(crate) type IdMap<V> =
    std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;

/// The node's hash for group ids: one multiply and a fold, where the
/// standard `SipHash` took 4.6 % of a 1,000-region raft-rs run (every
/// call on a group looks its state up). Group ids are the embedder's,
/// not an adversary's, so a keyed hash buys nothing here.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        // The table takes its bucket from the low bits and its tag from
        // the high ones: fold the well-mixed high half down.
        self.0 ^ (self.0 >> 29)
    }
}

/// The shared offset below which nothing is needed: every group's oldest
/// live batch ([`GroupState::min_shared`]) and the checkpoint's position
/// (an open replays the log from there). Segments wholly below it are
/// reclaimable: the engine's reclamation frees them, and damage in them
/// costs nothing.
pub(crate) fn reclaim_floor(live: impl Iterator<Item = u64>, checkpoint: u64) -> u64 {
    live.min().map_or(checkpoint, |l| l.min(checkpoint))
}
