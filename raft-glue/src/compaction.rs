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
