//! A follower's fetch position, with `KRaft`'s semantics: valid on the
//! leader's log, diverging (truncate to the end of the leader's largest
//! epoch not newer than the follower's), or snapshot needed (before the log
//! start, at it with another epoch, or older than the oldest snapshot).
//! Checked on a model log and on a real `Log` on the simulated disk.
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
use quorumlog_io::SimFs;
use quorumlog_log::Log;
use quorumlog_raft::{
    kraft::validate_offset_and_epoch, kraft::FetchPosition, kraft::LogView, Error,
};
use quorumlog_snapshot::SnapshotId;
use quorumlog_testkit::small_log_options;

/// A log from `start` with epochs starting at the given offsets, ending at
/// `end`.
struct Model {
    start: u64,
    end: u64,
    epochs: Vec<(u64, u64)>,
}

impl LogView for Model {
    fn log_start_offset(&self) -> Offset {
        Offset(self.start)
    }
    fn log_end_offset(&self) -> Offset {
        Offset(self.end)
    }
    fn end_offset_for_epoch(&self, epoch: Epoch) -> Option<(Epoch, Offset)> {
        let i = self.epochs.iter().rposition(|&(e, _)| e <= epoch.0)?;
        let end = self.epochs.get(i + 1).map_or(self.end, |&(_, s)| s);
        Some((Epoch(self.epochs[i].0), Offset(end)))
    }
}

fn snap(end: u64, epoch: u64) -> SnapshotId {
    SnapshotId {
        end_offset: Offset(end),
        epoch: Epoch(epoch),
    }
}

fn check(
    log: &impl LogView,
    snaps: (Option<SnapshotId>, Option<SnapshotId>),
    o: u64,
    e: u64,
) -> FetchPosition {
    validate_offset_and_epoch(log, snaps, Offset(o), Epoch(e)).unwrap()
}

fn diverging(end: u64, epoch: u64) -> FetchPosition {
    FetchPosition::Diverging {
        end_offset: Offset(end),
        epoch: Epoch(epoch),
    }
}

#[test]
fn positions_on_an_uncompacted_log() {
    // Epoch 1 at [0, 10), epoch 3 at [10, 25), epoch 4 at [25, 30).
    let log = Model {
        start: 0,
        end: 30,
        epochs: vec![(1, 0), (3, 10), (4, 25)],
    };
    let none = (None, None);
    assert_eq!(check(&log, none, 0, 0), FetchPosition::Valid);
    assert_eq!(check(&log, none, 7, 1), FetchPosition::Valid);
    assert_eq!(check(&log, none, 10, 1), FetchPosition::Valid);
    assert_eq!(check(&log, none, 30, 4), FetchPosition::Valid);
    // The follower has more of epoch 1 than the leader: back to 10.
    assert_eq!(check(&log, none, 12, 1), diverging(10, 1));
    // Epoch 2 never existed here: the end of epoch 1.
    assert_eq!(check(&log, none, 14, 2), diverging(10, 1));
    // Beyond the leader's end in its last epoch.
    assert_eq!(check(&log, none, 31, 4), diverging(30, 4));
    // A newer epoch than the leader's last: the leader's end.
    assert_eq!(check(&log, none, 30, 5), diverging(30, 4));
}

#[test]
fn positions_around_a_snapshot_and_the_log_start() {
    // Snapshots at 10 (epoch 1) and 20 (epoch 3); the log starts at 10.
    let log = Model {
        start: 10,
        end: 30,
        epochs: vec![(3, 10), (4, 25)],
    };
    let snaps = (Some(snap(10, 1)), Some(snap(20, 3)));
    let latest = FetchPosition::SnapshotNeeded(snap(20, 3));
    assert_eq!(check(&log, snaps, 5, 1), latest, "before the log start");
    assert_eq!(
        check(&log, snaps, 10, 2),
        latest,
        "at the start, another epoch"
    );
    assert_eq!(
        check(&log, snaps, 15, 0),
        latest,
        "older than the oldest snapshot"
    );
    assert_eq!(
        check(&log, snaps, 10, 1),
        FetchPosition::Valid,
        "at the start, its epoch"
    );
    assert_eq!(check(&log, snaps, 15, 3), FetchPosition::Valid);
    assert_eq!(check(&log, snaps, 26, 3), diverging(25, 3));
}

#[test]
fn below_the_start_without_a_snapshot_is_a_typed_error() {
    let log = Model {
        start: 10,
        end: 30,
        epochs: vec![(3, 10)],
    };
    assert!(matches!(
        validate_offset_and_epoch(&log, (None, None), Offset(5), Epoch(3)),
        Err(Error::OffsetOutOfRange {
            offset: Offset(5),
            start: Offset(10),
            ..
        })
    ));
}

#[test]
fn the_same_answers_from_a_real_log() {
    let sim = SimFs::new(1);
    let fs: SharedFs = Arc::new(sim);
    format_with(
        &fs,
        Path::new("/data"),
        Meta::new(ClusterId(1), NodeId(1), DirectoryId(11)),
    )
    .unwrap();
    let dd = Arc::new(DataDir::open(fs, Path::new("/data"), &OpenOptions::default()).unwrap());
    let mut log = Log::open(dd, small_log_options()).unwrap();
    for (epoch, count) in [(1u64, 10u64), (3, 15), (4, 5)] {
        for _ in 0..count {
            log.append_as_leader(Epoch(epoch), &[b"r".as_slice()])
                .unwrap();
        }
    }
    log.flush().unwrap();
    let model = Model {
        start: 0,
        end: 30,
        epochs: vec![(1, 0), (3, 10), (4, 25)],
    };
    for o in 0..=32 {
        for e in 0..=5 {
            assert_eq!(
                check(&log, (None, None), o, e),
                check(&model, (None, None), o, e),
                "offset {o}, epoch {e}"
            );
        }
    }
}
