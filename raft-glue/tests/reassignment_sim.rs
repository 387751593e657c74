//! The replica simulation of `three_replicas.rs`, extended with voter
//! changes (issue 14): up to five replicas, each a store on its own
//! simulated disk; elections count only voters of the candidate's latest
//! set, by (node id, directory id); the high watermark is a majority of the
//! leader's latest set; the leader drives reassignments from its
//! followers' fetch progress (`KraftReplica::drive_reassignment`), one voter
//! change at a time, and resigns once its own removal is committed.
//!
//! Scenarios, each over many seeds with random appends, fetches, flushes,
//! power cuts (of the leader too, mid-reassignment: the next leader
//! continues from the log) and elections:
//! - grow 3 → 5, then shrink to 3 (removing the leader when it is among
//!   the removed);
//! - a voter loses its disk (same node id, new directory id): its votes do
//!   not count and it cannot stand; it is replaced by reassignment;
//! - cancel after 0, 1 or 2 promotions: the set returns to exactly the
//!   original;
//! - a pending reassignment replaced by another.
//!
//! Checked after every step: committed entries never change and agree
//! everywhere; at most one leader per epoch; consecutive committed voter
//! sets differ by exactly one voter; after a power cut a replica's latest
//! set is one some leader appended. At the end (after the cluster settles)
//! the committed set is exactly the expected one and no reassignment is
//! pending.
//!
//! `QUORUMLOG_REASSIGN_SEEDS=N` runs N seeds per scenario (default 60),
//! `QUORUMLOG_REASSIGN_SEED=S` replays one seed of every scenario.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use quorumlog_raft::kraft::StateAt;
use std::collections::BTreeMap;

use quorumlog_checkpoint::{DirectoryId, Epoch, NodeId, Offset, Voter};
use quorumlog_io::{SimFs, SimRng};
use quorumlog_raft::kraft::voters::{Step, VoterEntry, VoterError, VoterSet};
use quorumlog_raft::{
    kraft::KraftReplica, kraft::LogPosition, kraft::VoteDecision, Error, Isolation,
};

const DIR: &str = "/data";
const MAX_LAG: u64 = 8;

struct Replica {
    disk: SimFs,
    store: KraftReplica,
    me: Voter,
}

impl Replica {
    fn new(node: u64, dir: u128, seed: u64) -> Replica {
        let (disk, store) = common::replicas::fresh_store(
            seed.wrapping_mul(131)
                .wrapping_add(node * 7 + u64::try_from(dir % 1_000_000).unwrap()),
            node,
            dir,
            DIR,
        );
        Replica {
            disk,
            store,
            me: Voter {
                node_id: NodeId(node),
                directory_id: DirectoryId(dir),
            },
        }
    }

    fn restart(self) -> Replica {
        let Replica { disk, store, me } = self;
        let (disk, store) = common::replicas::power_cut(&disk, store, DIR);
        Replica { disk, store, me }
    }

    fn position(&self) -> LogPosition {
        common::replicas::position(&self.store)
    }
}

fn voters(vs: &[Voter]) -> VoterSet {
    VoterSet::new(
        vs.iter()
            .map(|v| VoterEntry {
                voter: *v,
                endpoint: Some(format!("node-{}", v.node_id.0)),
            })
            .collect(),
    )
    .unwrap()
}

fn diff(a: &VoterSet, b: &VoterSet) -> usize {
    a.voters().filter(|v| !b.contains(*v)).count() + b.voters().filter(|v| !a.contains(*v)).count()
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    promotions: u64,
    removals: u64,
    resigned: u64,
    catching_up: u64,
    cancels: u64,
    replaced_pending: u64,
    refused_completing: u64,
    not_a_voter: u64,
    vote_to_old_directory: u64,
    leader_restarts_mid_reassignment: u64,
    elections_won: u64,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.promotions += o.promotions;
        self.removals += o.removals;
        self.resigned += o.resigned;
        self.catching_up += o.catching_up;
        self.cancels += o.cancels;
        self.replaced_pending += o.replaced_pending;
        self.refused_completing += o.refused_completing;
        self.not_a_voter += o.not_a_voter;
        self.vote_to_old_directory += o.vote_to_old_directory;
        self.leader_restarts_mid_reassignment += o.leader_restarts_mid_reassignment;
        self.elections_won += o.elections_won;
    }
}

