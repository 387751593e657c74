//! One Raft member of a group of its node directory's shared log, on the
//! in-process network: what the cluster tests start, write to and stop.

use std::path::Path;
use std::sync::Arc;

use openraft10::{Config, Raft};
use quorumlog_openraft10::{LocalRouter, LogStore};
use quorumlog_raft::{
    ClusterId, DirectoryId, Group, Identity, Meta, Node, NodeId, NodeOptions, Offset, SharedFs,
};

use super::{Adv, Machine, Put};

/// A member's Raft.
pub type GroupRaft = Raft<Adv, Machine<Adv>>;
/// The network of group members.
pub type GroupRouter = LocalRouter<Adv, Machine<Adv>>;

/// One node: its node (shared log), its Raft and its state machine.
pub struct Member {
    pub node: Node,
    pub raft: GroupRaft,
    pub machine: Machine<Adv>,
}

/// Node `id`'s identity (cluster 1).
pub fn meta(id: u64) -> Meta {
    Meta::new(ClusterId(1), NodeId(id), DirectoryId(u128::from(id) + 1))
}

/// Opens node `id`'s directory `root/n{id}` with small segments (1 MiB,
/// a case opens its node in milliseconds); if `fresh`, formats it first
/// and creates `group` in it.
pub fn open_node(fs: &SharedFs, root: &Path, id: u64, group: u64, fresh: bool) -> Node {
    let dir = root.join(format!("n{id}"));
    let options = NodeOptions::with_segment_bytes(1 << 20);
    if fresh {
        fs.create_dir_all(&dir).unwrap();
        Node::format(fs, &dir, meta(id), &options).unwrap();
    }
    let (node, _) = Node::open(fs, &dir, &Identity::of(&meta(id)), &options).unwrap();
    if fresh {
        node.create_group(group, Offset(0)).unwrap();
    }
    node
}

/// Starts node `id`'s Raft of `group` (opened as [`open_node`] does) on
/// `router`, electing after `election` ms (min, max) of silence.
pub async fn start(
    router: &GroupRouter,
    fs: &SharedFs,
    root: &Path,
    (id, group): (u64, u64),
    fresh: bool,
    election: (u64, u64),
) -> Member {
    let node = open_node(fs, root, id, group, fresh);
    let door: Arc<Group> = Arc::new(node.group(group).unwrap());
    let machine = super::machine::<Adv>(Arc::clone(&door));
    let log = LogStore::new(door, id).unwrap();
    let config = quorumlog_openraft10::raft_config(Config {
        heartbeat_interval: 100,
        election_timeout_min: election.0,
        election_timeout_max: election.1,
        ..Config::default()
    })
    .unwrap();
    let raft = Raft::new(id, config, router.factory(group), log, machine.clone())
        .await
        .unwrap();
    router.insert_files(id, group, raft.clone(), machine.files().clone());
    Member {
        node,
        raft,
        machine,
    }
}

/// Stops member `id` of `group` and closes its node.
pub async fn stop(router: &GroupRouter, m: Member, id: u64, group: u64) {
    router.remove(id, group);
    m.raft.shutdown().await.unwrap();
    drop(m.raft);
    drop(m.machine);
    m.node.close().unwrap();
}

/// Writes `k{i} = v{i}` for `i` in `from..to` through `leader`.
pub async fn write(leader: &GroupRaft, from: u64, to: u64) {
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
