//! Power loss of a whole cluster that runs many groups per node. Three
//! nodes, each on its own simulated disk with one node directory holding
//! `GROUPS` groups; every group is an openraft 0.10 Raft whose log is a
//! group of its node's shared log, with snapshots as the group's files.
//! Clients write to every group at once on disks whose syncs take 1–4 ms;
//! at a seeded point every disk loses power together (unsynced writes dropped, the last one torn or not); the
//! nodes reopen from what their disks kept and every group re-elects.
//!
//! Invariants: every node directory reopens; every write acknowledged
//! before the cut is, once the group applied a write made after the
//! restart, on every node of its group (and on no other group's machine).
//! Seeded (the disks; the scheduler is not): `QUORUMLOG_GROUPS_SEEDS=N`
//! (default 100), `QUORUMLOG_GROUPS_SEED=s` replays one.
#![allow(
    clippy::expect_used,
    reason = "test code: a panic is a failed assertion"
)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Adv, Get, Machine, Put};
use openraft10::{BasicNode, Config, Raft};
use quorumlog_io::{CrashPlan, SimFs, SimRng, Tear};
use quorumlog_raft::{
    ClusterId, DirectoryId, Identity, LogOptions, Meta, Node, NodeId, NodeOptions, SharedFs,
};

type R = Raft<Adv, Machine<Adv>>;
type Router = common::GroupRouter;
const GROUPS: u64 = 4;
const DIR: &str = "/node";

fn meta(id: u64) -> Meta {
    Meta::new(ClusterId(1), NodeId(id), DirectoryId(u128::from(id) + 1))
}

fn options() -> NodeOptions {
    NodeOptions {
        log: LogOptions {
            segment_size_bytes: 64 << 10,
            max_batch_bytes: 32 << 10,
            prefill_segments: 0,
            ..NodeOptions::default().log
        },
        ..NodeOptions::default()
    }
}

/// Fast timers; a snapshot every 60 entries, keeping 5 behind it.
fn config() -> Arc<Config> {
    quorumlog_openraft10::raft_config(Config {
        heartbeat_interval: 20,
        election_timeout_min: 80,
        election_timeout_max: 160,
        snapshot_policy: openraft10::SnapshotPolicy::LogsSinceLast(60),
        max_in_snapshot_log_to_keep: 5,
        ..Config::default()
    })
    .unwrap()
}

type Machines = common::GroupMachines;

/// The three nodes on `disks` (formatted if `fresh`), every group a Raft.
async fn start(router: &Router, disks: &[SimFs], fresh: bool) -> (Vec<Node>, Machines) {
    let (mut nodes, mut machines) = (Vec::new(), BTreeMap::new());
    for (i, disk) in disks.iter().enumerate() {
        let id = i as u64 + 1;
        let fs: SharedFs = Arc::new(disk.clone());
        let dir = Path::new(DIR);
        if fresh {
            fs.create_dir_all(dir).unwrap();
            // The directory's own entry, durable before anything in it.
            fs.sync_dir(Path::new("/")).unwrap();
            Node::format(&fs, dir, meta(id), &options()).unwrap();
        }
        let (node, _) = Node::open(&fs, dir, &Identity::of(&meta(id)), &options())
            .unwrap_or_else(|e| panic!("node {id} does not reopen: {e}"));
        common::start_groups(router, &node, id, GROUPS, fresh, &config(), &mut machines).await;
        nodes.push(node);
    }
    (nodes, machines)
}

/// Every Raft stopped and dropped (the disks are then cut).
async fn stop_all(router: &Router, nodes: Vec<Node>, machines: Machines) {
    for id in 1..=3 {
        for g in 0..GROUPS {
            if let Some(r) = router.remove(id, g) {
                // In its own task: when the cut disk stopped this Raft while
                // writers were calling it, openraft 0.10.0-alpha.37 may have
                // panicked in one of them ("RaftCore should have already
                // quit") and poisoned its state, and its shutdown then
                // panics too. That is openraft's race with its callers, not
                // a durability question: contained here, as the writers'
                // tasks contain theirs.
                let _ = tokio::spawn(async move { r.shutdown().await }).await;
            }
        }
    }
    drop(machines);
    drop(nodes);
}

