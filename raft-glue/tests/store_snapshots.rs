//! Snapshots through the store: created only for committed state with the
//! log's own epoch at the last covered offset; installed from the leader
//! in chunks, after which the follower's log continues the snapshot (kept
//! when it already holds the snapshot's last entry with its epoch,
//! restarted at the snapshot's end otherwise); a follower behind the
//! leader's log start is told to fetch the snapshot.
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

use quorumlog_checkpoint::{Epoch, NodeId, Offset, SharedFs};
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_raft::{Error, FetchPosition, KraftReplica};
use quorumlog_snapshot::{SnapshotId, WriterOptions};

fn store(node: u64) -> KraftReplica {
    common::store(node, node)
}

/// A leader with 20 entries in its epoch, committed up to 15.
fn leader() -> (KraftReplica, Epoch) {
    let s = store(1);
    let epoch = {
        let mut e = s.election();
        let epoch = e.become_candidate().unwrap();
        e.become_leader().unwrap();
        epoch
    };
    for i in 0..20u8 {
        s.append_durable(epoch, &[vec![i; 200]]).unwrap();
    }
    s.set_high_watermark(Offset(15)).unwrap();
    (s, epoch)
}

fn snapshot(s: &KraftReplica, end: u64, epoch: Epoch) -> SnapshotId {
    let mut w = s
        .create_snapshot(Offset(end), epoch, b"meta", WriterOptions::default())
        .unwrap();
    w.write(&vec![7u8; 3000]).unwrap();
    w.freeze().unwrap().id
}

#[test]
fn only_committed_state_with_the_logs_epoch_is_snapshotted() {
    let (s, epoch) = leader();
    assert!(matches!(
        s.create_snapshot(Offset(16), epoch, b"", WriterOptions::default()),
        Err(Error::SnapshotRefused {
            why: "beyond the high watermark",
            ..
        })
    ));
    assert!(matches!(
        s.create_snapshot(
            Offset(10),
            Epoch(epoch.0 + 1),
            b"",
            WriterOptions::default()
        ),
        Err(Error::SnapshotRefused { .. })
    ));
    let id = snapshot(&s, 10, epoch);
    assert_eq!(s.snapshots().latest().unwrap().id, id);
    // Cleaning up to the snapshot (never past it): a follower behind the
    // new log start needs it.
    assert_eq!(s.clean_log_prefix(Offset(18)).unwrap(), Offset(10));
    assert_eq!(s.log().log_start_offset(), Offset(10));
    assert_eq!(
        s.validate_offset_and_epoch(Offset(4), epoch).unwrap(),
        FetchPosition::SnapshotNeeded(id)
    );
}

/// Installs `id` from `leader` into `follower` in 1 KiB chunks.
fn install(leader: &KraftReplica, follower: &KraftReplica, id: SnapshotId) {
    let size = leader.snapshots().get(id).unwrap().size_bytes;
    let mut inst = follower.snapshots().begin_install(id, size).unwrap();
    while inst.position() < size {
        let chunk = leader
            .snapshots()
            .read_chunk(id, inst.position(), 1024)
            .unwrap();
        let at = inst.position();
        inst.write_chunk(at, &chunk).unwrap();
    }
    inst.finish().unwrap();
}

#[test]
fn an_installed_snapshot_restarts_a_lagging_followers_log() {
    let (l, epoch) = leader();
    let id = snapshot(&l, 12, epoch);
    let f = store(2);
    f.election().become_follower(epoch, NodeId(1)).unwrap();
    install(&l, &f, id);
    assert_eq!(f.truncate_to_latest_snapshot().unwrap(), id);
    assert_eq!(f.log().log_start_offset(), Offset(12));
    assert_eq!(f.log().log_end_offset(), Offset(12));
    // Its position is now valid on the leader's log.
    assert_eq!(
        l.validate_offset_and_epoch(Offset(12), epoch).unwrap(),
        FetchPosition::Valid
    );
}

#[test]
fn a_follower_that_holds_the_snapshots_last_entry_keeps_its_log() {
    let (l, epoch) = leader();
    let f = store(2);
    f.election().become_follower(epoch, NodeId(1)).unwrap();
    // The follower replicated the first 14 entries.
    let mut raw = Vec::new();
    let mut at = Offset(0);
    while at < Offset(14) {
        let batches = l.read(at, 1 << 20).unwrap();
        for b in batches.iter().filter(|b| b.base_offset() < Offset(14)) {
            raw.push(b.raw().to_vec());
        }
        at = batches.next_offset().unwrap();
    }
    let refs: Vec<&[u8]> = raw.iter().map(Vec::as_slice).collect();
    f.append_as_follower(&refs).unwrap();
    let id = snapshot(&l, 12, epoch);
    install(&l, &f, id);
    f.truncate_to_latest_snapshot().unwrap();
    assert_eq!(f.log().log_start_offset(), Offset(0), "kept: cleaned later");
    assert_eq!(f.log().log_end_offset(), Offset(14));
}

#[test]
fn snapshot_ids_and_retention_through_the_store() {
    let (s, epoch) = leader();
    assert_eq!((s.earliest_snapshot(), s.latest_snapshot()), (None, None));
    let a = snapshot(&s, 5, epoch);
    let b = snapshot(&s, 10, epoch);
    let c = snapshot(&s, 15, epoch);
    assert_eq!(
        (s.earliest_snapshot(), s.latest_snapshot()),
        (Some(a), Some(c))
    );
    assert_eq!(s.end_offset_for_epoch(epoch), Some((epoch, Offset(20))));
    let removed = s
        .retain_snapshots(quorumlog_snapshot::Retention {
            keep_latest: 1,
            max_total_bytes: None,
        })
        .unwrap();
    assert_eq!(removed, vec![a, b]);
    assert_eq!(
        (s.earliest_snapshot(), s.latest_snapshot()),
        (Some(c), Some(c))
    );
}

