//! The service's whole history under faults, checked for linearizability.
//! Three nodes in one process on simulated disks; clients put unique
//! values and read through the service's own path (`replica::answer`, the
//! real client with its deadlines and retries) on a few keys, every
//! operation recorded with its invocation, completion and outcome; a
//! nemesis meanwhile crashes the leader and restarts it from its disk,
//! cuts the leader off from the others and reconnects it, cuts the power
//! of the whole cluster (restarting together, or the leader first and the
//! others after it), and slows every disk's syncs. At the end every
//! fault is healed, each key is read once more, and each key's history
//! must be linearizable (`quorumlog_kv_harness::check`). Also, alone: a leader cut
//! off never answers a read after its successor acknowledged a newer
//! write; a node restarted alone after the whole cluster lost power does
//! not serve reads, nor call itself leading.
//!
//! Seeded (the disks and the nemesis; the scheduler is not):
//! `QUORUMLOG_LIN_SEEDS=N` (default 12), `QUORUMLOG_LIN_SEED=s` replays
//! one; `QUORUMLOG_LIN_DUMP=1` prints a violating key's operations and the
//! fault times.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{read_every_key, record_ops, SimCluster};
use openraft10::async_runtime::WatchReceiver;
use quorumlog_io::{CrashPlan, SimRng, Tear};
use quorumlog_kv::client::Client;
use quorumlog_kv::cluster::addr;
use quorumlog_kv::Put;
use quorumlog_kv_harness::check;
use quorumlog_kv_harness::history::Recorder;
use tokio::time::Instant;

const KEYS: u64 = 3;
const CLIENTS: u64 = 6;

#[derive(Debug, Default)]
struct Totals {
    ops: usize,
    keys: usize,
    faults: BTreeMap<&'static str, usize>,
    violations: usize,
}

fn plan(rng: &mut SimRng) -> CrashPlan {
    match rng.below(3) {
        0 => CrashPlan::LoseUnsynced,
        1 => CrashPlan::Torn(Tear::Garbage),
        _ => CrashPlan::Random,
    }
}

async fn leader_of(sim: &SimCluster) -> u64 {
    if let Some(l) = sim.confirmed_leader(Duration::from_secs(10)).await {
        return l;
    }

    let seen: Vec<String> = sim
        .cluster
        .nodes
        .iter()
        .map(|(id, (r, _))| {
            let m = r.metrics().borrow_watched().clone();
            format!(
                "node {id}: {:?} term {} vote {} last log {:?} applied {:?} {:?}",
                m.state, m.current_term, m.vote, m.last_log_index, m.last_applied, m.running_state
            )
        })
        .collect();
    panic!("no confirmed leader within 10 s: {seen:#?}")
}

/// Injects fault `kind` (healed before it returns); returns its name.
async fn inject(sim: &mut SimCluster, kind: usize, rng: &mut SimRng) -> &'static str {
    match kind {
        0 => {
            let l = leader_of(sim).await;
            let p = plan(rng);
            sim.crash(l, p).await;
            "leader crash and restart"
        }
        1 => {
            let l = leader_of(sim).await;
            sim.cluster.isolate(l);
            tokio::time::sleep(Duration::from_millis(300 + rng.below(500))).await;
            sim.cluster.heal();
            "leader cut off and reconnected"
        }
        2 => {
            let p = plan(rng);
            sim.power_loss(p).await;
            "whole-cluster power loss"
        }
        3 => {
            // The leader comes back first: the case where openraft
            // restarts it as leader of its old term.
            let l = leader_of(sim).await;
            let mut order: Vec<u64> = std::iter::once(l)
                .chain((1..=3).filter(|i| *i != l))
                .collect();
            if rng.below(2) == 0 {
                order.swap(1, 2);
            }
            let p = plan(rng);
            let gap = Duration::from_millis(rng.below(100));
            sim.power_loss_staggered(p, [order[0], order[1], order[2]], gap)
                .await;
            "whole-cluster power loss, staggered restart"
        }
        _ => {
            let delay = Duration::from_millis(2 + rng.below(8));
            for d in &sim.disks {
                d.set_sync_delay(delay);
            }
            tokio::time::sleep(Duration::from_millis(300 + rng.below(400))).await;
            for d in &sim.disks {
                d.set_sync_delay(Duration::ZERO);
            }
            "slow disks"
        }
    }
}