struct Sim {
    rng: SimRng,
    seed: u64,
    replicas: BTreeMap<u64, Replica>,
    /// Leader node, its epoch, and the offset of its epoch's first record.
    leader: Option<(u64, Epoch, Offset)>,
    leaders_by_epoch: BTreeMap<Epoch, u64>,
    committed: BTreeMap<u64, (Epoch, Vec<u8>)>,
    /// The leader's view of each replica's durable end.
    progress: BTreeMap<Voter, Offset>,
    committed_sets: Vec<VoterSet>,
    appended_sets: Vec<VoterSet>,
    written: u64,
    now_ms: u64,
    counts: Counts,
}

impl Sim {
    fn new(seed: u64, nodes: &[u64]) -> Sim {
        let replicas = nodes
            .iter()
            .map(|n| (*n, Replica::new(*n, u128::from(*n), seed)))
            .collect();
        Sim {
            rng: SimRng::new(seed),
            seed,
            replicas,
            leader: None,
            leaders_by_epoch: BTreeMap::new(),
            committed: BTreeMap::new(),
            progress: BTreeMap::new(),
            committed_sets: Vec::new(),
            appended_sets: Vec::new(),
            written: 0,
            now_ms: 0,
            counts: Counts::default(),
        }
    }

    fn r(&self, n: u64) -> &Replica {
        &self.replicas[&n]
    }

    fn ctx(&self) -> String {
        format!("seed {}", self.seed)
    }

    /// Node 1 bootstraps the quorum {1, 2, 3} and commits it.
    fn bootstrap(&mut self) {
        let s = &self.replicas[&1].store;
        let epoch = s.election().become_candidate().unwrap();
        s.election().become_leader().unwrap();
        self.leaders_by_epoch.insert(epoch, 1);
        let set = voters(&[1, 2, 3].map(|n| self.replicas[&n].me));
        let info = s.append_voter_set(epoch, set.clone()).unwrap();
        self.appended_sets.push(set);
        self.leader = Some((1, epoch, info.base_offset));
        for _ in 0..4 {
            for f in [2, 3] {
                self.fetch_by(f, true);
            }
            self.leader_flush();
        }
        assert!(
            self.r(1)
                .store
                .control_state(StateAt::Committed)
                .voters
                .is_some(),
            "{}: bootstrap set not committed",
            self.ctx()
        );
    }

    fn elect(&mut self) {
        let present: Vec<u64> = self.replicas.keys().copied().collect();
        let c = present[usize::try_from(self.rng.below(present.len() as u64)).unwrap()];
        let me = self.r(c).me;
        if self
            .r(c)
            .store
            .control_state(StateAt::Latest)
            .voters
            .is_none()
        {
            return; // a replica that never learnt the voter set (a new one)
        }
        let epoch = match self.r(c).store.become_candidate() {
            Ok(e) => e,
            Err(Error::Voters(VoterError::NotAVoter(_))) => {
                self.counts.not_a_voter += 1;
                return;
            }
            Err(e) => panic!("{}: candidacy: {e}", self.ctx()),
        };
        self.leader = None;
        let set = self
            .r(c)
            .store
            .control_state(StateAt::Latest)
            .voters
            .expect("bootstrapped");
        let pos = self.r(c).position();
        let mut votes = 1;
        for v in set.voters().filter(|v| v.node_id.0 != c) {
            let Some(o) = self.replicas.get(&v.node_id.0) else {
                continue;
            };
            match o.store.grant_vote_to(epoch, me, v, pos) {
                Ok(VoteDecision::Granted) => {
                    assert_eq!(
                        o.me,
                        v,
                        "{}: a vote from a node that is not the voter",
                        self.ctx()
                    );
                    votes += 1;
                }
                Ok(_) | Err(Error::StaleEpoch { .. }) => {}
                Err(Error::Voters(VoterError::NotAVoter(_))) => {
                    assert_ne!(
                        o.me,
                        v,
                        "{}: the voter itself refused as not a voter",
                        self.ctx()
                    );
                    self.counts.vote_to_old_directory += 1;
                }
                Err(e) => panic!("{}: vote: {e}", self.ctx()),
            }
        }
        if votes * 2 > set.len() {
            self.counts.elections_won += 1;
            let s = &self.replicas[&c].store;
            s.election().become_leader().unwrap();
            assert!(
                self.leaders_by_epoch.insert(epoch, c).is_none(),
                "{}: two leaders in {epoch}",
                self.ctx()
            );
            let info = s.append_control(epoch, &[b"leader".as_slice()]).unwrap();
            self.leader = Some((c, epoch, info.base_offset));
            self.progress.clear();
        }
    }

