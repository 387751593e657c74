//! An in-process three-replica simulation of the Raft store (no network:
//! the test moves batches between three stores as fetches would). Each
//! seed draws a run of elections (with voting refusals), leader appends,
//! fetches (valid, diverging — the follower truncates — or snapshot
//! needed — it installs the leader's snapshot), flushes (the leader's often
//! late: its disk is the slow one), snapshots with leader-coordinated
//! cleaning, and power-cut restarts (a former leader comes back resigned).
//!
//! Checked after every step:
//! - every entry a replica knows is committed (below its own high
//!   watermark) is the one the leader committed, and the current leader
//!   holds every committed entry (leader completeness); committed entries
//!   never change;
//! - the high watermark never moves back within a leader's term, and it
//!   advances while the leader has not flushed (commit off the leader's
//!   sync: counted over the seeds, must happen);
//! - at most one leader per epoch; no replica truncates below its own high
//!   watermark (the store refuses, and the run fails).
//!
//! `QUORUMLOG_SIM_SEEDS=N` runs N seeds (default 500), `QUORUMLOG_SIM_SEED=S`
//! replays one.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use quorumlog_testkit::WingTest;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use quorumlog_checkpoint::{Epoch, NodeId, Offset};
use quorumlog_io::{SimFs, SimRng};
use quorumlog_raft::kraft::compaction::{LeaderCompaction, RetentionCap};
use quorumlog_raft::{
    kraft::CommitTracker, kraft::KraftReplica, kraft::LogPosition, kraft::VoteDecision, Isolation,
};
use quorumlog_snapshot::WriterOptions;

const DIR: &str = "/data";
const NODES: u64 = 3;

struct Replica {
    disk: SimFs,
    store: KraftReplica,
}

impl Replica {
    fn new(node: u64, seed: u64) -> Replica {
        let (disk, store) = common::replicas::fresh_store(
            seed.wrapping_mul(31).wrapping_add(node),
            node,
            u128::from(node) + 1,
            DIR,
        );
        Replica { disk, store }
    }

    /// Power cut (unsynced writes lost), reboot, reopen.
    fn restart(self) -> Replica {
        let Replica { disk, store } = self;
        let (disk, store) = common::replicas::power_cut(&disk, store, DIR);
        Replica { disk, store }
    }

    fn position(&self) -> LogPosition {
        common::replicas::position(&self.store)
    }
}

struct Sim {
    rng: SimRng,
    seed: u64,
    replicas: Vec<Option<Replica>>,
    leader: Option<(u64, Epoch, CommitTracker)>,
    leaders_by_epoch: BTreeMap<Epoch, u64>,
    committed: BTreeMap<u64, (Epoch, Vec<u8>)>,
    compaction: LeaderCompaction,
    clock: Instant,
    written: u64,
    counts: Counts,
}

/// What a run reached (each must happen over the seeds).
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    /// Commits that advanced the high watermark past the leader's own
    /// flushed offset.
    commits_ahead_of_leader_sync: u64,
    elections_won: u64,
    votes_refused: u64,
    diverging_truncations: u64,
    snapshot_installs: u64,
    restarts_of_a_leader: u64,
    /// Advertised log starts the retention cap moved past the window's
    /// bound, by kind (entries, bytes, age).
    cap_passed: [u64; 3],
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.commits_ahead_of_leader_sync += o.commits_ahead_of_leader_sync;
        self.elections_won += o.elections_won;
        self.votes_refused += o.votes_refused;
        self.diverging_truncations += o.diverging_truncations;
        self.snapshot_installs += o.snapshot_installs;
        self.restarts_of_a_leader += o.restarts_of_a_leader;
        for (a, b) in self.cap_passed.iter_mut().zip(o.cap_passed) {
            *a += b;
        }
    }
}

impl Sim {
    fn r(&self, n: u64) -> &Replica {
        self.replicas[usize::try_from(n).unwrap()].as_ref().unwrap()
    }