/// One seed: load, five faults in a seeded order, heal, check.
async fn run_seed(seed: u64, totals: &mut Totals) -> Result<(), String> {
    let mut rng = SimRng::new(seed);
    let mut sim = SimCluster::start(seed).await;
    leader_of(&sim).await;
    let history = Recorder::new();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            tokio::spawn(record_ops(
                sim.client(),
                seed.wrapping_mul(31).wrapping_add(c),
                KEYS,
                Arc::clone(&stop),
                history.clone(),
            ))
        })
        .collect();
    let mut kinds = [0usize, 1, 2, 3, 4];
    // A seeded order of the four faults.
    for i in (1..kinds.len()).rev() {
        kinds.swap(i, rng.index(i + 1));
    }
    let mut fault_times = Vec::new();
    for kind in kinds {
        tokio::time::sleep(Duration::from_millis(150 + rng.below(250))).await;
        eprintln!("seed {seed}: fault {kind}");
        fault_times.push((history.now(), kind));
        let name = inject(&mut sim, kind, &mut rng).await;
        fault_times.push((history.now(), kind + 100));
        *totals.faults.entry(name).or_insert(0) += 1;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.map_err(|e| e.to_string())?;
    }
    leader_of(&sim).await;
    read_every_key(&sim, KEYS, &history).await;
    let ops = history.ops();
    let report = check(&ops);
    totals.ops += report.ops;
    totals.keys += report.keys;
    totals.violations += report.violations.len();
    sim.cluster.shutdown().await;
    if report.ops == 0 {
        return Err("no operation completed".into());
    }
    if !report.ok() {
        if std::env::var("QUORUMLOG_LIN_DUMP").is_ok() {
            // The violating key's operations in call order, and when each
            // fault began (kind) and ended (kind + 100).
            let key = report
                .violations
                .first()
                .map(|v| v.key.clone())
                .unwrap_or_default();
            let mut mine: Vec<_> = ops.iter().filter(|o| o.key == key).collect();
            mine.sort_by_key(|o| o.call);
            for o in mine {
                eprintln!(
                    "DUMP {} {} {:?} {:?} c{}",
                    o.call, o.ret, o.action, o.outcome, o.client
                );
            }
            for (t, f) in &fault_times {
                eprintln!("DUMP-FAULT {t} {f}");
            }
        }
        return Err(format!("not linearizable: {:#?}", report.violations));
    }
    Ok(())
}

#[test]
fn every_history_under_faults_is_linearizable() {
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    let rt = quorumlog_kv_harness::runtime().unwrap();
    let seeds: Vec<u64> = if let Some(s) = env("QUORUMLOG_LIN_SEED") {
        vec![s]
    } else {
        let base = quorumlog_testkit::fresh_seed();
        let n = env("QUORUMLOG_LIN_SEEDS").unwrap_or(12);
        eprintln!("linearizability under faults: base seed {base}, {n} seeds");
        (0..n).map(|i| base.wrapping_add(i)).collect()
    };
    let mut totals = Totals::default();
    for &seed in &seeds {
        rt.block_on(run_seed(seed, &mut totals))
            .unwrap_or_else(|e| {
                panic!(
                "seed {seed}: {e} (replay: QUORUMLOG_LIN_SEED={seed} cargo test -p quorumlog-kv \
                 --test linearizable_faults)"
            )
            });
    }
    eprintln!(
        "linearizability under faults: {} seeds, {} operations checked on {} keys, faults {:?}, \
         {} violations",
        seeds.len(),
        totals.ops,
        totals.keys,
        totals.faults,
        totals.violations
    );
}

