//! E1, the end-to-end benchmark: a three-node openraft cluster in one
//! process (in-memory network, `quorumlog_kv::cluster`), three data
//! directories on the same disk, clients writing through the leader. The
//! log store is (a) quorumlog (`quorumlog-openraft`: appends acknowledged
//! from group-commit sync rounds), (b) raft-engine (a small openraft log
//! store written for this benchmark: entries as keyed puts, written with
//! `sync = true` on every append and vote, as durable as ours), or (c)
//! memory (no durability: the ceiling). A write counts once openraft
//! acknowledges it (committed on a majority and applied by the leader).

#![allow(
    clippy::result_large_err,
    reason = "openraft's storage traits return its `StorageError`; the helpers return the same"
)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote,
};
use quorumlog_checkpoint::{ClusterId, DirectoryId, Meta, NodeId, SharedFs};
use quorumlog_io::RealFs;
use quorumlog_kv::cluster::LocalCluster;
use quorumlog_kv::proto::Refusal;
use quorumlog_kv::{KvMachine, Put, TypeConfig};
use quorumlog_openraft::LogStore;
use quorumlog_raft::Store;

use crate::systems::{bench_entry, BenchEntries, BenchError, TunedEngine};
use raft_engine::MessageExt;

type StoreError = StorageError<u64>;

fn write_err(e: &dyn std::error::Error) -> StoreError {
    StorageIOError::write_logs(AnyError::error(e.to_string())).into()
}

fn read_err(e: &dyn std::error::Error) -> StoreError {
    StorageIOError::read_logs(AnyError::error(e.to_string())).into()
}

fn range(r: &impl RangeBounds<u64>) -> (u64, u64) {
    let from = match r.start_bound() {
        Bound::Included(x) => *x,
        Bound::Excluded(x) => x.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let to = match r.end_bound() {
        Bound::Included(x) => x.saturating_add(1),
        Bound::Excluded(x) => *x,
        Bound::Unbounded => u64::MAX,
    };
    (from, to)
}

/// What a log store keeps in memory about its log (both peers below).
#[derive(Debug, Default, Clone)]
struct Bounds {
    purged: Option<LogId<u64>>,
    last: Option<LogId<u64>>,
    vote: Option<Vote<u64>>,
}

const REGION: u64 = 1;
const VOTE_KEY: &[u8] = b"vote";

/// An openraft log store over raft-engine, as `TiKV` uses it
/// ([`TunedEngine`]: recycled prefilled files, purges on a timer): entries
/// through `LogBatch::add_entries` (an entry's bytes behind its index),
/// read with `fetch_entries_to`, a conflicting suffix overwritten by the
/// next append (raft-engine's memtable truncates it), purges as
/// `compact_to`, the vote a put; every append and vote one `LogBatch`
/// written with `sync = true` (raft-engine's own group commit joins
/// concurrent writers). Blocking writes run in place on a multi-threaded
/// runtime. Opened fresh only (no recovery scan).
#[derive(Clone)]
pub struct RaftEngineLog {
    engine: Arc<TunedEngine>,
    bounds: Arc<Mutex<Bounds>>,
}

impl RaftEngineLog {
    /// A fresh store in `dir`.
    ///
    /// # Errors
    /// raft-engine's open error.
    pub fn open(dir: &Path) -> Result<Self, BenchError> {
        Ok(RaftEngineLog {
            engine: Arc::new(TunedEngine::open(dir, 128)?),
            bounds: Arc::new(Mutex::new(Bounds::default())),
        })
    }

    fn engine(&self) -> &raft_engine::Engine {
        self.engine.engine()
    }

    fn bounds(&self) -> std::sync::MutexGuard<'_, Bounds> {
        self.bounds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self, batch: &mut raft_engine::LogBatch) -> Result<(), StoreError> {
        tokio::task::block_in_place(|| self.engine().write(batch, true))
            .map(|_| ())
            .map_err(|e| write_err(&e))
    }

    fn fetch(&self, lo: u64, hi: u64) -> Result<Vec<Entry<TypeConfig>>, StoreError> {
        if lo >= hi {
            return Ok(Vec::new());
        }
        let mut got = Vec::new();
        self.engine()
            .fetch_entries_to::<BenchEntries>(REGION, lo, hi, None, &mut got)
            .map_err(|e| read_err(&e))?;
        got.iter()
            .map(|e| {
                bincode::deserialize(e.value.get(8..).unwrap_or_default()).map_err(|e| read_err(&e))
            })
            .collect()
    }
}

impl RaftLogReader<TypeConfig> for RaftEngineLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        r: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StoreError> {
        let (from, to) = range(&r);
        let b = self.bounds().clone();
        let lo = from.max(b.purged.map_or(0, |p| p.index + 1));
        let hi = to.min(b.last.map_or(0, |l| l.index + 1));
        self.fetch(lo, hi)
    }
}

