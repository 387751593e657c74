//! The log-cleaning path: the log is truncated at the front only up to the
//! end of a durable snapshot (docs/design.md invariant 7).
//!
//! The order is the whole point: a snapshot is frozen (synced, renamed,
//! directory synced) *before* the log prefix it covers is deleted, and the
//! deletion is bounded by what the latest published snapshot covers. A crash
//! between the two steps leaves the log whole and the snapshot published: no
//! entry is ever without a copy. (Choosing the offset from what every voter
//! has replicated is the Raft layer's; this is the storage half.)

use quorumlog_checkpoint::Offset;
use quorumlog_log::{DurableLog, Log};
use quorumlog_snapshot::SnapshotStore;

/// A log whose prefix can be deleted: [`Log`] and [`DurableLog`].
pub trait PrefixLog {
    /// The first offset still in the log.
    fn log_start_offset(&self) -> Offset;
    /// The next offset to be written.
    fn log_end_offset(&self) -> Offset;
    /// Deletes the prefix below `offset`.
    ///
    /// # Errors
    /// The log's.
    fn truncate_prefix_to(&mut self, offset: Offset) -> Result<(), quorumlog_log::Error>;
}

impl PrefixLog for Log {
    fn log_start_offset(&self) -> Offset {
        Log::log_start_offset(self)
    }
    fn log_end_offset(&self) -> Offset {
        Log::log_end_offset(self)
    }
    fn truncate_prefix_to(&mut self, offset: Offset) -> Result<(), quorumlog_log::Error> {
        Log::truncate_prefix_to(self, offset)
    }
}

impl PrefixLog for DurableLog {
    fn log_start_offset(&self) -> Offset {
        DurableLog::log_start_offset(self)
    }
    fn log_end_offset(&self) -> Offset {
        DurableLog::log_end_offset(self)
    }
    fn truncate_prefix_to(&mut self, offset: Offset) -> Result<(), quorumlog_log::Error> {
        DurableLog::truncate_prefix_to(self, offset)
    }
}

/// Errors of the cleaning path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CleanError {
    /// The log refused or failed.
    #[error(transparent)]
    Log(#[from] quorumlog_log::Error),
}

/// Deletes the log prefix below `up_to`, but never past the end offset of
/// the latest durable snapshot, nor past the log end. Returns the log start
/// offset after cleaning (unchanged when no snapshot covers anything new).
///
/// # Errors
/// The log's errors (an I/O error poisons it).
pub fn clean_log_prefix(
    store: &SnapshotStore,
    log: &mut impl PrefixLog,
    up_to: Offset,
) -> Result<Offset, CleanError> {
    let Some(snapshot) = store.latest() else {
        return Ok(log.log_start_offset());
    };
    let bound = up_to.min(snapshot.id.end_offset).min(log.log_end_offset());
    if bound > log.log_start_offset() {
        log.truncate_prefix_to(bound)?;
    }
    Ok(log.log_start_offset())
}

/// Leader-coordinated compaction (KIP-595's question 102): every replica
/// snapshots its own state, but how far logs are deleted is decided by the
/// leader. It advertises a **safe log start** — the lowest of its latest
/// snapshot's end and the fetch offsets of every replica (voter or
/// observer) seen within the window — and each replica deletes only up to
/// the lower of that bound and its own latest durable snapshot
/// ([`crate::Store::clean_log_prefix`]). A retention cap lets the leader
/// move the bound past a replica that lags too far; that replica is then
/// answered `SnapshotNeeded`.
#[derive(Debug, Clone)]
pub struct LeaderCompaction {
    /// Fetch offsets older than this (in the caller's clock) are ignored:
    /// a replica gone that long does not hold the logs back.
    pub window: std::time::Duration,
    /// Keep at most this many entries behind the log end whatever the
    /// replicas' positions (`None`: no cap).
    pub max_retained_entries: Option<u64>,
    fetches: std::collections::BTreeMap<quorumlog_checkpoint::NodeId, (Offset, std::time::Instant)>,
}

impl LeaderCompaction {
    /// A coordinator with `window` and an optional retention cap.
    pub fn new(window: std::time::Duration, max_retained_entries: Option<u64>) -> Self {
        LeaderCompaction {
            window,
            max_retained_entries,
            fetches: std::collections::BTreeMap::new(),
        }
    }

    /// Records that `replica` fetched from `offset` at `now` (its log ends
    /// there: everything below is on it).
    pub fn record_fetch(
        &mut self,
        replica: quorumlog_checkpoint::NodeId,
        offset: Offset,
        now: std::time::Instant,
    ) {
        self.fetches.insert(replica, (offset, now));
    }

    /// The log start the leader advertises at `now`: never above its latest
    /// snapshot's end (`None`: nothing may be deleted), nor above a replica
    /// seen within the window, unless the retention cap says the log is
    /// too long; never below `log_start` (already deleted).
    pub fn safe_log_start(
        &self,
        latest_snapshot_end: Option<Offset>,
        log_start: Offset,
        log_end: Offset,
        now: std::time::Instant,
    ) -> Offset {
        let Some(snapshot_end) = latest_snapshot_end else {
            return log_start;
        };
        let lowest_fetch = self
            .fetches
            .values()
            .filter(|(_, seen)| now.saturating_duration_since(*seen) <= self.window)
            .map(|(o, _)| *o)
            .min();
        let mut bound = lowest_fetch.map_or(snapshot_end, |f| f.min(snapshot_end));
        if let Some(cap) = self.max_retained_entries {
            let capped = Offset(log_end.0.saturating_sub(cap));
            bound = bound.max(capped.min(snapshot_end));
        }
        bound.max(log_start)
    }
}