/// The stale-read cause the soak found, alone: a leader cut off from the
/// others keeps hearing clients; once its successor acknowledged a newer
/// value, a read sent to it must not answer the old one.
#[test]
fn a_leader_cut_off_never_answers_a_read() {
    let rt = quorumlog_kv_harness::runtime().unwrap();
    rt.block_on(async {
        let sim = SimCluster::start(11).await;
        let old = leader_of(&sim).await;
        let mut c = sim.client();
        let soon = || Instant::now() + Duration::from_secs(5);
        c.put("k", "old", soon()).await.unwrap();
        sim.cluster.isolate(old);
        // The others elect a successor, which acknowledges a newer value
        // (written to them directly: a redirect could name the old leader).
        let t0 = Instant::now();
        'written: loop {
            assert!(t0.elapsed() < Duration::from_secs(10), "no successor");
            for id in (1..=3).filter(|i| *i != old) {
                if sim.cluster.put(id, Put::new("k", "new")).await.is_ok() {
                    break 'written;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The old leader is asked directly, for longer than an election.
        let mut reader = Client::with_transport(vec![addr(old)], sim.cluster.transport());
        let read = reader
            .get("k", Instant::now() + Duration::from_millis(800))
            .await;
        assert!(read.is_err(), "the cut-off leader answered {read:?}");
        let stale = reader.get_stale(&addr(old), "k", soon()).await.unwrap();
        assert_eq!(
            stale.value.as_deref(),
            Some("old"),
            "a stale read is allowed, and is stale"
        );
        sim.cluster.heal();
        let read = reader.get("k", soon()).await;
        // Healed: it follows now, and redirects the reader to the leader
        // (whose answer is the newer value) or times out finding it.
        if let Ok(r) = read {
            assert_eq!(r.value.as_deref(), Some("new"));
        }
        let mut any = sim.client();
        assert_eq!(
            any.get("k", soon()).await.unwrap().value.as_deref(),
            Some("new")
        );
        sim.cluster.shutdown().await;
    });
}

/// The third cause, alone: after the whole cluster lost power, the node
/// that led restarts alone. It must not serve a read (it cannot confirm
/// it leads) nor say it leads; with the others back, the acknowledged
/// value is read.
#[test]
fn a_node_restarted_alone_after_a_power_loss_does_not_serve_reads() {
    let rt = quorumlog_kv_harness::runtime().unwrap();
    rt.block_on(async {
        let mut sim = SimCluster::start(12).await;
        let leader = leader_of(&sim).await;
        let mut c = sim.client();
        let soon = || Instant::now() + Duration::from_secs(5);
        c.put("k", "v", soon()).await.unwrap();
        sim.power_loss(CrashPlan::LoseUnsynced).await;
        for id in (1..=3).filter(|i| *i != leader) {
            sim.cluster.stop(id).await;
        }
        let mut reader = Client::with_transport(vec![addr(leader)], sim.cluster.transport());
        let read = reader
            .get("k", Instant::now() + Duration::from_millis(800))
            .await;
        assert!(read.is_err(), "a lone node answered {read:?}");
        let (raft, _) = sim.cluster.nodes.get(&leader).unwrap();
        assert!(
            raft.ensure_linearizable(openraft10::ReadPolicy::ReadIndex)
                .await
                .is_err(),
            "a lone node confirmed its leadership"
        );
        for id in (1..=3).filter(|i| *i != leader) {
            let (log, machine) = common::parts(&sim.disk(id).clone(), id, false);
            sim.cluster.add(id, log, machine).await.unwrap();
        }
        let mut any = sim.client();
        assert_eq!(
            any.get("k", soon()).await.unwrap().value.as_deref(),
            Some("v")
        );
        sim.cluster.shutdown().await;
    });
}
