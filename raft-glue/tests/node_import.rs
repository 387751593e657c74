//! The explicit migration of a one-group directory of the previous layout
//! (a log of its own, small files beside it; written here with the storage
//! crates, as that layout's runtime type is gone) into a group of a node:
//! after `Node::import_store` the group holds the old log's entries
//! (offsets, epochs, bytes, control flags), its log start and the epoch
//! before it, election state, metadata, high watermark and latest
//! snapshot, and still does after the node reopens; the old directory's
//! small files are unchanged; an id in use is refused. A `KRaft` replica's
//! directory imports with its control entries, and the wing over the new
//! group finds the same voter set.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::too_many_lines,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use quorumlog_raft::kraft::StateAt;
use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{
    format_with, ClusterId, DataDir, DirectoryId, Epoch, Meta, NodeId, Offset, OpenOptions,
    QuorumState, SharedFs, Vote, Voter,
};
use quorumlog_io::SimFs;
use quorumlog_log::{DurableLog, LogOptions, SyncPolicy};
use quorumlog_raft::kraft::voters::{ControlRecord, VoterEntry, VoterSet};
use quorumlog_raft::{kraft::KraftReplica, Error, Identity, Isolation, Node, NodeOptions};
use quorumlog_snapshot::{SnapshotId, SnapshotStore, WriterOptions};
use quorumlog_testkit::dir_image;

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(2))
}

fn node_options() -> NodeOptions {
    NodeOptions {
        background: false,
        ..NodeOptions::default()
    }
}

fn vote() -> QuorumState {
    QuorumState {
        epoch: Epoch(3),
        leader: Some(NodeId(2)),
        voted: Some(Vote {
            node_id: NodeId(2),
            directory_id: DirectoryId(5),
        }),
    }
}

/// The previous layout at `/old`: a log starting at 1, entries 1..=40 (1..=25
/// in epoch 1, then 3; `control` flags entry 26 as a control record), a
/// high watermark at 30, an election state, metadata, a snapshot at 20
/// and the log purged to 11.
fn write_previous(fs: &SharedFs, control: Option<&[u8]>) {
    let dir = Path::new("/old");
    format_with(fs, dir, meta()).unwrap();
    let dd = Arc::new(DataDir::open(fs.clone(), dir, &OpenOptions::default()).unwrap());
    let log = DurableLog::open(Arc::clone(&dd), LogOptions::default(), SyncPolicy::Never).unwrap();
    log.truncate_fully_and_start_at(Offset(1), None).unwrap();
    for i in 1..=40u64 {
        let epoch = Epoch(if i <= 25 { 1 } else { 3 });
        match control {
            Some(rec) if i == 26 => log.append_control(epoch, &[rec]).unwrap(),
            _ => log
                .append_at(Offset(i), epoch, &[format!("entry {i}")])
                .unwrap(),
        };
    }
    log.flush().unwrap();
    log.set_high_watermark(Offset(30)).unwrap();
    dd.persist_quorum_state(&vote()).unwrap();
    dd.write_app_metadata(b"membership").unwrap();
    let snapshots = SnapshotStore::open(fs.clone(), &dd.snapshots_dir()).unwrap();
    let id = SnapshotId {
        end_offset: Offset(20),
        epoch: Epoch(1),
    };
    let mut w = snapshots
        .create(id, b"snap meta", WriterOptions::default())
        .unwrap();
    w.write(b"state below 20").unwrap();
    w.freeze().unwrap();
    log.truncate_prefix_to(Offset(11)).unwrap();
    log.close().unwrap();
}

fn new_node(fs: &SharedFs) -> Node {
    Node::format(fs, Path::new("/new"), meta(), &node_options()).unwrap();
    reopen(fs)
}

fn reopen(fs: &SharedFs) -> Node {
    Node::open(
        fs,
        Path::new("/new"),
        &Identity::of(&meta()),
        &node_options(),
    )
    .unwrap()
    .0
}

#[test]
fn a_previous_directory_imports_into_a_group_whole_and_survives_a_reopen() {
    let fs: SharedFs = Arc::new(SimFs::new(3));
    write_previous(&fs, None);
    let image = || {
        let mut m = dir_image(fs.as_ref(), Path::new("/old")).unwrap();
        m.retain(|p, _| !p.starts_with("/old/log") && !p.ends_with("lock"));
        m
    };
    let before = image();
    let node = new_node(&fs);
    let report = node
        .import_store(5, &fs, Path::new("/old"), &Identity::of(&meta()))
        .unwrap();
    assert_eq!(report.entries, 30);
    assert!(report.snapshot);
    let check = |node: &Node| {
        let g = node.group(5).unwrap();
        let x = g.extent();
        assert_eq!((x.start, x.end), (Offset(11), Offset(41)));
        assert_eq!(x.last_purged, Some((Offset(10), Epoch(1))));
        let got = g
            .read_entries(Offset(11), Offset(41), u64::MAX, Isolation::Uncommitted)
            .unwrap();
        assert_eq!(got.len(), 30);
        for e in &got {
            let epoch = if e.offset.0 <= 25 { 1 } else { 3 };
            assert_eq!(e.epoch, Epoch(epoch));
            assert_eq!(e.bytes, format!("entry {}", e.offset.0).into_bytes());
            assert!(!e.control);
        }
        assert_eq!(g.quorum_state(), vote());
        assert_eq!(g.app_metadata().as_deref(), Some(&b"membership"[..]));
        assert_eq!(x.high_watermark, Some(Offset(30)));
        let id = x.latest_snapshot.unwrap();
        assert_eq!((id.end_offset, id.epoch), (Offset(20), Epoch(1)));
        let (m, state) = g.snapshot(id).and_then(|s| s.read()).unwrap();
        assert_eq!(
            (m.as_slice(), state.as_slice()),
            (&b"snap meta"[..], &b"state below 20"[..])
        );
    };
    check(&node);
    node.close().unwrap();
    let node = reopen(&fs);
    check(&node);
    // An id in use is refused.
    assert!(matches!(
        node.import_store(5, &fs, Path::new("/old"), &Identity::of(&meta())),
        Err(Error::GroupExists { group: 5 })
    ));
    node.close().unwrap();
    assert!(image() == before, "the old directory's small files changed");
}

#[test]
fn a_kraft_replicas_directory_imports_with_its_control_entries() {
    let fs: SharedFs = Arc::new(SimFs::new(4));
    let voters = VoterSet::new(vec![VoterEntry {
        voter: Voter {
            node_id: NodeId(1),
            directory_id: DirectoryId(2),
        },
        endpoint: None,
    }])
    .unwrap();
    write_previous(&fs, Some(&ControlRecord::VoterSet(voters.clone()).encode()));
    let node = new_node(&fs);
    node.import_store(
        quorumlog_raft::kraft::KRAFT_GROUP,
        &fs,
        Path::new("/old"),
        &Identity::of(&meta()),
    )
    .unwrap();
    let g = node.group(quorumlog_raft::kraft::KRAFT_GROUP).unwrap();
    let flags: Vec<u64> = g
        .read_entries(Offset(11), Offset(41), u64::MAX, Isolation::Uncommitted)
        .unwrap()
        .iter()
        .filter(|e| e.control)
        .map(|e| e.offset.0)
        .collect();
    assert_eq!(flags, vec![26]);
    drop(g);
    node.close().unwrap();
    let (replica, _) = KraftReplica::open(
        &fs,
        Path::new("/new"),
        &Identity::of(&meta()),
        &node_options(),
    )
    .unwrap();
    assert_eq!(replica.control_state(StateAt::Latest).voters, Some(voters));
}
