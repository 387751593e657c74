//! A node's typed refusals and failures: every one names what is wrong
//! and loses nothing.
//! - a directory of the previous one-group layout opened as a node, and a
//!   node's imported as one (`WrongLayout`); a blank directory; another
//!   node's;
//! - a damaged `groups.ckpt` (`NodeCorrupt`, nothing changed);
//! - a flipped bit in one group's entries: that group's read names the
//!   group and offset (`GroupData`), the other group's reads never touch
//!   those bytes and succeed;
//! - a failed sync and a full disk poison the node (every later call is
//!   refused with `Poisoned`); a reopen finds every acknowledged entry.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, SharedFs};
use quorumlog_io::{CrashPlan, FaultKind, FaultOp, SimFs};
use quorumlog_raft::{Error, Identity, Isolation, Node, NodeOptions};
use quorumlog_testkit::AppendDurable;

const DIR: &str = "/node";

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(2))
}

fn options() -> NodeOptions {
    NodeOptions {
        background: false,
        ..NodeOptions::default()
    }
}

fn open(fs: &SharedFs) -> Result<Node, Error> {
    Node::open(fs, Path::new(DIR), &Identity::of(&meta()), &options()).map(|(n, _)| n)
}

fn formatted() -> (SimFs, SharedFs) {
    let disk = SimFs::new(1);
    let fs: SharedFs = Arc::new(disk.clone());
    Node::format(&fs, Path::new(DIR), meta(), &options()).unwrap();
    (disk, fs)
}

#[test]
fn layouts_are_told_apart_and_blank_or_foreign_directories_refused() {
    let (_, fs) = formatted();
    {
        let node = open(&fs).unwrap();
        let r = node.import_store(1, &fs, Path::new(DIR), &Identity::of(&meta()));
        assert!(matches!(r, Err(Error::WrongLayout { .. })), "{r:?}");
        node.close().unwrap();
    }
    // The previous layout's directory as its format left it.
    quorumlog_checkpoint::format_with(&fs, Path::new("/store"), meta()).unwrap();
    let r = Node::open(&fs, Path::new("/store"), &Identity::of(&meta()), &options());
    assert!(matches!(r, Err(Error::WrongLayout { .. })), "{r:?}");

    fs.create_dir_all(Path::new("/blank")).unwrap();
    let r = Node::open(&fs, Path::new("/blank"), &Identity::of(&meta()), &options());
    assert!(matches!(r, Err(Error::Checkpoint(_))), "{r:?}");

    let other = Meta::new(ClusterId(9), NodeId(1), DirectoryId(2));
    let r = Node::open(&fs, Path::new(DIR), &Identity::of(&other), &options());
    assert!(matches!(r, Err(Error::Checkpoint(_))), "{r:?}");
    // Nothing changed: it opens as itself.
    open(&fs).unwrap();
}

#[test]
fn a_damaged_checkpoint_is_refused_naming_what_is_wrong() {
    let (disk, fs) = formatted();
    {
        let node = open(&fs).unwrap();
        node.create_group(7, Offset(1)).unwrap();
        node.close().unwrap();
    }
    let path = Path::new(DIR).join("groups.ckpt");
    let len = disk.durable_contents(&path).unwrap().len() as u64;
    for bit in [3, 8 * 30, 8 * (len - 1)] {
        disk.flip_bit(&path, bit).unwrap();
        let r = open(&fs);
        assert!(
            matches!(r, Err(Error::NodeCorrupt { group: None, .. })),
            "bit {bit}: {r:?}"
        );
        disk.flip_bit(&path, bit).unwrap();
    }
    assert_eq!(open(&fs).unwrap().groups(), vec![7]);
}

