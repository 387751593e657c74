//! Golden directories of the previous one-group layout (a store: a log
//! of its own, small files beside it), written by format version 2 and
//! committed under `testkit/golden/format-<N>/`. That layout has no
//! runtime type any more: `Node::import_store` (`quorumlog import`) brings
//! it into a group of a node. Invariant: every committed directory imports
//! whole (entries with their epochs and bytes, the high watermark, the
//! election state, the application metadata, the latest snapshot), the
//! group reads back the same after the node reopens, and the old
//! directory's files are left as they were but for its log's own tail
//! recovery.
//!
//! Each folder holds two directories written by the same workload and
//! exported byte for byte: `clean` (closed cleanly) and `crashed` (power
//! cut with unsynced appends in flight). The workload: three runs of
//! records in epochs 1 and 2 (a suffix truncation between them), a high
//! watermark, an election state, app metadata and a snapshot.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quorumlog_io::RealFs;
use quorumlog_raft::{
    ClusterId, DirectoryId, Epoch, Group, Identity, Isolation, Meta, Node, NodeId, NodeOptions,
    Offset, QuorumState, SharedFs, Voter,
};

const APP_METADATA: &[u8] = b"golden app metadata";
const SNAPSHOT_META: &[u8] = b"golden snapshot metadata";

fn meta() -> Meta {
    Meta::new(ClusterId(9), NodeId(1), DirectoryId(0x0601_de11))
}

/// Record `offset` of `epoch`: its size and bytes follow from both.
fn record(offset: u64, epoch: u64) -> Vec<u8> {
    let len = usize::try_from((offset * 37 + epoch * 11) % 300).unwrap();
    let mut r = format!("golden-{offset}-e{epoch}:").into_bytes();
    r.extend((0..len).map(|i| u8::try_from((i as u64 + offset) % 251).unwrap()));
    r
}

fn snapshot_state() -> Vec<u8> {
    (0..10_000u32).flat_map(u32::to_le_bytes).collect()
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

/// Checks group `g`, imported from a golden directory, against what the
/// workload wrote.
fn check(g: &Group, what: &str, crashed: bool) {
    let x = g.extent();
    let end = x.end.0;
    if crashed {
        assert!((500..=520).contains(&end), "{what}: log end {end}");
    } else {
        assert_eq!(end, 500, "{what}");
    }
    let got = g
        .read_entries(Offset(0), Offset(end), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(got.len() as u64, end, "{what}");
    for e in &got {
        let epoch = if e.offset.0 < 280 { 1 } else { 2 };
        assert_eq!(
            e.bytes,
            record(e.offset.0, epoch),
            "{what}: offset {}",
            e.offset.0
        );
        assert_eq!(e.epoch, Epoch(epoch), "{what}");
        assert!(!e.control, "{what}");
    }
    assert_eq!(x.high_watermark, Some(Offset(450)), "{what}");
    assert_eq!(g.quorum_state(), voted(), "{what}");
    assert_eq!(g.app_metadata().as_deref(), Some(APP_METADATA), "{what}");
    let id = x.latest_snapshot.expect("a snapshot");
    assert_eq!((id.end_offset, id.epoch), (Offset(200), Epoch(1)), "{what}");
    let (metadata, state) = g.snapshot(id).unwrap().read().unwrap();
    assert_eq!(metadata, SNAPSHOT_META, "{what}");
    assert_eq!(state, snapshot_state(), "{what}");
}

fn golden_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

/// Every file of `dir` but the log's (whose open may recover its tail)
/// and the lock file an open leaves.
fn small_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() && p.file_name().is_some_and(|n| n != "lock") {
            out.push((p.clone(), std::fs::read(&p).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn every_committed_golden_directory_imports_into_a_group_and_reads_back() {
    let fs: SharedFs = Arc::new(RealFs::new());
    let mut seen = 0;
    let mut versions: Vec<PathBuf> = std::fs::read_dir(golden_root())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("format-"))
        })
        .collect();
    versions.sort();
    for version in versions {
        for (name, crashed) in [("clean", false), ("crashed", true)] {
            let dir = version.join(name);
            assert!(dir.is_dir(), "{} is missing", dir.display());
            let what = dir.display().to_string();
            // Imported from a copy (its log's open may repair its tail).
            let tmp = tempfile::tempdir().unwrap();
            let old = tmp.path().join("old");
            quorumlog_testkit::copy_dir(&dir, &old);
            let before = small_files(&old);
            let node_dir = tmp.path().join("node");
            let node_meta = Meta::new(ClusterId(9), NodeId(1), DirectoryId(77));
            let options = NodeOptions::with_segment_bytes(1 << 20);
            Node::format(&fs, &node_dir, node_meta, &options).unwrap();
            let expect = Identity::of(&node_meta);
            let (node, _) = Node::open(&fs, &node_dir, &expect, &options).unwrap();
            let report = node
                .import_store(5, &fs, &old, &Identity::of(&meta()))
                .unwrap();
            assert!(report.snapshot, "{what}");
            check(&node.group(5).unwrap(), &what, crashed);
            node.close().unwrap();
            assert_eq!(
                small_files(&old),
                before,
                "{what}: the old directory's files changed"
            );
            let (node, _) = Node::open(&fs, &node_dir, &expect, &options).unwrap();
            check(
                &node.group(5).unwrap(),
                &format!("{what}, reopened"),
                crashed,
            );
            node.close().unwrap();
            seen += 1;
        }
    }
    assert!(
        seen >= 2,
        "no golden directory found under {}",
        golden_root().display()
    );
}
