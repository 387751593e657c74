//! The embedding guide's whole program (docs/embedding.md §2): three nodes,
//! each with its own node directory holding two Raft groups on its one
//! shared log, in one process with the adapter's in-process network.
//!
//! It writes through each group's leader, snapshots one group, stops a
//! follower, writes on, restarts the follower from its directory, then
//! stops and restarts the whole cluster and reads every acknowledged write
//! back, on every node, after a linearizable read barrier. An error is
//! returned, never a panic, if any write is missing.
//!
//! `cargo run -p quorumlog-openraft10 --example cluster [DIR]` (a
//! temporary directory without `DIR`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use quorumlog_openraft10::openraft::{self, BasicNode, Config, Raft, ReadPolicy};
use quorumlog_openraft10::{raft_config, AppState, FileMachine, LocalRouter, LogStore};
use quorumlog_raft::{
    ClusterId, DirectoryId, Identity, Meta, Node, NodeId, NodeOptions, Offset, RealFs, SharedFs,
};
use serde::{Deserialize, Serialize};

type Error = Box<dyn std::error::Error + Send + Sync>;

openraft::declare_raft_types!(
    /// The application's Raft types: writes are `Set`, answers the value
    /// replaced.
    pub Kv:
        D = Set,
        R = Option<String>,
);

/// A write: `key = value`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Set {
    key: String,
    value: String,
}

impl std::fmt::Display for Set {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

/// The application's state: keys and values.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Map(BTreeMap<String, String>);

impl AppState<Kv> for Map {
    fn apply(&mut self, set: Set) -> Option<String> {
        self.0.insert(set.key, set.value)
    }
}

type Machine = FileMachine<Kv, Map>;
type Router = LocalRouter<Kv, Machine>;

/// The Raft groups every node holds (openraft's first index is 0, so each
/// is created at offset 0).
const GROUPS: [u64; 2] = [1, 2];
const CLUSTER: ClusterId = ClusterId(42);

/// One node: its node directory, open, and a Raft per group.
struct Member {
    node: Node,
    rafts: BTreeMap<u64, (Raft<Kv, Machine>, Machine)>,
}

fn config() -> Result<Arc<Config>, Error> {
    // `raft_config` turns `enable_leader_restore` off (and refuses it on).
    Ok(raft_config(Config {
        heartbeat_interval: 100,
        election_timeout_min: 1000,
        election_timeout_max: 2000,
        ..Config::default()
    })?)
}

/// Opens node `id`'s directory under `root`, formatting it and creating its
/// groups first if `fresh`, and starts a Raft per group on `router`.
async fn start(router: &Router, root: &Path, id: u64, fresh: bool) -> Result<Member, Error> {
    let fs: SharedFs = Arc::new(RealFs::new());
    let dir = root.join(format!("node{id}"));
    let options = NodeOptions::with_segment_bytes(1 << 20);
    if fresh {
        std::fs::create_dir_all(&dir)?;
        Node::format(
            &fs,
            &dir,
            Meta::new(CLUSTER, NodeId(id), DirectoryId::random()),
            &options,
        )?;
    }
    let (node, _report) = Node::open(&fs, &dir, &Identity::node(CLUSTER, NodeId(id)), &options)?;
    let mut rafts = BTreeMap::new();
    for g in GROUPS {
        if fresh {
            node.create_group(g, Offset(0))?;
        }
        let group = Arc::new(node.group(g)?);
        let machine = Machine::new(Arc::clone(&group))?;
        let log = LogStore::new(group, id)?;
        let raft = Raft::new(id, config()?, router.factory(g), log, machine.clone()).await?;
        router.insert_files(id, g, raft.clone(), machine.files().clone());
        rafts.insert(g, (raft, machine));
    }
    Ok(Member { node, rafts })
}

/// Stops a node: its Rafts, then its node (a clean close).
async fn stop(router: &Router, id: u64, member: Member) -> Result<(), Error> {
    for (g, (raft, machine)) in member.rafts {
        router.remove(id, g);
        raft.shutdown().await?;
        drop((raft, machine));
    }
    member.node.close()?;
    Ok(())
}

/// Group `g`'s leader, once it has one and its first entry is applied.
async fn leader(members: &BTreeMap<u64, Member>, g: u64) -> Result<Raft<Kv, Machine>, Error> {
    let any = members.values().next().ok_or("no nodes")?;
    let (raft, _) = any.rafts.get(&g).ok_or("no such group")?;
    let id = raft
        .wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await?
        .current_leader
        .ok_or("no leader")?;
    let (leader, _) = members
        .get(&id)
        .and_then(|m| m.rafts.get(&g))
        .ok_or("leader not running")?;
    leader
        .wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.last_applied.is_some(), "its first entry applied")
        .await?;
    Ok(leader.clone())
}

