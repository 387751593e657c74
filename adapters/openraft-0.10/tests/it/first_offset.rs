//! A group openraft cannot use is refused where it is opened, not at its
//! first append. Invariant: a group that begins after offset 0 with
//! nothing to begin after (no entry, snapshot or purge) is refused by
//! `LogStore::new` with the offset to create it at; a group at offset 0 is
//! taken.

use std::path::Path;
use std::sync::Arc;

use quorumlog_io::SimFs;
use quorumlog_openraft10::LogStore;
use quorumlog_raft::{
    ClusterId, DirectoryId, Identity, Meta, Node, NodeId, NodeOptions, Offset, SharedFs,
};

openraft10::declare_raft_types!(pub C: D = String, R = String);

#[test]
fn a_group_that_begins_after_zero_with_nothing_before_is_refused_at_open() {
    let fs: SharedFs = Arc::new(SimFs::new(1));
    let meta = Meta::new(ClusterId(1), NodeId(1), DirectoryId(2));
    let dir = Path::new("/n1");
    Node::format(&fs, dir, meta, &NodeOptions::default()).unwrap();
    let (node, _) = Node::open(&fs, dir, &Identity::of(&meta), &NodeOptions::default()).unwrap();
    node.create_group(7, Offset(1)).unwrap();
    node.create_group(8, Offset(0)).unwrap();
    let refused = LogStore::<C>::new(Arc::new(node.group(7).unwrap()), 1)
        .err()
        .unwrap();
    assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
    let said = refused.to_string();
    assert!(
        said.contains("group 7 begins at offset 1")
            && said.contains("node.create_group(7, Offset(0))"),
        "{said}"
    );
    assert!(LogStore::<C>::new(Arc::new(node.group(8).unwrap()), 1).is_ok());
    node.close().unwrap();
}
