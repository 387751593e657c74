//! The commit point: `save_committed` moves the store's watermark (never
//! back, never past the log), a task makes it durable, and after a power
//! cut `read_committed` returns it, so a restarted node re-applies up to
//! where it was. Invariants: the durable commit point survives a crash; a
//! commit point past the log (learnt with a snapshot) is clamped, not an
//! error; an older one never moves it back.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use common::{open_store, Adv};
use openraft10::entry::RaftEntry;
use openraft10::impls::leader_id_adv::LeaderId;
use openraft10::storage::{IOFlushed, RaftLogStorage};
use openraft10::type_config::alias::OneshotOf;
use openraft10::type_config::async_runtime::Oneshot;
use openraft10::{LogId, RaftLogReader};
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_openraft10::LogStore;
use quorumlog_raft::{Offset, SharedFs};

type Entry = <Adv as openraft10::RaftTypeConfig>::Entry;

fn id(index: u64) -> LogId<LeaderId<u64, u64>> {
    LogId::new(
        LeaderId {
            term: 1,
            node_id: 1,
        },
        index,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_durable_commit_point_survives_a_power_cut() {
    let sim = SimFs::new(5);
    let fs: SharedFs = Arc::new(sim.clone());
    let dir = Path::new("/d");
    let store = open_store(&fs, dir, 1, true);
    let mut log: LogStore<Adv> = LogStore::new(Arc::clone(&store), 1).unwrap();
    let (tx, rx) = OneshotOf::<Adv>::channel();
    let entries: Vec<Entry> = (0..10).map(|i| Entry::new_blank(id(i))).collect();
    log.append(entries, IOFlushed::signal(tx)).await.unwrap();
    rx.await.unwrap().unwrap();

    log.save_committed(Some(id(7))).await.unwrap();
    assert_eq!(store.extent().high_watermark, Some(Offset(8)));
    log.save_committed(Some(id(3))).await.unwrap();
    assert_eq!(store.extent().high_watermark, Some(Offset(8)), "never back");
    log.save_committed(Some(id(50))).await.unwrap();
    assert_eq!(
        store.extent().high_watermark,
        Some(Offset(10)),
        "clamped to the log"
    );
    // The persist task makes it durable (a deadlock breaker, not a
    // timing threshold).
    let t0 = std::time::Instant::now();
    while store.extent().durable_high_watermark < Some(Offset(10)) && t0.elapsed().as_secs() < 30 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(store.extent().durable_high_watermark, Some(Offset(10)));

    let crashed = sim.crash_with(CrashPlan::LoseUnsynced);
    drop(log);
    drop(store);
    let fs: SharedFs = Arc::new(crashed);
    let mut log: LogStore<Adv> = LogStore::new(open_store(&fs, dir, 1, false), 1).unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(id(9)));
}

/// A commit point that arrives before this node's own copy of the entries
/// is in its log (appends are pipelined) is clamped and leaves the
/// watermark behind; the snapshot the state machine then builds of those
/// applied entries is still saved: the entries are waited for and the
/// watermark raised to them. The clamp is made certain by a commit point
/// short of the entries (where the flusher has got to is timing) and by a
/// held disk, so the entries are not durable when `save_built` starts.
/// Fails if `save_built` goes straight to the store's checked creation
/// (refused: beyond the high watermark).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_entries_committed_before_they_were_durable_here_is_saved() {
    let sim = SimFs::new(6);
    let fs: SharedFs = Arc::new(sim.clone());
    let store = open_store(&fs, Path::new("/d"), 1, true);
    let mut log: LogStore<Adv> = LogStore::new(Arc::clone(&store), 1).unwrap();
    // The disk is held (not slowed by a guessed duration), so the entries
    // are surely not durable before `save_built`; the guard lets the disk
    // go if an assertion fails.
    let held = Held::new(&sim);
    let (tx, rx) = OneshotOf::<Adv>::channel();
    let entries: Vec<Entry> = (0..10).map(|i| Entry::new_blank(id(i))).collect();
    log.append(entries, IOFlushed::signal(tx)).await.unwrap();
    log.save_committed(Some(id(4))).await.unwrap();
    assert!(
        store.extent().high_watermark <= Some(Offset(5)),
        "the watermark stays behind the entries ({:?})",
        store.extent().high_watermark
    );
    let files = quorumlog_openraft10::SnapshotFiles::new(Arc::clone(&store));
    let meta = openraft10::type_config::alias::SnapshotMetaOf::<Adv> {
        last_log_id: Some(id(9)),
        last_membership: openraft10::type_config::alias::StoredMembershipOf::<Adv>::default(),
    };
    // Let the disk go while `save_built` waits for the entries (if it
    // goes first, `save_built` still finds the watermark behind and must
    // raise it).
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(held);
    });
    let file = files.save_built::<Adv>(&meta, b"state").unwrap();
    release.join().unwrap();
    assert_eq!(file.id.end_offset, Offset(10));
    assert!(store.extent().high_watermark >= Some(Offset(10)));
    rx.await.unwrap().unwrap();
    assert_eq!(files.latest::<Adv>().unwrap().unwrap().1, b"state");
}

