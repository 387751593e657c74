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
use std::sync::Arc;
use std::time::Duration;

use common::member::{self, Member};
use openraft10::BasicNode;
use quorumlog_io::RealFs;
use quorumlog_raft::SharedFs;

type R = member::GroupRaft;

/// The one group each node holds.
const GROUP: u64 = 7;

/// Elections after 1–2 s of silence.
const ELECTION: (u64, u64) = (1000, 2000);

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
    let router = member::GroupRouter::default();
    let mut members = BTreeMap::new();
    for id in 1..=3 {
        members.insert(
            id,
            member::start(&router, &fs, tmp.path(), (id, GROUP), true, ELECTION).await,
        );
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
    member::write(&leader, 0, 200).await;
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
    member::write(&leader, 200, 300).await;
    members.insert(
        follower,
        member::start(&router, &fs, tmp.path(), (follower, GROUP), false, ELECTION).await,
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
