//! E1, the end-to-end benchmark: a three-node openraft 0.10 cluster in one
//! process (the key-value service's in-memory network,
//! `quorumlog_kv::cluster`), three data directories on the same disk,
//! clients writing through the leader. The log store is quorumlog
//! (`quorumlog-openraft10`: `append` returns at once, `IOFlushed` from the
//! shared log's group-commit rounds), raft-log 0.4, raft-engine or memory
//! (the ceiling), the peers written for the benchmark the way their best
//! users run them ([`stores`]). A write counts once openraft acknowledges it
//! (committed on a majority and applied by the leader).

pub mod groups;
pub mod stores;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlog_checkpoint::SharedFs;
use quorumlog_io::RealFs;
use quorumlog_kv::cluster::LocalCluster;
use quorumlog_kv::wire::Refusal;
use quorumlog_kv::{KvMachine, Put, TypeConfig};
use quorumlog_openraft10::LogStore;

use crate::systems::BenchError;
use stores::{MemLog, RaftEngineLog, RaftLogStore};

/// The log store E1 runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum E1Store {
    /// quorumlog through `quorumlog-openraft10`.
    Quorumlog,
    /// raft-log 0.4 through [`RaftLogStore`].
    RaftLog,
    /// raft-engine through [`RaftEngineLog`].
    RaftEngine,
    /// [`MemLog`].
    Memory,
}

impl E1Store {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            E1Store::Quorumlog => "quorumlog",
            E1Store::RaftLog => "raft-log",
            E1Store::RaftEngine => "raft-engine",
            E1Store::Memory => "memory",
        }
    }
}

/// One E1 measurement.
#[derive(Debug, Clone, Copy, Default)]
pub struct E1Result {
    /// Writes acknowledged.
    pub writes: u64,
    /// Acknowledged writes per second.
    pub writes_per_s: f64,
    /// Median client latency, microseconds.
    pub p50_us: u64,
    /// 99th percentile client latency, microseconds.
    pub p99_us: u64,
    /// CPU and context switches of the process over the measured window
    /// (zero where not measured).
    pub usage: quorumlog_io::Usage,
}

impl E1Result {
    /// The result of `latencies` (us, one per acknowledged write) over
    /// `elapsed` seconds.
    pub fn of(latencies: &mut [u64], elapsed: f64) -> E1Result {
        latencies.sort_unstable();
        let pick = |p: usize| {
            latencies
                .get(latencies.len().saturating_sub(1) * p / 100)
                .copied()
                .unwrap_or(0)
        };
        #[expect(clippy::cast_precision_loss, reason = "a rate for display")]
        let writes_per_s = latencies.len() as f64 / elapsed;
        E1Result {
            writes: latencies.len() as u64,
            writes_per_s,
            p50_us: pick(50),
            p99_us: pick(99),
            usage: quorumlog_io::Usage::default(),
        }
    }
}

/// The three nodes' quorumlog stores in `dir`, fresh.
type Parts = Vec<(u64, LogStore<TypeConfig>, KvMachine)>;

fn quorumlog_parts(dir: &Path) -> Result<Parts, BenchError> {
    let fs: SharedFs = Arc::new(RealFs::new());
    let mut parts = Vec::new();
    for id in 1..=3u64 {
        let d = dir.join(format!("node-{id}"));
        std::fs::create_dir_all(&d)?;
        // A one-group node; the group keeps it maintained.
        let (_node, store, _, _) = quorumlog_kv::cluster::open_store(&fs, &d, 1, id)
            .map_err(|e| BenchError::from(e.to_string()))?;
        let log =
            LogStore::new(Arc::clone(&store), id).map_err(|e| BenchError::from(e.to_string()))?;
        // The same machine as the peers': snapshots in memory, so only
        // the log store differs (the service itself keeps them as files).
        let machine = KvMachine::in_memory();
        parts.push((id, log, machine));
    }
    Ok(parts)
}

