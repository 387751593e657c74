//! The rules the one engine keeps whoever calls it, each a regression test
//! of a finding from outside (issue 38); each failed on the tree before
//! its fix:
//! - offsets never wrap: an append whose entries would pass `u64::MAX` is
//!   refused with `OffsetOverflow`, nothing written, and the node opens
//!   again with every group (before: `Ok` with `next_offset: 1`, then no
//!   open of the node ever succeeded);
//! - a refused open changes nothing: a checkpoint whose position lies past
//!   the log's end is refused before recovery touches the directory, whose
//!   image stays byte for byte what it was, clean marker included (before:
//!   the log was opened first and its clean marker removed);
//! - layouts are told apart by what the log holds: a node that lost its
//!   checkpoint is refused as damage by `Node::open` and as a node by the
//!   import of the previous layout, nothing changed (before: the
//!   previous layout's open opened it, returned the node's batches as
//!   entries and rewrote it); a directory of the previous layout (the
//!   golden one) is refused by `Node::open` naming `quorumlog import`;
//! - a purge's epoch is the log's where the entry before the purge point is
//!   in the log: a caller's other epoch is refused (before: recorded as the
//!   purge point's epoch).
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
use quorumlog_io::{OpenMode, SimFs};
use quorumlog_raft::{Encode, Purge};
use quorumlog_raft::{Error, Identity, Isolation, Node, NodeOptions};
use quorumlog_testkit::dir_image;
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

fn formatted(seed: u64) -> (SimFs, SharedFs) {
    let disk = SimFs::new(seed);
    let fs: SharedFs = Arc::new(disk.clone());
    Node::format(&fs, Path::new(DIR), meta(), &options()).unwrap();
    (disk, fs)
}

fn overflow(r: &Result<impl std::fmt::Debug, Error>) {
    assert!(
        matches!(
            r,
            Err(Error::Log(quorumlog_log::Error::OffsetOverflow { .. }))
        ),
        "{r:?}"
    );
}

/// Invariant: offsets never wrap (docs/decisions.md), on every append path
/// of a group, and a refused append leaves the node as it was.
#[test]
fn offsets_never_wrap_and_the_node_opens_again() {
    let (_, fs) = formatted(1);
    let start = u64::MAX - 1;
    {
        let node = open(&fs).unwrap();
        node.create_group(8, Offset(1)).unwrap();
        node.create_group(9, Offset(start)).unwrap();
        let (a, g) = (node.group(8).unwrap(), node.group(9).unwrap());
        a.append_durable(Offset(1), Epoch(1), &[b"a one"]).unwrap();
        let three: [&[u8]; 3] = [b"x", b"y", b"z"];
        overflow(&g.append_durable(Offset(start), Epoch(1), &three));
        overflow(&g.append_durable(Offset(start), Epoch(1), &three));
        overflow(&g.append(Offset(start), Epoch(1), &three));
        overflow(&g.append(
            Offset(start),
            Epoch(1),
            Encode {
                count: 3,
                len_hint: 3,
                write: |i: usize, buf: &mut Vec<u8>| -> std::io::Result<()> {
                    buf.push(u8::try_from(i).unwrap());
                    Ok(())
                },
            },
        ));
        let mut batch = node.write_batch();
        batch.append(&a, Offset(2), Epoch(1), &[b"a two"]).unwrap();
        batch.append(&g, Offset(start), Epoch(1), &three).unwrap();
        overflow(&batch.commit());
        // Two items of one group in a batch: the second passes the end.
        let mut batch = node.write_batch();
        batch.append(&g, Offset(start), Epoch(1), &[b"x"]).unwrap();
        batch
            .append(&g, Offset(u64::MAX), Epoch(1), &[b"y"])
            .unwrap();
        overflow(&batch.commit());
        // Nothing was placed: the group is empty, its neighbour unchanged.
        assert_eq!(g.extent().end, Offset(start));
        assert_eq!(a.extent().end, Offset(2));
        // The last offset that fits is still usable.
        let info = g
            .append_durable(Offset(start), Epoch(1), &[b"last"])
            .unwrap();
        assert_eq!(info.next_offset, Offset(u64::MAX));
        overflow(&g.append_durable(Offset(u64::MAX), Epoch(1), &[b"past"]));
        drop((a, g));
        node.close().unwrap();
    }
    let node = open(&fs).unwrap();
    assert_eq!(node.groups(), vec![8, 9]);
    let g = node.group(9).unwrap();
    let e = g
        .read_entries(
            Offset(start),
            Offset(u64::MAX),
            1 << 20,
            Isolation::Uncommitted,
        )
        .unwrap();
    assert_eq!((e.len(), e[0].bytes.as_slice()), (1, b"last".as_slice()));
    let a = node.group(8).unwrap();
    assert_eq!(a.extent().end, Offset(2));
}

