//! The error type of the snapshot crate.

use std::io;

use crate::id::SnapshotId;

/// What is wrong with snapshot bytes: the one structured kind shared by
/// every crate of quorumlog.
pub use quorumlog_checkpoint::{CorruptionKind, Location};

/// Errors of the snapshot crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error; its message names the operation and the path.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// A snapshot file failed verification.
    #[error("corrupt snapshot {at}: {kind}")]
    Corruption {
        /// Where (a file and a byte).
        at: Location,
        /// What is wrong.
        kind: CorruptionKind,
    },
    /// No published snapshot with this id.
    #[error("no snapshot {0}")]
    NotFound(SnapshotId),
    /// A snapshot with this id is already published.
    #[error("snapshot {0} already exists")]
    AlreadyExists(SnapshotId),
    /// An install of a snapshot not newer than the latest published one.
    #[error("snapshot {offered} is not newer than the latest, {latest}")]
    NotNewer {
        /// The id offered.
        offered: SnapshotId,
        /// The latest published id.
        latest: SnapshotId,
    },
    /// An install chunk at another position than the next expected one.
    #[error("chunk at byte {position}, expected byte {expected}")]
    WrongPosition {
        /// The position given.
        position: u64,
        /// The next byte the install expects.
        expected: u64,
    },
    /// An install chunk beyond the announced total size.
    #[error("chunk of {len} bytes at {position} exceeds the total size {total}")]
    Oversize {
        /// Its position.
        position: u64,
        /// Its length.
        len: u64,
        /// The announced total.
        total: u64,
    },
    /// An install finished before all bytes arrived.
    #[error("install has {received} of {total} bytes")]
    Incomplete {
        /// Bytes received.
        received: u64,
        /// Bytes announced.
        total: u64,
    },
    /// An argument out of its range.
    #[error("invalid argument: {what}")]
    InvalidArgument {
        /// What is wrong.
        what: &'static str,
    },
    /// A write or sync of this writer or install failed earlier; nothing
    /// more is written through it (drop it and start again).
    #[error("poisoned by an earlier failure: {op} failed ({kind:?})")]
    Poisoned {
        /// The operation that failed first.
        op: &'static str,
        /// What it reported.
        kind: io::ErrorKind,
    },
    /// The writer was used after it was frozen or failed.
    #[error("the snapshot writer is finished")]
    WriterFinished,
}

impl Error {
    /// Whether this is an I/O failure (or the poisoning one left): the only
    /// errors that poison a writer or an install.
    pub fn is_io(&self) -> bool {
        matches!(self, Error::Io(_) | Error::Poisoned { .. })
    }

    /// The failure to record when this error poisons.
    pub fn failure(&self) -> quorumlog_io::Failure {
        match self {
            Error::Io(e) => quorumlog_io::Failure::of(e),
            Error::Poisoned { op, kind } => quorumlog_io::Failure { op, kind: *kind },
            _ => quorumlog_io::Failure {
                op: "snapshot",
                kind: io::ErrorKind::Other,
            },
        }
    }

    /// Runs `f` unless `poisoned`; an I/O failure of `f` poisons.
    pub(crate) fn guard<T>(
        poisoned: &mut Option<quorumlog_io::Failure>,
        f: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        if let Some(p) = *poisoned {
            return Err(Error::Poisoned {
                op: p.op,
                kind: p.kind,
            });
        }
        let r = f();
        if let Err(e) = &r {
            if e.is_io() {
                *poisoned = Some(e.failure());
            }
        }
        r
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
