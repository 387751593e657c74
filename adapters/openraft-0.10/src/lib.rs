//! openraft 0.10 log storage over quorumlog: [`LogStore`] implements
//! `RaftLogStorage` and `RaftLogReader` over any door of the store's kind
//! ([`quorumlog_raft::RaftStorage`]: a one-group `Store` or a node's
//! `Group` on the shared log).
//!
//! 0.10 returns from `append` at once and takes the completion later
//! (`IOFlushed`): the entries are queued for the shared log's next sync
//! round (readable at once from the adapter's tail), and each append's
//! `IOFlushed` fires from the round that makes it durable, in submission
//! order. Leader ids map to store epochs for both of openraft's kinds
//! ([`mapping::EpochLeaderId`]): the standard one (`leader_id_std`, one
//! leader per term: the epoch is the term) and the advanced one
//! (`leader_id_adv`, the default: the epoch is `term << 32 | node id`).
//!
//! Snapshots are quorumlog snapshot files ([`snapshot`]): the state
//! machine's `SnapshotData` is a [`SnapshotData`]: a published file, sent
//! chunk by chunk, or a download received into the store's install
//! (durable per chunk, resumable, verified), published by the state
//! machine's install once openraft has made the leader's vote durable.
//!
//! Run openraft with `enable_leader_restore` off: 0.10 replicates entries a
//! leader has not made durable yet, so after a power cut a leader restored
//! in its old term can write different entries under log ids its
//! followers already hold (docs/decisions.md).
//!
//! The 0.9 adapter (`quorumlog-openraft`) stays for users on openraft's
//! stable line; this crate depends on openraft 0.10 under the name
//! `openraft10` so both can live in one workspace.

pub mod log_store;
pub mod mapping;
pub mod recover;
pub mod snapshot;

pub use log_store::{LogStore, COMMIT_PERSIST_EVERY, READ_CACHE_ENTRIES};
pub use mapping::{EpochLeaderId, MappingError};
pub use snapshot::{
    FileSnapshot, Receiver, SnapshotData, SnapshotFile, SnapshotFiles, CHUNK_BYTES,
};
