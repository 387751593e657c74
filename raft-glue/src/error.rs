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
    #[error("offset {offset} is outside the log [{start}, {end}){}", snapshot.as_ref().map_or_else(String::new, |s| format!(" (latest snapshot: {s})")))]
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
    /// A high watermark lower than the current one (a stale fetch
    /// response, a Raft library's bug): the commit offset never moves back.
    #[error("high watermark {offset} is below the current high watermark {high_watermark}")]
    HighWatermarkBackwards {
        /// The offset asked for.
        offset: Offset,
        /// The current high watermark.
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
    /// An operation that needs a snapshot found none.
    #[error("there is no snapshot")]
    NoSnapshot,
    /// Entries below the log start have no snapshot covering them
    /// (invariant 7): found at open.
    #[error("the log starts at {log_start} but {}", latest.as_ref().map_or_else(|| "there is no snapshot below it".to_string(), |s| format!("the latest snapshot is {s}")))]
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
    /// A purge whose epoch is not the log's for the entry before its
    /// point: the caller's log id names another entry than the group's.
    #[error("a purge to {offset} names epoch {given}, but the entry before it is in epoch {log}")]
    PurgeEpochMismatch {
        /// The purge point.
        offset: Offset,
        /// The epoch of the entry at `offset - 1` in the group's log.
        log: Epoch,
        /// The epoch the caller gave.
        given: Epoch,
    },
    /// No group of that id exists in the node.
    #[error("group {group} does not exist")]
    UnknownGroup {
        /// The group id.
        group: u64,
    },
    /// The group was dropped: its id is never used again.
    #[error("group {group} was dropped; its id cannot be used again")]
    GroupDropped {
        /// The group id.
        group: u64,
    },
    /// A group of that id exists already.
    #[error("group {group} exists already")]
    GroupExists {
        /// The group id.
        group: u64,
    },
    /// Another handle owns the group (one handle per group at a time, so
    /// one writer orders its appends).
    #[error("group {group} is open through another handle")]
    GroupInUse {
        /// The group id.
        group: u64,
    },
    /// `Node::close` while group handles are alive: the node cannot close
    /// (its log and its directory lock live on with them). Drop every
    /// handle, then close.
    #[error(
        "the node cannot close: groups {groups:?} are still held by handles \
         (drop them first; the directory stays locked while any lives)"
    )]
    GroupsHeld {
        /// The groups whose handles are alive.
        groups: Vec<u64>,
    },
    /// A directory opened as a node is not one (a one-group store's
    /// directory: bring it over with `Node::import_store`), or a node's
    /// directory opened as a one-group store.
    #[error("{path} is {found}, not {expected}")]
    WrongLayout {
        /// The directory.
        path: std::path::PathBuf,
        /// What it is.
        found: &'static str,
        /// What was asked for.
        expected: &'static str,
    },
    /// The node's checkpoint or a node record does not hold what the
    /// format requires: `group` and `offset` name where (the group's own
    /// offset, or the shared log's offset of the record when `group` is
    /// none).
    #[error("node data corrupt at {}: {what}", corrupt_at(*group, *offset))]
    NodeCorrupt {
        /// The group, when known.
        group: Option<u64>,
        /// The offset.
        offset: Offset,
        /// What is wrong.
        what: &'static str,
    },
    /// A repair's first damage lies in reclaimable bytes (nothing live,
    /// below the checkpoint's position) of a segment that still holds
    /// live batches: a cut there would remove live entries a later,
    /// intact part of the log serves. Nothing was changed.
    #[error(
        "the first damage, at shared offset {at}, is in reclaimable bytes (nothing live) of a \
         segment that still holds live batches: a cut there would remove live entries; nothing \
         changed (the node's rewrite moves them out and its next checkpoint deletes the segment)"
    )]
    CutInReclaimable {
        /// The damaged shared offset.
        at: Offset,
    },
    /// A read of a group's entries found the log corrupt: the group and
    /// its offset, and the log's error (segment, position, shared offset).
    #[error("group {group}'s entry at {offset} is unreadable: {source}")]
    GroupData {
        /// The group.
        group: u64,
        /// The group offset read.
        offset: Offset,
        /// The log's error.
        source: quorumlog_log::Error,
    },
    /// An earlier I/O failure (a failed write or sync, a full disk) left
    /// the store poisoned: every later call returns this, naming the
    /// first failure. What is on disk is intact; reopen the store to
    /// recover from it.
    #[error("the store is poisoned by an earlier failure: {0}")]
    Poisoned(quorumlog_io::Failure),
    /// The snapshots refused or failed.
    #[error(transparent)]
    Snapshot(quorumlog_snapshot::Error),
    /// The data directory (checkpoints, election state) refused or failed.
    #[error(transparent)]
    Checkpoint(quorumlog_checkpoint::Error),
    /// The log refused or failed.
    #[error(transparent)]
    Log(quorumlog_log::Error),
    /// A voter-set change or reassignment request was refused.
    #[error(transparent)]
    Voters(#[from] crate::voters::VoterError),
}