async fn start(store: E1Store, dir: &Path) -> Result<LocalCluster, BenchError> {
    let config = quorumlog_kv::raft_config(quorumlog_kv::SNAPSHOT_EVERY);
    let started = match store {
        E1Store::Quorumlog => LocalCluster::start(quorumlog_parts(dir)?, config, true).await,
        E1Store::RaftEngine => {
            let mut parts = Vec::new();
            for id in 1..=3u64 {
                let d = dir.join(format!("node-{id}"));
                std::fs::create_dir_all(&d)?;
                let log = RaftEngineLog::open(&d)?;
                parts.push((id, log, KvMachine::in_memory()));
            }
            LocalCluster::start(parts, config, true).await
        }
        E1Store::RaftLog => {
            let mut parts = Vec::new();
            for id in 1..=3u64 {
                let log = RaftLogStore::open(&dir.join(format!("node-{id}")))?;
                parts.push((id, log, KvMachine::in_memory()));
            }
            LocalCluster::start(parts, config, true).await
        }
        E1Store::Memory => {
            let parts = (1..=3u64)
                .map(|id| (id, MemLog::default(), KvMachine::in_memory()))
                .collect();
            LocalCluster::start(parts, config, true).await
        }
    };
    started.map_err(|e| BenchError::from(e.to_string()))
}

/// `clients` tasks writing `value_bytes`-byte values through `leader`
/// (following redirects) until `stop`; each returns its latencies (us).
fn clients_writing(
    cluster: &Arc<LocalCluster>,
    leader: u64,
    clients: usize,
    value_bytes: usize,
    stop: &Arc<AtomicBool>,
    acked: &Arc<std::sync::atomic::AtomicU64>,
) -> Vec<tokio::task::JoinHandle<Vec<u64>>> {
    let value = "v".repeat(value_bytes);
    (0..clients)
        .map(|c| {
            let (cluster, stop, value, acked) = (
                Arc::clone(cluster),
                Arc::clone(stop),
                value.clone(),
                Arc::clone(acked),
            );
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut via = leader;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let put = Put::new(format!("c{c}-{n}"), value.clone());
                    let t0 = Instant::now();
                    match cluster.put(via, put).await {
                        Ok(_) => {
                            lat.push(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
                            acked.fetch_add(1, Ordering::Relaxed);
                            n += 1;
                        }
                        Err(Refusal::NotLeader {
                            leader: Some((l, _)),
                        }) => via = l,
                        Err(_) => {}
                    }
                }
                lat
            })
        })
        .collect()
}

/// Lets the client `tasks` write until `limit`, stops them, and returns
/// their result and the time spent writing.
pub(crate) async fn measure(
    limit: Limit,
    acked: &std::sync::atomic::AtomicU64,
    stop: &AtomicBool,
    tasks: Vec<tokio::task::JoinHandle<Vec<u64>>>,
) -> (E1Result, Duration) {
    let t0 = Instant::now();
    match limit {
        Limit::Seconds(s) => tokio::time::sleep(Duration::from_secs_f64(s)).await,
        Limit::Writes(w) => {
            while acked.load(Ordering::Relaxed) < w {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        }
    }
    let writing = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    (E1Result::of(&mut all, t0.elapsed().as_secs_f64()), writing)
}

/// How long an E1 run writes.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    /// For this many seconds.
    Seconds(f64),
    /// Until this many writes were acknowledged.
    Writes(u64),
}

/// Runs E1 on `store` in `dir` with `clients` concurrent clients writing
/// `value_bytes`-byte values, until `limit`; returns the result and the
/// time spent writing.
///
/// # Errors
/// The cluster could not start or elect a leader.
pub fn run(
    store: E1Store,
    dir: &Path,
    clients: usize,
    value_bytes: usize,
    limit: Limit,
) -> Result<(E1Result, Duration), BenchError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let cluster = Arc::new(start(store, dir).await?);
        // openraft 0.10's new leader takes writes once a quorum
        // acknowledged it: one write first.
        let leader = groups::warm(&cluster).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let tasks = clients_writing(&cluster, leader, clients, value_bytes, &stop, &acked);
        let (result, writing) = measure(limit, &acked, &stop, tasks).await;
        if let Ok(c) = Arc::try_unwrap(cluster) {
            c.shutdown().await;
        }
        Ok((result, writing))
    })
}