/// Holds the simulated disk's writes and syncs while alive.
struct Held(SimFs);

impl Held {
    fn new(sim: &SimFs) -> Self {
        sim.hold_io(true);
        Held(sim.clone())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.hold_io(false);
    }
}

/// openraft's `t10_save_committed`, made certain: openraft saves a commit
/// point up to what it *submitted*, before the log has written it (here:
/// the disk is held while the entries are appended and the commit point
/// saved). The adapter clamped it to the written end and dropped the rest,
/// so once idle `read_committed` answered behind the last `save_committed`
/// (openraft's own test failed 2 of 20 runs on a store, 9 of 20 on a
/// group). Invariant: the commit point openraft gives is never dropped:
/// once the entries are durable, `read_committed` returns it, on a store
/// and on a node's group, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_point_saved_before_its_entries_are_written_is_kept() {
    for round in 0..10u64 {
        let sim = SimFs::new(100 + round);
        let fs: SharedFs = Arc::new(sim.clone());
        let store = open_store(&fs, Path::new("/d"), 1, true);
        let log: LogStore<Adv> = LogStore::new(Arc::clone(&store), 1).unwrap();
        commit_ahead_of_the_log(&sim, log, round).await;

        let sim = SimFs::new(200 + round);
        let fs: SharedFs = Arc::new(sim.clone());
        let meta = quorumlog_raft::Meta::new(
            quorumlog_raft::ClusterId(1),
            quorumlog_raft::NodeId(1),
            quorumlog_raft::DirectoryId(2),
        );
        let dir = Path::new("/n");
        let options = quorumlog_raft::NodeOptions::default();
        quorumlog_raft::Node::format(&fs, dir, meta, &options).unwrap();
        let (node, _) =
            quorumlog_raft::Node::open(&fs, dir, &quorumlog_raft::Identity::of(&meta), &options)
                .unwrap();
        node.create_group(5, Offset(0)).unwrap();
        let log: LogStore<Adv> = LogStore::new(Arc::new(node.group(5).unwrap()), 1).unwrap();
        commit_ahead_of_the_log(&sim, log, round).await;
    }
}

async fn commit_ahead_of_the_log(sim: &SimFs, mut log: LogStore<Adv>, round: u64) {
    let n = 3 + round;
    let held = Held::new(sim);
    let (tx, rx) = OneshotOf::<Adv>::channel();
    let entries: Vec<Entry> = (0..n).map(|i| Entry::new_blank(id(i))).collect();
    log.append(entries, IOFlushed::signal(tx)).await.unwrap();
    log.save_committed(Some(id(n - 1))).await.unwrap();
    drop(held);
    rx.await.unwrap().unwrap();
    assert_eq!(
        log.read_committed().await.unwrap(),
        Some(id(n - 1)),
        "round {round}: the last save_committed, once the log is durable"
    );
}

/// openraft's contract for `read_committed`: the last commit point
/// `save_committed` saved, at once, even past what the log has written
/// (a follower's commit point comes from its leader). It answered the
/// group's watermark, which lags until the entries are written (openraft's
/// `t10_save_committed` failed 15 of 80 runs on a group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_answers_the_last_saved_commit_point_at_once() {
    let sim = SimFs::new(8);
    let fs: SharedFs = Arc::new(sim.clone());
    let store = open_store(&fs, Path::new("/d"), 1, true);
    let mut log: LogStore<Adv> = LogStore::new(Arc::clone(&store), 1).unwrap();
    let held = Held::new(&sim);
    let (tx, rx) = OneshotOf::<Adv>::channel();
    let entries: Vec<Entry> = (0..6).map(|i| Entry::new_blank(id(i))).collect();
    log.append(entries, IOFlushed::signal(tx)).await.unwrap();
    log.save_committed(Some(id(5))).await.unwrap();
    // Nothing is written yet (the disk is held): the answer is the saved
    // point, not the group's watermark.
    assert_eq!(log.read_committed().await.unwrap(), Some(id(5)));
    log.save_committed(Some(id(2))).await.unwrap();
    assert_eq!(
        log.read_committed().await.unwrap(),
        Some(id(5)),
        "an older commit point never moves it back"
    );
    drop(held);
    rx.await.unwrap().unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(id(5)));
}