// Each part's own poisoned error becomes the store's one `Poisoned`.
impl From<quorumlog_snapshot::Error> for Error {
    fn from(e: quorumlog_snapshot::Error) -> Self {
        match e {
            quorumlog_snapshot::Error::Poisoned { op, kind } => {
                Error::Poisoned(quorumlog_io::Failure { op, kind })
            }
            e => Error::Snapshot(e),
        }
    }
}

impl From<quorumlog_checkpoint::Error> for Error {
    fn from(e: quorumlog_checkpoint::Error) -> Self {
        match e {
            quorumlog_checkpoint::Error::Poisoned { op, kind } => {
                Error::Poisoned(quorumlog_io::Failure { op, kind })
            }
            e => Error::Checkpoint(e),
        }
    }
}

impl From<quorumlog_log::Error> for Error {
    fn from(e: quorumlog_log::Error) -> Self {
        match e {
            quorumlog_log::Error::Poisoned { op, kind } => {
                Error::Poisoned(quorumlog_io::Failure { op, kind })
            }
            quorumlog_log::Error::Checkpoint(c) => Error::from(c),
            quorumlog_log::Error::Undecodable {
                offset,
                epoch,
                kind,
            } => Error::UndecodableBatch {
                offset,
                epoch,
                kind,
            },
            quorumlog_log::Error::HighWatermarkBackwards {
                offset,
                high_watermark,
            } => Error::HighWatermarkBackwards {
                offset,
                high_watermark,
            },
            quorumlog_log::Error::BelowHighWatermark {
                offset,
                high_watermark,
            } => Error::BelowHighWatermark {
                offset,
                high_watermark,
            },
            e => Error::Log(e),
        }
    }
}

impl Error {
    /// Whether this is `open` finding no data directory (missing, blank, or
    /// without a valid meta file): the one case a program formats.
    pub fn is_not_formatted(&self) -> bool {
        matches!(
            self,
            Error::Checkpoint(quorumlog_checkpoint::Error::NotFormatted { .. })
        )
    }

    /// The I/O failure this error reports, if it is one (or the poisoning
    /// one a storage component left): the errors that poison the store.
    /// Refusals and bad input return `None`: they change nothing.
    pub fn failure(&self) -> Option<quorumlog_io::Failure> {
        match self {
            Error::Poisoned(f) => Some(*f),
            Error::Snapshot(e) => e.is_io().then(|| e.failure()),
            Error::Checkpoint(e) => e.is_io().then(|| e.failure()),
            Error::Log(e) => e.is_io().then(|| e.failure()),
            _ => None,
        }
    }
}

/// Where node data is corrupt, for people: the group's offset, or the
/// shared log's.
fn corrupt_at(group: Option<u64>, offset: Offset) -> String {
    match group {
        Some(g) => format!("group {g}, offset {offset}"),
        None => format!("shared offset {offset}"),
    }
}