/// A write to group `g` through whichever node leads it, retried until
/// `limit`; its log index.
async fn put(router: &Router, g: u64, key: &str, limit: Duration) -> Option<u64> {
    let t0 = tokio::time::Instant::now();
    while t0.elapsed() < limit {
        for id in 1..=3 {
            let Some(r) = router.get(id, g) else { continue };
            let w = tokio::time::timeout(
                Duration::from_millis(300),
                r.client_write(Put {
                    key: key.into(),
                    value: key.into(),
                }),
            )
            .await;
            if let Ok(Ok(resp)) = w {
                return Some(resp.log_id.index);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

async fn wait_applied(r: &R, index: u64) {
    r.wait(Some(Duration::from_secs(30)))
        .applied_index_at_least(Some(index), "the write after the restart")
        .await
        .unwrap();
}

fn plan(rng: &mut SimRng) -> CrashPlan {
    match rng.below(3) {
        0 => CrashPlan::LoseUnsynced,
        1 => CrashPlan::Torn(Tear::Garbage),
        _ => CrashPlan::Random,
    }
}

type Acked = Arc<Mutex<Vec<(u64, String)>>>;

/// Two writers per group, each putting unique keys until `stop`,
/// recording the acknowledged ones.
fn spawn_writers(
    router: &Router,
    acked: &Acked,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..GROUPS * 2)
        .map(|w| {
            let (router, acked, stop) = (router.clone(), Arc::clone(acked), Arc::clone(stop));
            tokio::spawn(async move {
                let g = w % GROUPS;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("g{g}-w{w}-{n}");
                    if put(&router, g, &key, Duration::from_millis(500))
                        .await
                        .is_some()
                        && !stop.load(Ordering::Relaxed)
                    {
                        acked.lock().unwrap().push((g, key));
                    }
                    n += 1;
                }
            })
        })
        .collect()
}

/// Every write acknowledged before the cut is on every node of its group,
/// and not on the next group's machine.
fn check(machines: &Machines, before: &[(u64, String)], seed: u64) {
    for (g, key) in before {
        for id in 1..=3 {
            assert_eq!(
                machines[&(id, *g)].get(key).as_deref(),
                Some(key.as_str()),
                "seed {seed}: node {id} group {g} lost acknowledged {key}"
            );
            let other = (g + 1) % GROUPS;
            assert_eq!(
                machines[&(id, other)].get(key),
                None,
                "seed {seed}: group {other} holds {key}"
            );
        }
    }
}

/// One seed; the number of acknowledged writes checked.
async fn run_seed(seed: u64) -> usize {
    let mut rng = SimRng::new(seed);
    let disks: Vec<SimFs> = (0..3u64)
        .map(|i| SimFs::new(seed.wrapping_mul(3).wrapping_add(i)))
        .collect();
    let router = Router::default();
    let (nodes, machines) = start(&router, &disks, true).await;
    let voters: BTreeMap<u64, BasicNode> = (1..=3).map(|i| (i, BasicNode::default())).collect();
    for g in 0..GROUPS {
        router
            .get(1 + g % 3, g)
            .unwrap()
            .initialize(voters.clone())
            .await
            .unwrap();
    }
    // Syncs take a few milliseconds, so a cut finds writes in flight (an
    // instant sync leaves nothing unsynced to lose).
    let delay = Duration::from_millis(1 + rng.below(4));
    for d in &disks {
        d.set_sync_delay(delay);
    }
    let acked: Acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(&router, &acked, &stop);
    tokio::time::sleep(Duration::from_millis(300 + rng.below(700))).await;
    // The cut: what was acknowledged so far must survive it.
    let before: Vec<(u64, String)> = acked.lock().unwrap().clone();
    let p = plan(&mut rng);
    let crashed: Vec<SimFs> = disks.iter().map(|d| d.crash_with(p)).collect();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.await;
    }
    stop_all(&router, nodes, machines).await;

    let router = Router::default();
    let (nodes, machines) = start(&router, &crashed, false).await;
    for g in 0..GROUPS {
        let after = put(&router, g, &format!("g{g}-after"), Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("seed {seed}: group {g} takes no write after the restart"));
        for id in 1..=3 {
            wait_applied(&router.get(id, g).unwrap(), after).await;
        }
    }
    check(&machines, &before, seed);
    stop_all(&router, nodes, machines).await;
    before.len()
}

#[test]
fn every_acknowledged_write_of_every_group_survives_a_power_loss() {
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let seeds: Vec<u64> = if let Some(s) = env("QUORUMLOG_GROUPS_SEED") {
        vec![s]
    } else {
        let base = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| {
                u64::try_from(d.as_nanos() % u128::from(u64::MAX)).unwrap_or(1)
            });
        let n = env("QUORUMLOG_GROUPS_SEEDS").unwrap_or(100);
        eprintln!("groups power loss: base seed {base}, {n} seeds");
        (0..n).map(|i| base.wrapping_add(i)).collect()
    };
    // Four seeds at a time (each its own disks, routers and Rafts): a
    // seed mostly waits on timers, so this keeps the run's wall time, not
    // its coverage, down.
    let mut checked = 0;
    for chunk in seeds.chunks(4) {
        checked += rt.block_on(async {
            let runs: Vec<_> = chunk.iter().map(|&s| tokio::spawn(run_seed(s))).collect();
            let mut n = 0;
            for r in runs {
                n += r.await.unwrap();
            }
            n
        });
    }
    eprintln!(
        "groups power loss: {} seeds, {checked} acknowledged writes checked on every node of their group",
        seeds.len()
    );
    assert!(checked > 0, "no write was acknowledged before any cut");
}
