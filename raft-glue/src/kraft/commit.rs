//! Commit from the voters' durable offsets (KIP-595's question 209): the
//! leader's progress tracker.
//!
//! Each voter reports, in its fetches, the end offset it has made
//! **durable**; the leader counts only its own **flushed** offset, never
//! what it has merely written. The high watermark is the largest offset
//! durable on a majority of the voters, so when a majority of voters other
//! than the leader already hold an entry durably it commits without waiting
//! for the leader's own sync: the leader's fsync is off the commit path.
//!
//! Invariants:
//! - the high watermark never moves backward;
//! - it never commits by counting an entry of an older epoch before an
//!   entry of the leader's current epoch is durable on a majority (Raft
//!   §5.4.2): it stays below the offset where the leader's epoch starts
//!   until the majority reaches past it;
//! - observers (non-voters) are tracked, never counted.

use std::collections::BTreeMap;

use quorumlog_checkpoint::{NodeId, Offset};

/// A replica's progress as the leader knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The end offset the replica has made durable (for the leader itself:
    /// its flushed offset).
    pub durable_end: Offset,
    /// Whether it votes (observers do not count toward commit).
    pub voter: bool,
}

/// The leader's view of its replicas in one epoch.
#[derive(Debug, Clone)]
pub struct CommitTracker {
    leader: NodeId,
    /// The offset of the leader's first entry in its epoch: nothing below it
    /// commits by counting until something at or above it does.
    epoch_start: Offset,
    replicas: BTreeMap<NodeId, Progress>,
    high_watermark: Offset,
}

impl CommitTracker {
    /// A tracker for `leader`, whose epoch starts at `epoch_start` (the log
    /// end when it became leader), with `voters` (the leader among them or
    /// not: it is always counted as a voter) and the high watermark known
    /// so far.
    pub fn new(
        leader: NodeId,
        epoch_start: Offset,
        voters: impl IntoIterator<Item = NodeId>,
        high_watermark: Offset,
    ) -> CommitTracker {
        let mut replicas: BTreeMap<NodeId, Progress> = voters
            .into_iter()
            .map(|id| {
                (
                    id,
                    Progress {
                        durable_end: Offset(0),
                        voter: true,
                    },
                )
            })
            .collect();
        replicas.insert(
            leader,
            Progress {
                durable_end: Offset(0),
                voter: true,
            },
        );
        CommitTracker {
            leader,
            epoch_start,
            replicas,
            high_watermark,
        }
    }

    /// The high watermark: every offset below it is durable on a majority
    /// of the voters.
    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    /// The progress of every replica the leader knows.
    pub fn replicas(&self) -> &BTreeMap<NodeId, Progress> {
        &self.replicas
    }

    /// Records the leader's own flushed offset; returns the new high
    /// watermark if it moved.
    pub fn leader_flushed(&mut self, flushed: Offset) -> Option<Offset> {
        let leader = self.leader;
        self.report(leader, flushed)
    }

    /// Records `replica`'s durable end offset (from its fetch); an unknown
    /// replica is tracked as an observer. Progress never moves back (a
    /// stale report is ignored). Returns the new high watermark if it
    /// moved.
    pub fn report(&mut self, replica: NodeId, durable_end: Offset) -> Option<Offset> {
        let p = self.replicas.entry(replica).or_insert(Progress {
            durable_end: Offset(0),
            voter: false,
        });
        p.durable_end = p.durable_end.max(durable_end);
        self.advance()
    }

    /// Recomputes the high watermark: the majority's durable offset, if it
    /// reaches the leader's epoch and is above the current one.
    fn advance(&mut self) -> Option<Offset> {
        let mut durable: Vec<Offset> = self
            .replicas
            .values()
            .filter(|p| p.voter)
            .map(|p| p.durable_end)
            .collect();
        durable.sort_unstable_by(|a, b| b.cmp(a));
        // The largest offset durable on a majority: the (n/2 + 1)-th
        // largest durable end.
        let majority = durable.len() / 2;
        let candidate = *durable.get(majority)?;
        if candidate <= self.epoch_start || candidate <= self.high_watermark {
            return None;
        }
        self.high_watermark = candidate;
        Some(candidate)
    }
}