fn id_in(term: u64, index: u64) -> LogId<LeaderId<u64, u64>> {
    LogId::new(LeaderId { term, node_id: 1 }, index)
}

/// Invariant: a purge the group refuses changes nothing, through the
/// adapter as on the group, and the group opens again. openraft's
/// `t90_issue_1892 … startup_rejects_inverted_log_store` purges to index 0
/// naming term 3 where the log holds term 1: the adapter wrote openraft's
/// `last_purged` first, the group refused, and every later
/// `LogStore::new` failed. Each refusal of the group's purge is made to
/// happen here: another epoch than the log's (`PurgeEpochMismatch`), and
/// past the latest snapshot (`MissingSnapshot`); and a truncation below
/// the commit point (the adapter trimmed its cache before asking).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_the_group_refuses_changes_nothing_and_the_group_opens_again() {
    let sim = SimFs::new(9);
    let fs: SharedFs = Arc::new(sim.clone());
    let dir = Path::new("/d");
    let store = open_store(&fs, dir, 1, true);
    let mut log: LogStore<Adv> = LogStore::new(Arc::clone(&store), 1).unwrap();
    let (tx, rx) = OneshotOf::<Adv>::channel();
    let entries: Vec<Entry> = (0..8).map(|i| Entry::new_blank(id(i))).collect();
    log.append(entries, IOFlushed::signal(tx)).await.unwrap();
    rx.await.unwrap().unwrap();
    // A snapshot through index 2 (the watermark past it first).
    log.save_committed(Some(id(7))).await.unwrap();
    let files = quorumlog_openraft10::SnapshotFiles::new(Arc::clone(&store));
    let meta = openraft10::type_config::alias::SnapshotMetaOf::<Adv> {
        last_log_id: Some(id(2)),
        last_membership: openraft10::type_config::alias::StoredMembershipOf::<Adv>::default(),
    };
    files.save_built::<Adv>(&meta, b"state").unwrap();
    let state = log.get_log_state().await.unwrap();
    let before = quorumlog_testkit::group_image(&store);
    for (bad, why) in [
        (id_in(3, 0), "another epoch than the log's"),
        (id_in(3, 1), "another epoch than the log's"),
        (id(4), "past the latest snapshot"),
    ] {
        let r = log.purge(bad).await;
        assert!(r.is_err(), "purge to {bad} ({why}) accepted");
        assert_eq!(
            quorumlog_testkit::group_image(&store),
            before,
            "purge to {bad} ({why})"
        );
        let after = log.get_log_state().await.unwrap();
        assert_eq!(
            (after.last_purged_log_id, after.last_log_id),
            (state.last_purged_log_id, state.last_log_id),
            "purge to {bad} ({why}) changed the log state"
        );
    }
    // A truncation below the commit point (7): refused by the group, and
    // the adapter's cache is left as it was too.
    assert!(log.truncate_after(Some(id(4))).await.is_err());
    assert_eq!(
        quorumlog_testkit::group_image(&store),
        before,
        "a refused truncation"
    );
    let all = log.try_get_log_entries(0..8).await.unwrap();
    assert_eq!(
        all.iter().map(RaftEntry::index).collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>(),
        "a refused truncation changed what the adapter reads"
    );
    // A good purge still works, and the group opens again.
    log.purge(id(1)).await.unwrap();
    assert_eq!(store.extent().start, Offset(2));
    drop(log);
    drop(files);
    drop(store);
    let store = open_store(&fs, dir, 1, false);
    let mut log: LogStore<Adv> = LogStore::new(Arc::clone(&store), 1).unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(id(1)));
    assert_eq!(state.last_log_id, Some(id(7)));
}
