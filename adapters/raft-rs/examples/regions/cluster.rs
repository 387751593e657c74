//! Three raft-rs nodes in one process, channels as the network, each node
//! one directory whose shared log holds all its regions (a group each),
//! each node's regions driven by one Ready loop thread with the
//! [`AsyncPersister`], one `Pass` per loop pass. The `regions` example's
//! Ready loop, and what `tests/cluster.rs` runs in CI: copy it as the
//! shape of a multi-region raft-rs node (docs/embedding.md §4).
#![allow(
    unreachable_pub,
    dead_code,
    reason = "shared by a test and an example; each uses part"
)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use quorumlog_raft::{
    ClusterId, DirectoryId, Identity, Meta, Node, NodeId, NodeOptions, Offset, RealFs, SharedFs,
    SyncPolicy,
};
use quorumlog_raftrs::{AsyncPersister, Event, RegionStorage};
use raft::eraftpb::{ConfState, EntryType, Message};
use raft::{Config, RawNode, StateRole};

/// Small segments, none prepared ahead: a case opens its node in
/// milliseconds. The Ready loop leads its rounds.
fn small_options() -> NodeOptions {
    NodeOptions {
        sync: SyncPolicy::CallerLed,
        ..NodeOptions::with_segment_bytes(1 << 20)
    }
}

/// The nodes' ids.
pub const NODES: [u64; 3] = [1, 2, 3];

/// What a node tells the others: a region's message.
type Mail = (u64, Message);

/// What a node's loop is asked to do besides its mail.
enum Ask {
    Propose(u64, Vec<u8>),
}

/// Round `round`'s payloads: `per` distinct ones on each region.
pub fn payloads(regions: u64, round: u32, per: u32) -> BTreeMap<u64, Vec<Vec<u8>>> {
    (0..regions)
        .map(|r| {
            let ds = (0..per)
                .map(|k| format!("r{r}-round{round}-{k}").into_bytes())
                .collect();
            (r, ds)
        })
        .collect()
}

/// Each node's applied entries: region → index → (term, data).
pub type Applied = Arc<Mutex<BTreeMap<u64, BTreeMap<u64, (u64, Vec<u8>)>>>>;

fn meta(id: u64) -> Meta {
    Meta::new(ClusterId(9), NodeId(id), DirectoryId(u128::from(id) + 1))
}

struct Running {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
    asks: Sender<Ask>,
}