    fn current_leader(&mut self) -> Option<(u64, Epoch)> {
        let (l, epoch, _) = self.leader?;
        let ok = self
            .replicas
            .get(&l)
            .is_some_and(|r| r.store.election().check_leader_append(epoch).is_ok());
        if ok {
            Some((l, epoch))
        } else {
            self.leader = None;
            None
        }
    }

    fn append(&mut self) {
        let Some((l, epoch)) = self.current_leader() else {
            return;
        };
        let n = 1 + self.rng.below(3);
        let recs: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("e{}-n{l}-{}-{i}", epoch.0, self.written).into_bytes())
            .collect();
        self.written += 1;
        self.r(l).store.append_as_leader(epoch, &recs).unwrap();
    }

    fn leader_flush(&mut self) {
        let Some((l, _)) = self.current_leader() else {
            return;
        };
        let end = self.r(l).store.extent().queued_end;
        let flushed = self.r(l).store.wait_durable(end).unwrap();
        let me = self.r(l).me;
        self.progress.insert(me, flushed);
        self.commit();
    }

    /// The high watermark: the largest offset durable on a majority of the
    /// leader's latest voter set, once its own epoch's first record is
    /// below it.
    fn commit(&mut self) {
        let Some((l, _, start)) = self.leader else {
            return;
        };
        let s = &self.replicas[&l].store;
        let Some(set) = s.control_state(StateAt::Latest).voters else {
            return;
        };
        let mut ends: Vec<Offset> = set
            .voters()
            .map(|v| self.progress.get(&v).copied().unwrap_or(Offset(0)))
            .collect();
        ends.sort_unstable_by(|a, b| b.cmp(a));
        let hw = ends[set.len() / 2].min(s.extent().queued_end);
        let before = s.extent().high_watermark.unwrap_or(Offset(0));
        if hw <= start || hw <= before {
            return;
        }
        s.set_high_watermark(hw).unwrap();
        let from = s.extent().start.max(before);
        for e in s
            .read_entries(from, hw, u64::MAX, Isolation::Uncommitted)
            .unwrap()
        {
            if let Some(p) = self
                .committed
                .insert(e.offset.0, (e.epoch, e.bytes.clone()))
            {
                assert_eq!(
                    p,
                    (e.epoch, e.bytes),
                    "seed {}: committed entry changed",
                    self.seed
                );
            }
        }
        let now = s.control_state(StateAt::Committed).voters.unwrap();
        match self.committed_sets.last() {
            Some(last) if last.same_voters(&now) => {}
            Some(last) => {
                assert_eq!(
                    diff(last, &now),
                    1,
                    "seed {}: committed sets {last:?} -> {now:?} differ by more than one voter",
                    self.seed
                );
                self.committed_sets.push(now);
            }
            None => self.committed_sets.push(now),
        }
    }

    fn fetch(&mut self) {
        let present: Vec<u64> = self.replicas.keys().copied().collect();
        let f = present[usize::try_from(self.rng.below(present.len() as u64)).unwrap()];
        let flush = self.rng.below(2) == 0;
        self.fetch_by(f, flush);
    }

    fn fetch_by(&mut self, f: u64, flush: bool) {
        let Some((l, epoch)) = self.current_leader() else {
            return;
        };
        if f == l || !self.replicas.contains_key(&f) {
            return;
        }
        let theirs = self.r(f).store.election().epoch();
        if theirs > epoch {
            // The fetch answer names a newer epoch: the leader steps down
            // into it (an election follows).
            self.r(l)
                .store
                .election()
                .become_unattached(theirs)
                .unwrap();
            self.leader = None;
            return;
        }
        if self
            .r(f)
            .store
            .election()
            .become_follower(epoch, NodeId(l))
            .is_err()
        {
            return;
        }
        let matched = self.catch_up(l, f);
        if !matched {
            return;
        }
        if flush {
            let end = self.r(f).store.extent().queued_end;
            self.r(f).store.wait_durable(end).unwrap();
        }
        let durable = self.r(f).store.extent().flushed;
        let me = self.r(f).me;
        self.progress.insert(me, durable);
        self.commit();
        let hw = self.r(l).store.extent().high_watermark.unwrap_or(Offset(0));
        let fs = &self.r(f).store;
        let fhw = hw.min(fs.extent().queued_end);
        if fs.extent().high_watermark.unwrap_or(Offset(0)) < fhw {
            fs.set_high_watermark(fhw).unwrap();
        }
    }

    fn catch_up(&self, l: u64, f: u64) -> bool {
        common::replicas::catch_up(&self.r(l).store, &self.r(f).store, &self.ctx()).matched
    }

    /// The leader's reassignment step.
    fn drive(&mut self) {
        let Some((l, epoch)) = self.current_leader() else {
            return;
        };
        let me = self.r(l).me;
        let before = self.r(l).store.control_state(StateAt::Latest).voters;
        let step = self
            .r(l)
            .store
            .drive_reassignment(epoch, me, &self.progress, MAX_LAG)
            .unwrap();
        match step {
            Step::Append(next) => {
                let before = before.unwrap();
                if next.len() > before.len() {
                    self.counts.promotions += 1;
                } else {
                    self.counts.removals += 1;
                }
                self.appended_sets.push(next);
            }
            Step::Resign => {
                self.counts.resigned += 1;
                self.leader = None;
            }
            Step::CatchingUp(_) => self.counts.catching_up += 1,
            Step::Idle | Step::WaitForCommit | Step::Finish => {}
        }
    }

    fn restart(&mut self, n: u64) {
        let old = self.replicas.remove(&n).unwrap();
        let r = old.restart();
        let latest = r.store.control_state(StateAt::Latest).voters;
        if let Some(latest) = latest {
            assert!(
                self.appended_sets.iter().any(|s| s.same_voters(&latest)),
                "{}: node {n} recovered a voter set no leader appended: {latest:?}",
                self.ctx()
            );
        }
        self.replicas.insert(n, r);
        if self.leader.is_some_and(|(l, _, _)| l == n) {
            if self
                .r(n)
                .store
                .control_state(StateAt::Latest)
                .reassignment
                .is_some()
            {
                self.counts.leader_restarts_mid_reassignment += 1;
            }
            self.leader = None;
        }
    }

    /// Node `n` loses its disk: it comes back empty with a new directory.
    fn lose_disk(&mut self, n: u64) {
        let old = self.replicas.remove(&n).unwrap();
        let dir = old.me.directory_id.0 + 1000;
        self.replicas
            .insert(n, Replica::new(n, dir, self.seed ^ 0x5eed));
        if self.leader.is_some_and(|(l, _, _)| l == n) {
            self.leader = None;
        }
    }

    /// Asks the leader to reassign to `target` (`None`: cancel); returns
    /// the request's offset and bytes once in the log.
    fn alter(&mut self, target: Option<&[u64]>) -> Result<(Offset, Vec<u8>), Error> {
        let Some((l, epoch)) = self.current_leader() else {
            return Err(Error::Voters(VoterError::NoVoterSet));
        };
        let set = target.map(|t| voters(&t.iter().map(|n| self.r(*n).me).collect::<Vec<_>>()));
        self.now_ms += 1;
        let s = &self.r(l).store;
        let info = s.alter_voters(epoch, set, self.now_ms)?;
        // Readable once written (the leader's round).
        s.wait_durable(info.next_offset)?;
        let bytes = s
            .read_entries(
                info.base_offset,
                info.next_offset,
                u64::MAX,
                Isolation::Uncommitted,
            )?
            .remove(0)
            .bytes;
        Ok((info.base_offset, bytes))
    }

    /// Whether the record `bytes` at `at` is committed (at the leader),
    /// `Some(false)` if the leader's log lost it, `None` if not known yet.
    fn request_committed(&mut self, at: Offset, bytes: &[u8]) -> Option<bool> {
        let (l, _) = self.current_leader()?;
        let s = &self.r(l).store;
        if s.extent().queued_end <= at {
            return Some(false);
        }
        if s.extent().end <= at {
            return None; // queued, not written yet
        }
        if at < s.extent().start {
            return Some(true); // cut below a snapshot: committed long ago
        }
        let e = s
            .read_entries(at, Offset(at.0 + 1), u64::MAX, Isolation::Uncommitted)
            .ok()?;
        if e.first().is_none_or(|e| e.bytes != bytes) {
            return Some(false);
        }
        (s.extent().high_watermark.unwrap_or(Offset(0)) > at).then_some(true)
    }

    /// One random step.
    fn random_step(&mut self, restarts: bool) {
        match self.rng.below(100) {
            0..=7 => self.elect(),
            8..=29 => self.append(),
            30..=69 => self.fetch(),
            70..=79 => self.leader_flush(),
            80..=93 => self.drive(),
            _ if restarts => {
                let present: Vec<u64> = self.replicas.keys().copied().collect();
                let n = present[usize::try_from(self.rng.below(present.len() as u64)).unwrap()];
                self.restart(n);
            }
            _ => self.fetch(),
        }
        if self.leader.is_none() && self.rng.below(2) == 0 {
            self.elect();
        }
        self.check();
    }

    /// Runs without power cuts until nothing is pending: every change
    /// committed, no reassignment; returns the committed set.
    fn settle(&mut self) -> VoterSet {
        let trace = std::env::var_os("QUORUMLOG_REASSIGN_TRACE").is_some();
        for i in 0..3000 {
            if trace && i > 2990 {
                let view: Vec<String> = self
                    .replicas
                    .iter()
                    .map(|(n, r)| {
                        let s = &r.store;
                        let (epoch, role) = {
                            let e = s.election();
                            (e.epoch().0, e.role())
                        };
                        format!(
                            "n{n}/{}:[{},{}) hw {:?} e{} {:?} voters {:?}",
                            r.me.directory_id.0,
                            s.extent().start.0,
                            s.extent().queued_end.0,
                            s.extent().high_watermark.map(|h| h.0),
                            epoch,
                            role,
                            s.control_state(StateAt::Latest)
                                .voters
                                .map(|v| v.voters().map(|x| x.node_id.0).collect::<Vec<_>>())
                        )
                    })
                    .collect();
                eprintln!(
                    "settle {i}: leader {:?}\n  {}",
                    self.leader,
                    view.join("\n  ")
                );
                if let Some((l, _, _)) = self.leader {
                    eprintln!(
                        "  state {:?}",
                        self.r(l).store.control_state(StateAt::Latest).reassignment
                    );
                }
            }
            if self.current_leader().is_none() {
                self.elect();
                continue;
            }
            let present: Vec<u64> = self.replicas.keys().copied().collect();
            for f in present {
                self.fetch_by(f, true);
            }
            self.leader_flush();
            self.drive();
            self.check();
            let Some((l, _)) = self.current_leader() else {
                continue;
            };
            let s = &self.r(l).store;
            let st = s.control_state(StateAt::Latest);
            let hw = s.extent().high_watermark.unwrap_or(Offset(0));
            if st.reassignment.is_none()
                && s.control_state(StateAt::Committed)
                    .voters
                    .is_some_and(|c| c.same_voters(st.voters.as_ref().unwrap()))
                && hw == s.extent().queued_end
            {
                return s.control_state(StateAt::Committed).voters.unwrap();
            }
        }
        panic!("{}: the cluster did not settle", self.ctx());
    }

    /// Random steps until `cond` holds or `limit` steps passed.
    fn run_until(&mut self, limit: usize, restarts: bool, mut cond: impl FnMut(&mut Sim) -> bool) {
        for _ in 0..limit {
            if cond(self) {
                return;
            }
            self.random_step(restarts);
        }
    }

    /// Committed entries agree everywhere.
    fn check(&self) {
        common::replicas::check_committed(
            self.replicas.iter().map(|(n, r)| (*n, &r.store)),
            &self.committed,
            &self.ctx(),
        );
    }
}

