//! `TailWrites::Direct` (issue 11): a sync round's group write goes to the
//! device with `O_DIRECT | O_DSYNC` and is durable on return, so the round
//! skips `fdatasync`. Invariants protected:
//! - an acknowledged append is durable without a sync (it survives a crash
//!   that loses every unsynced write);
//! - a round syncs whenever something went through the page cache since
//!   the last sync (a buffered write is never acknowledged unsynced);
//! - direct writes are aligned (the simulated device refuses any other);
//! - on a real file system the mode works end to end and reopens.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{format_dir, open_dd, payload, read_all, shared, sim, small_options, DIR};
use quorumlog_checkpoint::{Epoch, Offset, SharedFs};
use quorumlog_io::{CrashPlan, FaultKind, FaultOp, RealFs};
use quorumlog_log::{DurableLog, LogOptions, SyncPolicy, TailWrites};

/// 64 KiB segments: fifteen one-page rounds before a roll (a roll syncs
/// the sealed segment on its own path).
fn direct() -> LogOptions {
    LogOptions {
        tail_writes: TailWrites::Direct,
        segment_size_bytes: 64 << 10,
        ..small_options()
    }
}

fn open(fs: &SharedFs, policy: SyncPolicy) -> DurableLog {
    DurableLog::open(open_dd(fs, Path::new(DIR)), direct(), policy).unwrap()
}

#[test]
fn acknowledged_direct_appends_need_no_sync_and_survive_a_crash() {
    let (disk, fs) = sim(1);
    let log = open(&fs, SyncPolicy::GroupCommit);
    // The first round syncs once (the segment was opened buffered); after
    // it, any sync would fail: the direct path must not need one.
    log.append_durable(Epoch(1), &[payload(0, 0, 100)]).unwrap();
    disk.inject_fault(FaultOp::Sync, 1, FaultKind::Eio);
    for o in 1..12u64 {
        log.append_durable(Epoch(1), &[payload(o, 0, 100)])
            .unwrap_or_else(|e| panic!("offset {o}: {e}"));
    }
    assert_eq!(log.segment_bases().len(), 1);
    let acked = log.flushed_offset().0;
    assert_eq!(acked, 12);
    drop(log);
    let disk = disk.crash_with(CrashPlan::LoseUnsynced);
    let fs = shared(&disk);
    let log = open(&fs, SyncPolicy::Never);
    assert!(log.log_end_offset().0 >= acked);
    let got = quorumlog_testkit::read_records(&log, Offset(0)).unwrap();
    for (o, _, r) in got {
        assert_eq!(r, payload(o, 0, 100), "offset {o}");
    }
}

#[test]
fn a_buffered_write_before_a_round_is_synced() {
    let (disk, fs) = sim(2);
    let log = open(&fs, SyncPolicy::GroupCommit);
    log.append_durable(Epoch(1), &[payload(0, 0, 100)]).unwrap();
    // A non-waiting append lands in the page after the round's aligned
    // start only if the previous write left the end unaligned: two appends
    // without a round in between (the second continues the first's page,
    // buffered).
    log.append_as_leader(Epoch(1), &[payload(1, 0, 100)])
        .unwrap();
    log.append_as_leader(Epoch(1), &[payload(2, 0, 100)])
        .unwrap();
    // The round must sync: a failing sync must surface.
    disk.inject_fault(FaultOp::Sync, 1, FaultKind::Eio);
    let r = log.append_durable(Epoch(1), &[payload(3, 0, 100)]);
    assert!(
        r.is_err(),
        "the buffered write was acknowledged without a sync"
    );
}

#[test]
fn direct_tail_writes_on_a_real_file_system() {
    let tmp = tempfile::tempdir().unwrap();
    let fs: SharedFs = Arc::new(RealFs::new());
    format_dir(&fs, tmp.path());
    let options = LogOptions {
        segment_size_bytes: 1 << 20,
        max_batch_bytes: 256 << 10,
        tail_writes: TailWrites::Direct,
        ..LogOptions::default()
    };
    let log = Arc::new(
        DurableLog::open(
            open_dd(&fs, tmp.path()),
            options.clone(),
            SyncPolicy::GroupCommit,
        )
        .unwrap(),
    );
    std::thread::scope(|s| {
        for w in 0..4u64 {
            let log = Arc::clone(&log);
            s.spawn(move || {
                for i in 0..200u64 {
                    let len = 1 + usize::try_from((w * 7919 + i * 104_729) % 9000).unwrap();
                    log.append_durable(Epoch(1), &[payload(w, i, len)]).unwrap();
                }
            });
        }
    });
    assert_eq!(log.flushed_offset(), Offset(800));
    assert!(
        log.segment_bases().len() > 1,
        "rolled while writing directly"
    );
    drop(log);
    let log = quorumlog_log::Log::open(open_dd(&fs, tmp.path()), options).unwrap();
    assert_eq!(read_all(&log, Offset(0)).len(), 800);
}
