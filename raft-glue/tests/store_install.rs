//! Snapshot installs through the store: the finish publishes and makes the
//! log continue the snapshot; a crash between the two is completed at open
//! (a log that disagrees with the snapshot's last entry restarts at its
//! end, one that agrees is kept); unfinished installs older than the
//! latest snapshot are discarded at open, newer ones resume where they
//! stopped.
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

use common::{lead, meta, options, DIR};
use quorumlog_checkpoint::{Epoch, Offset, SharedFs};
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_raft::{Isolation, KraftReplica};
use quorumlog_snapshot::{SnapshotId, WriterOptions};

fn store_on(sim: &SimFs, node: u64) -> KraftReplica {
    let fs: SharedFs = Arc::new(sim.clone());
    quorumlog_raft::Store::format(&fs, Path::new(DIR), meta(node), None, &options()).unwrap();
    KraftReplica::open(
        &fs,
        Path::new(DIR),
        &quorumlog_raft::Identity::of(&meta(node)),
        &options(),
    )
    .unwrap()
    .0
}

fn reopen(sim: &SimFs) -> (KraftReplica, quorumlog_raft::OpenReport) {
    let fs: SharedFs = Arc::new(sim.crash_with(CrashPlan::LoseUnsynced));
    // Node 1 is the follower these tests reopen.
    let expect = quorumlog_raft::Identity::of(&meta(1));
    KraftReplica::open(&fs, Path::new(DIR), &expect, &options()).unwrap()
}

/// A leader (node 9) whose log holds `n` committed entries in its second
/// epoch, with a snapshot at `at`.
fn leader(n: u64, at: u64) -> (KraftReplica, SnapshotId) {
    let l = store_on(&SimFs::new(99), 9);
    lead(&l);
    let epoch = lead(&l);
    for _ in 0..n {
        l.append_durable(epoch, &[b"leader".as_slice()]).unwrap();
    }
    l.set_high_watermark(Offset(n)).unwrap();
    let mut w = l
        .create_snapshot(Offset(at), epoch, b"m", WriterOptions::default())
        .unwrap();
    w.write(b"the state").unwrap();
    let info = w.freeze().unwrap();
    (l, info.id)
}

/// Publishes `id` from `l` on `s` with the snapshot store alone: what a
/// crash right after an install's publish leaves (the log not yet cut).
fn publish_only(s: &KraftReplica, l: &KraftReplica, id: SnapshotId) {
    let size = l.snapshots().get(id).unwrap().size_bytes;
    let mut inst = s.snapshots().begin_install(id, size).unwrap();
    inst.write_chunk(0, &l.read_snapshot_chunk(id, 0, usize::MAX).unwrap())
        .unwrap();
    inst.finish().unwrap();
}

/// Copies the leader's batches in `[from, to)` to the follower, as fetches
/// would.
fn replicate(l: &KraftReplica, s: &KraftReplica, from: Offset, to: Offset) {
    let mut at = from;
    while at < to {
        let batches = l.read(at, u64::MAX).unwrap();
        let raw: Vec<&[u8]> = batches
            .iter()
            .take_while(|b| b.base_offset() < to)
            .map(|b| b.raw())
            .collect();
        s.append_as_follower(&raw).unwrap();
        at = s.log_end_offset();
    }
}

#[test]
fn a_log_disagreeing_with_a_published_install_restarts_at_it() {
    let (l, id) = leader(30, 20);
    let sim = SimFs::new(1);
    let s = store_on(&sim, 1);
    // This node led epoch 1 and wrote 25 entries nobody committed.
    lead(&s);
    for _ in 0..25 {
        s.append_durable(Epoch(1), &[b"stray".as_slice()]).unwrap();
    }
    publish_only(&s, &l, id);
    drop(s);
    let (s, report) = reopen(&sim);
    assert_eq!(report.restarted_at_snapshot, Some(id));
    assert_eq!(
        (s.log_start_offset(), s.log_end_offset()),
        (Offset(20), Offset(20))
    );
    assert_eq!(s.last_purged(), Some((Offset(19), id.epoch)));
}

#[test]
fn a_log_agreeing_with_a_published_install_is_kept() {
    let (l, id) = leader(30, 20);
    let sim = SimFs::new(2);
    let s = store_on(&sim, 1);
    // A follower with the leader's first 25 entries, durably.
    replicate(&l, &s, Offset(0), Offset(25));
    s.log().flush().unwrap();
    let end = s.log_end_offset();
    publish_only(&s, &l, id);
    drop(s);
    let (s, report) = reopen(&sim);
    assert_eq!(report.restarted_at_snapshot, None);
    assert_eq!((s.log_start_offset(), s.log_end_offset()), (Offset(0), end));
}