fn nodes_of(s: &VoterSet) -> Vec<(u64, u128)> {
    s.voters()
        .map(|v| (v.node_id.0, v.directory_id.0))
        .collect()
}

/// Issues `target` (or a cancel) until a leader commits it (an
/// uncommitted request may be lost with its leader, as any entry), with
/// random steps in between; returns the refusals met on the way.
fn issue(sim: &mut Sim, target: Option<&[u64]>) -> Vec<Error> {
    let mut refusals = Vec::new();
    let trace = std::env::var_os("QUORUMLOG_REASSIGN_TRACE").is_some();
    for attempt in 0..2000 {
        if trace {
            eprintln!(
                "issue {target:?} attempt {attempt}: leader {:?}",
                sim.leader
            );
        }
        match sim.alter(target) {
            Ok((at, bytes)) => {
                for _ in 0..400 {
                    match sim.request_committed(at, &bytes) {
                        Some(true) => return refusals,
                        Some(false) => break,
                        None => sim.random_step(true),
                    }
                }
            }
            Err(e @ Error::Voters(VoterError::Completing | VoterError::NoReassignment)) => {
                refusals.push(e);
                return refusals;
            }
            Err(e) => refusals.push(e),
        }
        sim.random_step(false);
    }
    panic!("{}: no leader committed the request", sim.ctx());
}

