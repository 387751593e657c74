//! Leader-coordinated cleaning: where the leader may let the log start,
//! from the replicas' fetch positions within a window and the retention
//! caps. The cleaning itself is the wing's
//! (`KraftReplica::clean_log_prefix`, never past the latest durable
//! snapshot: docs/design.md invariant 7).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use quorumlog_checkpoint::{NodeId, Offset};

/// How much log the leader keeps at most, whatever the replicas' fetch
/// positions (each `None`: no cap of that kind). Past any cap the log may
/// be deleted up to the leader's latest snapshot, and a replica left below
/// is answered `SnapshotNeeded`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionCap {
    /// Entries behind the log end.
    pub max_entries: Option<u64>,
    /// Bytes of log (whole segments, as Kafka's `retention.bytes`: the
    /// newest segment is always kept).
    pub max_bytes: Option<u64>,
    /// Age of an entry, by the leader's own record of when the log grew
    /// ([`LeaderCompaction::record_append`]; entries appended before this
    /// leader started count as appended when it first recorded).
    pub max_age: Option<Duration>,
}

/// The leader's log as compaction sees it: start, end, and each segment's
/// base and size in bytes, oldest first ([`LogExtent::of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogExtent {
    /// The log start offset.
    pub start: Offset,
    /// The log end offset.
    pub end: Offset,
    /// `(base offset, bytes)` of every segment, oldest first.
    pub segments: Vec<(Offset, u64)>,
}

impl LogExtent {
    /// The extent of `group`'s log now; each of its batches counts as a
    /// segment (a group's log shares the node's segments with others).
    pub fn of(group: &crate::Group) -> LogExtent {
        let x = group.extent();
        LogExtent {
            start: x.start,
            end: x.queued_end,
            segments: group.batch_sizes(),
        }
    }

    /// The lowest segment base such that the segments from it to the end
    /// hold at most `max_bytes` (the newest segment's base if it alone
    /// holds more).
    fn start_within_bytes(&self, max_bytes: u64) -> Offset {
        let mut total = 0u64;
        let mut bound = self.segments.last().map_or(self.start, |s| s.0);
        for &(base, bytes) in self.segments.iter().rev() {
            total = total.saturating_add(bytes);
            if total > max_bytes {
                break;
            }
            bound = base;
        }
        bound
    }
}

/// Leader-coordinated compaction (KIP-595's question 102): every replica
/// snapshots its own state, but how far logs are deleted is decided by the
/// leader. It advertises a **safe log start** — the lowest of its latest
/// snapshot's end and the fetch offsets of every replica (voter or
/// observer) seen within the window — and each replica deletes only up to
/// the lower of that bound and its own latest durable snapshot
/// ([`crate::kraft::KraftReplica::clean_log_prefix`]). A [`RetentionCap`] lets the leader
/// move the bound past a replica that lags too far; that replica is then
/// answered `SnapshotNeeded`. Times are the caller's clock (`Instant`).
#[derive(Debug, Clone)]
pub struct LeaderCompaction {
    /// Fetch offsets older than this are ignored: a replica gone that long
    /// does not hold the logs back.
    pub window: Duration,
    /// The most log kept whatever the replicas' positions.
    pub cap: RetentionCap,
    fetches: BTreeMap<NodeId, (Offset, Instant)>,
    /// Samples for the age cap, oldest first: every entry below `end` was
    /// appended at or before `last`; a sample takes appends for 1/64 of
    /// `max_age` after its `first`, so the list stays short and an age is
    /// overestimated by at most that.
    grown: VecDeque<AgeSample>,
}

impl LeaderCompaction {
    /// A coordinator with `window` and retention `cap`.
    pub fn new(window: Duration, cap: RetentionCap) -> Self {
        LeaderCompaction {
            window,
            cap,
            fetches: BTreeMap::new(),
            grown: VecDeque::new(),
        }
    }

    /// Records that `replica` fetched from `offset` at `now` (its log ends
    /// there: everything below is on it).
    pub fn record_fetch(&mut self, replica: NodeId, offset: Offset, now: Instant) {
        self.fetches.insert(replica, (offset, now));
    }

    /// Records that the leader's log ended at `end` at `now` (after an
    /// append): every entry below `end` is at least as old as `now`. Only
    /// the age cap uses it.
    pub fn record_append(&mut self, end: Offset, now: Instant) {
        let Some(max_age) = self.cap.max_age else {
            return;
        };
        let step = max_age / 64;
        match self.grown.back_mut() {
            Some(s) if now.saturating_duration_since(s.first) < step => {
                s.end = s.end.max(end);
                s.last = s.last.max(now);
            }
            _ => self.grown.push_back(AgeSample {
                end,
                first: now,
                last: now,
            }),
        }
        // Keep one sample older than the cap (the bound), drop the rest.
        while self
            .grown
            .get(1)
            .is_some_and(|s| now.saturating_duration_since(s.last) > max_age)
        {
            self.grown.pop_front();
        }
    }

    /// The log start `leader` advertises at `now`:
    /// [`LeaderCompaction::safe_log_start`] over its latest snapshot and
    /// its log as they stand.
    pub fn advertised(&self, leader: &super::KraftReplica, now: Instant) -> Offset {
        let snapshot_end = leader.group.extent().latest_snapshot.map(|s| s.end_offset);
        self.safe_log_start(snapshot_end, &LogExtent::of(&leader.group), now)
    }

    /// The log start the leader advertises at `now`: never above its latest
    /// snapshot's end (`None`: nothing may be deleted), nor above a replica
    /// seen within the window, unless a retention cap says the log is too
    /// long; never below the log start (already deleted).
    pub fn safe_log_start(
        &self,
        latest_snapshot_end: Option<Offset>,
        log: &LogExtent,
        now: Instant,
    ) -> Offset {
        let Some(snapshot_end) = latest_snapshot_end else {
            return log.start;
        };
        let lowest_fetch = self
            .fetches
            .values()
            .filter(|(_, seen)| now.saturating_duration_since(*seen) <= self.window)
            .map(|(o, _)| *o)
            .min();
        let mut bound = lowest_fetch.map_or(snapshot_end, |f| f.min(snapshot_end));
        let capped = [
            self.cap
                .max_entries
                .map(|cap| Offset(log.end.0.saturating_sub(cap))),
            self.cap.max_bytes.map(|cap| log.start_within_bytes(cap)),
            self.cap.max_age.and_then(|age| self.aged_out(age, now)),
        ];
        for c in capped.into_iter().flatten() {
            bound = bound.max(c.min(snapshot_end));
        }
        bound.max(log.start)
    }

    /// The end of the entries appended more than `max_age` before `now`.
    fn aged_out(&self, max_age: Duration, now: Instant) -> Option<Offset> {
        self.grown
            .iter()
            .take_while(|s| now.saturating_duration_since(s.last) > max_age)
            .map(|s| s.end)
            .last()
    }
}

/// See [`LeaderCompaction::record_append`].
#[derive(Debug, Clone, Copy)]
struct AgeSample {
    end: Offset,
    first: Instant,
    last: Instant,
}
