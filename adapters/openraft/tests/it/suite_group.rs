//! openraft's own storage suite (`openraft::testing::Suite::test_all`),
//! every case, against the same adapter over a group of a node
//! (`LogStore<_, Group>`): the adapter is written once for one group or
//! many. Each case's node holds three groups, the suite's in the middle,
//! with entries in the other two, so a case that read another group's
//! entries would fail.

use crate::common;

use std::sync::Arc;

use common::{meta, Machine, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use quorumlog_io::RealFs;
use quorumlog_openraft::LogStore;
use quorumlog_raft::{Epoch, Group, Identity, Node, NodeOptions, Offset, SharedFs};
use quorumlog_testkit::AppendDurable;

type GroupLog = LogStore<TypeConfig>;

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

struct Builder;

impl StoreBuilder<TypeConfig, GroupLog, Machine, Held> for Builder {
    async fn build(&self) -> Result<(Held, GroupLog, Machine), StorageError<u64>> {
        let dir = tempfile::tempdir().unwrap();
        let fs: SharedFs = Arc::new(RealFs::new());
        let options = small_options();
        Node::format(&fs, dir.path(), meta(0), &options).unwrap();
        let (node, _) = Node::open(&fs, dir.path(), &Identity::of(&meta(0)), &options).unwrap();
        for id in [1, 2, 3] {
            node.create_group(id, Offset(0)).unwrap();
        }
        let others: Vec<Group> = [1, 3].iter().map(|id| node.group(*id).unwrap()).collect();
        for g in &others {
            for i in 0..20u64 {
                g.append_durable(Offset(i), Epoch(1), &[b"another group's entry"])
                    .unwrap();
            }
        }
        let group = Arc::new(node.group(2).unwrap());
        let log = LogStore::new(group, 0)?;
        Ok((
            Held {
                _node: node,
                _others: others,
                _dir: dir,
            },
            log,
            Machine::in_memory(),
        ))
    }
}

#[test]
fn openraft_storage_suite_on_a_group() {
    Suite::test_all(Builder).unwrap();
}
