//! A replicated key-value service: openraft 0.10 over quorumlog
//! (`quorumlog-openraft10`). Keys map to `P ≥ 1` partitions, each its
//! own Raft group; each node is one process whose one data directory
//! holds all its partitions as groups of one shared log, and a controller
//! group places the replicas (KIP-455's alter, list and cancel). Nodes
//! talk over one connection per pair; an idle partition sends nothing.
//!
//! What a client can rely on (docs/design.md §14):
//! - **Linearizable reads** by default: a partition's leader answers a
//!   `get` only after a quorum confirmed that it still leads and its state
//!   machine applied everything committed when the read arrived (a read
//!   index); `--stale` reads any replica's own state.
//! - **Exactly-once writes**: a write carries a request id; the state
//!   machine applies it once and answers its retries with the first
//!   result (bounded client sessions, kept in snapshots).
//! - **Deadlines**: every client call has one deadline covering connect,
//!   send and receive; a write ends `Failed` (certainly not applied) or
//!   `Unknown` (maybe applied).
//!
//! A one-node cluster of two partitions in a fresh directory, written to
//! and read from over TCP as a client would:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use quorumlog_kv::client::partitioned::PartitionedClient;
//! use quorumlog_kv::server::host::{Host, HostArgs};
//! use tokio::time::Instant;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rt = tokio::runtime::Runtime::new()?;
//! rt.block_on(async {
//!     let dir = tempfile::tempdir()?;
//!     // A free port: the node listens where the peers list says.
//!     let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.to_string();
//!     let fs: quorumlog_raft::SharedFs = Arc::new(quorumlog_raft::RealFs::new());
//!     let host = Host::start(&fs, &HostArgs {
//!         id: 1,
//!         cluster: 7,
//!         dir: dir.path().join("n1"),
//!         listen: addr.clone(),
//!         peers: vec![(1, addr.clone())],
//!         partitions: 2,
//!         replication: 1,
//!         init: true,
//!         throttle: 0,
//!         snapshot_every: quorumlog_kv::SNAPSHOT_EVERY,
//!         segment_bytes: 0,
//!         metrics_addr: None,
//!     })
//!     .await?;
//!     tokio::spawn(host.serve());
//!     let mut client = PartitionedClient::new(&[addr], 2);
//!     let deadline = Instant::now() + Duration::from_secs(30);
//!     // Acknowledged once committed and applied: durable on a quorum.
//!     client.put("x", "1", deadline).await?;
//!     // Linearizable: the leader confirms it still leads first.
//!     assert_eq!(client.get("x", deadline).await?.value.as_deref(), Some("1"));
//!     Ok(())
//! })
//! # }
//! ```
#![allow(
    clippy::result_large_err,
    reason = "openraft's traits return its large error types"
)]

pub mod client;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod error;
pub mod machine;
pub mod net;
pub mod replica;
pub mod server;
pub mod wire;

pub use error::{Error, Result};
pub use machine::KvMachine;
pub use replica::{raft_config, SNAPSHOT_EVERY};
pub use wire::{Command, Put, Reply, TypeConfig};