/// Opens node 7's store (`two_epochs`) on `fs`.
fn open_on(fs: &SharedFs) -> (KraftReplica, quorumlog_raft::OpenReport) {
    let expect = quorumlog_raft::Identity::of(&common::meta(7));
    KraftReplica::open(fs, Path::new(common::DIR), &expect, &common::options()).unwrap()
}

/// A store on `sim` with epoch 1 at [0, 10) and epoch 2 at [10, 20),
/// committed, and a snapshot at 20.
fn two_epochs(sim: &SimFs) -> KraftReplica {
    let fs: SharedFs = Arc::new(sim.clone());
    quorumlog_raft::Store::format(
        &fs,
        Path::new(common::DIR),
        common::meta(7),
        None,
        &common::options(),
    )
    .unwrap();
    let s = open_on(&fs).0;
    for epoch in 1..=2u64 {
        let mut e = s.election();
        e.become_candidate().unwrap();
        e.become_leader().unwrap();
        drop(e);
        for _ in 0..10 {
            s.append_durable(Epoch(epoch), &[b"r".as_slice()]).unwrap();
        }
    }
    s.set_high_watermark(Offset(20)).unwrap();
    assert_eq!(s.last_purged(), None);
    snapshot(&s, 20, Epoch(2));
    s
}

/// Invariant: the id of the last deleted entry (offset, epoch) is known at
/// every purge point, the epoch boundary included, and survives a power cut
/// (it is written with the log start).
#[test]
fn the_log_start_keeps_its_epoch_at_any_purge_point() {
    for (cut, epoch) in [(1u64, 1u64), (9, 1), (10, 1), (11, 2), (15, 2), (20, 2)] {
        let sim = SimFs::new(cut);
        let s = two_epochs(&sim);
        assert_eq!(
            s.clean_log_prefix(Offset(cut)).unwrap(),
            Offset(cut),
            "cut {cut}"
        );
        let expected = Some((Offset(cut - 1), Epoch(epoch)));
        assert_eq!(s.last_purged(), expected, "cut {cut}");
        drop(s);
        let fs: SharedFs = Arc::new(sim.crash_with(CrashPlan::LoseUnsynced));
        let s = open_on(&fs).0;
        assert_eq!(s.log_start_offset(), Offset(cut));
        assert_eq!(s.last_purged(), expected, "cut {cut}, after a power cut");
    }
}

/// A log restarted at a snapshot (an install) knows the snapshot's epoch
/// for the last purged entry even once that snapshot is deleted.
#[test]
fn a_restart_at_a_snapshot_keeps_the_snapshots_epoch() {
    let sim = SimFs::new(3);
    let s = two_epochs(&sim);
    // A follower installing the leader's snapshot at 40, epoch 5.
    let leader = store(8);
    let mut e = leader.election();
    e.become_unattached(Epoch(4)).unwrap();
    e.become_candidate().unwrap();
    e.become_leader().unwrap();
    drop(e);
    for _ in 0..40 {
        leader.append_durable(Epoch(5), &[b"x".as_slice()]).unwrap();
    }
    leader.set_high_watermark(Offset(40)).unwrap();
    let id = snapshot(&leader, 40, Epoch(5));
    let size = leader.snapshots().get(id).unwrap().size_bytes;
    let mut install = s.install_snapshot(id, size).unwrap();
    install
        .write_chunk(0, &leader.read_snapshot_chunk(id, 0, usize::MAX).unwrap())
        .unwrap();
    install.finish().unwrap();
    assert_eq!(
        (s.log_start_offset(), s.log_end_offset()),
        (Offset(40), Offset(40))
    );
    assert_eq!(s.last_purged(), Some((Offset(39), Epoch(5))));
    // Only the latest snapshot kept: the log still knows.
    s.retain_snapshots(quorumlog_snapshot::Retention {
        keep_latest: 1,
        max_total_bytes: None,
    })
    .unwrap();
    drop(s);
    let fs: SharedFs = Arc::new(sim.crash_with(CrashPlan::LoseUnsynced));
    let s = open_on(&fs).0;
    assert_eq!(s.last_purged(), Some((Offset(39), Epoch(5))));
}

/// Invariant: entries a snapshot covers are committed and never truncated,
/// even when the high watermark found after a crash is lower (it is made
/// durable lazily): open raises it to the snapshot's end, and a truncation
/// below the snapshot's end is refused.
#[test]
fn a_snapshot_bounds_truncation_even_after_a_crash() {
    let sim = SimFs::new(11);
    let s = two_epochs(&sim);
    drop(s);
    let fs: SharedFs = Arc::new(sim.crash_with(CrashPlan::LoseUnsynced));
    let s = open_on(&fs).0;
    assert_eq!(s.high_watermark(), Some(Offset(20)));
    assert!(matches!(
        s.truncate_to(Offset(15)),
        Err(Error::BelowHighWatermark {
            high_watermark: Offset(20),
            ..
        })
    ));
    assert_eq!(s.log_end_offset(), Offset(20));
}
