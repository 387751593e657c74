//! openraft (0.9, `storage-v2`) log storage over the quorumlog Raft store:
//! [`LogStore`] implements `RaftLogStorage` and `RaftLogReader`, and
//! [`snapshot::SnapshotFiles`] keeps a state machine's snapshots as
//! quorumlog snapshot files (checksummed, durable before openraft purges
//! the log they cover).
//!
//! The openraft-specific mapping (entries, vote, last purged id) is in
//! [`mapping`]; see docs/design.md, "The openraft adapter".

#![allow(
    clippy::result_large_err,
    reason = "openraft's storage traits return its `StorageError`; the helpers return the same"
)]

pub mod log_store;
pub mod mapping;
pub mod snapshot;
pub mod stream;

pub use log_store::{
    LogStore, PurgeMode, StoreError, COMMIT_PERSIST_EVERY, READ_AHEAD_BYTES, READ_AHEAD_ENTRIES,
};
pub use snapshot::SnapshotFiles;
pub use stream::SnapshotStream;