#[test]
fn the_stores_install_finish_makes_the_log_continue_the_snapshot() {
    let (l, id) = leader(30, 20);
    let s = store_on(&SimFs::new(3), 1);
    lead(&s);
    s.append_durable(Epoch(1), &[b"stray".as_slice()]).unwrap();
    let size = l.snapshots().get(id).unwrap().size_bytes;
    let mut inst = s.install_snapshot(id, size).unwrap();
    while inst.position() < size {
        let at = inst.position();
        let chunk = l.read_snapshot_chunk(id, at, 10).unwrap();
        inst.write_chunk(at, &chunk).unwrap();
    }
    let info = inst.finish().unwrap();
    assert_eq!(info.id, id);
    assert_eq!(s.latest_snapshot(), Some(id));
    assert_eq!(
        (s.log_start_offset(), s.log_end_offset()),
        (Offset(20), Offset(20))
    );
    // The follower continues from the leader's log.
    replicate(&l, &s, Offset(20), Offset(30));
    let got = s
        .read_entries(Offset(20), Offset(30), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(got.len(), 10);
}

#[test]
fn unfinished_installs_resume_or_are_discarded_at_open() {
    let (l, old) = leader(40, 10);
    let newer = {
        let mut w = l
            .create_snapshot(Offset(30), old.epoch, b"m", WriterOptions::default())
            .unwrap();
        w.write(b"later state").unwrap();
        w.freeze().unwrap().id
    };
    let sim = SimFs::new(4);
    let s = store_on(&sim, 1);
    // Half of the older one, then half of the newer one; then the older
    // becomes stale: a snapshot at 20 is published.
    let old_size = l.snapshots().get(old).unwrap().size_bytes;
    let mut first = s.install_snapshot(old, old_size).unwrap();
    first
        .write_chunk(0, &l.read_snapshot_chunk(old, 0, 40).unwrap())
        .unwrap();
    drop(first);
    let new_size = l.snapshots().get(newer).unwrap().size_bytes;
    let mut second = s.install_snapshot(newer, new_size).unwrap();
    let most = usize::try_from(new_size - 1).unwrap();
    second
        .write_chunk(0, &l.read_snapshot_chunk(newer, 0, most).unwrap())
        .unwrap();
    drop(second);
    let mid = {
        let mut w = l
            .create_snapshot(Offset(20), old.epoch, b"m", WriterOptions::default())
            .unwrap();
        w.write(b"middle").unwrap();
        w.freeze().unwrap().id
    };
    publish_only(&s, &l, mid);
    drop(s);
    let (s, report) = reopen(&sim);
    assert_eq!(report.snapshots.obsolete_installs_removed.len(), 1);
    assert!(report.snapshots.obsolete_installs_removed[0].starts_with(&old.stem()));
    assert_eq!(report.installs_in_progress, vec![(newer, new_size)]);
    assert!(s
        .snapshots()
        .installs()
        .unwrap()
        .iter()
        .all(|(i, _)| *i != old));
    // The newer one resumes after its verified chunks (all but the
    // footer, which was cut short) and finishes.
    let mut second = s.install_snapshot(newer, new_size).unwrap();
    assert!(
        (1..new_size).contains(&second.position()),
        "{}",
        second.position()
    );
    while second.position() < new_size {
        let at = second.position();
        let chunk = l.read_snapshot_chunk(newer, at, 64).unwrap();
        second.write_chunk(at, &chunk).unwrap();
    }
    second.finish().unwrap();
    assert_eq!(s.latest_snapshot(), Some(newer));
    assert_eq!(s.log_start_offset(), Offset(30));
    // Or a newer one can be dropped explicitly.
    s.discard_install(newer).unwrap();
    assert!(s.snapshots().installs().unwrap().is_empty());
}

/// Found by the model-checked harness driving the store: a follower whose
/// log starts exactly at its own snapshot's end installs the leader's
/// snapshot ending at the same offset in a newer epoch. Its log's entries
/// after that offset are in older epochs than the snapshot's last entry,
/// so they diverged: the install restarts the log (as `KRaft` truncates
/// fully when the snapshot's epoch is newer than the log's).
#[test]
fn a_log_starting_at_the_snapshot_in_an_older_epoch_is_restarted() {
    let s = store_on(&SimFs::new(5), 1);
    let epoch = lead(&s);
    for _ in 0..10 {
        s.append_durable(epoch, &[b"own".as_slice()]).unwrap();
    }
    s.set_high_watermark(Offset(4)).unwrap();
    let mut w = s
        .create_snapshot(Offset(4), epoch, b"m", WriterOptions::default())
        .unwrap();
    w.write(b"own state").unwrap();
    w.freeze().unwrap();
    assert_eq!(s.clean_log_prefix(Offset(4)).unwrap(), Offset(4));
    // The leader's snapshot at 4, in its newer epoch.
    let (l, _) = leader(10, 8);
    let mut lw = l
        .create_snapshot(Offset(4), Epoch(2), b"m", WriterOptions::default())
        .unwrap();
    lw.write(b"leader state").unwrap();
    let id = lw.freeze().unwrap().id;
    assert!(id.epoch > epoch);
    let size = l.snapshots().get(id).unwrap().size_bytes;
    let mut inst = s.install_snapshot(id, size).unwrap();
    inst.write_chunk(0, &l.read_snapshot_chunk(id, 0, usize::MAX).unwrap())
        .unwrap();
    inst.finish().unwrap();
    assert_eq!(
        (s.log_start_offset(), s.log_end_offset()),
        (Offset(4), Offset(4))
    );
    assert_eq!(s.last_purged(), Some((Offset(3), id.epoch)));
}
