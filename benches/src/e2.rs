//! E2: three raft-rs (`raft` 0.7) nodes in one process, channels as the
//! network, `regions` regions on each node, proposals driven through each
//! node's Ready loop (one thread per node, as a `TiKV` store's raft
//! poller). Region `r`'s leader is node `r % 3 + 1` (it campaigns first);
//! each node keeps `in_flight` of its own proposals (64-byte payloads)
//! outstanding, spread round-robin over the regions it leads. A proposal
//! counts once its leader applies it (committed on a majority); its
//! latency is from `propose` to that apply.
//!
//! The three persistences, the only difference between the runs:
//! - **quorumlog** ([`E2Store::Quorumlog`]): every region a group of the
//!   node's shared log, `quorumlog-raftrs`'s `AsyncPersister`: each
//!   Ready's entries queued for the next group-commit round and
//!   `advance_append_async`; persisted messages and `on_persist_ready`
//!   from the round's completion (no thread waits for a sync);
//! - **raft-engine** ([`E2Store::RaftEngine`]), as `TiKV` uses it: each
//!   loop pass gathers every region's Ready into one `LogBatch` (entries
//!   with `add_entries`, the hard state with `put_message`), one
//!   `Engine::write`, synced when any Ready needs it, then
//!   `advance_append` for each; raft-engine tuned as in the many-groups
//!   workload ([`crate::systems::TunedEngine`]: recycled, prefilled
//!   files, its purge worker);
//! - **memory** ([`E2Store::Memory`]): raft-rs's `MemStorage`, the same
//!   loop as raft-engine's with nothing written: the ceiling.
//!
//! All three compact each region's log to 1,024 entries behind what it
//! applied, every 1,024 entries.

mod peers;
mod quorumlog;

use peers::{EngineStorage, SyncStore};
use quorumlog::quorumlog_loop;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use quorumlog_checkpoint::{ClusterId, DirectoryId, Meta, NodeId, SharedFs};
use quorumlog_io::RealFs;
use quorumlog_raft::{Identity, Node, NodeOptions, Offset};
use quorumlog_raftrs::{AsyncPersister, Event, RegionStorage};
use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Message};
use raft::storage::MemStorage;
use raft::{Config, GetEntriesContext, RaftState, RawNode, Ready, StateRole, Storage};

use crate::e1::E1Result;
use crate::systems::{BenchError, TunedEngine};

/// The persistence E2 runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum E2Store {
    /// quorumlog with asynchronous persistence.
    Quorumlog,
    /// raft-engine, one batch per loop pass.
    RaftEngine,
    /// raft-rs's `MemStorage`.
    Memory,
}

impl E2Store {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            E2Store::Quorumlog => "quorumlog",
            E2Store::RaftEngine => "raft-engine",
            E2Store::Memory => "memory",
        }
    }
}

/// Entries a region keeps behind what it applied.
const KEEP: u64 = 1_024;
const NODES: [u64; 3] = [1, 2, 3];
const PAYLOAD: usize = 64;

/// What a node's inbox carries.
enum Mail {
    /// A region's Raft message.
    Raft(u64, Message),
    /// Persistence finished something: look at the persister's events.
    Wake,
}

/// The run's counters, shared by the three loops.
#[derive(Default)]
struct Stats {
    stop: AtomicBool,
    recording: AtomicBool,
    leaders: AtomicU64,
    latencies: Mutex<Vec<u64>>,
}

/// What every loop does the same way: the network, ticks, proposals and
/// applying.
struct Common<S: Storage> {
    raws: Vec<RawNode<S>>,
    leading: Vec<bool>,
    mail: Vec<Sender<Mail>>,
    inbox: Receiver<Mail>,
    in_flight: usize,
    target: usize,
    pending: HashMap<u64, Instant>,
    next_id: u64,
    next_region: usize,
    last_tick: Instant,
    compacted: Vec<u64>,
    stats: Arc<Stats>,
    local: Vec<u64>,
}