    /// The leader and its epoch, if it still leads (a newer epoch seen in a
    /// vote request makes a leader step down).
    fn current_leader(&mut self) -> Option<(u64, Epoch)> {
        let (l, epoch, _) = self.leader.as_ref()?;
        let (l, epoch) = (*l, *epoch);
        if self
            .r(l)
            .store
            .election()
            .check_leader_append(epoch)
            .is_ok()
        {
            Some((l, epoch))
        } else {
            self.leader = None;
            None
        }
    }

    fn elect(&mut self) {
        let c = self.rng.below(NODES);
        let epoch = self.r(c).store.election().become_candidate().unwrap();
        let pos = self.r(c).position();
        let mut votes = 1;
        for o in (0..NODES).filter(|&o| o != c) {
            let ours = self.r(o).position();
            let d = self
                .r(o)
                .store
                .election()
                .grant_vote(epoch, (NodeId(c), None), pos, ours)
                .unwrap();
            if d == VoteDecision::Granted {
                assert!(pos >= ours, "seed {}: vote for a log behind", self.seed);
                votes += 1;
            } else {
                self.counts.votes_refused += 1;
            }
        }
        if votes * 2 > NODES {
            self.counts.elections_won += 1;
            self.r(c).store.election().become_leader().unwrap();
            assert!(
                self.leaders_by_epoch.insert(epoch, c).is_none(),
                "seed {}: two leaders in {epoch}",
                self.seed
            );
            let start = self.r(c).store.extent().queued_end;
            let hw = self
                .r(c)
                .store
                .extent()
                .high_watermark
                .unwrap_or(self.r(c).store.extent().start);
            let members = (0..NODES).map(NodeId);
            self.leader = Some((c, epoch, CommitTracker::new(NodeId(c), start, members, hw)));
        }
    }