#[test]
fn corruption_in_one_group_is_reported_with_its_group_and_offset_and_spares_the_other() {
    let (disk, fs) = formatted();
    {
        let node = open(&fs).unwrap();
        node.create_group(1, Offset(1)).unwrap();
        node.create_group(2, Offset(1)).unwrap();
        let (a, b) = (node.group(1).unwrap(), node.group(2).unwrap());
        for i in 1..=20u64 {
            a.append_durable(Offset(i), Epoch(1), &[format!("group one entry {i:03}")])
                .unwrap();
            b.append_durable(Offset(i), Epoch(1), &[format!("group two entry {i:03}")])
                .unwrap();
        }
        drop((a, b));
        node.close().unwrap();
    }
    // Flip a bit inside group two's entry 9.
    let log = Path::new(DIR).join("log");
    let mut flipped = false;
    for e in fs.list(&log).unwrap() {
        let path = log.join(&e.name);
        let Some(bytes) = disk.durable_contents(&path) else {
            continue;
        };
        let needle = b"group two entry 009";
        if let Some(pos) = bytes.windows(needle.len()).position(|w| w == needle) {
            disk.flip_bit(&path, 8 * (pos as u64 + 3)).unwrap();
            flipped = true;
        }
    }
    assert!(flipped, "group two's entry 9 is in a segment");
    let node = open(&fs).unwrap();
    let (a, b) = (node.group(1).unwrap(), node.group(2).unwrap());
    let all = a
        .read_entries(Offset(1), Offset(21), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(all.len(), 20, "group one reads all its entries");
    let r = b.read_entries(Offset(1), Offset(21), u64::MAX, Isolation::Uncommitted);
    assert!(
        matches!(
            r,
            Err(Error::GroupData {
                group: 2,
                offset: Offset(9),
                ..
            })
        ),
        "{r:?}"
    );
    // Its other entries are readable around it.
    let before = b
        .read_entries(Offset(1), Offset(9), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(before.len(), 8);
}

#[test]
fn a_failed_sync_or_a_full_disk_poisons_and_a_reopen_loses_nothing_acknowledged() {
    for (op, kind) in [
        (FaultOp::Sync, FaultKind::Eio),
        (FaultOp::Write, FaultKind::Eio),
        (FaultOp::Write, FaultKind::Enospc),
    ] {
        let (disk, fs) = formatted();
        // Buffered sync-round writes, so a round syncs (direct writes are
        // durable on return and need none).
        let mut o = options();
        o.log.tail_writes = quorumlog_log::TailWrites::Buffered;
        let (node, _) = Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &o).unwrap();
        node.create_group(1, Offset(1)).unwrap();
        let g = node.group(1).unwrap();
        for i in 1..=5u64 {
            g.append_durable(Offset(i), Epoch(1), &[b"acknowledged"])
                .unwrap();
        }
        disk.inject_fault(op, 1, kind);
        let r = g.append_durable(Offset(6), Epoch(1), &[b"in doubt"]);
        assert!(r.is_err(), "{op:?}: the failed append is reported");
        assert!(node.poisoned().is_some(), "{op:?}: the node is poisoned");
        let r = g.persist_quorum_state(&quorumlog_checkpoint::QuorumState::default());
        assert!(matches!(r, Err(Error::Poisoned(_))), "{op:?}: {r:?}");
        let r = g.read_entries(Offset(1), Offset(6), u64::MAX, Isolation::Uncommitted);
        assert!(matches!(r, Err(Error::Poisoned(_))), "{op:?}: {r:?}");
        drop(g);
        drop(node);
        let fs: SharedFs = Arc::new(disk.crash_with(CrashPlan::LoseUnsynced));
        let (node, _) = Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &o).unwrap();
        let g = node.group(1).unwrap();
        let got = g
            .read_entries(Offset(1), g.extent().end, u64::MAX, Isolation::Uncommitted)
            .unwrap();
        assert!(got.len() >= 5, "{op:?}: acknowledged entries survive");
        assert!(got.iter().take(5).all(|e| e.bytes == b"acknowledged"));
    }
}