fn config(id: u64) -> Config {
    Config {
        id,
        election_tick: 20,
        heartbeat_tick: 2,
        max_size_per_msg: 1 << 20,
        max_inflight_msgs: 256,
        ..Config::default()
    }
}

impl<S: Storage> Common<S> {
    fn new(id: u64, raws: Vec<RawNode<S>>, net: &Net, target: usize, stats: Arc<Stats>) -> Self {
        let n = raws.len();
        Common {
            raws,
            leading: vec![false; n],
            mail: net.senders.clone(),
            inbox: net.take_inbox(id),
            in_flight: 0,
            target,
            pending: HashMap::new(),
            next_id: id << 48,
            next_region: 0,
            last_tick: Instant::now(),
            compacted: vec![0; n],
            stats,
            local: Vec::new(),
        }
    }

    fn region(&mut self, r: u64) -> Option<&mut RawNode<S>> {
        self.raws.get_mut(usize::try_from(r).ok()?)
    }

    /// Steps what arrived (waiting up to 1 ms for something when idle);
    /// returns whether persistence woke it.
    fn receive(&mut self, idle: bool) -> bool {
        let first = if idle {
            self.inbox.recv_timeout(Duration::from_millis(1)).ok()
        } else {
            self.inbox.try_recv().ok()
        };
        let mut woken = false;
        let rest: Vec<Mail> = self.inbox.try_iter().collect();
        for m in first.into_iter().chain(rest) {
            match m {
                Mail::Raft(r, msg) => {
                    if let Some(raw) = self.region(r) {
                        let _ = raw.step(msg);
                    }
                }
                Mail::Wake => woken = true,
            }
        }
        woken
    }

    fn tick(&mut self) {
        if self.last_tick.elapsed() >= Duration::from_millis(10) {
            self.last_tick = Instant::now();
            for raw in &mut self.raws {
                raw.tick();
            }
        }
    }

    /// Tops this node's proposals up to `target`.
    fn propose(&mut self) {
        let n = self.raws.len();
        let led = self.leading.iter().filter(|l| **l).count();
        if led == 0 {
            return;
        }
        while self.in_flight < self.target {
            let mut r = self.next_region % n;
            while !self.leading.get(r).copied().unwrap_or(false) {
                r = (r + 1) % n;
            }
            self.next_region = r + 1;
            let id = self.next_id;
            self.next_id += 1;
            let mut data = vec![0u8; PAYLOAD];
            if let Some(head) = data.get_mut(..8) {
                head.copy_from_slice(&id.to_le_bytes());
            }
            let Some(raw) = self.raws.get_mut(r) else {
                return;
            };
            if raw.propose(vec![], data).is_err() {
                return;
            }
            self.pending.insert(id, Instant::now());
            self.in_flight += 1;
        }
    }

    fn send(&self, msgs: Vec<Message>, region: u64) {
        for m in msgs {
            let to = usize::try_from(m.to.saturating_sub(1)).unwrap_or(usize::MAX);
            if let Some(tx) = self.mail.get(to) {
                let _ = tx.send(Mail::Raft(region, m));
            }
        }
    }

