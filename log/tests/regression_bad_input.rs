//! Regression (issue 9, bug 5): bad input accepted or panicking.
//! - Two `Log`s (or `DurableLog`s) opened on one `DataDir` in one process
//!   both appended offset 0 to the same file: the file lock covers other
//!   processes only. Now the second open fails with `LogAlreadyOpen` before
//!   reading or repairing anything (invariant: one writer per data
//!   directory).
//! - `truncate_fully_and_start_at(u64::MAX - 1)` then three appends was
//!   accepted with wrapping offsets, `flush` then panicked and reopen gave an
//!   empty log. Now an append whose offsets would pass `u64::MAX` is a typed
//!   `OffsetOverflow` and writes nothing (invariant: offsets never wrap).
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

use common::{open_dd, open_log, read_all, sim, small_options, DIR};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_log::{DurableLog, Error, FollowerBatch, Log, SyncPolicy};

fn already_open(e: &Error) -> bool {
    matches!(
        e,
        Error::Checkpoint(quorumlog_checkpoint::Error::LogAlreadyOpen { .. })
    )
}

#[test]
fn one_log_per_data_directory_in_one_process() {
    let (_, fs) = sim(1);
    let dd = open_dd(&fs, Path::new(DIR));
    let mut first = Log::open(Arc::clone(&dd), small_options()).unwrap();
    let second = Log::open(Arc::clone(&dd), small_options()).unwrap_err();
    assert!(already_open(&second), "{second:?}");
    let durable =
        DurableLog::open(Arc::clone(&dd), small_options(), SyncPolicy::GroupCommit).unwrap_err();
    assert!(already_open(&durable), "{durable:?}");
    first.append_as_leader(Epoch(1), &[b"only"]).unwrap();
    first.close().unwrap();
    // Released on close (and on drop): the next open works and sees one
    // record at offset 0.
    let log = DurableLog::open(Arc::clone(&dd), small_options(), SyncPolicy::GroupCommit).unwrap();
    assert_eq!(log.log_end_offset(), Offset(1));
    assert!(already_open(
        &Log::open(Arc::clone(&dd), small_options()).unwrap_err()
    ));
    drop(log);
    let log = Log::open(dd, small_options()).unwrap();
    assert_eq!(read_all(&log, Offset(0)).len(), 1);
}

#[test]
fn offsets_never_wrap() {
    let (_, fs) = sim(2);
    let mut log = open_log(&fs, Path::new(DIR), &small_options()).unwrap();
    log.truncate_fully_and_start_at(Offset(u64::MAX - 1), None)
        .unwrap();
    let a = log.append_as_leader(Epoch(1), &[b"a"]).unwrap();
    assert_eq!(a.next_offset, Offset(u64::MAX));
    for _ in 0..2 {
        let e = log.append_as_leader(Epoch(1), &[b"b"]).unwrap_err();
        assert!(
            matches!(e, Error::OffsetOverflow { base, records: 1 } if base == Offset(u64::MAX)),
            "{e:?}"
        );
    }
    let two: [&[u8]; 2] = [b"x", b"y"];
    let e = log
        .append_as_follower(&[FollowerBatch {
            base_offset: Offset(u64::MAX),
            epoch: Epoch(1),
            records: &two,
        }])
        .unwrap_err();
    assert!(matches!(e, Error::OffsetOverflow { .. }), "{e:?}");
    assert_eq!(log.flush().unwrap(), Offset(u64::MAX));
    log.close().unwrap();
    let log = open_log(&fs, Path::new(DIR), &small_options()).unwrap();
    assert_eq!(
        (log.log_start_offset(), log.log_end_offset()),
        (Offset(u64::MAX - 1), Offset(u64::MAX))
    );
    let all = read_all(&log, Offset(u64::MAX - 1));
    assert_eq!(all, vec![(u64::MAX - 1, Epoch(1), b"a".to_vec())]);
    drop(log);

    // The same through DurableLog's write-combining queue.
    let dd = open_dd(&fs, Path::new(DIR));
    let log = DurableLog::open(dd, small_options(), SyncPolicy::GroupCommit).unwrap();
    let e = log.append_durable(Epoch(1), &[b"c"]).unwrap_err();
    assert!(matches!(e, Error::OffsetOverflow { .. }), "{e:?}");
    assert_eq!(log.log_end_offset(), Offset(u64::MAX));
    log.close().unwrap();
}
