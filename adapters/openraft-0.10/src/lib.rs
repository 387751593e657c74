#![doc = include_str!("../README.md")]
pub mod config;
pub mod local;
pub mod log_store;
pub mod machine;
pub mod mapping;
pub mod recover;
pub mod snapshot;

pub use config::{raft_config, ConfigRefused};
pub use local::LocalRouter;
pub use log_store::{LogStore, COMMIT_PERSIST_EVERY, READ_CACHE_ENTRIES};
pub use machine::{AppState, Applied, FileMachine};
pub use mapping::{EpochLeaderId, MappingError};
/// The openraft this adapter is built against, an exact 0.10 alpha: take
/// it from here (`use quorumlog_openraft10::openraft;`) so that a program
/// and the adapter cannot resolve two different alphas.
pub use openraft10 as openraft;
/// openraft's multi-Raft network adapters (`GroupRouter`,
/// `GroupNetworkAdapter`), the same alpha: a network carrying many groups
/// over one connection per peer implements its `GroupRouter`.
pub use openraft_multi;
pub use snapshot::{
    FileSnapshot, Receiver, SnapshotData, SnapshotFile, SnapshotFiles, CHUNK_BYTES,
};
