//! openraft's suite never reopens a store: these close and reopen it after
//! each kind of write (vote, append, truncate, purge, committed, snapshot)
//! and check that openraft gets back what it saved. Invariants: a vote and
//! the entries acknowledged through `LogFlushed` survive a reopen and a
//! power cut; a committed vote for another node may follow an uncommitted
//! one in the same term (openraft's order), and a vote never regresses;
//! the last purged id (with its leader's node id) survives; a snapshot
//! saved through `SnapshotFiles` is the state machine's after a reopen.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use common::{open_store, parts, Put, TypeConfig, DIR};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::{Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, Vote};
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_openraft::mapping::log_id;
use quorumlog_raft::SharedFs;

fn entry(term: u64, node: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, node, index),
        payload: EntryPayload::Normal(Put {
            key: format!("k{index}"),
            value: format!("v{term}-{index}"),
        }),
    }
}

fn ids(entries: &[Entry<TypeConfig>]) -> Vec<LogId<u64>> {
    entries.iter().map(|e| e.log_id).collect()
}

/// Reopens node 1's store on what `sim` kept after `plan`.
fn reopen(sim: &SimFs, plan: CrashPlan) -> (SimFs, Arc<quorumlog_raft::Group>) {
    let after = sim.crash_with(plan);
    let fs: SharedFs = Arc::new(after.clone());
    (after, open_store(&fs, Path::new(DIR), 1, false))
}

