//! The adapter's one error type: the store's, or a caller's call that
//! breaks raft-rs's storage rules (each named with its numbers).

use raft::{StorageError, NO_LIMIT};

/// What the adapter refuses or fails with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store underneath failed or refused (a vote conflict, a commit
    /// index moving back, I/O, a poisoned log).
    #[error(transparent)]
    Store(#[from] quorumlog_raft::Error),
    /// The round that held this Ready's loop pass failed (the error the
    /// pass's first region was given).
    #[error("the round of this Ready's pass failed: {0}")]
    PassFailed(String),
    /// A loop pass given a region of another node than its earlier ones
    /// (a pass's one completion covers one node's shared log).
    #[error(
        "region {region} is on another node than the pass's earlier regions: use one pass per node"
    )]
    PassAcrossNodes {
        /// The region refused.
        region: u64,
    },
    /// Entries below the first index (compacted).
    #[error("entries from index {index} are compacted: the first index is {first}")]
    Compacted {
        /// The first index asked for.
        index: u64,
        /// The log's first index.
        first: u64,
    },
    /// Entries that would leave a gap after the last index.
    #[error("entries from index {index} leave a gap: the last index is {last}")]
    Gap {
        /// The first index given.
        index: u64,
        /// The log's last index.
        last: u64,
    },
    /// A slice of entries whose indexes do not follow one another, or
    /// whose terms go back.
    #[error("entry {position} of an append has index {index} term {term}, after index {prev_index} term {prev_term}")]
    Unordered {
        /// Its position in the slice.
        position: usize,
        /// Its index.
        index: u64,
        /// Its term.
        term: u64,
        /// The entry before's index.
        prev_index: u64,
        /// The entry before's term.
        prev_term: u64,
    },
    /// An entry larger than one batch of the store may hold.
    #[error("entry {index} is {size} bytes, more than a batch holds ({max})")]
    EntryTooLarge {
        /// Its index.
        index: u64,
        /// Its encoded size.
        size: u64,
        /// The most an entry may be.
        max: u64,
    },
    /// A hard state whose commit index is past the last index.
    #[error("commit index {commit} is past the last index {last}")]
    CommitPastLast {
        /// The commit index given.
        commit: u64,
        /// The log's last index.
        last: u64,
    },
    /// A hard state whose commit index is below the one given before.
    #[error("commit index {commit} is below the commit index {current} given before")]
    CommitBackwards {
        /// The commit index given.
        commit: u64,
        /// The one given before.
        current: u64,
    },
    /// A snapshot older than the log's first index.
    #[error("snapshot at index {index} is out of date: the first index is {first}")]
    SnapshotOutOfDate {
        /// The snapshot's index.
        index: u64,
        /// The log's first index.
        first: u64,
    },
    /// A compaction past the last index.
    #[error("compaction to {index} is past the last index {last}")]
    CompactBeyondEnd {
        /// The index asked for.
        index: u64,
        /// The log's last index.
        last: u64,
    },
    /// Bytes in the store that are not what the adapter wrote.
    #[error("{what} does not decode: {source}")]
    Decode {
        /// What was read.
        what: &'static str,
        /// protobuf's error.
        source: protobuf::ProtobufError,
    },
}

/// The adapter's result.
pub type Result<T> = std::result::Result<T, Error>;

impl From<Error> for raft::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Compacted { .. } => raft::Error::Store(StorageError::Compacted),
            Error::SnapshotOutOfDate { .. } => raft::Error::Store(StorageError::SnapshotOutOfDate),
            other => raft::Error::Store(StorageError::Other(Box::new(other))),
        }
    }
}

/// raft-rs's "no limit" as a byte budget.
pub(crate) fn budget(max_size: Option<u64>) -> u64 {
    match max_size {
        None | Some(NO_LIMIT) => u64::MAX,
        Some(m) => m,
    }
}
