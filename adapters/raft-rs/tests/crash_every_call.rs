//! A power cut after every step of a seeded sequence, on the simulated
//! disk. A raft-rs follower (node 1 of 1, 2, 3; region 1 of its node's
//! shared log) is driven by a scripted cluster: elections (vote
//! requests), appends from the leader of each term (new entries,
//! conflicting suffixes after a new leader, commit indexes) and snapshots
//! (files a leader's store wrote). Its Readies go through the
//! [`AsyncPersister`]; what it sends is what the persister released. The
//! sequence is replayed from the start for each cut, so every prefix is
//! cut once (the disk keeps a random part of what was not synced).
//!
//! Invariants after each reopen:
//! - the region opens and raft-rs accepts its state (`RawNode::new`
//!   checks the commit index against the log);
//! - every entry it holds is the one the follower held at that index at
//!   the cut (a truncation is never undone, nothing appears);
//! - every entry up to the last index an append response acknowledged
//!   (and no later truncation cut) is held, or covered by the snapshot;
//! - an installed snapshot stays installed;
//! - the term is at least every sent message's, and a vote granted in a
//!   term is the vote held; the commit index is at least the one of every
//!   Ready reported persisted that needed a sync and of every Ready
//!   before it (a Ready with only a new commit index, `must_sync()`
//!   false, is reported without a round of its own, after every earlier
//!   Ready: its commit index is durable once a later round is).
//!
//! Fails when Readies are reported persisted before their round is
//! durable (checked: `report_before_durable`). Seeded:
//! `QUORUMLOG_CALLS_SEEDS=N` (default 40), `QUORUMLOG_CALLS_SEED=s`.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::too_many_lines,
    clippy::similar_names,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use quorumlog_io::{CrashPlan, SimFs, SimRng, Tear};
use quorumlog_raft::{Node, SharedFs};
use quorumlog_raftrs::{AsyncPersister, Event, RegionStorage};
use raft::eraftpb::{ConfState, Entry, Message, MessageType};
use raft::{Config, GetEntriesContext, RawNode, Storage};

const VOTERS: [u64; 3] = [1, 2, 3];

/// One step of the scripted cluster.
#[derive(Debug, Clone)]
enum Step {
    /// A message to the follower.
    Send(Message),
    /// Waits for the rounds queued so far (some cuts land after it).
    Settle,
}

fn conf() -> ConfState {
    ConfState::from((VOTERS.to_vec(), vec![]))
}

/// The scripted cluster: the canonical log of terms (index i at `log[i - 1]`),
/// the committed index (never truncated), the leader's store (snapshot
/// files), and a mirror of what the follower accepted.
struct Script {
    rng: SimRng,
    term: u64,
    leader: u64,
    log: Vec<u64>,
    committed: u64,
    /// The follower's log as raft would leave it: (snapshot index, terms
    /// after it).
    mirror: (u64, Vec<u64>),
    store: RegionStorage,
    _node: Node,
}

impl Script {
    fn new(seed: u64) -> Script {
        let fs: SharedFs = Arc::new(SimFs::new(seed ^ 0xabcd));
        common::format(&fs, Path::new("/leader"), 2);
        let node = common::open(&fs, Path::new("/leader"), 2);
        let store = common::region(&node, 1, 1);
        store.initialize_with_conf_state(conf()).unwrap();
        Script {
            rng: SimRng::new(seed),
            term: 0,
            leader: 2,
            log: Vec::new(),
            committed: 0,
            mirror: (0, Vec::new()),
            store,
            _node: node,
        }
    }

    fn term_at(&self, i: u64) -> u64 {
        if i == 0 {
            0
        } else {
            self.log[usize::try_from(i - 1).unwrap()]
        }
    }

    fn mirror_term(&self, i: u64) -> Option<u64> {
        let (s, ref t) = self.mirror;
        if i == s {
            return Some(if s == 0 { 0 } else { self.term_at(s) });
        }
        i.checked_sub(s + 1)
            .and_then(|k| t.get(usize::try_from(k).ok()?).copied())
    }

