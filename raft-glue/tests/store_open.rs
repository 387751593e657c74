//! The store: format with an initial offset, open with reconciliation (a
//! log behind the latest snapshot restarts at its end; entries below the
//! log start without a snapshot are refused, invariant 7), leader appends
//! only in a durably led epoch, and truncation never below the high
//! watermark.
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
    ClusterId, DataDir, DirectoryId, Epoch, Meta, NodeId, Offset, OpenOptions, SharedFs,
};
use quorumlog_io::SimFs;
use quorumlog_log::{Log, SyncPolicy};
use quorumlog_raft::{Error, FetchPosition, KraftReplica, StoreOptions};
use quorumlog_snapshot::{SnapshotId, WriterOptions};
use quorumlog_testkit::{read_records, small_log_options};

const DIR: &str = "/data";

fn options() -> StoreOptions {
    StoreOptions {
        log: small_log_options(),
        sync: SyncPolicy::GroupCommit,
    }
}

fn formatted(initial: Option<Offset>) -> SharedFs {
    let fs: SharedFs = Arc::new(SimFs::new(1));
    quorumlog_raft::Store::format(
        &fs,
        Path::new(DIR),
        Meta::new(ClusterId(1), NodeId(1), DirectoryId(11)),
        initial,
        &options(),
    )
    .unwrap();
    fs
}

/// The identity `formatted` gives the directory.
fn expect() -> quorumlog_raft::Identity {
    quorumlog_raft::Identity::of(&Meta::new(ClusterId(1), NodeId(1), DirectoryId(11)))
}

fn open(fs: &SharedFs) -> KraftReplica {
    KraftReplica::open(fs, Path::new(DIR), &expect(), &options())
        .unwrap()
        .0
}

/// Makes this node leader of a new epoch; returns the epoch.
fn lead(store: &KraftReplica) -> Epoch {
    let mut e = store.election();
    let epoch = e.become_candidate().unwrap();
    e.become_leader().unwrap();
    epoch
}

#[test]
fn a_formatted_store_starts_at_its_initial_offset_and_appends_as_leader_only() {
    let fs = formatted(Some(Offset(1)));
    let store = open(&fs);
    assert_eq!(store.log().log_start_offset(), Offset(1));
    assert_eq!(store.log().log_end_offset(), Offset(1));
    // Not a leader: refused, typed, nothing written.
    assert!(matches!(
        store.append_durable(Epoch(1), &[b"x".as_slice()]),
        Err(Error::WrongRole { .. })
    ));
    let epoch = lead(&store);
    let info = store
        .append_durable(epoch, &[b"a".as_slice(), b"b"])
        .unwrap();
    assert_eq!((info.base_offset, info.next_offset), (Offset(1), Offset(3)));
    assert!(store
        .append_durable(Epoch(epoch.0 + 1), &[b"c".as_slice()])
        .is_err());
    drop(store);
    // Reopened: the former leader comes back resigned; the records stay.
    let store = open(&fs);
    assert!(store.append_durable(epoch, &[b"c".as_slice()]).is_err());
    let got = read_records(store.log(), Offset(1)).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].2, b"a");
}

#[test]
fn a_log_behind_the_latest_snapshot_restarts_at_its_end() {
    let fs = formatted(None);
    let store = open(&fs);
    let epoch = lead(&store);
    for _ in 0..5 {
        store.append_durable(epoch, &[b"r".as_slice()]).unwrap();
    }
    // A snapshot (installed from the leader, say) well past the log end.
    let id = SnapshotId {
        end_offset: Offset(50),
        epoch,
    };
    let mut w = store
        .snapshots()
        .create(id, b"", WriterOptions::default())
        .unwrap();
    w.write(b"state").unwrap();
    w.freeze().unwrap();
    drop(store);
    let (store, report) = KraftReplica::open(&fs, Path::new(DIR), &expect(), &options()).unwrap();
    assert_eq!(report.restarted_at_snapshot, Some(id));
    assert_eq!(store.log().log_start_offset(), Offset(50));
    assert_eq!(store.log().log_end_offset(), Offset(50));
    // A follower at the snapshot's position is on this log; behind it, it
    // needs the snapshot.
    assert_eq!(
        store.validate_offset_and_epoch(Offset(50), epoch).unwrap(),
        FetchPosition::Valid
    );
    assert_eq!(
        store.validate_offset_and_epoch(Offset(3), epoch).unwrap(),
        FetchPosition::SnapshotNeeded(id)
    );
}