/// Invariant: a refused open changes nothing on disk (docs/decisions.md),
/// the log's clean marker included.
#[test]
fn a_checkpoint_past_the_log_end_is_refused_before_a_byte_changes() {
    let (disk, fs) = formatted(2);
    {
        let node = open(&fs).unwrap();
        node.create_group(1, Offset(1)).unwrap();
        node.close().unwrap();
    }
    // The directory as it is now, cleanly closed.
    let early = dir_image(&disk, Path::new(DIR)).unwrap();
    {
        let node = open(&fs).unwrap();
        let g = node.group(1).unwrap();
        for i in 1..=50u64 {
            g.append_durable(Offset(i), Epoch(1), &[format!("entry {i}")])
                .unwrap();
        }
        drop(g);
        node.close().unwrap();
    }
    // The later checkpoint (its position past the early log's end) over
    // the early directory.
    let ckpt = Path::new(DIR).join("groups.ckpt");
    let later = disk.durable_contents(&ckpt).unwrap();
    let early_fs: SharedFs = Arc::new(disk.crash());
    for path in dir_image(early_fs.as_ref(), Path::new(DIR)).unwrap().keys() {
        if !early.contains_key(path) {
            early_fs.remove_file(path).unwrap();
        }
    }
    for (path, bytes) in early.iter().chain([(&ckpt, &later)]) {
        let f = early_fs.open(path, OpenMode::CreateOrTruncate).unwrap();
        f.write_all_at(bytes, 0).unwrap();
        f.sync_all().unwrap();
    }
    let before = dir_image(early_fs.as_ref(), Path::new(DIR)).unwrap();
    assert!(
        before.keys().any(|p| p.ends_with("log/clean")),
        "the early directory was closed cleanly: {:?}",
        before.keys().collect::<Vec<_>>()
    );
    for _ in 0..2 {
        let r = open(&early_fs);
        assert!(
            matches!(r, Err(Error::NodeCorrupt { group: None, .. })),
            "{:?}",
            r.map(|_| ())
        );
        let after = dir_image(early_fs.as_ref(), Path::new(DIR)).unwrap();
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>()
        );
        assert!(before == after, "a refused open changed the directory");
    }
}

