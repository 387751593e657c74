//! Golden node directories: directories of the node layout (many groups
//! in one data directory, docs/format.md "The node layout"), written by
//! node format version `N` and committed under `testkit/golden/node-<N>/`,
//! must open and read back with every later version, as the one-group
//! directories of `tests/golden.rs` do.
//!
//! The workload: four groups; group 1 takes entries in epochs 1 and 2 with
//! a suffix truncation between them, a vote, metadata and a persisted
//! high watermark; group 2 is purged and snapshotted; group 3 is dropped;
//! group 4 stays empty; a checkpoint is taken in the middle, so opening
//! replays only what followed. `clean` is closed cleanly; `crashed` ends
//! with a power cut while appends are in flight. Regenerate (only when
//! adding a new version) with
//! `cargo test -p quorumlog-testkit --test golden_node -- --ignored`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quorumlog_io::{CrashPlan, RealFs, SimFs};
use quorumlog_raft::{
    options::WriterOptions, ClusterId, DirectoryId, Epoch, Group, Identity, Isolation, LogOptions,
    Meta, Node, NodeId, NodeOptions, Offset, Purge, QuorumState, SharedFs, Voter,
};

/// The node format version the workload writes today.
const VERSION: u32 = 1;
const DIR: &str = "/golden-node";

fn meta() -> Meta {
    Meta::new(ClusterId(9), NodeId(1), DirectoryId(0x0601_de12))
}

fn options() -> NodeOptions {
    NodeOptions {
        log: LogOptions {
            segment_size_bytes: 64 << 10,
            max_batch_bytes: 32 << 10,
            prefill_segments: 0,
            ..LogOptions::default()
        },
        background: false,
        ..NodeOptions::default()
    }
}

fn record(group: u64, offset: u64, epoch: u64) -> Vec<u8> {
    let len = usize::try_from((offset * 37 + epoch * 11 + group) % 200).unwrap();
    let mut r = format!("golden-g{group}-{offset}-e{epoch}:").into_bytes();
    r.extend((0..len).map(|i| u8::try_from((i as u64 + offset) % 251).unwrap()));
    r
}

fn voted() -> QuorumState {
    QuorumState {
        epoch: Epoch(2),
        leader: Some(NodeId(1)),
        voted: Some(Voter {
            node_id: NodeId(1),
            directory_id: meta().directory_id,
        }),
    }
}

fn append(g: &Group, from: u64, to: u64, epoch: u64) {
    let mut at = from;
    while at < to {
        let end = (at + 10).min(to);
        let records: Vec<Vec<u8>> = (at..end).map(|o| record(g.id(), o, epoch)).collect();
        g.append(Offset(at), Epoch(epoch), &records).unwrap();
        g.wait_durable(Offset(end)).unwrap();
        at = end;
    }
}

fn write(disk: &SimFs, crashed: bool) -> SimFs {
    let fs: SharedFs = Arc::new(disk.clone());
    Node::format(&fs, Path::new(DIR), meta(), &options()).unwrap();
    let (node, _) = Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options()).unwrap();
    for id in 1..=4 {
        node.create_group(id, Offset(1)).unwrap();
    }
    let (g1, g2) = (node.group(1).unwrap(), node.group(2).unwrap());
    append(&g1, 1, 150, 1);
    append(&g2, 1, 100, 1);
    g1.wait_durable(Offset(150)).unwrap();
    g1.set_high_watermark(Offset(120)).unwrap();
    g1.truncate_to(Offset(140)).unwrap();
    node.maintain().unwrap();
    append(&g1, 140, 200, 2);
    g1.persist_quorum_state(&voted()).unwrap();
    g1.write_app_metadata(b"group one metadata").unwrap();
    g1.wait_durable(Offset(200)).unwrap();
    g1.set_high_watermark(Offset(180)).unwrap();
    g1.wait_durable(Offset(u64::MAX)).unwrap();
    g2.set_high_watermark(Offset(100)).unwrap();
    let mut w = g2
        .create_snapshot(
            Offset(60),
            Epoch(1),
            b"group two snapshot",
            WriterOptions::default(),
        )
        .unwrap();
    w.write(b"state of group two below 60").unwrap();
    w.freeze().unwrap();
    g2.purge(Purge::Covered { up_to: Offset(50) }).unwrap();
    node.drop_group(3).unwrap();
    if crashed {
        g1.append(Offset(200), Epoch(2), &[record(1, 200, 2)])
            .unwrap();
        disk.crash_after(0);
        drop((g1, g2));
        drop(node);
        disk.crash_with(CrashPlan::LoseUnsynced)
    } else {
        drop((g1, g2));
        node.close().unwrap();
        disk.clone()
    }
}

