//! openraft 0.10's storage suite, every case, against the same adapter
//! over a group of a node (`LogStore<_>`): the one adapter serves
//! one group or many on the shared log. Each case's node holds three
//! groups, the suite's in the middle, with entries in the other two, so a
//! case that read another group's entries would fail.

use crate::common;

use std::sync::Arc;

use common::{Adv, MemMachine, Std};
use openraft10::testing::log::{StoreBuilder, Suite};
use openraft10::{RaftTypeConfig, StorageError};
use quorumlog_io::RealFs;
use quorumlog_openraft10::LogStore;
use quorumlog_raft::{
    ClusterId, DirectoryId, Epoch, Group, Identity, Meta, Node, NodeId, NodeOptions, Offset,
    SharedFs,
};

/// Small segments, none prepared ahead: a case opens its node in
/// milliseconds.
fn small_options() -> NodeOptions {
    NodeOptions::with_segment_bytes(1 << 20)
}

/// The node stays open as long as the case (its directory with it).
struct Held {
    _node: Node,
    _others: Vec<Group>,
    _dir: tempfile::TempDir,
}

fn build<C>() -> (Held, LogStore<C>)
where
    C: RaftTypeConfig<
        NodeId = u64,
        Term = u64,
        Vote = openraft10::impls::Vote<<C as RaftTypeConfig>::LeaderId>,
    >,
    C::LeaderId: quorumlog_openraft10::EpochLeaderId,
    C::Entry: serde::Serialize + serde::de::DeserializeOwned + Clone,
{
    let dir = tempfile::tempdir().unwrap();
    let fs: SharedFs = Arc::new(RealFs::new());
    let options = small_options();
    let meta = Meta::new(ClusterId(1), NodeId(0), DirectoryId(1));
    Node::format(&fs, dir.path(), meta, &options).unwrap();
    let (node, _) = Node::open(&fs, dir.path(), &Identity::of(&meta), &options).unwrap();
    for id in [1, 2, 3] {
        node.create_group(id, Offset(0)).unwrap();
    }
    let others: Vec<Group> = [1, 3].iter().map(|id| node.group(*id).unwrap()).collect();
    for g in &others {
        for i in 0..20u64 {
            g.append(Offset(i), Epoch(1), &[b"another group's entry"])
                .unwrap();
            g.wait_durable(Offset(i + 1)).unwrap();
        }
    }
    let log = LogStore::new(Arc::new(node.group(2).unwrap()), 0).unwrap();
    (
        Held {
            _node: node,
            _others: others,
            _dir: dir,
        },
        log,
    )
}

struct Builder;

impl StoreBuilder<Adv, LogStore<Adv>, MemMachine<Adv>, Held> for Builder {
    async fn build(&self) -> Result<(Held, LogStore<Adv>, MemMachine<Adv>), StorageError<Adv>> {
        let (held, log) = build::<Adv>();
        Ok((held, log, MemMachine::new()))
    }
}

impl StoreBuilder<Std, LogStore<Std>, MemMachine<Std>, Held> for Builder {
    async fn build(&self) -> Result<(Held, LogStore<Std>, MemMachine<Std>), StorageError<Std>> {
        let (held, log) = build::<Std>();
        Ok((held, log, MemMachine::new()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_on_a_group_advanced_leader_ids() {
    Suite::<Adv, LogStore<Adv>, MemMachine<Adv>, Builder, Held>::test_all(Builder)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_on_a_group_standard_leader_ids() {
    Suite::<Std, LogStore<Std>, MemMachine<Std>, Builder, Held>::test_all(Builder)
        .await
        .unwrap();
}
