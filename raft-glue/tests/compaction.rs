//! Invariant 7: no log entry is deleted before a durable snapshot covers it.
//! The cleaning path is bounded by the latest published snapshot, and a
//! crash at any I/O call between freezing the snapshot and deleting the log
//! prefix loses nothing: every offset is in the log or covered by a listed,
//! verifiable snapshot.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{
    format_with, ClusterId, DataDir, DirectoryId, Epoch, Meta, NodeId, Offset, OpenOptions,
    SharedFs,
};
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_log::{Log, LogOptions, SegmentPreparation};
use quorumlog_raft::compaction::clean_log_prefix;
use quorumlog_snapshot::{SnapshotId, SnapshotStore, WriterOptions};
use quorumlog_testkit::{read_records, CRASH_PLANS};

const DIR: &str = "/data";

fn options() -> LogOptions {
    LogOptions {
        segment_size_bytes: 8192,
        max_batch_bytes: 2048,
        segment_preparation: SegmentPreparation::Inline,
        ..LogOptions::default()
    }
}

fn record(o: u64) -> Vec<u8> {
    format!("record {o:05}").into_bytes()
}

fn open(sim: &SimFs) -> (Log, SnapshotStore) {
    let fs: SharedFs = Arc::new(sim.clone());
    let dd = Arc::new(DataDir::open(fs.clone(), Path::new(DIR), &OpenOptions::default()).unwrap());
    let store = SnapshotStore::open(fs, &dd.snapshots_dir()).unwrap();
    (Log::open(dd, options()).unwrap(), store)
}

/// 100 records (several segments), flushed.
fn setup(seed: u64) -> SimFs {
    let sim = SimFs::new(seed);
    let fs: SharedFs = Arc::new(sim.clone());
    format_with(
        &fs,
        Path::new(DIR),
        Meta::new(ClusterId(1), NodeId(1), DirectoryId(7)),
    )
    .unwrap();
    let (mut log, _) = open(&sim);
    for o in 0..100u64 {
        log.append_as_leader(Epoch(1), &[record(o)]).unwrap();
    }
    log.close().unwrap();
    sim
}

/// The state a snapshot at `end` holds: every record below it.
fn state_below(end: u64) -> Vec<u8> {
    (0..end).flat_map(record).collect()
}

fn snapshot(store: &SnapshotStore, end: u64) -> quorumlog_snapshot::Result<()> {
    let id = SnapshotId {
        end_offset: Offset(end),
        epoch: Epoch(1),
    };
    let mut w = store.create(id, b"", WriterOptions::default())?;
    w.write(&state_below(end))?;
    w.freeze().map(|_| ())
}

#[test]
fn cleaning_is_bounded_by_the_latest_snapshot() {
    let sim = setup(1);
    let (mut log, store) = open(&sim);
    assert_eq!(
        clean_log_prefix(&store, &mut log, Offset(90)).unwrap(),
        Offset(0),
        "no snapshot"
    );
    snapshot(&store, 40).unwrap();
    assert_eq!(
        clean_log_prefix(&store, &mut log, Offset(90)).unwrap(),
        Offset(40)
    );
    assert_eq!(
        clean_log_prefix(&store, &mut log, Offset(20)).unwrap(),
        Offset(40),
        "never backwards"
    );
    snapshot(&store, 200).unwrap(); // beyond the log end
    assert_eq!(
        clean_log_prefix(&store, &mut log, Offset(500)).unwrap(),
        Offset(100)
    );
}

#[test]
fn a_crash_between_snapshot_and_truncation_loses_nothing() {
    // Count the calls of the whole path.
    let total = {
        let sim = setup(0);
        let (mut log, store) = open(&sim);
        let before = sim.calls();
        snapshot(&store, 60).unwrap();
        clean_log_prefix(&store, &mut log, Offset(60)).unwrap();
        sim.calls() - before
    };
    let mut states = 0;
    for point in 0..=total {
        for plan in CRASH_PLANS.into_iter().chain([CrashPlan::Random]) {
            let sim = setup(point + 1);
            let (mut log, store) = open(&sim);
            sim.crash_after(point);
            let frozen = snapshot(&store, 60).is_ok();
            let cleaned = frozen && clean_log_prefix(&store, &mut log, Offset(60)).is_ok();
            drop((log, store));
            let disk = sim.crash_with(plan);
            let (log, store) = open(&disk);
            let what = format!("crash after {point}/{total} {plan:?}");
            let start = log.log_start_offset().0;
            assert!(start == 0 || start == 60, "{what}: start {start}");
            if cleaned {
                assert_eq!(start, 60, "{what}: acknowledged cleaning undone");
            }
            if frozen {
                assert!(
                    store.latest().is_some(),
                    "{what}: acknowledged snapshot lost"
                );
            }
            // Every offset below 100 is in the log or in a verified snapshot.
            let covered = store.latest().map_or(0, |s| {
                let data = store.reader(s.id).unwrap().read_to_end().unwrap();
                assert_eq!(data, state_below(s.id.end_offset.0), "{what}");
                s.id.end_offset.0
            });
            assert!(
                covered >= start,
                "{what}: offsets {covered}..{start} have no copy"
            );
            assert_eq!(log.log_end_offset(), Offset(100), "{what}");
            let records =
                read_records(&log, Offset(start)).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(records.len() as u64, 100 - start, "{what}");
            for (o, _, rec) in records {
                assert_eq!(rec, record(o), "{what}");
            }
            states += 1;
        }
    }
    eprintln!(
        "snapshot -> truncate_prefix_to: {} crash points, {states} crash states",
        total + 1
    );
}
