//! E1's many-groups run: `groups` Raft groups on the same three nodes, each
//! group its own openraft 0.10 cluster (the key-value service's nodes, an
//! in-memory state machine), clients spread over the groups. quorumlog
//! keeps every group of a node in that node's one shared log (one data
//! directory and one group commit per node); raft-log gets one directory
//! (one `RaftLog`, one flush thread) per group per node, as a user of it
//! runs many groups; memory is the ceiling.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlog_io::RealFs;
use quorumlog_kv::cluster::LocalCluster;
use quorumlog_kv::wire::Refusal;
use quorumlog_kv::{KvMachine, Put};
use quorumlog_openraft10::LogStore;
use quorumlog_raft::{
    ClusterId, DirectoryId, Group, Identity, Meta, Node, NodeId, NodeOptions, Offset, SharedFs,
};

use super::stores::{MemLog, RaftLogStore};
use super::{E1Result, E1Store};
use crate::systems::BenchError;

/// The systems the many-groups run compares.
pub const SYSTEMS: [E1Store; 3] = [E1Store::Quorumlog, E1Store::RaftLog, E1Store::Memory];

async fn start_groups(
    store: E1Store,
    dir: &Path,
    groups: u64,
) -> Result<(Vec<LocalCluster>, Vec<Node>), BenchError> {
    let config = quorumlog_kv::raft_config(quorumlog_kv::SNAPSHOT_EVERY);
    let err = |e: &dyn std::fmt::Display| BenchError::from(e.to_string());
    let mut nodes = Vec::new();
    if store == E1Store::Quorumlog {
        let fs: SharedFs = Arc::new(RealFs::new());
        for id in 1..=3u64 {
            let d = dir.join(format!("node-{id}"));
            std::fs::create_dir_all(&d)?;
            let meta = Meta::new(ClusterId(1), NodeId(id), DirectoryId(u128::from(id) + 1));
            let options = NodeOptions::default();
            Node::format(&fs, &d, meta, &options).map_err(|e| err(&e))?;
            let (node, _) =
                Node::open(&fs, &d, &Identity::of(&meta), &options).map_err(|e| err(&e))?;
            for g in 0..groups {
                node.create_group(g, Offset(0)).map_err(|e| err(&e))?;
            }
            nodes.push(node);
        }
    }
    let mut clusters = Vec::new();
    for g in 0..groups {
        let started = match store {
            E1Store::Quorumlog => {
                let mut parts = Vec::new();
                for (i, node) in nodes.iter().enumerate() {
                    let id = i as u64 + 1;
                    let group: Arc<Group> = Arc::new(node.group(g).map_err(|e| err(&e))?);
                    let log = LogStore::new(group, id).map_err(|e| err(&e))?;
                    parts.push((id, log, KvMachine::in_memory()));
                }
                LocalCluster::start(parts, Arc::clone(&config), true).await
            }
            E1Store::RaftLog => {
                let mut parts = Vec::new();
                for id in 1..=3u64 {
                    let log = RaftLogStore::open(&dir.join(format!("node-{id}-group-{g}")))?;
                    parts.push((id, log, KvMachine::in_memory()));
                }
                LocalCluster::start(parts, Arc::clone(&config), true).await
            }
            E1Store::Memory => {
                let parts = (1..=3u64)
                    .map(|id| (id, MemLog::default(), KvMachine::in_memory()))
                    .collect();
                LocalCluster::start(parts, Arc::clone(&config), true).await
            }
            E1Store::RaftEngine => {
                return Err(BenchError::from("raft-engine has no many-groups run"))
            }
        };
        clusters.push(started.map_err(|e| err(&e))?);
    }
    Ok((clusters, nodes))
}

/// Writes until the group's leader takes one (a new leader refuses writes
/// until a quorum acknowledged it); returns the leader.
pub(crate) async fn warm(cluster: &LocalCluster) -> Result<u64, BenchError> {
    let t0 = Instant::now();
    let mut via = cluster
        .leader(Duration::from_secs(20))
        .await
        .ok_or_else(|| BenchError::from("no leader"))?;
    while t0.elapsed() < Duration::from_secs(20) {
        match cluster.put(via, Put::new("warm", "up")).await {
            Ok(_) => return Ok(via),
            Err(Refusal::NotLeader {
                leader: Some((l, _)),
            }) => via = l,
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
    Err(BenchError::from("no group leader took a write"))
}

/// The many-groups run on `store` in `dir`: `groups` groups, `clients`
/// clients (client `c` writes to group `c % groups`) writing
/// `value_bytes`-byte values for `seconds`.
///
/// # Errors
/// A group could not start or elect a leader.
pub fn run(
    store: E1Store,
    dir: &Path,
    groups: u64,
    clients: usize,
    value_bytes: usize,
    seconds: f64,
) -> Result<E1Result, BenchError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let (clusters, nodes) = start_groups(store, dir, groups).await?;
        let clusters: Vec<Arc<LocalCluster>> = clusters.into_iter().map(Arc::new).collect();
        let mut leaders = Vec::new();
        for c in &clusters {
            leaders.push(warm(c).await?);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let value = "v".repeat(value_bytes);
        let tasks: Vec<_> = (0..clients)
            .zip(clusters.iter().zip(&leaders).cycle())
            .map(|(c, (cluster, leader))| {
                let cluster = Arc::clone(cluster);
                let mut via = *leader;
                let (stop, acked, value) = (Arc::clone(&stop), Arc::clone(&acked), value.clone());
                tokio::spawn(async move {
                    let mut lat = Vec::new();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let put = Put::new(format!("c{c}-{n}"), value.clone());
                        let t0 = Instant::now();
                        match cluster.put(via, put).await {
                            Ok(_) => {
                                lat.push(
                                    u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX),
                                );
                                acked.fetch_add(1, Ordering::Relaxed);
                                n += 1;
                            }
                            Err(Refusal::NotLeader {
                                leader: Some((l, _)),
                            }) => via = l,
                            Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
                        }
                    }
                    lat
                })
            })
            .collect();
        let (result, _) =
            super::measure(super::Limit::Seconds(seconds), &acked, &stop, tasks).await;
        for c in clusters {
            if let Ok(c) = Arc::try_unwrap(c) {
                c.shutdown().await;
            }
        }
        for n in nodes {
            let _ = n.close();
        }
        Ok(result)
    })
}