fn fresh(seed: u64) -> (SimFs, Arc<quorumlog_raft::Group>) {
    let sim = SimFs::new(seed);
    let fs: SharedFs = Arc::new(sim.clone());
    let store = open_store(&fs, Path::new(DIR), 1, true);
    (sim, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn votes_survive_and_follow_openrafts_order() {
    let (sim, store) = fresh(1);
    let (mut log, _) = parts(&store, 1);
    assert_eq!(log.read_vote().await.unwrap(), None);
    log.save_vote(&Vote::new(3, 2)).await.unwrap();
    drop((log, store));
    let (sim, store) = reopen(&sim, CrashPlan::LoseUnsynced);
    let (mut log, _) = parts(&store, 1);
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 2)));
    // The leader elected in term 3 is node 5: a committed vote for another
    // node outranks the uncommitted one.
    log.save_vote(&Vote::new_committed(3, 5)).await.unwrap();
    // A second uncommitted vote in term 3 for another node is refused.
    assert!(log.save_vote(&Vote::new(3, 4)).await.is_err());
    drop((log, store));
    let (_, store) = reopen(&sim, CrashPlan::LoseUnsynced);
    let (mut log, _) = parts(&store, 1);
    assert_eq!(
        log.read_vote().await.unwrap(),
        Some(Vote::new_committed(3, 5))
    );
    // Never back to an older term.
    assert!(log.save_vote(&Vote::new(2, 1)).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appended_truncated_and_purged_logs_survive_a_power_cut() {
    let (sim, store) = fresh(2);
    let (mut log, _) = parts(&store, 1);
    // Terms 1 and 2 in one call (two batches), then more of term 2.
    let first: Vec<_> = (1..=5)
        .map(|i| entry(if i < 4 { 1 } else { 2 }, 7, i))
        .collect();
    log.blocking_append(first.clone()).await.unwrap();
    let more: Vec<_> = (6..=10).map(|i| entry(2, 7, i)).collect();
    log.blocking_append(more.clone()).await.unwrap();
    drop((log, store));
    let (sim, store) = reopen(&sim, CrashPlan::LoseUnsynced);
    let (mut log, _) = parts(&store, 1);
    let got = log.try_get_log_entries(0..100).await.unwrap();
    let want: Vec<_> = first.iter().chain(&more).cloned().collect();
    assert_eq!(ids(&got), ids(&want));
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(format!("{:?}", g.payload), format!("{:?}", w.payload));
    }
    // Truncate [8, ..), purge ..=3 (leader node 7 of term 1).
    log.truncate(log_id(2, 7, 8)).await.unwrap();
    log.purge(log_id(1, 7, 3)).await.unwrap();
    drop((log, store));
    let (_, store) = reopen(&sim, CrashPlan::LoseUnsynced);
    let (mut log, _) = parts(&store, 1);
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 7, 3)));
    assert_eq!(state.last_log_id, Some(log_id(2, 7, 7)));
    let got = log.try_get_log_entries(0..100).await.unwrap();
    assert_eq!(ids(&got), ids(&want[3..7]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_past_the_end_and_the_committed_id_survive_a_clean_close() {
    let (sim, store) = fresh(3);
    let (mut log, _) = parts(&store, 1);
    log.blocking_append((0..=4).map(|i| entry(1, 2, i)))
        .await
        .unwrap();
    log.save_committed(Some(log_id(1, 2, 3))).await.unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 2, 3)));
    log.purge(log_id(1, 2, 9)).await.unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 2, 9)));
    assert_eq!(state.last_log_id, Some(log_id(1, 2, 9)));
    // The log continues after the purged id.
    log.blocking_append([entry(2, 3, 10)]).await.unwrap();
    log.save_committed(Some(log_id(2, 3, 10))).await.unwrap();
    drop(log);
    store
        .wait_durable(quorumlog_raft::Offset(u64::MAX))
        .unwrap();
    drop(store);
    let (_, store) = reopen(&sim, CrashPlan::LoseUnsynced);
    let (mut log, _) = parts(&store, 1);
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(2, 3, 10)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 2, 9)));
    assert_eq!(state.last_log_id, Some(log_id(2, 3, 10)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_saved_by_the_state_machine_is_there_after_a_power_cut() {
    let (sim, store) = fresh(4);
    let (mut log, mut sm) = parts(&store, 1);
    let entries: Vec<_> = (1..=20).map(|i| entry(1, 2, i)).collect();
    log.blocking_append(entries.clone()).await.unwrap();
    // As openraft does: committed, then applied.
    log.save_committed(Some(log_id(1, 2, 20))).await.unwrap();
    sm.apply(entries).await.unwrap();
    let mut builder = sm.get_snapshot_builder().await;
    let built = builder.build_snapshot().await.unwrap();
    log.purge(log_id(1, 2, 15)).await.unwrap();
    drop((log, sm, builder, store));
    let (_, store) = reopen(&sim, CrashPlan::LoseUnsynced);
    let (mut log, mut sm) = parts(&store, 1);
    let snap = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(snap.meta, built.meta);
    assert_eq!(sm.get("k20"), Some("v1-20".to_string()));
    assert_eq!(
        log.get_log_state().await.unwrap().last_purged_log_id,
        Some(log_id(1, 2, 15))
    );
    assert_eq!(log.try_get_log_entries(0..).await.unwrap().len(), 5);
}

/// The commit point survives a power cut: the group queues it for the
/// shared log's next round (the node's default durability), and the
/// adapter's persister forces that round within `COMMIT_PERSIST_EVERY`
/// when the log is idle, so a restarted node re-applies up to where it
/// was. The control: a node that keeps the watermark for its checkpoints
/// (`WatermarkDurability::Checkpoint`), without the persister, recovers no
/// commit point after the same power cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commit_point_survives_a_power_cut() {
    use quorumlog_raft::{NodeOptions, WatermarkDurability};
    for (watermark, persist, kept) in [
        (WatermarkDurability::NextRound, true, true),
        (WatermarkDurability::NextRound, false, true),
        (WatermarkDurability::Checkpoint, false, false),
    ] {
        let options = NodeOptions {
            watermark,
            ..common::options()
        };
        let sim = SimFs::new(11);
        let fs: SharedFs = Arc::new(sim.clone());
        let store = common::open_store_with(&fs, Path::new(DIR), 1, true, &options);
        let (log, _) = parts(&store, 1);
        let mut log = if persist {
            log
        } else {
            log.persist_commit_every(None)
        };
        log.blocking_append((0..20).map(|i| entry(1, 2, i)))
            .await
            .unwrap();
        log.save_committed(Some(log_id(1, 2, 14))).await.unwrap();
        tokio::time::sleep(quorumlog_openraft::COMMIT_PERSIST_EVERY * 3).await;
        if persist {
            assert_eq!(
                store.extent().durable_high_watermark,
                Some(quorumlog_raft::Offset(15))
            );
        }
        drop((log, store));
        let after = sim.crash_with(CrashPlan::LoseUnsynced);
        let fs: SharedFs = Arc::new(after.clone());
        let store = common::open_store_with(&fs, Path::new(DIR), 1, false, &options);
        let (mut log, _) = parts(&store, 1);
        let committed = log.read_committed().await.unwrap();
        let want = kept.then(|| log_id(1, 2, 14));
        assert_eq!(committed, want, "{watermark:?}, persister {persist}");
    }
}

/// Invariant: a purge the group refuses (another term than the log's at
/// that index) changes nothing through the adapter: not its metadata, not
/// its cache, not the log state openraft reads, and the group opens again.
/// The adapter wrote openraft's `last_purged` before asking the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_the_group_refuses_changes_nothing_and_the_group_opens_again() {
    let (sim, store) = fresh(11);
    let (mut log, _) = parts(&store, 1);
    let entries: Vec<_> = (1..=6).map(|i| entry(1, 1, i)).collect();
    log.blocking_append(entries).await.unwrap();
    let state = log.get_log_state().await.unwrap();
    let before = quorumlog_testkit::group_image(&store);
    for bad in [log_id(3, 1, 2), log_id(3, 1, 6)] {
        assert!(log.purge(bad).await.is_err(), "purge to {bad} accepted");
        assert_eq!(
            quorumlog_testkit::group_image(&store),
            before,
            "purge to {bad}"
        );
        let after = log.get_log_state().await.unwrap();
        assert_eq!(after, state, "purge to {bad} changed the log state");
        let read = log.try_get_log_entries(1..7).await.unwrap();
        assert_eq!(ids(&read).len(), 6, "purge to {bad} changed the cache");
    }
    // A truncation below the commit point: refused by the group, the
    // caches left as they were.
    log.save_committed(Some(log_id(1, 1, 5))).await.unwrap();
    store
        .wait_durable(quorumlog_raft::Offset(u64::MAX))
        .unwrap();
    let before = quorumlog_testkit::group_image(&store);
    assert!(log.truncate(log_id(1, 1, 3)).await.is_err());
    assert_eq!(
        quorumlog_testkit::group_image(&store),
        before,
        "a refused truncation"
    );
    let read = log.try_get_log_entries(1..7).await.unwrap();
    assert_eq!(
        ids(&read).len(),
        6,
        "a refused truncation changed the cache"
    );
    log.purge(log_id(1, 1, 2)).await.unwrap();
    drop(log);
    drop(store);
    let (_, store) = reopen(&sim, CrashPlan::LoseUnsynced);
    let (mut log, _) = parts(&store, 1);
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 2)));
    assert_eq!(state.last_log_id, Some(log_id(1, 1, 6)));
}