    fn mirror_last(&self) -> u64 {
        self.mirror.0 + self.mirror.1.len() as u64
    }

    fn msg(&self, t: MessageType) -> Message {
        let mut m = Message::default();
        m.set_msg_type(t);
        m.from = self.leader;
        m.to = 1;
        m.term = self.term;
        m
    }

    /// An append from the leader: from the last index where the follower
    /// agrees with the canonical log, everything after it, with the
    /// commit index.
    fn append(&mut self) -> Message {
        let mut p = self.mirror_last().min(self.log.len() as u64);
        while p > self.mirror.0 && self.mirror_term(p) != Some(self.term_at(p)) {
            p -= 1;
        }
        let entries: Vec<Entry> = (p + 1..=self.log.len() as u64)
            .map(|i| common::entry(i, self.term_at(i)))
            .collect();
        let mut m = self.msg(MessageType::MsgAppend);
        m.index = p;
        m.log_term = self.term_at(p);
        m.commit = self.committed;
        m.set_entries(entries.into());
        // The follower accepts (it holds p in that term): its log is the
        // canonical one up to the end.
        let (s, _) = self.mirror;
        let keep = usize::try_from(p - s).unwrap();
        self.mirror.1.truncate(keep);
        self.mirror
            .1
            .extend(self.log[usize::try_from(p).unwrap()..].iter().copied());
        m
    }

    fn sync_leader_store(&mut self) {
        let last = self.store.last_index().unwrap();
        let from = (self.committed + 1).min(last + 1);
        let entries: Vec<Entry> = (from..=self.log.len() as u64)
            .map(|i| common::entry(i, self.term_at(i)))
            .collect();
        if from <= last && !entries.is_empty() {
            self.store.append(&entries).unwrap();
        } else if !entries.is_empty() {
            let more: Vec<Entry> = entries.into_iter().filter(|e| e.index > last).collect();
            self.store.append(&more).unwrap();
        }
        let mut hs = self.store.hard_state();
        hs.term = self.term;
        hs.commit = self.committed;
        self.store.set_hard_state(&hs).unwrap();
    }

    fn steps(&mut self, n: usize) -> Vec<Step> {
        let mut out = Vec::new();
        while out.len() < n {
            match self.rng.below(12) {
                0..=4 if self.term > 0 => {
                    let k = 1 + self.rng.below(5);
                    self.log
                        .extend(std::iter::repeat_n(self.term, usize::try_from(k).unwrap()));
                    let last = self.log.len() as u64;
                    let lo = self.committed;
                    self.committed = lo + self.rng.below(last - lo + 1);
                    // The commit never passes what the follower is sent.
                    out.push(Step::Send(self.append()));
                }
                0..=6 => {
                    // A new leader: its vote request, then it cuts the
                    // canonical log above the commit point.
                    self.term += 1;
                    self.leader = 2 + self.rng.below(2);
                    let last = self.log.len() as u64;
                    let cut = self.committed + self.rng.below(last - self.committed + 1);
                    let mut v = self.msg(MessageType::MsgRequestVote);
                    v.index = cut;
                    v.log_term = self.term_at(cut);
                    self.log.truncate(usize::try_from(cut).unwrap());
                    out.push(Step::Send(v));
                }
                7 | 8 => {
                    if self.term > 0 {
                        out.push(Step::Send(self.append()));
                    }
                }
                9 if self.committed > self.mirror.0 && self.term > 0 => {
                    // A snapshot at the commit point.
                    self.sync_leader_store();
                    let at = self.committed;
                    if self
                        .store
                        .store()
                        .extent()
                        .latest_snapshot
                        .map(|s| s.end_offset.0)
                        != Some(at + 1)
                    {
                        let state = format!("state at {at}").into_bytes();
                        self.store.create_snapshot(at, &conf(), &state).unwrap();
                    }
                    let mut m = self.msg(MessageType::MsgSnapshot);
                    m.set_snapshot(self.store.snapshot(at, 1).unwrap());
                    out.push(Step::Send(m));
                    if self.mirror_term(at) != Some(self.term_at(at)) {
                        self.mirror = (at, Vec::new());
                    }
                }
                _ => out.push(Step::Settle),
            }
        }
        out
    }
}

