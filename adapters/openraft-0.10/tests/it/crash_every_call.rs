//! A power cut after every call of a seeded sequence of appends, votes,
//! truncations, purges and commit points, on the simulated disk, then a
//! reopen. The sequence is replayed from the start for each cut, so every
//! prefix is cut once.
//!
//! Invariants after each reopen:
//! - the store reopens and the adapter opens over it;
//! - every append whose `IOFlushed` had completed before the cut, and
//!   that no later truncation cut, is in the log with its log id (or below
//!   the purge point);
//! - every entry the log holds is one the sequence appended at that index
//!   and not cut since (a cut is never undone by a crash);
//! - the vote is at least the last one `save_vote` returned for, and the
//!   purge point at least the last `purge` that returned.
//!
//! Fails when `append` completes its flush at once (checked). Seeded:
//! `QUORUMLOG_CALLS_SEEDS=N` (default 40), `QUORUMLOG_CALLS_SEED=s`.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::{open_store, Adv};
use openraft10::entry::RaftEntry;
use openraft10::impls::leader_id_adv::LeaderId;
use openraft10::impls::Vote;
use openraft10::storage::{IOFlushed, RaftLogStorage};
use openraft10::type_config::alias::{OneshotOf, OneshotReceiverOf};
use openraft10::type_config::async_runtime::Oneshot;
use openraft10::{LogId, RaftLogReader};
use quorumlog_io::{CrashPlan, SimFs, SimRng, Tear};
use quorumlog_openraft10::LogStore;
use quorumlog_raft::SharedFs;

type Entry = <Adv as openraft10::RaftTypeConfig>::Entry;
type Id = LogId<LeaderId<u64, u64>>;
type Rx = OneshotReceiverOf<Adv, Result<(), std::io::Error>>;

fn id(term: u64, index: u64) -> Id {
    LogId::new(LeaderId { term, node_id: 1 }, index)
}

/// One call.
#[derive(Debug, Clone, Copy)]
enum Call {
    /// `n` entries at the end, in the current term.
    Append(u64),
    /// A vote for the next term (the appends after it are in that term).
    Vote,
    /// A new leader's conflict: everything from `keep` on is cut.
    Truncate(u64),
    /// Purge up to this index (it completed before).
    Purge(u64),
    /// The commit point at this index (it completed before).
    Commit(u64),
}

/// What the calls so far leave: each index's log id, the appends' ends and
/// their completions, the last returned vote and purge.
#[derive(Default)]
struct Model {
    log: BTreeMap<u64, Id>,
    term: u64,
    next: u64,
    vote: Option<u64>,
    purged: Option<u64>,
}

/// Draws a sequence of `n` calls a Raft node could make: truncations stay
/// above the commit point, purges at or below it.
fn calls(rng: &mut SimRng, n: usize) -> Vec<Call> {
    let (mut next, mut committed) = (0u64, None::<u64>);
    let mut out = vec![Call::Vote];
    while out.len() < n {
        let floor = committed.map_or(0, |c| c + 1);
        match rng.below(10) {
            0..=5 => {
                let k = 1 + rng.below(6);
                out.push(Call::Append(k));
                next += k;
            }
            6 if next > floor + 1 => {
                // A new leader: its vote first, then the cut.
                let keep = floor + 1 + rng.below(next - floor - 1);
                out.push(Call::Vote);
                out.push(Call::Truncate(keep));
                next = keep;
            }
            7 => out.push(Call::Vote),
            8 if floor > 0 => out.push(Call::Purge(rng.below(floor))),
            _ if next > floor => {
                let at = floor + rng.below(next - floor);
                out.push(Call::Commit(at));
                committed = Some(at);
            }
            _ => {}
        }
    }
    out
}