    fn append(&mut self) {
        let Some((l, epoch)) = self.current_leader() else {
            return;
        };
        let n = 1 + self.rng.below(4);
        let recs: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("e{}-n{l}-{}-{i}", epoch.0, self.written).into_bytes())
            .collect();
        self.written += 1;
        let info = self.r(l).store.append_as_leader(epoch, &recs).unwrap();
        let now = self.tick();
        self.compaction.record_append(info.next_offset, now);
    }

    /// The leader's flush (late: it is the slow disk).
    fn leader_flush(&mut self) {
        let Some((l, _)) = self.current_leader() else {
            return;
        };
        let end = self.r(l).store.extent().queued_end;
        let flushed = self.r(l).store.wait_durable(end).unwrap();
        self.commit(|t| t.leader_flushed(flushed));
    }

    fn commit(&mut self, f: impl FnOnce(&mut CommitTracker) -> Option<Offset>) {
        let Some((l, _, tracker)) = &mut self.leader else {
            return;
        };
        let l = *l;
        let before = tracker.high_watermark();
        let Some(hw) = f(tracker) else {
            return;
        };
        assert!(
            hw > before,
            "seed {}: the high watermark moved back",
            self.seed
        );
        if hw > self.r(l).store.extent().flushed {
            self.counts.commits_ahead_of_leader_sync += 1;
        }
        let leader = self.r(l);
        leader.store.set_high_watermark(hw).unwrap();
        // Record what became committed (and check what was).
        let start = leader.store.extent().start.max(before);
        let entries = leader
            .store
            .read_entries(start, hw, u64::MAX, Isolation::Uncommitted)
            .unwrap();
        for e in entries {
            let prev = self
                .committed
                .insert(e.offset.0, (e.epoch, e.bytes.clone()));
            if let Some(p) = prev {
                assert_eq!(
                    p,
                    (e.epoch, e.bytes),
                    "seed {}: committed entry changed",
                    self.seed
                );
            }
        }
    }

    fn fetch(&mut self) {
        let Some((l, epoch)) = self.current_leader() else {
            return;
        };
        let f = (l + 1 + self.rng.below(NODES - 1)) % NODES;
        if self
            .r(f)
            .store
            .election()
            .become_follower(epoch, NodeId(l))
            .is_err()
        {
            return; // it moved to a newer epoch meanwhile
        }
        let ctx = format!("seed {}", self.seed);
        let c = common::replicas::catch_up(&self.r(l).store, &self.r(f).store, &ctx);
        self.counts.diverging_truncations += c.truncations;
        self.counts.snapshot_installs += c.installs;
        let matched = c.matched;
        if !matched {
            return; // its log is not known to match the leader's yet
        }
        if self.rng.below(2) == 0 {
            let end = self.r(f).store.extent().queued_end;
            self.r(f).store.wait_durable(end).unwrap();
        }
        let durable = self.r(f).store.extent().flushed;
        let now = self.tick();
        self.compaction.record_fetch(NodeId(f), durable, now);
        self.commit(|t| t.report(NodeId(f), durable));
        self.learn_high_watermark(l, f);
    }

    /// The follower learns the high watermark from the fetch response.
    fn learn_high_watermark(&self, l: u64, f: u64) {
        let hw = self.r(l).store.extent().high_watermark.unwrap_or(Offset(0));
        let fhw = hw.min(self.r(f).store.extent().queued_end);
        if self.r(f).store.extent().high_watermark.unwrap_or(Offset(0)) < fhw {
            self.r(f).store.set_high_watermark(fhw).unwrap();
        }
    }

    /// A replica snapshots its committed state; the leader advertises a
    /// safe log start; the replica cleans up to it.
    fn snapshot_and_clean(&mut self) {
        let n = self.rng.below(NODES);
        let store = &self.r(n).store;
        let hw = store.extent().high_watermark.unwrap_or(Offset(0));
        let latest = store.extent().latest_snapshot.map(|s| s.end_offset);
        if hw > store.extent().start && latest.is_none_or(|l| l < hw) {
            if let Some(epoch) = store.epoch_at(Offset(hw.0 - 1)) {
                let mut w = store
                    .create_snapshot(hw, epoch, b"", WriterOptions::default())
                    .unwrap();
                w.write(format!("state below {}", hw.0).as_bytes()).unwrap();
                w.freeze().unwrap();
            }
        }
        let Some((l, _, _)) = &self.leader else {
            return;
        };
        let leader = &self.r(*l).store;
        let bound = self.compaction.advertised(leader, self.clock);
        let mut uncapped = self.compaction.clone();
        uncapped.cap = RetentionCap::default();
        let passed = bound > uncapped.advertised(leader, self.clock);
        store.clean_log_prefix(bound).unwrap();
        if passed {
            let kind = usize::try_from(self.seed % 3).unwrap();
            self.counts.cap_passed[kind] += 1;
        }
    }

    fn restart(&mut self) {
        let n = self.rng.below(NODES);
        let i = usize::try_from(n).unwrap();
        let old = self.replicas[i].take().unwrap();
        self.replicas[i] = Some(old.restart());
        if self.leader.as_ref().is_some_and(|(l, _, _)| *l == n) {
            self.counts.restarts_of_a_leader += 1;
            // A former leader comes back resigned: no leader until an
            // election.
            let epoch = self.r(n).store.election().epoch();
            assert!(
                self.r(n)
                    .store
                    .append_as_leader(epoch, &[b"x".as_slice()])
                    .is_err(),
                "seed {}: a restarted leader appended in its old epoch",
                self.seed
            );
            self.leader = None;
        }
    }

    fn tick(&mut self) -> Instant {
        self.clock += Duration::from_millis(10);
        self.clock
    }

    /// Committed entries agree everywhere; the leader holds them all.
    fn check(&self) {
        let committed_end = self.committed.keys().next_back().map_or(0, |o| o + 1);
        common::replicas::check_committed(
            (0..NODES).map(|n| (n, &self.r(n).store)),
            &self.committed,
            &format!("seed {}", self.seed),
        );
        if let Some((l, _, _)) = &self.leader {
            let end = self.r(*l).store.extent().queued_end.0;
            assert!(
                end >= committed_end,
                "seed {}: leader {l} misses committed entries ({end} < {committed_end})",
                self.seed
            );
        }
    }
}