#[test]
fn entries_deleted_without_a_snapshot_are_refused_at_open() {
    let fs = formatted(None);
    let store = open(&fs);
    let epoch = lead(&store);
    for _ in 0..40 {
        store
            .append_durable(epoch, &[[7u8; 100].as_slice()])
            .unwrap();
    }
    let id = SnapshotId {
        end_offset: Offset(5),
        epoch,
    };
    let mut w = store
        .snapshots()
        .create(id, b"", WriterOptions::default())
        .unwrap();
    w.write(b"state").unwrap();
    w.freeze().unwrap();
    drop(store);
    // Something deletes the prefix past the snapshot (not through the
    // store, whose cleaning is bounded by the latest snapshot).
    {
        let dd =
            Arc::new(DataDir::open(fs.clone(), Path::new(DIR), &OpenOptions::default()).unwrap());
        let mut log = Log::open(dd, small_log_options()).unwrap();
        let bases = log.segment_bases();
        log.truncate_prefix_to(bases[bases.len() - 1]).unwrap();
        log.close().unwrap();
    }
    assert!(matches!(
        KraftReplica::open(&fs, Path::new(DIR), &expect(), &options()),
        Err(Error::MissingSnapshot { latest: Some(s), .. }) if s == id
    ));
}

#[test]
fn truncation_never_goes_below_the_high_watermark() {
    let fs = formatted(None);
    let store = open(&fs);
    let epoch = lead(&store);
    for _ in 0..10 {
        store.append_durable(epoch, &[b"r".as_slice()]).unwrap();
    }
    store.set_high_watermark(Offset(6)).unwrap();
    assert!(matches!(
        store.truncate_to(Offset(5)),
        Err(Error::BelowHighWatermark {
            offset: Offset(5),
            high_watermark: Offset(6)
        })
    ));
    assert_eq!(store.log().log_end_offset(), Offset(10));
    store.truncate_to(Offset(6)).unwrap();
    assert_eq!(store.log().log_end_offset(), Offset(6));
}

/// Invariant: a store no `KRaft` wing owns (openraft's, raft-rs's) pays
/// nothing for `KRaft`: an open and a close of an unchanged directory
/// write nothing that differs (the log's clean-close checkpoints are
/// rewritten with the same bytes), no election state is moved up to the
/// log's epoch, and no voter-history file appears. The wing's open does
/// both (its restart rule), which is what the store's no longer does.
#[test]
fn a_plain_store_open_and_close_write_nothing_for_kraft() {
    let fs = formatted(None);
    let dir = Path::new(DIR);
    let (s, _) = quorumlog_raft::Store::open(&fs, dir, &expect(), &options()).unwrap();
    let records: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 50]).collect();
    s.append_replicated(Offset(0), Epoch(5), &records).unwrap();
    s.wait_durable(Offset(10)).unwrap();
    s.set_high_watermark(Offset(10)).unwrap();
    s.close().unwrap();
    let before = quorumlog_testkit::dir_image(fs.as_ref(), dir).unwrap();
    let (s, _) = quorumlog_raft::Store::open(&fs, dir, &expect(), &options()).unwrap();
    assert_eq!(s.quorum_state().epoch, Epoch(0), "no election write-back");
    s.close().unwrap();
    let after = quorumlog_testkit::dir_image(fs.as_ref(), dir).unwrap();
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for (path, bytes) in &before {
        assert_eq!(Some(bytes), after.get(path), "{} changed", path.display());
    }
    assert!(
        !after
            .keys()
            .any(|p| p.to_string_lossy().contains("voter-history")),
        "no voter history"
    );
    // The wing's open applies `KRaft`'s restart rule.
    let (r, _) = KraftReplica::open(&fs, dir, &expect(), &options()).unwrap();
    assert_eq!(r.quorum_state().epoch, Epoch(5));
}
