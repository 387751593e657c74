//! E1's peer log stores for openraft 0.10, written for the benchmark the
//! way their best users run them; all for the key-value service's types.
//!
//! - [`RaftEngineLog`]: raft-engine as `TiKV` tunes it ([`TunedEngine`]):
//!   entries through `LogBatch::add_entries`, every append and vote one
//!   batch written with `sync = true` (raft-engine's own group commit joins
//!   concurrent writers), the `IOFlushed` completed once it returns.
//! - [`RaftLogStore`]: raft-log 0.4 (openraft's author's WAL) as
//!   databend-meta uses it: one `RaftLog`, an append buffered into it and
//!   flushed with a callback that completes the `IOFlushed` from raft-log's
//!   flush thread (which batches syncs); votes, truncations and purges
//!   flushed and waited for before they return.
//! - [`MemLog`]: memory, no durability (the ceiling).
//!
//! All are opened fresh (no recovery), as E1 only writes.

#![allow(
    clippy::significant_drop_tightening,
    reason = "a store's lock covers each call whole, as its users hold it"
)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use openraft10::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft10::type_config::alias::{EntryOf, LogIdOf, VoteOf};
use openraft10::{OptionalSend, RaftLogReader};
use quorumlog_kv::TypeConfig;
use raft_engine::MessageExt;
use raft_log::api::raft_log_writer::RaftLogWriter;

use crate::systems::{bench_entry, BenchEntries, BenchError, TunedEngine};

type Entry = EntryOf<TypeConfig>;
type LogId = LogIdOf<TypeConfig>;
type Vote = VoteOf<TypeConfig>;

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a store keeps in memory about its log.
#[derive(Debug, Default, Clone)]
struct Bounds {
    purged: Option<LogId>,
    last: Option<LogId>,
    vote: Option<Vote>,
    committed: Option<LogId>,
}

const REGION: u64 = 1;
const VOTE_KEY: &[u8] = b"vote";

/// raft-engine as an openraft 0.10 log store (see the module docs).
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

    fn write(&self, batch: &mut raft_engine::LogBatch) -> io::Result<()> {
        tokio::task::block_in_place(|| self.engine().write(batch, true))
            .map(|_| ())
            .map_err(other)
    }

    fn fetch(&self, lo: u64, hi: u64) -> io::Result<Vec<Entry>> {
        if lo >= hi {
            return Ok(Vec::new());
        }
        let mut got = Vec::new();
        self.engine()
            .fetch_entries_to::<BenchEntries>(REGION, lo, hi, None, &mut got)
            .map_err(other)?;
        got.iter()
            .map(|e| bincode::deserialize(e.value.get(8..).unwrap_or_default()).map_err(other))
            .collect()
    }
}

impl RaftLogReader<TypeConfig> for RaftEngineLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        r: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let (from, to) = range(&r);
        let b = lock(&self.bounds).clone();
        let lo = from.max(b.purged.map_or(0, |p| p.index + 1));
        let hi = to.min(b.last.map_or(0, |l| l.index + 1));
        self.fetch(lo, hi)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(lock(&self.bounds).vote)
    }
}

impl RaftLogStorage<TypeConfig> for RaftEngineLog {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let b = lock(&self.bounds).clone();
        Ok(LogState {
            last_purged_log_id: b.purged,
            last_log_id: b.last.or(b.purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let mut batch = raft_engine::LogBatch::default();
        let v = bincode::serialize(vote).map_err(other)?;
        batch.put(REGION, VOTE_KEY.to_vec(), v).map_err(other)?;
        self.write(&mut batch)?;
        lock(&self.bounds).vote = Some(*vote);
        Ok(())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut msgs = Vec::new();
        let mut last = None;
        for e in entries {
            let v = bincode::serialize(&e).map_err(other)?;
            msgs.push(bench_entry(e.log_id.index, &v));
            last = Some(e.log_id);
        }
        let mut batch = raft_engine::LogBatch::default();
        if let (Some(first), Some(known)) = (msgs.first(), lock(&self.bounds).last) {
            // Past a gap (after a purge beyond the end): start the region over.
            if BenchEntries::index(first) > known.index + 1 {
                batch.add_command(REGION, raft_engine::Command::Clean);
            }
        }
        batch
            .add_entries::<BenchEntries>(REGION, &msgs)
            .map_err(other)?;
        self.write(&mut batch)?;
        if last.is_some() {
            lock(&self.bounds).last = last;
        }
        callback.io_completed(Ok(()));
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        lock(&self.bounds).committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(lock(&self.bounds).committed)
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> Result<(), io::Error> {
        // The next append overwrites from here (raft-engine truncates the
        // memtable's suffix then); until it, reads stop at `last`.
        lock(&self.bounds).last = last;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        self.engine().compact_to(REGION, log_id.index + 1);
        let mut b = lock(&self.bounds);
        b.purged = Some(log_id);
        if b.last.is_none_or(|l| l.index <= log_id.index) {
            b.last = None;
        }
        Ok(())
    }
}

/// raft-log's types for the service's entries: a log id is (the committed
/// leader id packed as `term << 32 | node`, index), a vote (that packing of
/// its leader id, committed), an entry its `bincode` bytes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RlTypes;

/// What completes when raft-log's flush thread made a flush durable.
pub enum RlCallback {
    /// An append's openraft completion.
    Flushed(IOFlushed<TypeConfig>),
    /// A caller waiting (vote, truncation, purge).
    Wait(std::sync::mpsc::SyncSender<io::Result<()>>),
}

impl std::fmt::Debug for RlCallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RlCallback::Flushed(_) => "Flushed",
            RlCallback::Wait(_) => "Wait",
        })
    }
}

