//! The facade's one error type: typed refusals, and the storage crates'
//! errors carried through.

use quorumlog_checkpoint::{Epoch, NodeId, Offset};

/// The facade's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the facade refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A request names an epoch older than the current one.
    #[error("epoch {proposed} is older than the current epoch {current}")]
    StaleEpoch {
        /// The current epoch.
        current: Epoch,
        /// The epoch asked for.
        proposed: Epoch,
    },
    /// The transition needs another role (for example `become_leader`
    /// outside candidacy, or a leader append in an epoch this node does not
    /// lead).
    #[error("not allowed as {role} in epoch {epoch}: {what}")]
    WrongRole {
        /// The current epoch.
        epoch: Epoch,
        /// The current role, as a word.
        role: &'static str,
        /// What was asked.
        what: &'static str,
    },
    /// The epoch already has a known leader, another one.
    #[error("epoch {epoch} already has leader {existing}, not {proposed}")]
    LeaderKnown {
        /// The epoch.
        epoch: Epoch,
        /// Its leader.
        existing: NodeId,
        /// The leader proposed.
        proposed: NodeId,
    },
    /// An offset outside what the log holds.
    #[error("offset {offset} is outside the log [{start}, {end}) (latest snapshot: {snapshot:?})")]
    OffsetOutOfRange {
        /// The offset asked for.
        offset: Offset,
        /// The log start offset.
        start: Offset,
        /// The log end offset.
        end: Offset,
        /// The latest snapshot (what a reader below the start needs).
        snapshot: Option<quorumlog_snapshot::SnapshotId>,
    },
    /// A suffix truncation below the high watermark (committed entries are
    /// never removed).
    #[error("truncation to {offset} is below the high watermark {high_watermark}")]
    BelowHighWatermark {
        /// The offset asked for.
        offset: Offset,
        /// The high watermark.
        high_watermark: Offset,
    },
    /// A snapshot asked for beyond what is committed, or with an epoch that
    /// is not the log's at its last covered offset.
    #[error("snapshot {id} refused: {why}")]
    SnapshotRefused {
        /// The snapshot asked for.
        id: quorumlog_snapshot::SnapshotId,
        /// Why.
        why: &'static str,
    },
    /// Entries below the log start have no snapshot covering them
    /// (invariant 7): found at open.
    #[error("the log starts at {log_start} but the latest snapshot ends at {latest:?}")]
    MissingSnapshot {
        /// The log start offset.
        log_start: Offset,
        /// The latest snapshot, if any.
        latest: Option<quorumlog_snapshot::SnapshotId>,
    },
    /// A verified batch whose records do not decode (a compressed payload
    /// that does not decompress to its records).
    #[error("the batch at {offset} (epoch {epoch}) does not decode: {kind}")]
    UndecodableBatch {
        /// The batch's base offset.
        offset: Offset,
        /// Its epoch.
        epoch: Epoch,
        /// What is wrong.
        kind: quorumlog_log::CorruptionKind,
    },
    /// The snapshots refused or failed.
    #[error(transparent)]
    Snapshot(#[from] quorumlog_snapshot::Error),
    /// The data directory (checkpoints, election state) refused or failed.
    #[error(transparent)]
    Checkpoint(#[from] quorumlog_checkpoint::Error),
    /// The log refused or failed.
    #[error(transparent)]
    Log(#[from] quorumlog_log::Error),
}