fn grow_and_shrink(seed: u64) -> Counts {
    let mut sim = Sim::new(seed, &[1, 2, 3, 4, 5]);
    sim.bootstrap();
    sim.run_until(40, true, |_| false);
    issue(&mut sim, Some(&[1, 2, 3, 4, 5]));
    // A power cut of the leader mid-reassignment, once something moved.
    sim.run_until(400, true, |s| s.counts.promotions > 0);
    if let Some((l, _)) = sim.current_leader() {
        sim.restart(l);
    }
    sim.run_until(60, true, |_| false);
    let grown = sim.settle();
    assert_eq!(
        nodes_of(&grown),
        (1..=5).map(|n| (n, u128::from(n))).collect::<Vec<_>>()
    );
    // Shrink to {3, 4, 5}: removes 1 and 2 (the leader, if it is one of
    // them, last, then it resigns).
    issue(&mut sim, Some(&[3, 4, 5]));
    sim.run_until(60, true, |_| false);
    let shrunk = sim.settle();
    assert_eq!(
        nodes_of(&shrunk),
        vec![(3, 3), (4, 4), (5, 5)],
        "{}",
        sim.ctx()
    );
    sim.counts
}

fn lost_disk(seed: u64) -> Counts {
    let mut sim = Sim::new(seed, &[1, 2, 3]);
    sim.bootstrap();
    sim.run_until(30, true, |_| false);
    sim.lose_disk(3);
    sim.run_until(60, true, |_| false);
    sim.settle();
    // Node 3 (new directory) is not a voter: it cannot stand.
    assert!(
        matches!(
            sim.r(3).store.become_candidate(),
            Err(Error::Voters(VoterError::NotAVoter(_)))
        ) || sim
            .r(3)
            .store
            .control_state(StateAt::Latest)
            .voters
            .is_none()
    );
    issue(&mut sim, Some(&[1, 2, 3]));
    sim.run_until(80, true, |_| false);
    let set = sim.settle();
    assert_eq!(
        nodes_of(&set),
        vec![(1, 1), (2, 2), (3, 1003)],
        "{}: the replaced voter",
        sim.ctx()
    );
    sim.counts
}