    /// Notes a Ready's leadership change.
    fn note_role(&mut self, r: usize, rd: &Ready) {
        if let Some(ss) = rd.ss() {
            let lead = ss.raft_state == StateRole::Leader;
            if let Some(l) = self.leading.get_mut(r) {
                if *l != lead {
                    *l = lead;
                    if lead {
                        self.stats.leaders.fetch_add(1, Ordering::Relaxed);
                    } else {
                        self.stats.leaders.fetch_sub(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    /// Applies committed entries: this node's proposals complete.
    fn apply(&mut self, r: usize, entries: &[Entry]) {
        let Some(last) = entries.last() else {
            return;
        };
        for e in entries {
            if e.get_entry_type() != EntryType::EntryNormal {
                continue;
            }
            let Some(id) = e
                .data
                .get(..8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(u64::from_le_bytes)
            else {
                continue;
            };
            if let Some(t) = self.pending.remove(&id) {
                self.in_flight -= 1;
                if self.stats.recording.load(Ordering::Relaxed) {
                    self.local
                        .push(u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX));
                }
            }
        }
        if let Some(c) = self.compacted.get_mut(r) {
            if last.index >= *c + 2 * KEEP {
                *c = last.index - KEEP;
            }
        }
    }

    /// Regions whose compaction point moved since `seen`.
    fn to_compact(&self, seen: &mut [u64]) -> Vec<(usize, u64)> {
        let mut out = Vec::new();
        for (r, (c, s)) in self.compacted.iter().zip(seen.iter_mut()).enumerate() {
            if *c > *s {
                *s = *c;
                out.push((r, *c));
            }
        }
        out
    }

    fn finish(&mut self) {
        let mut l = self
            .stats
            .latencies
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        l.append(&mut self.local);
    }

    fn stopped(&mut self) -> bool {
        if !self.stats.recording.load(Ordering::Relaxed) && !self.local.is_empty() {
            self.finish();
        }
        self.stats.stop.load(Ordering::Relaxed)
    }
}

/// The three inboxes.
struct Net {
    senders: Vec<Sender<Mail>>,
    inboxes: Mutex<Vec<Option<Receiver<Mail>>>>,
}

impl Net {
    fn new() -> Net {
        let (senders, inboxes): (Vec<_>, Vec<_>) = NODES
            .iter()
            .map(|_| {
                let (tx, rx) = mpsc::channel();
                (tx, Some(rx))
            })
            .unzip();
        Net {
            senders,
            inboxes: Mutex::new(inboxes),
        }
    }

    fn take_inbox(&self, id: u64) -> Receiver<Mail> {
        let mut i = self.inboxes.lock().unwrap_or_else(PoisonError::into_inner);
        i.get_mut(usize::try_from(id - 1).unwrap_or(usize::MAX))
            .and_then(Option::take)
            .unwrap_or_else(|| mpsc::channel().1)
    }
}

fn voters() -> ConfState {
    ConfState::from((NODES.to_vec(), vec![]))
}

fn raw_nodes<S: Storage>(id: u64, storages: Vec<S>) -> Result<Vec<RawNode<S>>, BenchError> {
    let logger = raft::default_logger();
    let mut raws = Vec::new();
    for (r, s) in storages.into_iter().enumerate() {
        let mut raw = RawNode::new(&config(id), s, &logger)?;
        if r as u64 % 3 + 1 == id {
            raw.campaign()?;
        }
        raws.push(raw);
    }
    Ok(raws)
}

fn sync_loop<S: SyncStore>(
    id: u64,
    storages: Vec<S>,
    net: &Net,
    target: usize,
    stats: Arc<Stats>,
) -> Result<(), BenchError> {
    let mut c = Common::new(id, raw_nodes(id, storages)?, net, target, stats);
    let mut seen = vec![0; c.raws.len()];
    let mut idle = false;
    while !c.stopped() {
        c.receive(idle);
        c.tick();
        c.propose();
        let mut batch = raft_engine::LogBatch::default();
        let mut readies = Vec::new();
        let mut sync = false;
        for r in 0..c.raws.len() {
            let Some(raw) = c.raws.get_mut(r) else {
                continue;
            };
            if !raw.has_ready() {
                continue;
            }
            let mut rd = raw.ready();
            raw.store().stage(&rd, &mut batch)?;
            sync |= rd.must_sync();
            let msgs = rd.take_messages();
            c.note_role(r, &rd);
            c.send(msgs, r as u64);
            readies.push((r, rd));
        }
        idle = readies.is_empty();
        if let Some((r, _)) = readies.first() {
            if let Some(raw) = c.raws.get(*r) {
                raw.store().write(&mut batch, sync)?;
            }
        }
        for (r, mut rd) in readies {
            let persisted = rd.take_persisted_messages();
            c.send(persisted, r as u64);
            let committed = rd.take_committed_entries();
            c.apply(r, &committed);
            let Some(raw) = c.raws.get_mut(r) else {
                continue;
            };
            let mut light = raw.advance_append(rd);
            let msgs = light.take_messages();
            let more = light.take_committed_entries();
            raw.advance_apply();
            c.send(msgs, r as u64);
            c.apply(r, &more);
        }
        for (r, to) in c.to_compact(&mut seen) {
            if let Some(raw) = c.raws.get(r) {
                raw.store().compact(to, &mut batch);
            }
        }
    }
    c.finish();
    Ok(())
}

fn engine_loop(
    id: u64,
    dir: &Path,
    regions: u64,
    net: &Net,
    target: usize,
    stats: Arc<Stats>,
) -> Result<(), BenchError> {
    let d = dir.join(format!("node-{id}"));
    std::fs::create_dir_all(&d)?;
    let engine = Arc::new(TunedEngine::open(&d, 128)?);
    let storages = (0..regions)
        .map(|region| EngineStorage {
            engine: Arc::clone(&engine),
            region: region + 1,
            state: Arc::new(Mutex::new(RaftState::new(HardState::default(), voters()))),
        })
        .collect();
    sync_loop(id, storages, net, target, stats)
}

/// Runs E2 on `store` in `dir`: `regions` regions, `in_flight` proposals
/// per node, measured for `seconds` once every region has a leader.
///
/// # Errors
/// A node loop's failure; no leaders within 60 s.
pub fn run(
    store: E2Store,
    dir: &Path,
    regions: u64,
    in_flight: usize,
    seconds: f64,
) -> Result<E1Result, BenchError> {
    let stats = Arc::new(Stats::default());
    let net = Arc::new(Net::new());
    let mut threads = Vec::new();
    for id in NODES {
        let (stats, net, dir) = (Arc::clone(&stats), Arc::clone(&net), dir.to_path_buf());
        threads.push(
            std::thread::Builder::new()
                .name(format!("e2-node-{id}"))
                .spawn(move || match store {
                    E2Store::Quorumlog => quorumlog_loop(id, &dir, regions, &net, in_flight, stats),
                    E2Store::RaftEngine => engine_loop(id, &dir, regions, &net, in_flight, stats),
                    E2Store::Memory => {
                        let s = (0..regions)
                            .map(|_| MemStorage::new_with_conf_state(voters()))
                            .collect();
                        sync_loop(id, s, &net, in_flight, stats)
                    }
                })?,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while stats.leaders.load(Ordering::Relaxed) < regions {
        if Instant::now() > deadline || threads.iter().any(std::thread::JoinHandle::is_finished) {
            stats.stop.store(true, Ordering::Relaxed);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    let used = quorumlog_io::process_usage()?;
    stats.recording.store(true, Ordering::Relaxed);
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stats.recording.store(false, Ordering::Relaxed);
    let elapsed = t.elapsed().as_secs_f64();
    let usage = quorumlog_io::process_usage()?.since(used);
    std::thread::sleep(Duration::from_millis(50));
    stats.stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join()
            .map_err(|_| BenchError::from("an E2 node panicked".to_string()))??;
    }
    if stats.leaders.load(Ordering::Relaxed) < regions {
        return Err(BenchError::from(format!(
            "E2 {}: not every region elected a leader",
            store.name()
        )));
    }
    let mut l = std::mem::take(
        &mut *stats
            .latencies
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    Ok(E1Result {
        usage,
        ..E1Result::of(&mut l, elapsed)
    })
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a panic is a failed assertion"
    )]

    use super::{run, E2Store};

    /// Each persistence commits proposals through its Ready loop on every
    /// region (a loop that loses a persisted Ready, or never reports one,
    /// commits nothing and fails here).
    #[test]
    fn every_persistence_commits_proposals_on_every_region() {
        for store in [E2Store::Quorumlog, E2Store::RaftEngine, E2Store::Memory] {
            let dir = tempfile::tempdir().unwrap();
            let r = run(store, dir.path(), 6, 8, 0.3).unwrap();
            assert!(r.writes > 0, "{}: nothing committed", store.name());
        }
    }
}
