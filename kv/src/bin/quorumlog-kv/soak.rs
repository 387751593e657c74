//! `quorumlog-kv soak`: three real node processes, many clients on a few
//! keys with unique values, every operation recorded with its invocation
//! and completion times and outcome, while a nemesis kills (`SIGKILL`) the
//! leader, a follower, a random node or all three and restarts them, and
//! stops (`SIGSTOP`) a node or the leader for 1–5 s. At the end every
//! fault is healed, each key is read once more, and the whole history is
//! checked for linearizability per key ((`quorumlog_kv_harness::check`)).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use quorumlog_kv::client::status;
use quorumlog_kv_harness::check::{self, Report};
use quorumlog_kv_harness::processes::Processes;

use crate::demo::{pick, Recorded};
use quorumlog_kv::client::partitioned::{health, Health, PartitionedClient};
use quorumlog_kv::error::{Error, Result};
use quorumlog_kv_harness::history::{record_get, record_put, Action, Op, Outcome, Recorder};

/// How a soak runs.
#[derive(Debug, Clone)]
pub(crate) struct SoakArgs {
    /// Seconds of load and faults.
    pub(crate) seconds: u64,
    /// Partitions.
    pub(crate) partitions: u32,
    /// Concurrent clients.
    pub(crate) clients: usize,
    /// Keys they share.
    pub(crate) keys: usize,
    /// Where the data directories go (a fresh one is made inside).
    pub(crate) dir: PathBuf,
    /// The nemesis's seed.
    pub(crate) seed: u64,
}

/// What a soak did and found.
#[derive(Debug, Clone, Default)]
pub(crate) struct SoakReport {
    /// Operations by kind and outcome ("put ok", "get failed", …).
    pub(crate) ops: BTreeMap<&'static str, usize>,
    /// Faults by kind.
    pub(crate) faults: BTreeMap<&'static str, usize>,
    /// The checker's verdict.
    pub(crate) check: Report,
    /// At the end, with every fault healed: the partitions without a
    /// leader and the voters whose node does not host their partition.
    pub(crate) health: Health,
}

impl SoakReport {
    /// Prints the counts and the verdict; returns whether it passed.
    pub(crate) fn print(&self) -> bool {
        println!();
        for (k, n) in &self.ops {
            println!("{k:<24}{n}");
        }
        for (k, n) in &self.faults {
            println!("fault {k:<18}{n}");
        }
        println!(
            "checked                 {} keys, {} operations ({} recorded)",
            self.check.keys, self.check.ops, self.check.recorded
        );
        for v in &self.check.violations {
            println!(
                "VIOLATION on {} ({} ops{}): {}",
                v.key,
                v.ops,
                if v.undecided { ", undecided" } else { "" },
                v.detail
            );
        }
        let lin = self.check.ok() && self.check.ops > 0;
        println!(
            "linearizable            {}",
            if lin { "PASS" } else { "FAIL" }
        );
        let served = self.health.ok();
        if !served {
            println!(
                "UNSERVED at the end: partitions without a leader {:?}, voters not hosting (partition, node) {:?}",
                self.health.unled, self.health.unhosted
            );
        }
        println!(
            "every partition served  {}",
            if served { "PASS" } else { "FAIL" }
        );
        lin && served
    }
}

/// Deadline of one client operation.
const OP_DEADLINE: Duration = Duration::from_secs(5);

/// One client's loop: random keys, puts of unique values and reads, each
/// recorded.
async fn client_loop(
    c: usize,
    nodes: Vec<String>,
    partitions: u32,
    keys: usize,
    stop: Arc<AtomicBool>,
    history: Recorder,
) {
    let mut client = Recorded(PartitionedClient::new(&nodes, partitions));
    let mut seed = 0x2545_f491_4f6c_dd1d_u64 ^ ((c as u64 + 1) << 17);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("k{}", pick(&mut seed, keys));
        let deadline = Instant::now() + OP_DEADLINE;
        if pick(&mut seed, 2) == 0 {
            n += 1;
            record_put(&mut client, &history, key, format!("c{c}-{n}"), deadline).await;
        } else {
            record_get(&mut client, &history, key, deadline).await;
        }
    }
}