impl RaftLogStorage<TypeConfig> for RaftEngineLog {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StoreError> {
        let b = self.bounds().clone();
        Ok(LogState {
            last_purged_log_id: b.purged,
            last_log_id: b.last.or(b.purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StoreError> {
        let mut batch = raft_engine::LogBatch::default();
        let v = bincode::serialize(vote).map_err(|e| write_err(&e))?;
        batch
            .put(REGION, VOTE_KEY.to_vec(), v)
            .map_err(|e| write_err(&e))?;
        self.write(&mut batch)?;
        self.bounds().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StoreError> {
        Ok(self.bounds().vote)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StoreError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut msgs = Vec::new();
        let mut last = None;
        for e in entries {
            let v = bincode::serialize(&e).map_err(|e| write_err(&e))?;
            msgs.push(bench_entry(e.log_id.index, &v));
            last = Some(e.log_id);
        }
        let mut batch = raft_engine::LogBatch::default();
        if let (Some(first), Some(known)) = (msgs.first(), self.bounds().last) {
            // Past a gap (after a purge beyond the end): start the region over.
            if BenchEntries::index(first) > known.index + 1 {
                batch.add_command(REGION, raft_engine::Command::Clean);
            }
        }
        batch
            .add_entries::<BenchEntries>(REGION, &msgs)
            .map_err(|e| write_err(&e))?;
        self.write(&mut batch)?;
        if last.is_some() {
            self.bounds().last = last;
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StoreError> {
        // The next append overwrites from here (raft-engine truncates the
        // memtable's suffix then); until it, reads stop below.
        let b = self.bounds().clone();
        let last = match log_id.index.checked_sub(1) {
            Some(i) if b.purged.is_none_or(|p| p.index < i) => {
                self.fetch(i, i + 1)?.pop().map(|e| e.log_id)
            }
            _ => None,
        };
        self.bounds().last = last;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StoreError> {
        self.engine().compact_to(REGION, log_id.index + 1);
        let mut b = self.bounds();
        b.purged = Some(log_id);
        if b.last.is_none_or(|l| l.index <= log_id.index) {
            b.last = None;
        }
        Ok(())
    }
}

/// An in-memory openraft log store (no durability: the ceiling).
#[derive(Clone, Default)]
pub struct MemLog {
    log: Arc<Mutex<BTreeMap<u64, Entry<TypeConfig>>>>,
    bounds: Arc<Mutex<Bounds>>,
}

impl MemLog {
    fn bounds(&self) -> std::sync::MutexGuard<'_, Bounds> {
        self.bounds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn log(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry<TypeConfig>>> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl RaftLogReader<TypeConfig> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        r: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StoreError> {
        Ok(self.log().range(r).map(|(_, e)| e.clone()).collect())
    }
}

impl RaftLogStorage<TypeConfig> for MemLog {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StoreError> {
        let purged = self.bounds().purged;
        let last = self.log().values().next_back().map(|e| e.log_id).or(purged);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StoreError> {
        self.bounds().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StoreError> {
        Ok(self.bounds().vote)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StoreError>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut log = self.log();
        for e in entries {
            log.insert(e.log_id.index, e);
        }
        drop(log);
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StoreError> {
        self.log().split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StoreError> {
        let mut log = self.log();
        *log = log.split_off(&(log_id.index + 1));
        drop(log);
        self.bounds().purged = Some(log_id);
        Ok(())
    }
}

/// The log store E1 runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum E1Store {
    /// quorumlog through `quorumlog-openraft`.
    Quorumlog,
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
}

fn quorumlog_parts(dir: &Path) -> Result<Vec<(u64, LogStore<TypeConfig>, KvMachine)>, BenchError> {
    let fs: SharedFs = Arc::new(RealFs::new());
    let mut parts = Vec::new();
    for id in 1..=3u64 {
        let d = dir.join(format!("node-{id}"));
        std::fs::create_dir_all(&d)?;
        let meta = Meta::new(ClusterId(1), NodeId(id), DirectoryId(u128::from(id) + 1));
        let options = quorumlog_kv::node::store_options();
        Store::format(&fs, &d, meta, None, &options)
            .map_err(|e| BenchError::from(e.to_string()))?;
        let store = Arc::new(
            Store::open(&fs, &d, &quorumlog_raft::Identity::of(&meta), &options)
                .map_err(|e| BenchError::from(e.to_string()))?
                .0,
        );
        let log = LogStore::new_bounded(Arc::clone(&store), id)
            .map_err(|e| BenchError::from(e.to_string()))?;
        let machine = KvMachine::open(store).map_err(|e| BenchError::from(e.to_string()))?;
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
        let leader = cluster
            .leader(Duration::from_secs(10))
            .await
            .ok_or_else(|| BenchError::from("no leader"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let tasks = clients_writing(&cluster, leader, clients, value_bytes, &stop, &acked);
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
        let elapsed = t0.elapsed().as_secs_f64();
        all.sort_unstable();
        let pick = |p: usize| {
            all.get(all.len().saturating_sub(1) * p / 100)
                .copied()
                .unwrap_or(0)
        };
        #[expect(clippy::cast_precision_loss, reason = "a rate for display")]
        let writes_per_s = all.len() as f64 / elapsed;
        let result = E1Result {
            writes: all.len() as u64,
            writes_per_s,
            p50_us: pick(50),
            p99_us: pick(99),
        };
        if let Ok(c) = Arc::try_unwrap(cluster) {
            c.shutdown().await;
        }
        Ok((result, writing))
    })
}