/// The retention cap a seed runs with: in entries, in bytes (a group's
/// batches, about 110 bytes each here: nine of them) or in age, so each
/// kind passes laggards.
fn cap_for(seed: u64) -> RetentionCap {
    match seed % 3 {
        0 => RetentionCap {
            max_entries: Some(25),
            ..RetentionCap::default()
        },
        1 => RetentionCap {
            max_bytes: Some(1 << 10),
            ..RetentionCap::default()
        },
        _ => RetentionCap {
            max_age: Some(Duration::from_millis(120)),
            ..RetentionCap::default()
        },
    }
}

fn run(seed: u64) -> Counts {
    let mut sim = Sim {
        rng: SimRng::new(seed),
        seed,
        replicas: (0..NODES).map(|n| Some(Replica::new(n, seed))).collect(),
        leader: None,
        leaders_by_epoch: BTreeMap::new(),
        committed: BTreeMap::new(),
        compaction: LeaderCompaction::new(Duration::from_millis(200), cap_for(seed)),
        clock: Instant::now(),
        written: 0,
        counts: Counts::default(),
    };
    let trace = std::env::var_os("QUORUMLOG_SIM_TRACE").is_some();
    for step in 0..80 {
        if trace {
            let ends: Vec<String> = (0..NODES)
                .map(|n| {
                    let s = &sim.r(n).store;
                    format!(
                        "n{n}:[{},{}) hw {:?} e{}",
                        s.extent().start.0,
                        s.extent().queued_end.0,
                        s.extent().high_watermark.map(|h| h.0),
                        s.election().epoch().0
                    )
                })
                .collect();
            eprintln!(
                "step {step}: leader {:?} {}",
                sim.leader
                    .as_ref()
                    .map(|(l, e, t)| (*l, e.0, t.high_watermark().0)),
                ends.join(" ")
            );
        }
        match sim.rng.below(100) {
            0..=9 => sim.elect(),
            10..=39 => sim.append(),
            40..=74 => sim.fetch(),
            75..=84 => sim.leader_flush(),
            85..=94 => sim.snapshot_and_clean(),
            _ => sim.restart(),
        }
        if sim.leader.is_none() && sim.rng.below(2) == 0 {
            sim.elect();
        }
        sim.check();
    }
    sim.counts
}

#[test]
fn three_replicas_keep_every_committed_entry() {
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    if let Some(seed) = env("QUORUMLOG_SIM_SEED") {
        run(seed);
        return;
    }
    let seeds = env("QUORUMLOG_SIM_SEEDS").unwrap_or(500);
    let base = quorumlog_testkit::fresh_seed();
    eprintln!("three replicas: base seed {base} (replay one: QUORUMLOG_SIM_SEED=<seed>)");
    let mut total = Counts::default();
    for i in 0..seeds {
        total.add(run(base.wrapping_add(i)));
    }
    eprintln!("three replicas: {seeds} seeds, {total:?}");
    for (what, n) in [
        (
            "commit ahead of the leader's own sync",
            total.commits_ahead_of_leader_sync,
        ),
        ("an election won", total.elections_won),
        ("a vote refused", total.votes_refused),
        (
            "a diverging follower truncated",
            total.diverging_truncations,
        ),
        ("a snapshot installed", total.snapshot_installs),
        ("a leader restarted (resigned)", total.restarts_of_a_leader),
        ("the entry cap passing the window", total.cap_passed[0]),
        ("the byte cap passing the window", total.cap_passed[1]),
        ("the age cap passing the window", total.cap_passed[2]),
    ] {
        assert!(n > 0, "the simulation never reached: {what}");
    }
}