/// The controller's leader (it confirms it with a quorum).
async fn leader(p: &Processes, ids: &[u64]) -> Option<u64> {
    for id in ids {
        if !p.running(*id) {
            continue;
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        if let Ok(s) = status(&p.addr(*id), deadline).await {
            if s.leading {
                return Some(*id);
            }
        }
    }
    None
}

/// The nemesis: one fault at a time until `until`, each healed before the
/// next.
async fn nemesis(
    p: &mut Processes,
    ids: &[u64],
    seed: u64,
    until: Instant,
) -> Result<BTreeMap<&'static str, usize>> {
    let mut faults = BTreeMap::new();
    let mut rng = seed | 1;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1_000 + pick(&mut rng, 2_000) as u64)).await;
        if Instant::now() >= until {
            break;
        }
        let random = ids.get(pick(&mut rng, ids.len())).copied().unwrap_or(1);
        let lead = leader(p, ids).await;
        let follower = ids
            .iter()
            .copied()
            .find(|i| Some(*i) != lead)
            .unwrap_or(random);
        let hold = Duration::from_millis(1_000 + pick(&mut rng, 4_000) as u64);
        let kind = pick(&mut rng, 6);
        let (name, victims, stop): (&'static str, Vec<u64>, bool) = match kind {
            0 => ("kill leader", vec![lead.unwrap_or(random)], false),
            1 => ("kill follower", vec![follower], false),
            2 => ("kill random", vec![random], false),
            3 => ("kill all", ids.to_vec(), false),
            4 => ("stop random", vec![random], true),
            _ => ("stop leader", vec![lead.unwrap_or(random)], true),
        };
        *faults.entry(name).or_insert(0) += 1;
        if stop {
            for v in &victims {
                p.pause(*v, true);
            }
            tokio::time::sleep(hold).await;
            for v in &victims {
                p.pause(*v, false);
            }
        } else {
            for v in &victims {
                p.kill(*v);
            }
            tokio::time::sleep(Duration::from_millis(200 + pick(&mut rng, 1_500) as u64)).await;
            for v in &victims {
                p.spawn(*v)
                    .map_err(|e| Error::io(format!("restart node {v}"), e))?;
            }
        }
    }
    Ok(faults)
}

/// One last linearizable read of every key, recorded: a lost acknowledged
/// write shows here.
async fn read_every_key(p: &Processes, partitions: u32, keys: usize, history: &Recorder) {
    let mut last = Recorded(PartitionedClient::new(&p.addrs(), partitions));
    for k in 0..keys {
        let deadline = Instant::now() + Duration::from_secs(20);
        record_get(&mut last, history, format!("k{k}"), deadline).await;
    }
}

/// Operations by kind and outcome.
fn count(ops: &[Op]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for op in ops {
        let name = match (&op.action, &op.outcome) {
            (Action::Put(_), Outcome::Ok(_)) => "put ok",
            (Action::Put(_), Outcome::Failed) => "put failed",
            (Action::Put(_), Outcome::Unknown) => "put unknown",
            (Action::Get, Outcome::Ok(_)) => "get ok",
            (Action::Get, _) => "get failed",
        };
        *counts.entry(name).or_insert(0) += 1;
    }
    counts
}

/// Runs a soak; `exe` is this program (started as `node` three times).
///
/// # Errors
/// The cluster could not be started or elected no leader.
pub(crate) async fn run(exe: &Path, args: &SoakArgs) -> Result<SoakReport> {
    let base = args
        .dir
        .join(format!("quorumlog-kv-soak-{}", std::process::id()));
    std::fs::create_dir_all(&base).map_err(|e| Error::io(base.display().to_string(), e))?;
    let mut p = Processes::new(exe, &base, 3).map_err(|e| Error::io("ports", e))?;
    p.extra = vec!["--partitions".into(), args.partitions.max(1).to_string()];
    let ids = [1u64, 2, 3];
    for id in ids {
        p.spawn(id)
            .map_err(|e| Error::io(format!("start node {id}"), e))?;
    }
    let t0 = Instant::now();
    while leader(&p, &ids).await.is_none() {
        if t0.elapsed() > Duration::from_secs(20) {
            return Err(Error::Timeout {
                last: "no leader elected".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "soak: 3 nodes, {} partitions, {} clients on {} keys, {} s, seed {}, data in {}",
        args.partitions.max(1),
        args.clients,
        args.keys,
        args.seconds,
        args.seed,
        base.display()
    );
    let history = Recorder::new();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..args.clients)
        .map(|c| {
            tokio::spawn(client_loop(
                c,
                p.addrs(),
                args.partitions.max(1),
                args.keys.max(1),
                Arc::clone(&stop),
                history.clone(),
            ))
        })
        .collect();
    let until = Instant::now() + Duration::from_secs(args.seconds);
    let faults = nemesis(&mut p, &ids, args.seed, until).await?;
    // Healed: every node runs. Let the clients see it, then stop them.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = c.await;
    }
    read_every_key(&p, args.partitions.max(1), args.keys.max(1), &history).await;
    let health = served(&p.addrs(), args.partitions.max(1)).await;
    drop(p);
    let ops = history.ops();
    let counts = count(&ops);
    if let Some(path) = std::env::var_os("QUORUMLOG_SOAK_HISTORY") {
        // One operation per line, for a look at a failed run.
        let lines: Vec<String> = ops.iter().map(|o| format!("{o:?}")).collect();
        let _ = std::fs::write(path, lines.join("\n"));
    }
    let check = check::check(&ops);
    let _ = std::fs::remove_dir_all(&base);
    Ok(SoakReport {
        ops: counts,
        faults,
        check,
        health,
    })
}

/// Every partition led and every voter hosted, waited for up to 30 s
/// after the faults healed (an election may still be under way).
async fn served(nodes: &[String], partitions: u32) -> Health {
    let t0 = Instant::now();
    loop {
        let h = health(nodes, partitions, Instant::now() + Duration::from_secs(3)).await;
        if h.ok() || t0.elapsed() > Duration::from_secs(30) {
            return h;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
