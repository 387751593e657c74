//! Many Raft groups per node process on one shared log, with
//! `openraft-multi` sharing the network: three node directories, each
//! holding the same eight groups, each group an openraft 0.10 Raft whose
//! log is a group of its node's shared log. Invariants: every group elects
//! a leader and applies every write on all three nodes; a group reads
//! only its own entries (each group's machine holds exactly its own
//! writes). The syncs all groups' appends took on the three nodes are
//! printed (one log per node: they share rounds; a count, not asserted).

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::{Adv, Get, Machine, Put};
use openraft10::{BasicNode, Config, Raft};
use quorumlog_io::RealFs;
use quorumlog_raft::{ClusterId, DirectoryId, Identity, Meta, Node, NodeId, NodeOptions, SharedFs};

type R = Raft<Adv, Machine<Adv>>;
type Router = common::GroupRouter;

/// Small segments, none prepared ahead: a case opens its node in
/// milliseconds.
fn small_options() -> NodeOptions {
    NodeOptions::with_segment_bytes(1 << 20)
}

const GROUPS: u64 = 8;

fn meta(id: u64) -> Meta {
    Meta::new(ClusterId(1), NodeId(id), DirectoryId(u128::from(id) + 1))
}

type Machines = common::GroupMachines;

/// Three node directories with the same `GROUPS` groups, each a Raft.
async fn start(router: &Router, fs: &SharedFs, root: &std::path::Path) -> (Vec<Node>, Machines) {
    let config = quorumlog_openraft10::raft_config(Config {
        heartbeat_interval: 100,
        election_timeout_min: 1000,
        election_timeout_max: 2000,
        ..Config::default()
    })
    .unwrap();
    let (mut nodes, mut machines) = (Vec::new(), BTreeMap::new());
    for id in 1..=3u64 {
        let dir = root.join(format!("n{id}"));
        fs.create_dir_all(&dir).unwrap();
        let options = small_options();
        Node::format(fs, &dir, meta(id), &options).unwrap();
        let (node, _) = Node::open(fs, &dir, &Identity::of(&meta(id)), &options).unwrap();
        common::start_groups(router, &node, id, GROUPS, true, &config, &mut machines).await;
        nodes.push(node);
    }
    (nodes, machines)
}

/// Group `g`'s leader once it has one.
async fn leader_of(router: &Router, g: u64) -> R {
    let id = router
        .get(1, g)
        .unwrap()
        .wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .unwrap()
        .current_leader
        .unwrap();
    router.get(id, g).unwrap()
}

/// Waits until every node of group `g` applied the leader's whole log.
async fn settle(router: &Router, g: u64) {
    let last = leader_of(router, g)
        .await
        .wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.last_applied.is_some(), "its first entry applied")
        .await
        .unwrap()
        .last_log_index;
    for id in 1..=3 {
        router
            .get(id, g)
            .unwrap()
            .wait(Some(Duration::from_secs(30)))
            .applied_index_at_least(last, "applied everywhere")
            .await
            .unwrap();
    }
}

/// Twenty writes to group `g` at once: their appends share rounds.
async fn write(router: &Router, g: u64) {
    let leader = leader_of(router, g).await;
    let writes: Vec<_> = (0..20u64)
        .map(|i| {
            let leader = leader.clone();
            tokio::spawn(async move {
                leader
                    .client_write(Put {
                        key: format!("g{g}-k{i}"),
                        value: format!("{i}"),
                    })
                    .await
                    .unwrap()
            })
        })
        .collect();
    for w in writes {
        w.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_groups_on_three_nodes_share_each_nodes_log() {
    let tmp = tempfile::tempdir().unwrap();
    let fs: SharedFs = Arc::new(RealFs::new());
    let router = Router::default();
    let (nodes, machines) = start(&router, &fs, tmp.path()).await;
    let voters: BTreeMap<u64, BasicNode> = (1..=3).map(|i| (i, BasicNode::default())).collect();
    // Each group initialised from a different node, so leaders spread.
    for g in 0..GROUPS {
        let first = router.get(1 + g % 3, g).unwrap();
        first.initialize(voters.clone()).await.unwrap();
    }
    let syncs_before: u64 = nodes.iter().map(|n| n.stats().syncs).sum();
    for g in 0..GROUPS {
        // Its first entry applied everywhere: a quorum acknowledged it, so
        // the leader's lease holds and it takes writes.
        settle(&router, g).await;
        write(&router, g).await;
    }
    for g in 0..GROUPS {
        settle(&router, g).await;
        for id in 1..=3 {
            let m = &machines[&(id, g)];
            for i in 0..20u64 {
                assert_eq!(
                    m.get(&format!("g{g}-k{i}")),
                    Some(format!("{i}")),
                    "node {id} group {g}"
                );
            }
            for other in (0..GROUPS).filter(|o| *o != g) {
                assert_eq!(
                    m.get(&format!("g{other}-k0")),
                    None,
                    "group {g} read group {other}'s entry"
                );
            }
        }
    }
    let syncs: u64 = nodes.iter().map(|n| n.stats().syncs).sum::<u64>() - syncs_before;
    eprintln!("{} writes, {syncs} syncs on three nodes", GROUPS * 20);
    for r in router.all() {
        r.shutdown().await.unwrap();
    }
}