/// Writes `g{g}-k{i} = v{i}` for `i` in `range` through group `g`'s leader.
async fn write(
    members: &BTreeMap<u64, Member>,
    g: u64,
    range: std::ops::Range<u64>,
) -> Result<(), Error> {
    let leader = leader(members, g).await?;
    for i in range {
        let set = Set {
            key: format!("g{g}-k{i}"),
            value: format!("v{i}"),
        };
        leader.client_write(set).await?;
    }
    Ok(())
}

/// Checks every node of every group holds all `writes` acknowledged so far:
/// after a linearizable read barrier on the leader, each node applies up to
/// the leader's last entry and reads each key.
async fn check(members: &BTreeMap<u64, Member>, writes: u64) -> Result<(), Error> {
    for g in GROUPS {
        let leader = leader(members, g).await?;
        leader.ensure_linearizable(ReadPolicy::ReadIndex).await?;
        let last = leader
            .wait(None)
            .metrics(|_| true, "the leader's metrics")
            .await?
            .last_log_index;
        for (id, member) in members {
            let (raft, machine) = member.rafts.get(&g).ok_or("no such group")?;
            raft.wait(Some(Duration::from_secs(30)))
                .applied_index_at_least(last, "the leader's log applied")
                .await?;
            for i in 0..writes {
                let key = format!("g{g}-k{i}");
                let value = machine.read(|m| m.0.get(&key).cloned());
                if value.as_deref() != Some(format!("v{i}").as_str()) {
                    return Err(format!("node {id}: {key} reads {value:?}").into());
                }
            }
        }
    }
    Ok(())
}

/// The whole program in `root` (an empty directory).
///
/// # Errors
/// Any failed step, or a write missing from a node.
pub async fn run(root: &Path) -> Result<(), Error> {
    let router = Router::default();
    let mut members = BTreeMap::new();
    for id in 1..=3 {
        members.insert(id, start(&router, root, id, true).await?);
    }
    let voters: BTreeMap<u64, BasicNode> = (1..=3).map(|i| (i, BasicNode::default())).collect();
    for g in GROUPS {
        let (raft, _) = members
            .get(&1)
            .and_then(|m| m.rafts.get(&g))
            .ok_or("no such group")?;
        raft.initialize(voters.clone()).await?;
        write(&members, g, 0..100).await?;
    }
    // A snapshot of group 1: a snapshot file of each node's group.
    for (raft, _) in members.values().filter_map(|m| m.rafts.get(&GROUPS[0])) {
        raft.trigger().snapshot().await?;
    }
    check(&members, 100).await?;

    // A follower of group 1 stops, misses writes, and restarts from its
    // directory.
    let leader_id = leader(&members, GROUPS[0])
        .await?
        .wait(None)
        .metrics(|_| true, "the leader's metrics")
        .await?
        .id;
    let follower = (1..=3).find(|i| *i != leader_id).ok_or("no follower")?;
    let gone = members.remove(&follower).ok_or("no follower")?;
    stop(&router, follower, gone).await?;
    for g in GROUPS {
        write(&members, g, 100..200).await?;
    }
    members.insert(follower, start(&router, root, follower, false).await?);
    check(&members, 200).await?;

    // The whole cluster stops and restarts from its directories.
    for (id, member) in std::mem::take(&mut members) {
        stop(&router, id, member).await?;
    }
    for id in 1..=3 {
        members.insert(id, start(&router, root, id, false).await?);
    }
    check(&members, 200).await?;
    for (id, member) in members {
        stop(&router, id, member).await?;
    }
    println!(
        "3 nodes, {} groups: 200 writes per group read back on every node after a follower's \
         and the whole cluster's restart",
        GROUPS.len()
    );
    Ok(())
}

#[allow(dead_code, reason = "the tests call `run`")]
fn main() -> Result<(), Error> {
    let tmp = tempfile::tempdir()?;
    let root = std::env::args()
        .nth(1)
        .map_or_else(|| tmp.path().to_path_buf(), PathBuf::from);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run(&root))
}
