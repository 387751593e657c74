//! The explicit migration of a one-group directory (the previous layout)
//! into a group of a node: after `Node::import_store` the group holds the
//! store's entries (offsets, epochs, bytes), log start and the epoch
//! before it, election state, metadata, high watermark and latest
//! snapshot, and still does after the node reopens; the store is
//! unchanged. A `KRaft` replica's store (control records) is refused.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::too_many_lines,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{
    ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, QuorumState, SharedFs, Vote,
};
use quorumlog_io::SimFs;
use quorumlog_raft::{Error, Identity, Isolation, Node, NodeOptions, Store, StoreOptions};
use quorumlog_snapshot::WriterOptions;

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(2))
}

fn node_options() -> NodeOptions {
    NodeOptions {
        background: false,
        ..NodeOptions::default()
    }
}

#[test]
fn a_store_imports_into_a_group_whole_and_survives_a_reopen() {
    let fs: SharedFs = Arc::new(SimFs::new(3));
    let so = StoreOptions::default();
    Store::format(&fs, Path::new("/old"), meta(), Some(Offset(1)), &so).unwrap();
    let (store, _) = Store::open(&fs, Path::new("/old"), &Identity::of(&meta()), &so).unwrap();
    for i in 1..=40u64 {
        let epoch = if i <= 25 { 1 } else { 3 };
        store
            .append_replicated(Offset(i), Epoch(epoch), &[format!("entry {i}")])
            .unwrap();
    }
    store.wait_durable(Offset(41)).unwrap();
    store.set_high_watermark(Offset(30)).unwrap();
    let vote = QuorumState {
        epoch: Epoch(3),
        leader: Some(NodeId(2)),
        voted: Some(Vote {
            node_id: NodeId(2),
            directory_id: DirectoryId(5),
        }),
    };
    store.persist_quorum_state(&vote).unwrap();
    store.write_app_metadata(b"membership").unwrap();
    let mut w = store
        .create_snapshot(Offset(20), Epoch(1), b"snap meta", WriterOptions::default())
        .unwrap();
    w.write(b"state below 20").unwrap();
    w.freeze().unwrap();
    store.purge_to(Offset(11), Epoch(1)).unwrap();

    Node::format(&fs, Path::new("/new"), meta(), &node_options()).unwrap();
    let (node, _) = Node::open(
        &fs,
        Path::new("/new"),
        &Identity::of(&meta()),
        &node_options(),
    )
    .unwrap();
    let report = node.import_store(5, &store).unwrap();
    assert_eq!(report.entries, 30);
    assert!(report.snapshot);
    let check = |node: &Node| {
        let g = node.group(5).unwrap();
        assert_eq!(g.extent().start, Offset(11));
        assert_eq!(g.extent().end, Offset(41));
        assert_eq!(g.extent().last_purged, store.last_purged());
        let a = g
            .read_entries(Offset(11), Offset(41), u64::MAX, Isolation::Uncommitted)
            .unwrap();
        let b = store
            .read_entries(Offset(11), Offset(41), u64::MAX, Isolation::Uncommitted)
            .unwrap();
        assert_eq!(a, b, "the same entries, offsets and epochs");
        assert_eq!(g.quorum_state(), vote);
        assert_eq!(g.app_metadata().as_deref(), Some(&b"membership"[..]));
        assert_eq!(g.extent().high_watermark, Some(Offset(30)));
        let id = store.latest_snapshot().unwrap();
        assert_eq!(g.extent().latest_snapshot, Some(id));
        assert_eq!(
            g.snapshot(id).and_then(|x| x.read()).unwrap(),
            store.read_snapshot(id).unwrap()
        );
    };
    check(&node);
    node.close().unwrap();
    let (node, _) = Node::open(
        &fs,
        Path::new("/new"),
        &Identity::of(&meta()),
        &node_options(),
    )
    .unwrap();
    check(&node);
    // An id in use is refused, the store untouched.
    assert!(matches!(
        node.import_store(5, &store),
        Err(Error::GroupExists { group: 5 })
    ));
    assert_eq!(store.log_end_offset(), Offset(41));
}

#[test]
fn a_kraft_replicas_store_with_control_records_is_refused() {
    let fs: SharedFs = Arc::new(SimFs::new(4));
    let so = StoreOptions::default();
    Store::format(&fs, Path::new("/k"), meta(), None, &so).unwrap();
    let (replica, _) =
        quorumlog_raft::KraftReplica::open(&fs, Path::new("/k"), &Identity::of(&meta()), &so)
            .unwrap();
    let mut e = replica.election();
    e.become_candidate().unwrap();
    e.become_leader().unwrap();
    drop(e);
    replica.append_durable(Epoch(1), &[b"x"]).unwrap();
    let has_control = replica
        .read_entries(
            Offset(0),
            replica.log_end_offset(),
            u64::MAX,
            Isolation::Uncommitted,
        )
        .unwrap()
        .iter()
        .any(|e| e.control);
    Node::format(&fs, Path::new("/n"), meta(), &node_options()).unwrap();
    let (node, _) = Node::open(
        &fs,
        Path::new("/n"),
        &Identity::of(&meta()),
        &node_options(),
    )
    .unwrap();
    let r = node.import_store(1, &replica);
    if has_control {
        assert!(matches!(r, Err(Error::ImportRefused { .. })), "{r:?}");
    } else {
        r.unwrap();
    }
}