fn config() -> Config {
    Config {
        id: 1,
        election_tick: 10,
        heartbeat_tick: 3,
        max_size_per_msg: 1 << 20,
        max_inflight_msgs: 256,
        ..Config::default()
    }
}

/// What the follower did before the cut.
#[derive(Default)]
struct Seen {
    /// The highest index an append response acknowledged, lowered by
    /// every truncation below it.
    acked: u64,
    /// The highest term of a sent message.
    term: u64,
    /// Votes granted: term → candidate.
    votes: BTreeMap<u64, u64>,
    /// The highest snapshot installed.
    snapshot: u64,
    /// Each Ready that cut the log (a truncation or a snapshot's
    /// restart): its number and the last index it kept. An
    /// acknowledgement of an earlier Ready, delivered after it, is of
    /// entries it removed past that index.
    cuts: Vec<(u64, u64)>,
    /// A snapshot's Ready not yet reported persisted (number, index).
    snapshot_ready: Option<(u64, u64)>,
    /// Each Ready's commit index, until a report covers it durably.
    commits: BTreeMap<u64, u64>,
    /// The Readies that must be durable when reported (`must_sync()`).
    syncs: std::collections::BTreeSet<u64>,
    /// The highest commit index a report made durable: that of a Ready
    /// reported persisted that needed a sync, or of one before it (its
    /// round holds every record queued before). A Ready with only a new
    /// commit index is reported without a round of its own (raft-rs's
    /// contract), so its commit index may be lost until a later one.
    commit: u64,
}

impl Seen {
    fn cut(&mut self, number: u64, kept: u64) {
        self.acked = self.acked.min(kept);
        self.cuts.push((number, kept));
    }
}

/// Records messages of Ready `number` as sent.
fn sent(seen: &mut Seen, msgs: Vec<Message>, number: u64) {
    let floor = seen
        .cuts
        .iter()
        .filter(|(n, _)| *n > number)
        .map(|(_, k)| *k)
        .min()
        .unwrap_or(u64::MAX);
    for m in msgs {
        seen.term = seen.term.max(m.term);
        match m.get_msg_type() {
            MessageType::MsgAppendResponse if !m.reject => {
                seen.acked = seen.acked.max(m.index.min(floor));
            }
            MessageType::MsgRequestVoteResponse if !m.reject => {
                seen.votes.insert(m.term, m.to);
            }
            _ => {}
        }
    }
}