impl raft_log::Callback for RlCallback {
    fn send(self, res: Result<(), io::Error>) {
        match self {
            RlCallback::Flushed(f) => f.io_completed(res),
            RlCallback::Wait(tx) => {
                // The waiter may have gone (its call failed meanwhile).
                std::sync::mpsc::SyncSender::send(&tx, res).ok();
            }
        }
    }
}

impl raft_log::Types for RlTypes {
    type LogId = (u64, u64);
    type LogPayload = Vec<u8>;
    type Vote = (u64, bool);
    type Callback = RlCallback;
    type UserData = ();

    fn log_index(log_id: &Self::LogId) -> u64 {
        log_id.1
    }

    fn payload_size(payload: &Self::LogPayload) -> u64 {
        payload.len() as u64
    }
}

fn pack(term: u64, node: u64) -> u64 {
    (term << 32) | (node & 0xffff_ffff)
}

fn rl_log_id(l: &LogId) -> (u64, u64) {
    (pack(l.leader_id.term, l.leader_id.node_id), l.index)
}

fn of_rl_log_id(l: (u64, u64)) -> LogId {
    openraft10::LogId::new(
        openraft10::impls::leader_id_adv::LeaderId {
            term: l.0 >> 32,
            node_id: l.0 & 0xffff_ffff,
        },
        l.1,
    )
}

/// raft-log as an openraft 0.10 log store (see the module docs).
#[derive(Clone)]
pub struct RaftLogStore {
    log: Arc<Mutex<raft_log::RaftLog<RlTypes>>>,
    /// The vote as openraft saved it (raft-log keeps its packing).
    vote: Arc<Mutex<Option<Vote>>>,
}

impl RaftLogStore {
    /// A fresh store in `dir`, raft-log's default configuration (its flush
    /// thread waits up to 1 ms to batch syncs, as databend-meta runs it).
    ///
    /// # Errors
    /// raft-log's open error.
    pub fn open(dir: &Path) -> Result<Self, BenchError> {
        std::fs::create_dir_all(dir)?;
        let config = Arc::new(raft_log::Config::new(dir.to_string_lossy()));
        let log = raft_log::RaftLog::open(config)?;
        Ok(RaftLogStore {
            log: Arc::new(Mutex::new(log)),
            vote: Arc::new(Mutex::new(None)),
        })
    }

    /// Flushes what is buffered and waits until it is durable.
    fn flush_wait(log: &mut raft_log::RaftLog<RlTypes>) -> io::Result<()> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        log.flush(true, Some(RlCallback::Wait(tx)))?;
        tokio::task::block_in_place(|| rx.recv())
            .map_err(|_| io::Error::other("raft-log's flush thread is gone"))?
    }
}

impl RaftLogReader<TypeConfig> for RaftLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        r: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let (from, to) = range(&r);
        let log = lock(&self.log);
        log.read(from, to)
            .map(|x| x.and_then(|(_, bytes)| bincode::deserialize(&bytes).map_err(other)))
            .collect()
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(*lock(&self.vote))
    }
}

impl RaftLogStorage<TypeConfig> for RaftLogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let log = lock(&self.log);
        let s = log.log_state();
        let purged = s.purged().copied().map(of_rl_log_id);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: s.last().copied().map(of_rl_log_id).or(purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let mut log = lock(&self.log);
        log.save_vote((
            pack(vote.leader_id.term, vote.leader_id.node_id),
            vote.committed,
        ))?;
        Self::flush_wait(&mut log)?;
        *lock(&self.vote) = Some(*vote);
        Ok(())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = Vec::new();
        for e in entries {
            batch.push((rl_log_id(&e.log_id), bincode::serialize(&e).map_err(other)?));
        }
        let mut log = lock(&self.log);
        log.append(batch)?;
        log.flush(true, Some(RlCallback::Flushed(callback)))?;
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        if let Some(c) = committed {
            // Buffered: flushed with the next append or vote.
            lock(&self.log).commit(rl_log_id(&c))?;
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(lock(&self.log)
            .log_state()
            .committed()
            .copied()
            .map(of_rl_log_id))
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> Result<(), io::Error> {
        let mut log = lock(&self.log);
        log.truncate(last.map_or(0, |l| l.index + 1))?;
        Self::flush_wait(&mut log)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut log = lock(&self.log);
        log.purge(rl_log_id(&log_id))?;
        Self::flush_wait(&mut log)
    }
}

/// An in-memory openraft 0.10 log store (no durability: the ceiling).
#[derive(Clone, Default)]
pub struct MemLog {
    log: Arc<Mutex<BTreeMap<u64, Entry>>>,
    bounds: Arc<Mutex<Bounds>>,
}

impl RaftLogReader<TypeConfig> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        r: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        Ok(lock(&self.log).range(r).map(|(_, e)| e.clone()).collect())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(lock(&self.bounds).vote)
    }
}

impl RaftLogStorage<TypeConfig> for MemLog {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let purged = lock(&self.bounds).purged;
        let last = lock(&self.log)
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(purged);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        lock(&self.bounds).vote = Some(*vote);
        Ok(())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut log = lock(&self.log);
        for e in entries {
            log.insert(e.log_id.index, e);
        }
        drop(log);
        callback.io_completed(Ok(()));
        Ok(())
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> Result<(), io::Error> {
        lock(&self.log).split_off(&last.map_or(0, |l| l.index + 1));
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut log = lock(&self.log);
        *log = log.split_off(&(log_id.index + 1));
        drop(log);
        lock(&self.bounds).purged = Some(log_id);
        Ok(())
    }
}