/// The cluster.
pub struct Cluster {
    root: PathBuf,
    regions: u64,
    mail: HashMap<u64, Sender<Mail>>,
    inboxes: HashMap<u64, Arc<Mutex<Receiver<Mail>>>>,
    running: HashMap<u64, Running>,
    /// Each node's applied entries.
    pub applied: HashMap<u64, Applied>,
    /// Region → (node, term) of the leader a loop last saw.
    leaders: Arc<Mutex<HashMap<u64, (u64, u64)>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Cluster {
    /// Formats three node directories under `root` with `regions`
    /// regions each and starts their loops.
    pub fn start(root: &Path, regions: u64) -> Cluster {
        let fs: SharedFs = Arc::new(RealFs::new());
        let (mut mail, mut inboxes) = (HashMap::new(), HashMap::new());
        for id in NODES {
            let dir = root.join(format!("n{id}"));
            std::fs::create_dir_all(&dir).unwrap();
            Node::format(&fs, &dir, meta(id), &small_options()).unwrap();
            let (tx, rx) = mpsc::channel();
            mail.insert(id, tx);
            inboxes.insert(id, Arc::new(Mutex::new(rx)));
        }
        let mut c = Cluster {
            root: root.to_path_buf(),
            regions,
            mail,
            inboxes,
            running: HashMap::new(),
            applied: NODES.iter().map(|&id| (id, Applied::default())).collect(),
            leaders: Arc::default(),
        };
        for id in NODES {
            c.run(id, true);
        }
        c
    }

    /// Starts node `id`'s loop over its directory.
    fn run(&mut self, id: u64, fresh: bool) {
        let fs: SharedFs = Arc::new(RealFs::new());
        let dir = self.root.join(format!("n{id}"));
        let (node, _) = Node::open(&fs, &dir, &Identity::of(&meta(id)), &small_options()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (asks, ask_rx) = mpsc::channel();
        let ctx = Loop {
            id,
            regions: self.regions,
            fresh,
            node,
            inbox: Arc::clone(&self.inboxes[&id]),
            mail: self.mail.clone(),
            asks: ask_rx,
            applied: Arc::clone(&self.applied[&id]),
            leaders: Arc::clone(&self.leaders),
            stop: Arc::clone(&stop),
            reported: Mutex::default(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("raft-node-{id}"))
            .spawn(move || ctx.run())
            .unwrap();
        self.running.insert(id, Running { stop, thread, asks });
    }

    /// Stops node `id` (no clean close: what its log had not synced is
    /// the operating system's) and starts it again from its directory;
    /// it re-applies its committed entries from the log.
    pub fn restart(&mut self, id: u64) {
        if let Some(r) = self.running.remove(&id) {
            r.stop.store(true, Ordering::Release);
            r.thread.join().unwrap();
        }
        lock(&self.applied[&id]).clear();
        self.run(id, false);
    }

    /// The leader of `region`, if one is known.
    pub fn leader(&self, region: u64) -> Option<u64> {
        lock(&self.leaders).get(&region).map(|l| l.0)
    }

    /// Proposes `data` on `region` at its leader (dropped if none).
    pub fn propose(&self, region: u64, data: Vec<u8>) {
        if let Some(r) = self.leader(region).and_then(|l| self.running.get(&l)) {
            let _ = r.asks.send(Ask::Propose(region, data));
        }
    }

    /// Whether every node applied `data` on `region`.
    pub fn applied_everywhere(&self, region: u64, data: &[u8]) -> bool {
        self.applied.values().all(|a| {
            lock(a)
                .get(&region)
                .is_some_and(|m| m.values().any(|(_, d)| d == data))
        })
    }

    /// Proposes every payload of `want` (region → payloads) until every
    /// node applied each, re-proposing what is missing; `false` after
    /// `timeout`.
    pub fn write_all(&self, want: &BTreeMap<u64, Vec<Vec<u8>>>, timeout: Duration) -> bool {
        self.until_applied(want, timeout, true)
    }

    /// Waits until every node applied every payload of `want`, proposing
    /// nothing; `false` after `timeout`.
    pub fn wait_applied(&self, want: &BTreeMap<u64, Vec<Vec<u8>>>, timeout: Duration) -> bool {
        self.until_applied(want, timeout, false)
    }

    fn until_applied(
        &self,
        want: &BTreeMap<u64, Vec<Vec<u8>>>,
        timeout: Duration,
        propose: bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let mut missing = 0;
            for (r, ds) in want {
                for d in ds {
                    if !self.applied_everywhere(*r, d) {
                        missing += 1;
                        if propose {
                            self.propose(*r, d.clone());
                        }
                    }
                }
            }
            if missing == 0 {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Every region's applied entries are the same on every node, index
    /// by index (a prefix on a node behind); returns the entries checked.
    pub fn check_agreement(&self) -> usize {
        let mut checked = 0;
        for r in 0..self.regions {
            let logs: Vec<BTreeMap<u64, (u64, Vec<u8>)>> = NODES
                .iter()
                .map(|n| lock(&self.applied[n]).get(&r).cloned().unwrap_or_default())
                .collect();
            for (i, a) in logs.iter().enumerate() {
                for b in &logs[i + 1..] {
                    for (idx, e) in a {
                        if let Some(f) = b.get(idx) {
                            assert_eq!(e, f, "region {r} index {idx} differs between nodes");
                            checked += 1;
                        }
                    }
                }
            }
        }
        checked
    }

    /// Stops every loop.
    pub fn stop(mut self) {
        for (_, r) in self.running.drain() {
            r.stop.store(true, Ordering::Release);
            r.thread.join().unwrap();
        }
    }
}

/// One node's Ready loop.
struct Loop {
    id: u64,
    regions: u64,
    fresh: bool,
    node: Node,
    inbox: Arc<Mutex<Receiver<Mail>>>,
    mail: HashMap<u64, Sender<Mail>>,
    asks: Receiver<Ask>,
    applied: Applied,
    leaders: Arc<Mutex<HashMap<u64, (u64, u64)>>>,
    stop: Arc<AtomicBool>,
    /// The last Ready number reported persisted, per region.
    reported: Mutex<HashMap<u64, u64>>,
}

type Raw = RawNode<RegionStorage>;

impl Loop {
    fn config(&self) -> Config {
        Config {
            id: self.id,
            election_tick: 10,
            heartbeat_tick: 2,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            pre_vote: true,
            check_quorum: true,
            ..Config::default()
        }
    }

    fn send(&self, msgs: Vec<Message>, region: u64) {
        for m in msgs {
            if let Some(tx) = self.mail.get(&m.to) {
                let _ = tx.send((region, m));
            }
        }
    }

    fn run(self) {
        let persister = AsyncPersister::new();
        let mut raws: BTreeMap<u64, Raw> = BTreeMap::new();
        for r in 0..self.regions {
            if self.fresh {
                self.node.create_group(r, Offset(1)).unwrap();
            }
            let s = RegionStorage::open(Arc::new(self.node.group(r).unwrap()), r).unwrap();
            if self.fresh {
                s.initialize_with_conf_state(ConfState::from((NODES.to_vec(), vec![])))
                    .unwrap();
            }
            persister.enable_async_fetch(&s);
            let mut raw = RawNode::with_default_logger(&self.config(), s).unwrap();
            // Node 1 stands first everywhere: elections end quickly.
            if self.fresh && self.id == 1 {
                raw.campaign().unwrap();
            }
            raws.insert(r, raw);
        }
        let mut pending_snap: HashMap<u64, u64> = HashMap::new();
        let mut last_tick = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            // Before the loop may sleep: the round of what it persisted.
            persister.lead_round();
            let got = lock(&self.inbox).recv_timeout(Duration::from_millis(2));
            if let Ok((r, m)) = got {
                if let Some(raw) = raws.get_mut(&r) {
                    let _ = raw.step(m);
                }
                for (r, m) in lock(&self.inbox).try_iter() {
                    if let Some(raw) = raws.get_mut(&r) {
                        let _ = raw.step(m);
                    }
                }
            }
            for Ask::Propose(r, d) in self.asks.try_iter() {
                if let Some(raw) = raws.get_mut(&r) {
                    let _ = raw.propose(vec![], d);
                }
            }
            if last_tick.elapsed() >= Duration::from_millis(10) {
                last_tick = Instant::now();
                for raw in raws.values_mut() {
                    raw.tick();
                }
            }
            // One pass over the regions: one completion for all.
            let mut pass = persister.pass();
            for (r, raw) in &mut raws {
                if !raw.has_ready() {
                    continue;
                }
                let mut rd = raw.ready();
                if let Some(ss) = rd.ss() {
                    if ss.raft_state == StateRole::Leader {
                        lock(&self.leaders).insert(*r, (self.id, raw.raft.term));
                    }
                }
                let w = pass.persist(raw.store(), &mut rd).unwrap();
                self.send(w.messages, *r);
                if w.snapshot.is_some() {
                    pending_snap.insert(*r, rd.number());
                }
                let committed = rd.take_committed_entries();
                self.apply(*r, &committed);
                raw.advance_append_async(rd);
                if let Some(e) = committed.last() {
                    raw.advance_apply_to(e.index);
                }
            }
            pass.finish();
            self.events(&persister, &mut raws, &mut pending_snap);
        }
    }

    /// Reports persisted Readies and fetched entries to their regions;
    /// sends the messages persistence released.
    fn events(
        &self,
        persister: &AsyncPersister,
        raws: &mut BTreeMap<u64, Raw>,
        pending_snap: &mut HashMap<u64, u64>,
    ) {
        for e in persister.try_events() {
            match e {
                Event::Persisted {
                    region,
                    number,
                    messages,
                } => {
                    // Ready order per region (raft-rs requires it).
                    let last = lock(&self.reported).insert(region, number);
                    assert!(
                        last.is_none_or(|l| l < number),
                        "node {} region {region}: Ready {number} reported after {last:?}",
                        self.id
                    );
                    if let Some(raw) = raws.get_mut(&region) {
                        raw.on_persist_ready(number);
                        if pending_snap.get(&region).is_some_and(|&n| n <= number) {
                            pending_snap.remove(&region);
                            let at = raw.raft.raft_log.committed;
                            raw.advance_apply_to(at);
                        }
                    }
                    self.send(messages, region);
                }
                Event::Fetched { region, context } => {
                    if let Some(raw) = raws.get_mut(&region) {
                        raw.on_entries_fetched(context);
                    }
                }
                Event::Failed { region, error } => {
                    panic!("node {} region {region}: {error}", self.id)
                }
            }
        }
    }

    fn apply(&self, region: u64, entries: &[raft::eraftpb::Entry]) {
        if entries.is_empty() {
            return;
        }
        let mut a = lock(&self.applied);
        let m = a.entry(region).or_default();
        for e in entries {
            if e.get_entry_type() == EntryType::EntryNormal && !e.data.is_empty() {
                m.insert(e.index, (e.term, e.data.to_vec()));
            }
        }
    }
}
