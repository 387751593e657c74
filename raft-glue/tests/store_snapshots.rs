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

use quorumlog_checkpoint::{Epoch, NodeId, Offset};
use quorumlog_raft::{Error, FetchPosition, Store};
use quorumlog_snapshot::{SnapshotId, WriterOptions};

fn store(node: u64) -> Store {
    common::store(node, node)
}

/// A leader with 20 entries in its epoch, committed up to 15.
fn leader() -> (Store, Epoch) {
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

fn snapshot(s: &Store, end: u64, epoch: Epoch) -> SnapshotId {
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
fn install(leader: &Store, follower: &Store, id: SnapshotId) {
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

#[test]
fn the_log_start_keeps_its_epoch_at_any_purge_point() {
    // Epoch 1 at [0, 10), epoch 2 at [10, 20), committed; a snapshot at 20.
    let s = store(7);
    for epoch in 1..=2u64 {
        let mut e = s.election();
        while e.epoch() < Epoch(epoch - 1) {
            let next = Epoch(e.epoch().0 + 1);
            e.become_unattached(next).unwrap();
        }
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
    // Asked to cut at the epoch boundary (10): the cut moves one entry
    // down, so the last purged entry's epoch (1) is still known.
    assert_eq!(s.clean_log_prefix(Offset(10)).unwrap(), Offset(9));
    assert_eq!(s.last_purged(), Some((Offset(8), Epoch(1))));
    assert_eq!(s.clean_log_prefix(Offset(15)).unwrap(), Offset(15));
    assert_eq!(s.last_purged(), Some((Offset(14), Epoch(2))));
    // At the snapshot's end (an epoch boundary or not): the snapshot's.
    assert_eq!(s.clean_log_prefix(Offset(20)).unwrap(), Offset(20));
    assert_eq!(s.last_purged(), Some((Offset(19), Epoch(2))));
}
