//! `DurableLog::append_at_queued`: an append that is queued for the next
//! sync round without being written (the openraft adapter's path: openraft
//! 0.9 waits for every append's flush, so the round's one direct write is
//! the whole cost). Invariants protected:
//! - a queued append is completed only once durable: it survives a crash
//!   that loses every unsynced write, and with direct tail writes its round
//!   needs no `fdatasync` (it is the round's group write);
//! - until a round writes it, it counts in `queued_end` but not in the
//!   readable log end;
//! - a suffix truncation, a prefix cut reaching into the queue and a close
//!   all write the queue first: nothing queued below the cut is lost, and
//!   the log continues at the right offset;
//! - a failed round fails the queued appends' completions (never a false
//!   acknowledgement) and poisons the log.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;
use std::sync::mpsc;

use common::{open_dd, payload, shared, sim, small_options, DIR};
use quorumlog_checkpoint::{Epoch, Offset, SharedFs};
use quorumlog_io::{CrashPlan, FaultKind, FaultOp};
use quorumlog_log::{DurableLog, LogOptions, SyncPolicy, TailWrites};

fn options() -> LogOptions {
    LogOptions {
        tail_writes: TailWrites::Direct,
        segment_size_bytes: 64 << 10,
        ..small_options()
    }
}

fn open(fs: &SharedFs, policy: SyncPolicy) -> DurableLog {
    DurableLog::open(open_dd(fs, Path::new(DIR)), options(), policy).unwrap()
}