fn cancel(seed: u64) -> Counts {
    let mut sim = Sim::new(seed, &[1, 2, 3, 4, 5]);
    sim.bootstrap();
    sim.run_until(30, true, |_| false);
    let original = sim.settle();
    issue(&mut sim, Some(&[1, 2, 4, 5]));
    let promoted = seed % 3;
    sim.run_until(2000, true, |s| {
        s.counts.promotions >= promoted
            && s.current_leader().is_some_and(|(l, _)| {
                let st = s.r(l).store.control_state(StateAt::Latest);
                st.reassignment
                    .as_ref()
                    .is_some_and(|r| !r.completing(st.voters.as_ref().unwrap()))
            })
    });
    let refusals = issue(&mut sim, None);
    // A refusal right after a cancel of ours that a leader change hid
    // from us: the rollback is what is pending.
    let rolling_back = sim.current_leader().is_some_and(|(l, _)| {
        sim.r(l)
            .store
            .control_state(StateAt::Latest)
            .reassignment
            .is_some_and(|r| r.rollback)
    });
    if !rolling_back
        && refusals
            .iter()
            .any(|e| matches!(e, Error::Voters(VoterError::Completing)))
    {
        // The removal began first (voter 3 went): the reassignment must
        // complete instead.
        sim.counts.refused_completing += 1;
        let set = sim.settle();
        assert_eq!(
            nodes_of(&set),
            vec![(1, 1), (2, 2), (4, 4), (5, 5)],
            "{}",
            sim.ctx()
        );
        return sim.counts;
    }
    sim.counts.cancels += 1;
    sim.run_until(60, true, |_| false);
    let set = sim.settle();
    assert!(
        set.same_voters(&original),
        "{}: cancel did not return to the original: {set:?}",
        sim.ctx()
    );
    sim.counts
}