/// Invariant: the last purged id is an entry of the log: a purge whose
/// epoch differs from the log's for the entry before the purge point is
/// refused, on the group and in a write batch, and nothing is purged.
#[test]
fn a_purge_names_the_logs_epoch_or_is_refused() {
    let (_, fs) = formatted(3);
    let node = open(&fs).unwrap();
    node.create_group(1, Offset(1)).unwrap();
    let g = node.group(1).unwrap();
    for (i, epoch) in [(1u64, 1u64), (2, 1), (3, 1), (4, 1), (5, 7), (6, 7)] {
        g.append_durable(Offset(i), Epoch(epoch), &[format!("e{i}")])
            .unwrap();
    }
    // Entry 4 is in epoch 1: a purge to 5 naming epoch 7 is refused.
    let r = g.purge(Purge::To {
        offset: Offset(5),
        epoch: Epoch(7),
    });
    assert!(
        matches!(
            r,
            Err(Error::PurgeEpochMismatch {
                offset: Offset(5),
                log: Epoch(1),
                given: Epoch(7)
            })
        ),
        "{r:?}"
    );
    let mut batch = node.write_batch();
    batch.purge(&g, Offset(5), Epoch(7)).unwrap();
    let r = batch.commit();
    assert!(matches!(r, Err(Error::PurgeEpochMismatch { .. })), "{r:?}");
    assert_eq!(g.extent().start, Offset(1));
    assert_eq!(g.extent().last_purged, None);
    // The log's epoch is accepted and is what the group reports.
    g.purge(Purge::To {
        offset: Offset(5),
        epoch: Epoch(1),
    })
    .unwrap();
    assert_eq!(g.extent().start, Offset(5));
    assert_eq!(g.extent().last_purged, Some((Offset(4), Epoch(1))));
    // Past the end the caller's epoch is the only one there is.
    g.purge(Purge::To {
        offset: Offset(10),
        epoch: Epoch(9),
    })
    .unwrap();
    assert_eq!(g.extent().last_purged, Some((Offset(9), Epoch(9))));
    drop(g);
    node.close().unwrap();
}

/// Invariant: a directory of another layout, or a node without its
/// checkpoint, is refused before a byte changes.
#[test]
fn a_node_without_its_checkpoint_is_neither_opened_nor_imported() {
    let (disk, fs) = formatted(4);
    {
        let node = open(&fs).unwrap();
        node.create_group(1, Offset(1)).unwrap();
        let g = node.group(1).unwrap();
        g.append_durable(Offset(1), Epoch(1), &[b"one"]).unwrap();
        drop(g);
        node.close().unwrap();
    }
    let fs: SharedFs = Arc::new(disk.crash());
    fs.remove_file(&Path::new(DIR).join("groups.ckpt")).unwrap();
    let before = dir_image(fs.as_ref(), Path::new(DIR)).unwrap();
    let r = open(&fs);
    assert!(
        matches!(r, Err(Error::NodeCorrupt { group: None, .. })),
        "{:?}",
        r.map(|_| ())
    );
    let other_fs: SharedFs = Arc::new(SimFs::new(9));
    let other = Path::new("/other");
    Node::format(&other_fs, other, meta(), &options()).unwrap();
    let (node, _) = Node::open(&other_fs, other, &Identity::of(&meta()), &options()).unwrap();
    let r = node.import_store(3, &fs, Path::new(DIR), &Identity::of(&meta()));
    assert!(matches!(r, Err(Error::WrongLayout { .. })), "{r:?}");
    assert!(before == dir_image(fs.as_ref(), Path::new(DIR)).unwrap());

    // A directory of the previous layout: refused by the node, naming the
    // import.
    let tmp = tempfile::tempdir().unwrap();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testkit/golden/format-2/clean");
    quorumlog_testkit::copy_dir(&golden, tmp.path());
    let store_fs: SharedFs = Arc::new(quorumlog_io::RealFs::new());
    let dir = tmp.path();
    let golden_meta = quorumlog_checkpoint::read_meta(store_fs.as_ref(), dir)
        .unwrap()
        .unwrap();
    // On a real disk an open leaves its lock file (empty of meaning once
    // the process is gone): every other byte is compared.
    let image = || {
        let mut m = dir_image(store_fs.as_ref(), dir).unwrap();
        m.remove(&dir.join("lock"));
        m
    };
    let before = image();
    let r = Node::open(&store_fs, dir, &Identity::of(&golden_meta), &options()).map(|_| ());
    let Err(e @ Error::WrongLayout { .. }) = r else {
        panic!("{r:?}");
    };
    assert!(e.to_string().contains("quorumlog import"), "{e}");
    assert!(before == image());
}
