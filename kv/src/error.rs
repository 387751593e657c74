//! The service's errors: what a node or a client call can fail with, typed
//! so a caller can tell "certainly not applied" from "maybe applied".

use crate::wire::Refusal;

/// A node's or a client's failure.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The node asked does not lead; the leader it knows, if any.
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// The leader's id and address.
        leader: Option<(u64, String)>,
    },
    /// A node refused the request (see [`Refusal`]).
    #[error("{0}")]
    Refused(Refusal),
    /// The write certainly did not apply: no attempt reached a node that
    /// could have applied it before the deadline.
    #[error("not applied: {last}")]
    Failed {
        /// The last attempt's failure.
        last: String,
    },
    /// The deadline passed after an attempt that may have applied the
    /// write (an answer lost after sending it): its outcome is unknown.
    /// A retry with the same request id would be applied at most once.
    #[error("outcome unknown at the deadline (last attempt: {last})")]
    Unknown {
        /// The last attempt's failure.
        last: String,
    },
    /// The deadline passed (a read or an admin call).
    #[error("deadline passed (last attempt: {last})")]
    Timeout {
        /// The last attempt's failure.
        last: String,
    },
    /// A node answered something other than what was asked.
    #[error("unexpected answer from {addr}")]
    Protocol {
        /// The node's address.
        addr: String,
    },
    /// The store failed (opening, formatting).
    #[error("store: {0}")]
    Store(#[from] quorumlog_raft::Error),
    /// openraft's storage (the adapter or the state machine) failed.
    #[error("storage: {0}")]
    Storage(std::io::Error),
    /// openraft failed (starting, initializing, a membership change).
    #[error("raft: {0}")]
    Raft(String),
    /// A network or file-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The failure.
        source: std::io::Error,
    },
}

impl Error {
    /// An I/O failure while doing `context`.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// openraft's error, as text (its error types are generic and large).
    pub fn raft(e: impl std::fmt::Display) -> Error {
        Error::Raft(e.to_string())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Storage(e)
    }
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Error {
        match r {
            Refusal::NotLeader { leader } => Error::NotLeader { leader },
            r => Error::Refused(r),
        }
    }
}

/// The service's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