/// Runs the follower through `steps`; returns what it sent, its log at the
/// end and its storage (still open).
fn run(
    sim: &SimFs,
    steps: &[Step],
    early: bool,
    mode: Mode,
) -> (
    Seen,
    BTreeMap<u64, u64>,
    Node,
    RegionStorage,
    AsyncPersister,
) {
    let fs: SharedFs = Arc::new(sim.clone());
    common::format(&fs, Path::new("/f"), 1);
    let node = common::open(&fs, Path::new("/f"), 1);
    let storage = common::region(&node, 1, 1);
    storage.initialize_with_conf_state(conf()).unwrap();
    let persister = AsyncPersister::new();
    persister.report_before_durable(early);
    let mut raw = RawNode::with_default_logger(&config(), storage.clone()).unwrap();
    let mut seen = Seen::default();
    let drive = |raw: &mut RawNode<RegionStorage>, seen: &mut Seen| {
        for _ in 0..8 {
            // `Mode::Pass`: every Ready of this turn in one loop pass,
            // reported together; `Mode::Ready`: one completion each.
            let mut pass = (mode == Mode::Pass).then(|| persister.pass());
            while raw.has_ready() {
                let mut rd = raw.ready();
                if let Some(head) = rd.entries().first() {
                    if head.index <= raw.store().last_index().unwrap() {
                        seen.cut(rd.number(), head.index - 1);
                    }
                }
                let snap = rd.snapshot().get_metadata().index;
                if let Some(hs) = rd.hs() {
                    seen.commits.insert(rd.number(), hs.commit);
                }
                if rd.must_sync() {
                    seen.syncs.insert(rd.number());
                }
                let w = match &mut pass {
                    Some(p) => p.persist(raw.store(), &mut rd).unwrap(),
                    None => persister.persist(raw.store(), &mut rd).unwrap(),
                };
                if w.snapshot.is_some() {
                    // The log restarts at the snapshot (raft-rs restores
                    // only one its log does not hold).
                    seen.snapshot = seen.snapshot.max(snap);
                    seen.cut(rd.number(), snap);
                }
                sent(seen, w.messages, rd.number());
                // Applied: the committed entries at once; a snapshot once
                // its Ready is reported persisted.
                let applied = rd.take_committed_entries().last().map(|e| e.index);
                if w.snapshot.is_some() {
                    seen.snapshot_ready = Some((rd.number(), snap));
                }
                raw.advance_append_async(rd);
                if let Some(a) = applied {
                    raw.advance_apply_to(a);
                }
            }
            drop(pass);
            let events: Vec<Event> = persister.try_events().collect();
            if events.is_empty() {
                break;
            }
            for e in events {
                match e {
                    Event::Persisted {
                        number, messages, ..
                    } => {
                        raw.on_persist_ready(number);
                        sent(seen, messages, number);
                        if let Some(&m) = seen.syncs.range(..=number).next_back() {
                            let later = seen.commits.split_off(&(m + 1));
                            if let Some(c) = seen.commits.values().max() {
                                seen.commit = seen.commit.max(*c);
                            }
                            seen.commits = later;
                            seen.syncs = seen.syncs.split_off(&(m + 1));
                        }
                        if let Some((n, at)) = seen.snapshot_ready {
                            if n <= number {
                                raw.advance_apply_to(at);
                                seen.snapshot_ready = None;
                            }
                        }
                    }
                    Event::Fetched { context, .. } => raw.on_entries_fetched(context),
                    Event::Failed { error, .. } => panic!("the store failed: {error}"),
                }
            }
        }
    };
    for s in steps {
        match s {
            Step::Send(m) => {
                raw.step(m.clone()).unwrap();
                drive(&mut raw, &mut seen);
            }
            Step::Settle => {
                let end = raw.store().store().extent().queued_end;
                raw.store().store().wait_durable(end).unwrap();
                std::thread::sleep(Duration::from_millis(1));
                drive(&mut raw, &mut seen);
            }
        }
    }
    let (first, last) = (
        storage.first_index().unwrap(),
        storage.last_index().unwrap(),
    );
    let log: BTreeMap<u64, u64> = storage
        .entries(first, last + 1, None, GetEntriesContext::empty(false))
        .unwrap()
        .iter()
        .map(|e| (e.index, e.term))
        .collect();
    (seen, log, node, storage, persister)
}

fn plan(rng: &mut SimRng) -> CrashPlan {
    match rng.below(3) {
        0 => CrashPlan::LoseUnsynced,
        1 => CrashPlan::Torn(Tear::Garbage),
        _ => CrashPlan::Random,
    }
}

