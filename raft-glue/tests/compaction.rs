//! Invariant 7: no log entry is deleted before a durable snapshot covers it.
//! The store's cleaning path (`Store::clean_log_prefix`, the only one) is
//! bounded by the latest published snapshot, and a crash at any I/O call
//! between freezing the snapshot and deleting the log prefix loses
//! nothing: every offset is in the log or covered by a listed, verifiable
//! snapshot.
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
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_log::{LogOptions, SegmentPreparation, SyncPolicy};
use quorumlog_raft::{Identity, Isolation, Store, StoreOptions};
use quorumlog_snapshot::WriterOptions;
use quorumlog_testkit::CRASH_PLANS;

const DIR: &str = "/data";

fn options() -> StoreOptions {
    StoreOptions {
        log: LogOptions {
            segment_size_bytes: 8192,
            max_batch_bytes: 2048,
            segment_preparation: SegmentPreparation::Inline,
            ..LogOptions::default()
        },
        sync: SyncPolicy::GroupCommit,
    }
}

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(7))
}

fn record(o: u64) -> Vec<u8> {
    format!("record {o:05}").into_bytes()
}

fn open(sim: &SimFs) -> Store {
    let fs: SharedFs = Arc::new(sim.clone());
    Store::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options())
        .unwrap()
        .0
}

/// 100 records (several segments), committed and flushed.
fn setup(seed: u64) -> SimFs {
    let sim = SimFs::new(seed);
    let fs: SharedFs = Arc::new(sim.clone());
    Store::format(&fs, Path::new(DIR), meta(), None, &options()).unwrap();
    let s = open(&sim);
    for o in 0..100u64 {
        s.append_replicated(Offset(o), Epoch(1), &[record(o)])
            .unwrap();
    }
    s.wait_durable(Offset(100)).unwrap();
    s.set_high_watermark(Offset(100)).unwrap();
    s.close().unwrap();
    sim
}

/// The state a snapshot at `end` holds: every record below it.
fn state_below(end: u64) -> Vec<u8> {
    (0..end).flat_map(record).collect()
}

fn snapshot(s: &Store, end: u64) -> quorumlog_raft::Result<()> {
    let mut w = s.create_snapshot(Offset(end), Epoch(1), b"", WriterOptions::default())?;
    w.write(&state_below(end))?;
    w.freeze().map(|_| ())
}

fn clean(s: &Store, up_to: u64) -> quorumlog_raft::Result<Offset> {
    s.clean_log_prefix(Offset(up_to))
}

#[test]
fn cleaning_is_bounded_by_the_latest_snapshot() {
    let sim = setup(1);
    let s = open(&sim);
    assert_eq!(clean(&s, 90).unwrap(), Offset(0), "no snapshot");
    snapshot(&s, 40).unwrap();
    assert_eq!(clean(&s, 90).unwrap(), Offset(40));
    assert_eq!(clean(&s, 20).unwrap(), Offset(40), "never backwards");
    // A snapshot beyond the commit point is refused; one at the log end
    // lets everything go.
    assert!(snapshot(&s, 200).is_err());
    snapshot(&s, 100).unwrap();
    assert_eq!(clean(&s, 500).unwrap(), Offset(100));
}

#[test]
fn a_crash_between_snapshot_and_truncation_loses_nothing() {
    // Count the calls of the whole path.
    let total = {
        let sim = setup(0);
        let s = open(&sim);
        let before = sim.calls();
        snapshot(&s, 60).unwrap();
        clean(&s, 60).unwrap();
        sim.calls() - before
    };
    let mut states = 0;
    for point in 0..=total {
        for plan in CRASH_PLANS.into_iter().chain([CrashPlan::Random]) {
            let sim = setup(point + 1);
            let s = open(&sim);
            sim.crash_after(point);
            let frozen = snapshot(&s, 60).is_ok();
            let cleaned = frozen && clean(&s, 60).is_ok();
            drop(s);
            let disk = sim.crash_with(plan);
            let s = open(&disk);
            let what = format!("crash after {point}/{total} {plan:?}");
            let start = s.log_start_offset().0;
            assert!(start == 0 || start == 60, "{what}: start {start}");
            if cleaned {
                assert_eq!(start, 60, "{what}: acknowledged cleaning undone");
            }
            if frozen {
                assert!(
                    s.latest_snapshot().is_some(),
                    "{what}: acknowledged snapshot lost"
                );
            }
            // Every offset below 100 is in the log or in a verified snapshot.
            let covered = s.latest_snapshot().map_or(0, |id| {
                let (_, data) = s.read_snapshot(id).unwrap();
                assert_eq!(data, state_below(id.end_offset.0), "{what}");
                id.end_offset.0
            });
            assert!(
                covered >= start,
                "{what}: offsets {covered}..{start} have no copy"
            );
            assert_eq!(s.log_end_offset(), Offset(100), "{what}");
            let entries = s
                .read_entries(Offset(start), Offset(100), u64::MAX, Isolation::Uncommitted)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(entries.len() as u64, 100 - start, "{what}");
            for e in entries {
                assert_eq!(e.bytes, record(e.offset.0), "{what}");
            }
            states += 1;
        }
    }
    eprintln!(
        "snapshot -> truncate_prefix_to: {} crash points, {states} crash states",
        total + 1
    );
}