fn replace_pending(seed: u64) -> Counts {
    let mut sim = Sim::new(seed, &[1, 2, 3, 4, 5]);
    sim.bootstrap();
    sim.run_until(30, true, |_| false);
    issue(&mut sim, Some(&[1, 2, 3, 4]));
    sim.run_until(usize::try_from(seed % 50).unwrap(), true, |_| false);
    let refusals = issue(&mut sim, Some(&[1, 2, 3, 5]));
    if refusals.is_empty()
        || !refusals
            .iter()
            .any(|e| matches!(e, Error::Voters(VoterError::Completing)))
    {
        sim.counts.replaced_pending += 1;
    }
    sim.run_until(60, true, |_| false);
    let set = sim.settle();
    let got = nodes_of(&set);
    assert!(
        got == vec![(1, 1), (2, 2), (3, 3), (5, 5)],
        "{}: after the replacement: {got:?}",
        sim.ctx()
    );
    sim.counts
}

type Scenario = fn(u64) -> Counts;

#[test]
fn reassignments_keep_one_change_at_a_time_and_end_where_asked() {
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    let scenarios: [(&str, Scenario); 4] = [
        ("grow 3 -> 5 -> 3", grow_and_shrink),
        ("replace a lost disk", lost_disk),
        ("cancel", cancel),
        ("replace a pending reassignment", replace_pending),
    ];
    if let Some(seed) = env("QUORUMLOG_REASSIGN_SEED") {
        for (_, f) in scenarios {
            f(seed);
        }
        return;
    }
    let seeds = env("QUORUMLOG_REASSIGN_SEEDS").unwrap_or(60);
    let base = quorumlog_testkit::fresh_seed();
    eprintln!("reassignment: base seed {base} (replay: QUORUMLOG_REASSIGN_SEED=<seed>)");
    let mut total = Counts::default();
    for (name, f) in scenarios {
        for i in 0..seeds {
            let seed = base.wrapping_add(i);
            let c = std::panic::catch_unwind(|| f(seed))
                .unwrap_or_else(|_| panic!("scenario {name}, seed {seed}"));
            total.add(c);
        }
    }
    eprintln!("reassignment: {seeds} seeds per scenario, {total:?}");
    for (what, n) in [
        ("a promotion", total.promotions),
        ("a removal", total.removals),
        ("a removed leader resigning", total.resigned),
        ("an adding replica catching up", total.catching_up),
        ("a cancel rolled back", total.cancels),
        ("a pending reassignment replaced", total.replaced_pending),
        (
            "a vote or candidacy refused to a non-voter",
            total.not_a_voter,
        ),
        (
            "a leader power cut mid-reassignment",
            total.leader_restarts_mid_reassignment,
        ),
    ] {
        assert!(n > 0, "the simulation never reached: {what}");
    }
}