/// Runs every cut of `seed`'s sequence; returns (cuts, acknowledged
/// entries checked).
fn check_seed(seed: u64, early: bool, mode: Mode) -> (usize, u64) {
    let mut script = Script::new(seed);
    let steps = script.steps(30);
    let mut rng = SimRng::new(seed.wrapping_mul(31));
    let (mut cuts, mut checked) = (0, 0);
    for k in 1..=steps.len() {
        let sim = SimFs::new(seed ^ (k as u64).wrapping_mul(0x9e37_79b9));
        sim.set_sync_delay(Duration::from_micros(400));
        let (seen, log, node, storage, persister) = run(&sim, &steps[..k], early, mode);
        let crashed = sim.crash_with(plan(&mut rng));
        // After the cut: what they write lands on the disk left behind.
        drop(persister);
        drop(storage);
        drop(node);
        let fs: SharedFs = Arc::new(crashed);
        let node = common::open(&fs, Path::new("/f"), 1);
        let s = common::region(&node, 1, 1);
        let ctx = format!("seed {seed} cut {k} ({:?})", steps.get(k - 1));
        if std::env::var("QUORUMLOG_CALLS_DEBUG").is_ok() {
            eprintln!(
                "{ctx}: held before the cut {log:?}, acked {}, snapshot {}",
                seen.acked, seen.snapshot
            );
        }
        let raw = RawNode::with_default_logger(&config(), s.clone())
            .unwrap_or_else(|e| panic!("{ctx}: raft-rs refuses the state: {e}"));
        let (first, last) = (s.first_index().unwrap(), s.last_index().unwrap());
        let held: BTreeMap<u64, u64> = s
            .entries(first, last + 1, None, GetEntriesContext::empty(false))
            .unwrap()
            .iter()
            .map(|e| (e.index, e.term))
            .collect();
        for (i, t) in &held {
            assert_eq!(
                log.get(i),
                Some(t),
                "{ctx}: entry {i} in term {t}, which the follower held as {:?}",
                log.get(i)
            );
        }
        assert!(
            first > seen.snapshot,
            "{ctx}: snapshot {} installed, log starts at {first}",
            seen.snapshot
        );
        for i in first..=seen.acked {
            assert_eq!(
                held.get(&i),
                log.get(&i),
                "{ctx}: acknowledged entry {i} lost (acked to {})",
                seen.acked
            );
            checked += 1;
        }
        let hs = raw.raft.hard_state();
        assert!(
            hs.term >= seen.term,
            "{ctx}: term {} below a sent message's {}",
            hs.term,
            seen.term
        );
        assert!(
            hs.commit >= seen.commit,
            "{ctx}: commit index {} below {}, a persisted Ready's (log {first}..={last}, initial {:?})",
            hs.commit,
            seen.commit,
            s.initial_state().unwrap().hard_state
        );
        for (t, c) in &seen.votes {
            assert!(
                hs.term > *t || hs.vote == *c,
                "{ctx}: the vote for {c} in term {t} is lost ({hs:?})"
            );
        }
        cuts += 1;
    }
    (cuts, checked)
}

fn seeds() -> Vec<u64> {
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    if let Some(s) = env("QUORUMLOG_CALLS_SEED") {
        vec![s]
    } else {
        (1..=env("QUORUMLOG_CALLS_SEEDS").unwrap_or(40)).collect()
    }
}

/// How the follower's Ready loop persists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `AsyncPersister::persist`: one completion per Ready.
    Ready,
    /// `AsyncPersister::pass`: the Readies of one turn in one pass.
    Pass,
}

fn every_cut(mode: Mode) {
    let seeds = seeds();
    let (mut cuts, mut checked) = (0, 0);
    for s in &seeds {
        let (c, k) = check_seed(*s, false, mode);
        cuts += c;
        checked += k;
    }
    eprintln!(
        "{mode:?}: {} seeds, {cuts} cuts, {checked} acknowledged entries checked after them",
        seeds.len()
    );
    assert!(checked > 0, "no append was acknowledged before any cut");
}

#[test]
fn a_power_cut_after_every_step_loses_nothing_persisted() {
    every_cut(Mode::Ready);
}

#[test]
fn a_power_cut_after_every_step_of_a_pass_loses_nothing_persisted() {
    every_cut(Mode::Pass);
}

fn early_is_caught(mode: Mode) -> bool {
    (1..=20u64).any(|s| {
        std::panic::catch_unwind(|| {
            check_seed(s, true, mode);
        })
        .is_err()
    })
}

#[test]
fn reporting_before_the_round_is_durable_is_caught() {
    assert!(
        early_is_caught(Mode::Ready),
        "Readies reported persisted before their round was durable lost nothing the checks see"
    );
}

#[test]
fn reporting_a_pass_before_its_round_is_durable_is_caught() {
    assert!(
        early_is_caught(Mode::Pass),
        "a pass reported persisted before its round was durable lost nothing the checks see"
    );
}
