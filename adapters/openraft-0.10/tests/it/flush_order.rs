//! openraft 0.10 drops a flush notification delivered out of order, so the
//! adapter must complete every append's `IOFlushed` in submission order,
//! and only once the append is durable. Invariants, over seeded random
//! sequences of appends, suffix truncations (a new leader's conflict, each
//! one's appends in a higher term) and votes, on the simulated disk:
//! - at every moment the completed appends are a prefix of those submitted
//!   (fails if a truncation leaves the cut appends' completions to later
//!   rounds: the new appends' then complete first);
//! - a completed append's entries are durable: when a completion is seen,
//!   the store's durable end covers it (fails if `append` completes its
//!   flush at once), and once all have completed a power cut that loses
//!   every unsynced write leaves the log holding all of them;
//! - every append completes, and none with an error, also after a
//!   conflict that cuts far back (fails if the cut appends' completions
//!   wait for the log to regrow past their ends).

use crate::common;

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
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_openraft10::LogStore;
use quorumlog_raft::{Group, SharedFs};

type Entry = <Adv as openraft10::RaftTypeConfig>::Entry;
type Rx = OneshotReceiverOf<Adv, Result<(), std::io::Error>>;

/// A submitted append's completion: its receiver, whether it completed
/// (and well), the end it covers, and whether a later truncation cut it.
struct Waiting {
    rx: Rx,
    done: Option<bool>,
    end: u64,
    cut: bool,
}

fn entry(term: u64, index: u64) -> Entry {
    Entry::new_blank(LogId::new(LeaderId { term, node_id: 1 }, index))
}

/// A tiny deterministic generator (no dependency for a test's dice).
struct Dice(u64);

impl Dice {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Polls every pending completion; asserts the completed ones are a
/// prefix of the submitted ones, and that each one seen completed (and not
/// cut since) is durable: the store's durable end covers it.
fn check_prefix(waiting: &mut [Waiting], store: &Group, seed: u64) {
    // Last first: completions run on another thread meanwhile, and one
    // seen done was completed after every earlier one, so those are seen
    // done too when polled after it (polled first to last, an earlier one
    // completing between the two polls would look out of order).
    for w in waiting.iter_mut().rev() {
        if w.done.is_none() {
            match w.rx.try_recv() {
                Ok(r) => {
                    w.done = Some(r.is_ok());
                    let durable = store.extent().flushed.0;
                    assert!(
                        w.cut || durable >= w.end,
                        "seed {seed}: an append up to {} completed with only {durable} durable",
                        w.end
                    );
                }
                Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {}
                Err(e) => panic!("seed {seed}: a flush was dropped: {e}"),
            }
        }
    }
    if let Some(first_pending) = waiting.iter().position(|w| w.done.is_none()) {
        let later = waiting[first_pending..]
            .iter()
            .position(|w| w.done.is_some());
        assert!(
            later.is_none(),
            "seed {seed}: append {} completed before append {first_pending}",
            first_pending + later.unwrap_or(0)
        );
    }
}

/// The log under test and what was submitted to it.
struct Run {
    log: LogStore<Adv>,
    waiting: Vec<Waiting>,
    term: u64,
    next: u64,
}

impl Run {
    /// `n` entries at the end, in the current term.
    async fn append(&mut self, n: u64) {
        let (tx, rx) = OneshotOf::<Adv>::channel();
        let entries: Vec<Entry> = (self.next..self.next + n)
            .map(|i| entry(self.term, i))
            .collect();
        self.log
            .append(entries, IOFlushed::signal(tx))
            .await
            .unwrap();
        self.next += n;
        self.waiting.push(Waiting {
            rx,
            done: None,
            end: self.next,
            cut: false,
        });
    }

    /// A new leader (a higher term, its vote saved) cuts the log to `keep`.
    async fn conflict(&mut self, keep: u64) {
        self.term += 1;
        self.log
            .save_vote(&Vote::new_committed(self.term, 1))
            .await
            .unwrap();
        let last = match keep.checked_sub(1) {
            Some(i) => Some(self.log.try_get_log_entries(i..=i).await.unwrap()[0].log_id()),
            None => None,
        };
        self.log.truncate_after(last).await.unwrap();
        for w in self.waiting.iter_mut().filter(|w| w.end > keep) {
            w.cut = true;
        }
        self.next = keep;
    }
}

async fn run(seed: u64) {
    let sim = SimFs::new(seed);
    let fs: SharedFs = Arc::new(sim.clone());
    let dir = Path::new("/d");
    let store = open_store(&fs, dir, 1, true);
    let mut run = Run {
        log: LogStore::new(Arc::clone(&store), 1).unwrap(),
        waiting: Vec::new(),
        term: 1,
        next: 0,
    };
    let mut dice = Dice(seed);
    run.log.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
    for _ in 0..300 {
        if dice.below(10) == 0 && run.next > 0 {
            let keep = run.next - 1 - dice.below(run.next.min(4));
            run.conflict(keep).await;
        } else {
            run.append(1 + dice.below(4)).await;
        }
        check_prefix(&mut run.waiting, &store, seed);
        if dice.below(8) == 0 {
            tokio::task::yield_now().await;
        }
    }
    // A last conflict far back, then one append below the old end: the
    // cut appends' completions must not wait for the log to regrow past
    // where they ended (nothing would complete the new one meanwhile).
    if run.next > 8 {
        run.conflict(run.next / 2).await;
        run.append(1).await;
    }
    // Everything completes (a deadlock breaker, not a timing threshold).
    let t0 = std::time::Instant::now();
    while run.waiting.iter().any(|w| w.done.is_none()) && t0.elapsed().as_secs() < 60 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        check_prefix(&mut run.waiting, &store, seed);
    }
    assert!(
        run.waiting.iter().all(|w| w.done == Some(true)),
        "seed {seed}"
    );
    let next = run.next;
    let held = run.log.try_get_log_entries(0..next).await.unwrap();
    assert_eq!(held.len() as u64, next);
    // Completed means durable: a power cut now loses none of it.
    let crashed = sim.crash_with(CrashPlan::LoseUnsynced);
    drop(run);
    drop(store);
    let fs: SharedFs = Arc::new(crashed);
    let store = open_store(&fs, dir, 1, false);
    let mut log: LogStore<Adv> = LogStore::new(store, 1).unwrap();
    let back = log.try_get_log_entries(0..next).await.unwrap();
    let ids = |v: &[Entry]| v.iter().map(RaftEntry::log_id).collect::<Vec<_>>();
    assert_eq!(ids(&back), ids(&held), "seed {seed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushes_complete_in_submission_order_and_only_when_durable() {
    for seed in 0..100 {
        run(seed).await;
    }
}
