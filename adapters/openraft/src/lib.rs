#![doc = include_str!("../README.md")]
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