/// Queues one record at `o` and returns the receiver of its completion.
fn queue(log: &DurableLog, o: u64) -> mpsc::Receiver<quorumlog_log::Result<Offset>> {
    log.append_at_queued(Offset(o), Epoch(1), &[payload(o, 0, 100)])
        .unwrap();
    let (tx, rx) = mpsc::channel();
    log.on_durable(
        Offset(o + 1),
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx
}

fn records(log: &DurableLog) -> Vec<u64> {
    quorumlog_testkit::read_records(log, log.log_start_offset())
        .unwrap()
        .into_iter()
        .map(|(o, _, r)| {
            assert_eq!(r, payload(o, 0, 100), "offset {o}");
            o
        })
        .collect()
}

#[test]
fn queued_appends_are_completed_durable_by_the_rounds_direct_write() {
    let (disk, fs) = sim(11);
    let log = open(&fs, SyncPolicy::GroupCommit);
    // The first round syncs once (the segment was opened buffered).
    queue(&log, 0).recv().unwrap().unwrap();
    // The next sync fails: the queued appends' rounds must be direct
    // writes, durable on return.
    disk.inject_fault(FaultOp::Sync, 1, FaultKind::Eio);
    for o in 1..10u64 {
        let done = queue(&log, o).recv().unwrap();
        assert!(
            done.is_ok_and(|f| f.0 > o),
            "offset {o}: completed only once durable"
        );
    }
    drop(log);
    let disk = disk.crash_with(CrashPlan::LoseUnsynced);
    let log = open(&shared(&disk), SyncPolicy::Never);
    assert_eq!(records(&log), (0..10).collect::<Vec<_>>());
}

#[test]
fn a_queued_append_counts_in_the_queue_end_not_the_log_end_until_written() {
    let (_disk, fs) = sim(12);
    // No flusher runs under `Never`: the queue stays until something
    // writes it.
    let log = open(&fs, SyncPolicy::Never);
    for o in 0..5 {
        let _ = queue(&log, o);
    }
    assert_eq!(log.queued_end(), Offset(5));
    assert_eq!(log.log_end_offset(), Offset(0));
    // The next append must continue the queue, not the written log.
    assert!(log
        .append_at_queued(Offset(0), Epoch(1), &[payload(0, 0, 100)])
        .is_err());
    log.flush().unwrap();
    assert_eq!(log.log_end_offset(), Offset(5));
    assert_eq!(records(&log), (0..5).collect::<Vec<_>>());
}

#[test]
fn truncations_and_close_write_the_queue_first() {
    let (disk, fs) = sim(13);
    let log = open(&fs, SyncPolicy::Never);
    for o in 0..8 {
        let _ = queue(&log, o);
    }
    // A suffix truncation inside the queue keeps what lies below it.
    log.truncate_to(Offset(6)).unwrap();
    assert_eq!(
        (log.log_end_offset(), log.queued_end()),
        (Offset(6), Offset(6))
    );
    for o in 6..10 {
        let _ = queue(&log, o);
    }
    // A prefix cut reaching into the queue (offset 8 is queued, not yet
    // written): the log starts there and keeps the rest.
    log.truncate_prefix_to(Offset(8)).unwrap();
    assert_eq!(log.log_start_offset(), Offset(8));
    assert_eq!(log.log_end_offset(), Offset(10));
    let _ = queue(&log, 10);
    log.close().unwrap();
    let disk = disk.crash_with(CrashPlan::LoseUnsynced);
    let log = open(&shared(&disk), SyncPolicy::Never);
    assert_eq!(records(&log), vec![8, 9, 10]);
}

#[test]
fn a_failed_round_fails_the_queued_completions() {
    let (disk, fs) = sim(14);
    let log = open(&fs, SyncPolicy::GroupCommit);
    queue(&log, 0).recv().unwrap().unwrap();
    // The next write fails: the round's direct write.
    disk.inject_fault(FaultOp::Write, 1, FaultKind::Eio);
    let done = queue(&log, 1).recv().unwrap();
    assert!(
        done.is_err(),
        "a queued append whose round failed is not acknowledged"
    );
    assert!(log.poisoned().is_some());
    assert!(log
        .append_at_queued(Offset(2), Epoch(1), &[payload(2, 0, 100)])
        .is_err());
}

/// `append_at_queued_with`: records a caller encodes straight into the
/// batch read back exactly as the same records appended as slices, and
/// survive a power cut once durable; an encoder that fails, or that writes
/// more than the batch limit, queues nothing and poisons nothing.
#[test]
fn records_encoded_into_the_batch_are_the_same_records() {
    let (disk, fs) = sim(21);
    let log = open(&fs, SyncPolicy::GroupCommit);
    let records: Vec<Vec<u8>> = (0..5u8)
        .map(|i| payload(u64::from(i), 0, 30 + 17 * usize::from(i)))
        .collect();
    let hint = 40 + records.iter().map(|r| r.len() as u64 + 4).sum::<u64>();
    log.append_at_queued_with(Offset(0), Epoch(1), records.len(), hint, |i, out| {
        out.extend_from_slice(&records[i]);
        Ok(())
    })
    .unwrap();
    log.append_at_queued(Offset(5), Epoch(1), &records).unwrap();
    log.wait_durable(Offset(10)).unwrap();
    // A failing encoder, and one that overruns the limit: refused, nothing
    // queued, the log usable.
    let e = log
        .append_at_queued_with(Offset(10), Epoch(1), 2, 100, |i, out| {
            if i == 1 {
                return Err(std::io::Error::other("cannot encode"));
            }
            out.extend_from_slice(b"x");
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(e, quorumlog_log::Error::RecordEncoding(_)), "{e}");
    let huge = log
        .append_at_queued_with(Offset(10), Epoch(1), 1, 100, |_, out| {
            out.resize(out.len() + (1 << 20), 7);
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(huge, quorumlog_log::Error::BatchTooLarge { .. }),
        "{huge}"
    );
    assert_eq!(log.queued_end(), Offset(10));
    assert!(log.poisoned().is_none());
    drop(log);
    let fs = shared(&disk.crash_with(CrashPlan::LoseUnsynced));
    let log = open(&fs, SyncPolicy::GroupCommit);
    let got = quorumlog_testkit::read_records(&log, Offset(0)).unwrap();
    let bytes: Vec<Vec<u8>> = got.into_iter().map(|(_, _, r)| r).collect();
    let mut want = records.clone();
    want.extend(records);
    assert_eq!(bytes, want);
}
