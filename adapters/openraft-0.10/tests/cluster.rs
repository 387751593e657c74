//! Three openraft 0.10 nodes in one process (calls as the network), each
//! on its own node directory with the Raft group as a group of the shared
//! log: openraft's own engine drives the adapter's pipelined appends,
//! votes and commits. Invariants: every write acknowledged by the leader
//! is applied on every node; a node shut down and reopened from its
//! directory comes back with its log (the state machine, in memory here,
//! is rebuilt by re-applying it) and catches up with what it missed.
#![allow(
    clippy::unwrap_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{Adv, Machine, Put};
use openraft10::{BasicNode, Config, Raft};
use quorumlog_io::RealFs;
use quorumlog_openraft10::LogStore;
use quorumlog_raft::{
    ClusterId, DirectoryId, Group, Identity, Meta, Node, NodeId, NodeOptions, Offset, SharedFs,
};

type R = Raft<Adv, Machine<Adv, Group>>;
type Router = common::net::Router<Adv, Machine<Adv, Group>>;

/// Small segments, none prepared ahead: a case opens its node in
/// milliseconds.
fn small_options() -> NodeOptions {
    NodeOptions::with_segment_bytes(1 << 20)
}

/// The one group each node holds.
const GROUP: u64 = 0;

/// One node: its directory, its node (shared log) and its Raft.
struct Member {
    node: Node,
    raft: R,
    machine: Machine<Adv, Group>,
}

fn meta(id: u64) -> Meta {
    Meta::new(ClusterId(1), NodeId(id), DirectoryId(u128::from(id) + 1))
}

async fn start(router: &Router, fs: &SharedFs, root: &Path, id: u64, fresh: bool) -> Member {
    let dir = root.join(format!("n{id}"));
    let options = small_options();
    if fresh {
        fs.create_dir_all(&dir).unwrap();
        Node::format(fs, &dir, meta(id), &options).unwrap();
    }
    let (node, _) = Node::open(fs, &dir, &Identity::of(&meta(id)), &options).unwrap();
    if fresh {
        node.create_group(7, Offset(0)).unwrap();
    }
    let group: Arc<Group> = Arc::new(node.group(7).unwrap());
    let machine = Machine::<Adv, Group>::new(Arc::clone(&group));
    let log = LogStore::new(group, id).unwrap();
    let config = Arc::new(
        Config {
            heartbeat_interval: 100,
            election_timeout_min: 1000,
            election_timeout_max: 2000,
            ..Config::default()
        }
        .validate()
        .unwrap(),
    );
    let raft = Raft::new(id, config, router.factory(GROUP), log, machine.clone())
        .await
        .unwrap();
    let files = machine.files().clone();
    router.insert_receiving(
        id,
        GROUP,
        raft.clone(),
        Arc::new(move |meta, from| common::receive_snapshot::<Adv, Group>(&files, meta, &from)),
    );
    Member {
        node,
        raft,
        machine,
    }
}

async fn write(leader: &R, from: u64, to: u64) {
    for i in from..to {
        leader
            .client_write(Put {
                key: format!("k{i}"),
                value: format!("v{i}"),
            })
            .await
            .unwrap();
    }
}

async fn all_applied(members: &BTreeMap<u64, Member>, leader: &R) {
    let last = leader
        .wait(Some(Duration::from_secs(30)))
        .metrics(|_| true, "the leader's metrics")
        .await
        .unwrap()
        .last_log_index;
    for m in members.values() {
        m.raft
            .wait(Some(Duration::from_secs(30)))
            .applied_index_at_least(last, "applied")
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_replicate_and_a_reopened_node_catches_up() {
    let tmp = tempfile::tempdir().unwrap();
    let fs: SharedFs = Arc::new(RealFs::new());
    let router = Router::default();
    let mut members = BTreeMap::new();
    for id in 1..=3 {
        members.insert(id, start(&router, &fs, tmp.path(), id, true).await);
    }
    let voters: BTreeMap<u64, BasicNode> = (1..=3).map(|i| (i, BasicNode::default())).collect();
    members[&1].raft.initialize(voters).await.unwrap();
    let leader_id = members[&1]
        .raft
        .wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .unwrap()
        .current_leader
        .unwrap();
    let leader = members[&leader_id].raft.clone();
    // Its first entry applied everywhere: a quorum has acknowledged it,
    // so its lease holds and it takes writes.
    all_applied(&members, &leader).await;
    write(&leader, 0, 200).await;
    all_applied(&members, &leader).await;
    for m in members.values() {
        assert_eq!(m.machine.get("k199").as_deref(), Some("v199"));
    }

    // A follower goes away, misses writes, and comes back from its
    // directory.
    let follower = *BTreeSet::from([1u64, 2, 3])
        .iter()
        .find(|i| **i != leader_id)
        .unwrap();
    let gone = members.remove(&follower).unwrap();
    router.remove(follower, GROUP);
    gone.raft.shutdown().await.unwrap();
    drop(gone.raft);
    drop(gone.machine);
    gone.node.close().unwrap();
    write(&leader, 200, 300).await;
    members.insert(
        follower,
        start(&router, &fs, tmp.path(), follower, false).await,
    );
    all_applied(&members, &leader).await;
    for m in members.values() {
        for i in [0u64, 150, 250, 299] {
            assert_eq!(
                m.machine.get(&format!("k{i}")),
                Some(format!("v{i}")),
                "k{i}"
            );
        }
    }
    for m in members.into_values() {
        m.raft.shutdown().await.unwrap();
    }
}