fn check(dir: &Path) {
    let fs: SharedFs = Arc::new(RealFs::new());
    let (node, _) = Node::open(&fs, dir, &Identity::of(&meta()), &options())
        .unwrap_or_else(|e| panic!("{} does not open: {e}", dir.display()));
    assert_eq!(node.groups(), vec![1, 2, 4]);
    let g1 = node.group(1).unwrap();
    // The crashed directory may hold the append in flight (its round may
    // have run before the power cut) or not.
    let end = g1.extent().end;
    assert!(end == Offset(200) || end == Offset(201), "end {end:?}");
    let got = g1
        .read_entries(Offset(1), end, u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(got.len() as u64, end.0 - 1);
    for e in &got {
        let epoch = if e.offset.0 < 140 { 1 } else { 2 };
        assert_eq!(
            e.bytes,
            record(1, e.offset.0, epoch),
            "offset {}",
            e.offset.0
        );
        assert_eq!(e.epoch, Epoch(epoch));
    }
    assert_eq!(g1.quorum_state(), voted());
    assert_eq!(
        g1.app_metadata().as_deref(),
        Some(&b"group one metadata"[..])
    );
    assert_eq!(g1.extent().high_watermark, Some(Offset(180)));
    let g2 = node.group(2).unwrap();
    assert_eq!(g2.extent().start, Offset(50));
    assert_eq!(g2.extent().last_purged, Some((Offset(49), Epoch(1))));
    let got = g2
        .read_entries(Offset(50), Offset(100), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(got.len(), 50);
    assert!(got.iter().all(|e| e.bytes == record(2, e.offset.0, 1)));
    let id = g2.extent().latest_snapshot.unwrap();
    let (meta, state) = g2.snapshot(id).and_then(|s| s.read()).unwrap();
    assert_eq!(meta, b"group two snapshot");
    assert_eq!(state, b"state of group two below 60");
    let g4 = node.group(4).unwrap();
    assert_eq!(
        (g4.extent().start, g4.extent().queued_end),
        (Offset(1), Offset(1))
    );
    assert!(matches!(
        node.group(3),
        Err(quorumlog_raft::Error::GroupDropped { group: 3 })
    ));
    drop((g1, g2, g4));
    node.close().unwrap();
}

fn golden_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

#[test]
#[ignore = "writes the golden node directories of today's version into the source tree"]
fn write_golden_node_directories() {
    let root = golden_root().join(format!("node-{VERSION}"));
    for (name, crashed) in [("clean", false), ("crashed", true)] {
        let out = root.join(name);
        let _ = std::fs::remove_dir_all(&out);
        let disk = write(&SimFs::new(2026), crashed);
        quorumlog_testkit::export_durable(&disk, Path::new(DIR), &out);
    }
}

#[test]
fn the_node_workload_reads_back_on_the_simulated_disk() {
    for crashed in [false, true] {
        let disk = write(&SimFs::new(7), crashed);
        let tmp = tempfile::tempdir().unwrap();
        quorumlog_testkit::export_durable(&disk, Path::new(DIR), tmp.path());
        check(tmp.path());
    }
}

#[test]
fn every_committed_golden_node_directory_opens_and_reads_back() {
    let mut seen = 0;
    let mut versions: Vec<PathBuf> = std::fs::read_dir(golden_root())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("node-"))
        })
        .collect();
    versions.sort();
    for version in versions {
        for name in ["clean", "crashed"] {
            let dir = version.join(name);
            assert!(dir.is_dir(), "{} is missing", dir.display());
            let tmp = tempfile::tempdir().unwrap();
            quorumlog_testkit::copy_dir(&dir, tmp.path());
            check(tmp.path());
            check(tmp.path());
            seen += 1;
        }
    }
    assert!(
        seen >= 2,
        "no golden node directory under {}",
        golden_root().display()
    );
}
