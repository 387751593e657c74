//! Golden data directories: directories written by a released format
//! version, committed under `testkit/golden/format-<N>/`, must open and
//! read back with every later version. Invariant: a format change either
//! keeps them readable or is a deliberate version bump that adds a new
//! folder (and a migration) while this test keeps reading the old ones.
//!
//! Each folder holds two directories written by the same workload on the
//! simulated disk and exported byte for byte: `clean` (closed cleanly) and
//! `crashed` (power cut with unsynced appends in flight, so opening it
//! runs recovery). The workload: three runs of records in epochs 1 and 2
//! (a suffix truncation between them), a high watermark, an election
//! state, app metadata and a snapshot. Regenerate (only when adding a new
//! format version) with
//! `cargo test -p quorumlog-testkit --test golden -- --ignored`.
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
    ClusterId, DirectoryId, Epoch, Identity, Isolation, LogOptions, Meta, NodeId, Offset,
    QuorumState, SharedFs, Store, StoreOptions, SyncPolicy, Voter, WriterOptions,
};

/// The format version the workload below writes today.
const FORMAT: u32 = 2;
const DIR: &str = "/golden";
const APP_METADATA: &[u8] = b"golden app metadata";
const SNAPSHOT_META: &[u8] = b"golden snapshot metadata";

fn meta() -> Meta {
    Meta::new(ClusterId(9), NodeId(1), DirectoryId(0x0601_de11))
}

fn options() -> StoreOptions {
    StoreOptions {
        log: LogOptions {
            segment_size_bytes: 64 << 10,
            max_batch_bytes: 32 << 10,
            prefill_segments: 0,
            ..LogOptions::default()
        },
        sync: SyncPolicy::GroupCommit,
    }
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

fn append(store: &Store, from: u64, to: u64, epoch: u64) {
    let mut at = from;
    while at < to {
        let end = (at + 25).min(to);
        let records: Vec<Vec<u8>> = (at..end).map(|o| record(o, epoch)).collect();
        store
            .append_replicated(Offset(at), Epoch(epoch), &records)
            .unwrap();
        at = end;
    }
}

/// The workload, on `disk`; `crashed` ends it with a power cut.
fn write(disk: &SimFs, crashed: bool) -> SimFs {
    let fs: SharedFs = Arc::new(disk.clone());
    Store::format(&fs, Path::new(DIR), meta(), None, &options()).unwrap();
    let (store, _) = Store::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options()).unwrap();
    append(&store, 0, 300, 1);
    store.wait_durable(Offset(300)).unwrap();
    store.set_high_watermark(Offset(250)).unwrap();
    store.truncate_to(Offset(280)).unwrap();
    append(&store, 280, 500, 2);
    store.wait_durable(Offset(500)).unwrap();
    store.set_high_watermark(Offset(450)).unwrap();
    store.persist_high_watermark().unwrap();
    store.persist_quorum_state(&voted()).unwrap();
    store.write_app_metadata(APP_METADATA).unwrap();
    let mut w = store
        .create_snapshot(
            Offset(200),
            Epoch(1),
            SNAPSHOT_META,
            WriterOptions::default(),
        )
        .unwrap();
    w.write(&snapshot_state()).unwrap();
    w.freeze().unwrap();
    if crashed {
        append(&store, 500, 520, 2);
        disk.crash_after(0);
        drop(store);
        disk.crash_with(CrashPlan::LoseUnsynced)
    } else {
        store.close().unwrap();
        disk.clone()
    }
}

/// Opens the directory at `dir` and checks everything the workload wrote.
fn check(dir: &Path, crashed: bool) {
    let fs: SharedFs = Arc::new(RealFs::new());
    let (store, _) = Store::open(&fs, dir, &Identity::of(&meta()), &options())
        .unwrap_or_else(|e| panic!("{} does not open: {e}", dir.display()));
    let end = store.log_end_offset().0;
    if crashed {
        assert!(
            (500..=520).contains(&end),
            "{}: log end {end}",
            dir.display()
        );
    } else {
        assert_eq!(end, 500, "{}", dir.display());
    }
    let got = store
        .read_entries(Offset(0), Offset(end), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(got.len() as u64, end);
    for e in &got {
        let epoch = if e.offset.0 < 280 { 1 } else { 2 };
        assert_eq!(
            e.bytes,
            record(e.offset.0, epoch),
            "{}: offset {}",
            dir.display(),
            e.offset.0
        );
        assert_eq!(store.epoch_at(e.offset), Some(Epoch(epoch)));
    }
    assert_eq!(store.high_watermark(), Some(Offset(450)));
    assert_eq!(store.quorum_state(), voted());
    assert_eq!(store.app_metadata().as_deref(), Some(APP_METADATA));
    let id = store.latest_snapshot().expect("a snapshot");
    assert_eq!((id.end_offset, id.epoch), (Offset(200), Epoch(1)));
    let (metadata, state) = store.read_snapshot(id).unwrap();
    assert_eq!(metadata, SNAPSHOT_META);
    assert_eq!(state, snapshot_state());
    store.close().unwrap();
}

fn golden_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

/// Copies every file of the simulated disk's `dir` into `out`, as durable.
#[test]
#[ignore = "writes the golden directories of today's format into the source tree"]
fn write_golden_directories() {
    let root = golden_root().join(format!("format-{FORMAT}"));
    for (name, crashed) in [("clean", false), ("crashed", true)] {
        let out = root.join(name);
        let _ = std::fs::remove_dir_all(&out);
        let disk = write(&SimFs::new(2026), crashed);
        quorumlog_testkit::export_durable(&disk, Path::new(DIR), &out);
    }
}

#[test]
fn the_workload_reads_back_on_the_simulated_disk() {
    // The generator's own check, so a change to the workload is caught
    // here before any golden directory is (re)written.
    for crashed in [false, true] {
        let disk = write(&SimFs::new(7), crashed);
        let tmp = tempfile::tempdir().unwrap();
        quorumlog_testkit::export_durable(&disk, Path::new(DIR), tmp.path());
        check(tmp.path(), crashed);
    }
}

#[test]
fn every_committed_golden_directory_opens_and_reads_back() {
    let mut seen = 0;
    // One-group directories (`format-<N>`); the node layout's are
    // `node-<N>` (tests/golden_node.rs).
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
            // Opened from a copy (recovery may repair what it opens), twice.
            let tmp = tempfile::tempdir().unwrap();
            quorumlog_testkit::copy_dir(&dir, tmp.path());
            check(tmp.path(), crashed);
            check(tmp.path(), crashed);
            seen += 1;
        }
    }
    assert!(
        seen >= 2,
        "no golden directory found under {}",
        golden_root().display()
    );
}
