//! `LogStore::new_bounded`: openraft 0.9 issues the purge that follows a
//! snapshot install while the state machine is still installing (found by
//! the whole-cluster power-loss test: a node restarted with a log starting
//! past its last snapshot file, and the store rightly refused to open).
//! Invariants: a power cut at any point between the purge and the snapshot
//! file leaves a store that opens, with the purge taken back to what the
//! files cover (the entries above are still there for openraft to
//! re-apply over the latest snapshot); the log is deleted as far as
//! snapshot files cover the purge, and the rest once one does; an append
//! just past a purge beyond the log's end waits for the snapshot file,
//! then continues there.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{open_store, TypeConfig, DIR};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{Entry, RaftLogReader, SnapshotMeta};
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_openraft::mapping::log_id;
use quorumlog_openraft::{LogStore, SnapshotFiles};
use quorumlog_raft::SharedFs;

fn entry(index: u64) -> Entry<TypeConfig> {
    common::put_entry(index)
}

fn meta(last: u64) -> SnapshotMeta<u64, openraft::BasicNode> {
    common::snapshot_meta(last)
}

fn reopen(sim: &SimFs) -> (SimFs, LogStore<TypeConfig>) {
    let after = sim.crash_with(CrashPlan::LoseUnsynced);
    let fs: SharedFs = Arc::new(after.clone());
    let store = open_store(&fs, Path::new(DIR), 1, false);
    (after, LogStore::new_bounded(store, 1).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_waits_for_the_snapshot_file_that_covers_it() {
    let sim = SimFs::new(1);
    let fs: SharedFs = Arc::new(sim.clone());
    let store = open_store(&fs, Path::new(DIR), 1, true);
    let mut log = LogStore::<TypeConfig>::new_bounded(Arc::clone(&store), 1).unwrap();
    log.blocking_append((0..=20).map(entry)).await.unwrap();
    // openraft purges up to 15 before any snapshot file exists.
    log.purge(log_id(1, 1, 15)).await.unwrap();
    assert_eq!(store.extent().start.0, 0, "nothing covers it yet");
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 15)));
    let got = log.try_get_log_entries(0..100).await.unwrap();
    assert_eq!(
        got.first().unwrap().log_id.index,
        16,
        "purged entries hidden"
    );
    // A power cut now, before any snapshot file: the store opens, and the
    // purge nothing covers is taken back (the state machine restarts from
    // no snapshot, so openraft must re-apply those entries: they are there).
    drop((log, store));
    let (sim, mut log) = reopen(&sim);
    assert_eq!(log.get_log_state().await.unwrap().last_purged_log_id, None);
    assert_eq!(log.try_get_log_entries(0..).await.unwrap().len(), 21);
    // Purged again; a snapshot file up to 10 lets the log go up to 11, one
    // up to 18 the whole purge.
    log.purge(log_id(1, 1, 15)).await.unwrap();
    // The state machine builds from applied, so committed, entries.
    log.save_committed(Some(log_id(1, 1, 20))).await.unwrap();
    let files = SnapshotFiles::new(Arc::clone(log.store()));
    files.save_built(&meta(10), b"state to 10").unwrap();
    assert_eq!(log.store().extent().start.0, 11);
    // A power cut here: the purge is taken back to what the file covers.
    drop((log, files));
    let (sim, mut log) = reopen(&sim);
    assert_eq!(
        log.get_log_state().await.unwrap().last_purged_log_id,
        Some(log_id(1, 1, 10))
    );
    log.purge(log_id(1, 1, 15)).await.unwrap();
    log.save_committed(Some(log_id(1, 1, 20))).await.unwrap();
    let files = SnapshotFiles::new(Arc::clone(log.store()));
    files.save_built(&meta(18), b"state to 18").unwrap();
    assert_eq!(log.store().extent().start.0, 16);
    drop((log, files));
    let (_, mut log) = reopen(&sim);
    assert_eq!(
        log.get_log_state().await.unwrap().last_purged_log_id,
        Some(log_id(1, 1, 15))
    );
    assert_eq!(log.try_get_log_entries(0..).await.unwrap().len(), 5);
}

/// The snapshot file a leader whose log holds `[0, last]` in term 1 sends
/// for its state up to `last`.
async fn leader_snapshot_file(last: u64) -> Vec<u8> {
    let fs: SharedFs = Arc::new(SimFs::new(99));
    let store = open_store(&fs, Path::new(DIR), 2, true);
    let mut log = LogStore::<TypeConfig>::new_bounded(Arc::clone(&store), 2).unwrap();
    log.blocking_append((0..=last).map(entry)).await.unwrap();
    log.save_committed(Some(log_id(1, 1, last))).await.unwrap();
    let files = SnapshotFiles::new(store);
    files.save_built(&meta(last), b"leader state").unwrap();
    files.file(&meta(last)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_past_a_purge_beyond_the_end_waits_for_the_install() {
    let sim = SimFs::new(2);
    let fs: SharedFs = Arc::new(sim.clone());
    let store = open_store(&fs, Path::new(DIR), 1, true);
    let mut log = LogStore::<TypeConfig>::new_bounded(Arc::clone(&store), 1).unwrap();
    log.blocking_append((0..=20).map(entry)).await.unwrap();
    // The install of the leader's snapshot up to 49: openraft purges to 49
    // at once; the state machine saves the file a little later.
    log.purge(log_id(1, 1, 49)).await.unwrap();
    assert_eq!(store.extent().end.0, 21, "kept until a file covers it");
    let files = SnapshotFiles::new(Arc::clone(&store));
    let file = leader_snapshot_file(49).await;
    let saver = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        files.save_received(&meta(49), &file).unwrap();
    });
    // The leader's next entries follow the snapshot.
    log.blocking_append((50..=55).map(entry)).await.unwrap();
    saver.await.unwrap();
    assert_eq!(store.extent().start.0, 50);
    drop((log, store));
    let (_, mut log) = reopen(&sim);
    let got = log.try_get_log_entries(0..).await.unwrap();
    assert_eq!(got.len(), 6);
    assert_eq!(got[0].log_id.index, 50);
}
