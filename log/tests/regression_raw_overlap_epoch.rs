//! Regression: a raw follower batch that overlaps the log's end was
//! accepted even when the follower held the overlapped records in another
//! epoch. `append_raw` re-encoded the batch from the end, trusting that
//! the records below it matched: leader epochs [30, 30, 32, 32], follower
//! [0, 3) in epoch 30, the leader's batch [2, 4) in epoch 32 appended →
//! `Ok`, follower [30, 30, 30, 32], a record the leader never wrote at 2.
//!
//! Invariant: a follower's log never holds a record under an epoch the
//! leader's log does not hold it under (Raft's log matching): an overlap
//! in another epoch is refused with `RawOverlapDiverges`, nothing written;
//! an overlap in the same epoch (a follower installed from a snapshot
//! inside the leader's batch, or re-sent records) is still accepted.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;

use common::{format_dir, open_dd, small_options};
use quorumlog_checkpoint::{Epoch, Offset, SharedFs};
use quorumlog_io::SimFs;
use quorumlog_log::{DurableLog, Error, SyncPolicy};

fn log(fs: &SharedFs, dir: &str) -> DurableLog {
    format_dir(fs, Path::new(dir));
    DurableLog::open(
        open_dd(fs, Path::new(dir)),
        small_options(),
        SyncPolicy::GroupCommit,
    )
    .unwrap()
}

fn raw_from(leader: &DurableLog, from: u64) -> Vec<Vec<u8>> {
    let read = leader.read(Offset(from), 1 << 20).unwrap();
    read.iter().map(|b| b.raw().to_vec()).collect()
}

fn records(log: &DurableLog) -> Vec<(Epoch, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let read = log.read(at, 1 << 20).unwrap();
        for b in read.iter() {
            for r in b.to_vecs().unwrap() {
                out.push((b.epoch(), r));
            }
            at = b.next_offset();
        }
    }
    out
}

#[test]
fn an_overlap_in_another_epoch_is_refused_and_nothing_is_written() {
    let fs: SharedFs = std::sync::Arc::new(SimFs::new(1));
    let leader = log(&fs, "/leader");
    leader
        .append_at(Offset(0), Epoch(30), &[b"L0", b"L1"])
        .unwrap();
    leader
        .append_at(Offset(2), Epoch(32), &[b"L2", b"L3"])
        .unwrap();
    let follower = log(&fs, "/follower");
    follower
        .append_at(Offset(0), Epoch(30), &[b"L0", b"L1", b"F2"])
        .unwrap();
    let raw = raw_from(&leader, 2);
    let refs: Vec<&[u8]> = raw.iter().map(Vec::as_slice).collect();
    let r = follower.append_raw(&refs);
    assert!(
        matches!(
            r,
            Err(Error::RawOverlapDiverges {
                offset: Offset(2),
                log: Some(Epoch(30)),
                batch: Epoch(32)
            })
        ),
        "{r:?}"
    );
    assert_eq!(follower.log_end_offset(), Offset(3));
    assert_eq!(records(&follower)[2], (Epoch(30), b"F2".to_vec()));

    // The follower truncates where it diverges; then the same batch lands.
    follower.truncate_to(Offset(2)).unwrap();
    let info = follower.append_raw(&refs).unwrap();
    follower.wait_durable(info.next_offset).unwrap();
    assert_eq!(records(&follower), records(&leader));
}

#[test]
fn an_overlap_in_the_same_epoch_is_appended_from_the_end() {
    let fs: SharedFs = std::sync::Arc::new(SimFs::new(2));
    let leader = log(&fs, "/leader");
    leader
        .append_at(Offset(0), Epoch(5), &[b"a", b"b", b"c", b"d"])
        .unwrap();
    let follower = log(&fs, "/follower");
    follower
        .append_at(Offset(0), Epoch(5), &[b"a", b"b"])
        .unwrap();
    let raw = raw_from(&leader, 0);
    let refs: Vec<&[u8]> = raw.iter().map(Vec::as_slice).collect();
    let info = follower.append_raw(&refs).unwrap();
    assert_eq!((info.base_offset, info.next_offset), (Offset(2), Offset(4)));
    follower.wait_durable(info.next_offset).unwrap();
    assert_eq!(records(&follower), records(&leader));
}
