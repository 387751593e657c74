//! Reads through the store return exactly the entries of `[from, to)`
//! (or the first one past `max_bytes`), each with its epoch; committed
//! reads stop at the high watermark; a read below the log start names the
//! log start and the latest snapshot; `epoch_at` answers for every offset
//! in the log and nothing outside it.
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
use quorumlog_io::SimFs;
use quorumlog_log::SyncPolicy;
use quorumlog_raft::{Error, Isolation, KraftReplica, StoreOptions};
use quorumlog_snapshot::{SnapshotId, WriterOptions};
use quorumlog_testkit::small_log_options;

const DIR: &str = "/data";

fn record(o: u64) -> Vec<u8> {
    format!("entry {o:04}").into_bytes()
}

/// A store with 30 entries: offsets 0–9 in epoch 1 (one batch of 10),
/// 10–29 in epoch 2 (batches of 4); high watermark 17.
fn store() -> KraftReplica {
    let fs: SharedFs = Arc::new(SimFs::new(1));
    let options = StoreOptions {
        log: small_log_options(),
        sync: SyncPolicy::GroupCommit,
    };
    quorumlog_raft::Store::format(
        &fs,
        Path::new(DIR),
        Meta::new(ClusterId(1), NodeId(1), DirectoryId(11)),
        None,
        &options,
    )
    .unwrap();
    let expect = quorumlog_raft::Identity::of(&Meta::new(ClusterId(1), NodeId(1), DirectoryId(11)));
    let store = KraftReplica::open(&fs, Path::new(DIR), &expect, &options)
        .unwrap()
        .0;
    for epoch in 1..=2 {
        let mut e = store.election();
        let got = e.become_candidate().unwrap();
        assert_eq!(got, Epoch(epoch));
        e.become_leader().unwrap();
        drop(e);
        let (from, to, per) = if epoch == 1 { (0, 10, 10) } else { (10, 30, 4) };
        let mut o = from;
        while o < to {
            let recs: Vec<Vec<u8>> = (o..(o + per).min(to)).map(record).collect();
            store.append_durable(Epoch(epoch), &recs).unwrap();
            o += per;
        }
    }
    store.set_high_watermark(Offset(17)).unwrap();
    store
}

fn offsets(entries: &[quorumlog_raft::Entry]) -> Vec<u64> {
    entries.iter().map(|e| e.offset.0).collect()
}

#[test]
fn exactly_the_range_asked_for_with_epochs() {
    let s = store();
    for (from, to) in [(0, 30), (3, 7), (9, 11), (12, 13), (29, 30), (30, 30)] {
        let got = s
            .read_entries(Offset(from), Offset(to), u64::MAX, Isolation::Uncommitted)
            .unwrap();
        assert_eq!(
            offsets(&got),
            (from..to).collect::<Vec<_>>(),
            "[{from}, {to})"
        );
        for e in &got {
            assert_eq!(e.bytes, record(e.offset.0));
            let epoch = if e.offset.0 < 10 { 1 } else { 2 };
            assert_eq!(e.epoch, Epoch(epoch));
            assert_eq!(s.epoch_at(e.offset), Some(Epoch(epoch)));
        }
    }
    assert_eq!(s.epoch_at(Offset(30)), None);
}

#[test]
fn max_bytes_bounds_a_read_but_returns_at_least_one_entry() {
    let s = store();
    let one = record(0).len() as u64;
    let got = s
        .read_entries(Offset(2), Offset(30), 3 * one, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(offsets(&got), vec![2, 3, 4]);
    let got = s
        .read_entries(Offset(2), Offset(30), 1, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(offsets(&got), vec![2]);
}

#[test]
fn committed_reads_stop_at_the_high_watermark() {
    let s = store();
    let got = s
        .read_entries(Offset(12), Offset(30), u64::MAX, Isolation::Committed)
        .unwrap();
    assert_eq!(offsets(&got), (12..17).collect::<Vec<_>>());
    let got = s
        .read_entries(Offset(17), Offset(30), u64::MAX, Isolation::Committed)
        .unwrap();
    assert!(got.is_empty());
}

#[test]
fn below_the_start_names_the_start_and_the_latest_snapshot() {
    let s = store();
    let id = SnapshotId {
        end_offset: Offset(12),
        epoch: Epoch(2),
    };
    let mut w = s
        .snapshots()
        .create(id, b"", WriterOptions::default())
        .unwrap();
    w.write(b"state").unwrap();
    w.freeze().unwrap();
    s.log().truncate_prefix_to(Offset(12)).unwrap();
    assert_eq!(s.log().log_start_offset(), Offset(12));
    let r = s.read_entries(Offset(0), Offset(5), u64::MAX, Isolation::Uncommitted);
    assert!(matches!(
        r,
        Err(Error::OffsetOutOfRange { offset: Offset(0), start: Offset(12), snapshot: Some(got), .. }) if got == id
    ));
    assert!(matches!(
        s.read_entries(Offset(31), Offset(40), u64::MAX, Isolation::Uncommitted),
        Err(Error::OffsetOutOfRange { .. })
    ));
}