/// Runs `calls` on a fresh store on `sim`; returns the model, the pending
/// and completed appends (end, log ids appended, receiver) at the end.
async fn run(sim: &SimFs, calls: &[Call]) -> (Model, Vec<(BTreeMap<u64, Id>, Rx)>, LogStore<Adv>) {
    let fs: SharedFs = Arc::new(sim.clone());
    let store = open_store(&fs, Path::new("/d"), 1, true);
    let mut log: LogStore<Adv> = LogStore::new(store, 1).unwrap();
    let mut m = Model::default();
    let mut appends = Vec::new();
    for c in calls {
        match *c {
            Call::Append(n) => {
                let (tx, rx) = OneshotOf::<Adv>::channel();
                let mut ids = BTreeMap::new();
                let entries: Vec<Entry> = (m.next..m.next + n)
                    .map(|i| {
                        ids.insert(i, id(m.term, i));
                        Entry::new_blank(id(m.term, i))
                    })
                    .collect();
                // Purge points are drawn from completed appends: wait for
                // this one if a later purge or commit may name it.
                log.append(entries, IOFlushed::signal(tx)).await.unwrap();
                for (i, x) in &ids {
                    m.log.insert(*i, *x);
                }
                m.next += n;
                appends.push((ids, rx));
            }
            Call::Vote => {
                m.term += 1;
                let v = Vote::new_committed(m.term, 1);
                log.save_vote(&v).await.unwrap();
                m.vote = Some(m.term);
            }
            Call::Truncate(keep) => {
                let last = m
                    .log
                    .get(&(keep.wrapping_sub(1)))
                    .copied()
                    .filter(|_| keep > 0);
                log.truncate_after(last).await.unwrap();
                m.log.split_off(&keep);
                m.next = keep;
                for (ids, _) in &mut appends {
                    ids.split_off(&keep);
                }
            }
            Call::Purge(upto) => {
                let Some(&pid) = m.log.get(&upto) else {
                    continue;
                };
                log.purge(pid).await.unwrap();
                m.purged = Some(upto);
            }
            Call::Commit(at) => {
                if let Some(&c) = m.log.get(&at) {
                    log.save_committed(Some(c)).await.unwrap();
                }
            }
        }
    }
    (m, appends, log)
}

fn plan(rng: &mut SimRng) -> CrashPlan {
    match rng.below(3) {
        0 => CrashPlan::LoseUnsynced,
        1 => CrashPlan::Torn(Tear::Garbage),
        _ => CrashPlan::Random,
    }
}

async fn check_seed(seed: u64) -> (usize, usize) {
    let mut rng = SimRng::new(seed);
    let calls = calls(&mut rng, 24);
    let (mut cuts, mut kept) = (0, 0);
    for k in 1..=calls.len() {
        let sim = SimFs::new(seed ^ (k as u64).wrapping_mul(0x9e37_79b9));
        sim.set_sync_delay(std::time::Duration::from_micros(300));
        let (m, mut appends, log) = run(&sim, &calls[..k]).await;
        // What completed before the cut.
        let mut completed: BTreeMap<u64, Id> = BTreeMap::new();
        for (ids, rx) in &mut appends {
            if matches!(rx.try_recv(), Ok(Ok(()))) {
                completed.extend(ids.iter().map(|(i, x)| (*i, *x)));
            }
        }
        let crashed = sim.crash_with(plan(&mut rng));
        drop(log);
        let fs: SharedFs = Arc::new(crashed);
        let store = open_store(&fs, Path::new("/d"), 1, false);
        let mut log: LogStore<Adv> = LogStore::new(Arc::clone(&store), 1)
            .unwrap_or_else(|e| panic!("seed {seed} cut {k}: the adapter does not open: {e}"));
        let state = log.get_log_state().await.unwrap();
        let purged = state.last_purged_log_id.map(|p| p.index);
        let end = state.last_log_id.map_or(0, |l| l.index + 1);
        let got = log.try_get_log_entries(0..end).await.unwrap();
        let held: BTreeMap<u64, Id> = got.iter().map(|e| (e.index(), e.log_id())).collect();
        for (i, x) in &held {
            assert_eq!(
                m.log.get(i),
                Some(x),
                "seed {seed} cut {k}: entry {i} is {x}, which the calls left as {:?}",
                m.log.get(i)
            );
        }
        for (i, x) in &completed {
            if purged.is_some_and(|p| *i <= p) || !m.log.contains_key(i) {
                continue;
            }
            assert_eq!(
                held.get(i),
                Some(x),
                "seed {seed} cut {k}: completed entry {i} lost (calls {:?})",
                &calls[..k]
            );
            kept += 1;
        }
        let vote = log.read_vote().await.unwrap().map(|v| v.leader_id.term);
        assert!(
            vote >= m.vote,
            "seed {seed} cut {k}: vote {vote:?} below {:?}",
            m.vote
        );
        assert!(
            purged >= m.purged,
            "seed {seed} cut {k}: purged {purged:?} below {:?}",
            m.purged
        );
        cuts += 1;
    }
    (cuts, kept)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_after_every_call_loses_nothing_completed() {
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    let seeds: Vec<u64> = if let Some(s) = env("QUORUMLOG_CALLS_SEED") {
        vec![s]
    } else {
        let n = env("QUORUMLOG_CALLS_SEEDS").unwrap_or(40);
        (1..=n).collect()
    };
    let (mut cuts, mut kept) = (0, 0);
    for s in &seeds {
        let (c, k) = check_seed(*s).await;
        cuts += c;
        kept += k;
    }
    eprintln!(
        "{} seeds, {cuts} cuts, {kept} completed entries checked after them",
        seeds.len()
    );
    assert!(kept > 0, "no append completed before any cut");
}
