//! A replicated key-value store: openraft over quorumlog
//! (`quorumlog-openraft`), each node its own process with its own data
//! directory, Raft RPCs and client requests in one small framed protocol
//! over TCP on loopback. `quorumlog-kv demo` runs a three-process cluster
//! through a leader kill and a restart and checks every acknowledged
//! write; `cluster` runs the same nodes in one process over an in-memory
//! network (the end-to-end benchmark, the whole-cluster power-loss test).
#![allow(
    clippy::result_large_err,
    reason = "openraft's traits return its large error types"
)]

pub mod client;
pub mod cluster;
pub mod demo;
pub mod machine;
pub mod network;
pub mod node;
pub mod proto;
pub mod reassign;

pub use machine::KvMachine;
pub use proto::{Put, TypeConfig};

/// The openraft configuration every node runs with: heartbeats every
/// 100 ms, elections after 300–600 ms of silence, a snapshot every 20,000
/// entries keeping 1,000 behind it.
///
/// # Panics
/// Never: the values are valid.
pub fn raft_config() -> std::sync::Arc<openraft::Config> {
    let config = openraft::Config {
        cluster_name: "quorumlog-kv".into(),
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(20_000),
        max_in_snapshot_log_to_keep: 1_000,
        max_payload_entries: 1_000,
        ..Default::default()
    };
    #[expect(clippy::expect_used, reason = "a fixed, valid configuration")]
    std::sync::Arc::new(config.validate().expect("a valid configuration"))
}
