//! Shared by the service's in-process tests: three nodes on simulated
//! disks, started, crashed (alone or all at once) and restarted from what
//! their disks kept; clients over the cluster's transport, recording a
//! history.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs,
    unreachable_pub,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorumlog_checkpoint::{ClusterId, DirectoryId, Meta, NodeId, SharedFs};
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_kv::client::Client;
use quorumlog_kv::cluster::{LocalCluster, LocalTransport};
use quorumlog_kv::KvMachine;
use quorumlog_kv_harness::history::{record_get, record_put, Calls, Outcome, Recorder};
use quorumlog_log::{LogOptions, SegmentPreparation, SyncPolicy};
use quorumlog_openraft10::LogStore;
use quorumlog_raft::{Group, Identity, Node, NodeOptions, Offset};
use tokio::time::Instant;

pub const DIR: &str = "/node";
pub const CLUSTER: u128 = 5;

pub fn options() -> NodeOptions {
    let d = NodeOptions::default();
    NodeOptions {
        log: LogOptions {
            segment_size_bytes: 64 << 10,
            max_batch_bytes: 32 << 10,
            segment_preparation: SegmentPreparation::Inline,
            prefill_segments: 0,
            ..d.log.clone()
        },
        sync: SyncPolicy::GroupCommit,
        ..d
    }
}

/// Fast timers, and snapshots (with purges) every 150 entries.
pub fn config() -> Arc<openraft10::Config> {
    // Leader restoration off, as the service runs it.
    quorumlog_openraft10::raft_config(openraft10::Config {
        heartbeat_interval: 20,
        election_timeout_min: 80,
        election_timeout_max: 160,
        snapshot_policy: openraft10::SnapshotPolicy::LogsSinceLast(150),
        max_in_snapshot_log_to_keep: 10,
        ..Default::default()
    })
    .unwrap()
}

/// Node `id`'s one-group node on `disk` (formatted first if `fresh`):
/// its group's handle, which keeps the node running.
pub fn open(disk: &SimFs, id: u64, fresh: bool) -> Arc<Group> {
    let fs: SharedFs = Arc::new(disk.clone());
    if fresh {
        let meta = Meta::new(ClusterId(CLUSTER), NodeId(id), DirectoryId(u128::from(id)));
        Node::format(&fs, Path::new(DIR), meta, &options()).unwrap();
    }
    let expect = Identity::node(ClusterId(CLUSTER), NodeId(id));
    let (node, _) = Node::open(&fs, Path::new(DIR), &expect, &options())
        .unwrap_or_else(|e| panic!("node {id} does not reopen: {e}"));
    if fresh {
        node.create_group(quorumlog_kv::cluster::GROUP, Offset(0))
            .unwrap();
    }
    Arc::new(node.group(quorumlog_kv::cluster::GROUP).unwrap())
}

/// Node `id`'s log store and state machine on `disk`.
pub fn parts(
    disk: &SimFs,
    id: u64,
    fresh: bool,
) -> (LogStore<quorumlog_kv::TypeConfig>, KvMachine) {
    let store = open(disk, id, fresh);
    let log = LogStore::new(Arc::clone(&store), id).unwrap();
    let machine = KvMachine::open(store).unwrap();
    (log, machine)
}

/// Three nodes on simulated disks.
pub struct SimCluster {
    pub disks: Vec<SimFs>,
    pub cluster: LocalCluster,
}

impl SimCluster {
    /// A fresh cluster of nodes 1–3 on disks seeded by `seed`.
    pub async fn start(seed: u64) -> SimCluster {
        let disks: Vec<SimFs> = (0..3)
            .map(|i| SimFs::new(seed.wrapping_mul(3).wrapping_add(i)))
            .collect();
        let p = disks
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let id = i as u64 + 1;
                let (log, machine) = parts(d, id, true);
                (id, log, machine)
            })
            .collect();
        let cluster = LocalCluster::start(p, config(), true).await.unwrap();
        SimCluster { disks, cluster }
    }

    pub fn disk(&self, id: u64) -> &SimFs {
        &self.disks[usize::try_from(id - 1).unwrap()]
    }

    /// Node `id` loses power: nothing more reaches its disk, its Raft
    /// stops, and it restarts from what the disk kept (`plan`).
    pub async fn crash(&mut self, id: u64, plan: CrashPlan) {
        self.cluster.drain(id).await;
        self.disk(id).crash_after(0);
        self.cluster.stop(id).await;
        let image = self.disk(id).crash_with(plan);
        self.disks[usize::try_from(id - 1).unwrap()] = image.clone();
        let (log, machine) = parts(&image, id, false);
        self.cluster.add(id, log, machine).await.unwrap();
    }

    /// Every node loses power at once, then all restart.
    pub async fn power_loss(&mut self, plan: CrashPlan) {
        self.power_loss_staggered(plan, [1, 2, 3], Duration::ZERO)
            .await;
    }

    /// Every node loses power at once, then they restart in `order`, `gap`
    /// apart (machines never come back together).
    pub async fn power_loss_staggered(&mut self, plan: CrashPlan, order: [u64; 3], gap: Duration) {
        for id in 1..=3 {
            self.cluster.drain(id).await;
        }
        for d in &self.disks {
            d.crash_after(0);
        }
        for id in 1..=3 {
            self.cluster.stop(id).await;
        }
        for id in 1..=3u64 {
            let image = self.disk(id).crash_with(plan);
            self.disks[usize::try_from(id - 1).unwrap()] = image;
        }
        for id in order {
            let (log, machine) = parts(
                &self.disks[usize::try_from(id - 1).unwrap()].clone(),
                id,
                false,
            );
            self.cluster.add(id, log, machine).await.unwrap();
            tokio::time::sleep(gap).await;
        }
    }

    /// The node a quorum confirms as leader now, waiting up to `limit`.
    pub async fn confirmed_leader(&self, limit: Duration) -> Option<u64> {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if let Some(l) = self.cluster.leader(Duration::from_millis(200)).await {
                if let Some((raft, _)) = self.cluster.nodes.get(&l) {
                    if raft
                        .ensure_linearizable(openraft10::ReadPolicy::ReadIndex)
                        .await
                        .is_ok()
                    {
                        return Some(l);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    pub fn client(&self) -> Client<LocalTransport> {
        Client::with_transport(self.cluster.addrs(), self.cluster.transport())
    }
}

/// A client of the in-process cluster whose calls a history records.
pub struct Recorded(pub Client<LocalTransport>);

impl Calls for Recorded {
    fn id(&self) -> u64 {
        self.0.id()
    }

    async fn put(&mut self, key: &str, value: &str, deadline: Instant) -> Outcome {
        match self.0.put(key, value, deadline).await {
            Ok(_) => Outcome::Ok(None),
            Err(quorumlog_kv::Error::Failed { .. }) => Outcome::Failed,
            Err(_) => Outcome::Unknown,
        }
    }

    async fn get(&mut self, key: &str, deadline: Instant) -> Outcome {
        match self.0.get(key, deadline).await {
            Ok(read) => Outcome::Ok(read.value),
            Err(_) => Outcome::Failed,
        }
    }
}

/// Deadline of one recorded operation.
pub const OP_DEADLINE: Duration = Duration::from_secs(2);

/// A client loop on `keys` keys until `stop`: puts of unique values and
/// linearizable gets, every one recorded.
pub async fn record_ops(
    client: Client<LocalTransport>,
    c: u64,
    keys: u64,
    stop: Arc<AtomicBool>,
    history: Recorder,
) {
    let mut client = Recorded(client);
    let mut rng = quorumlog_io::SimRng::new(c.wrapping_mul(7919).wrapping_add(1));
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("k{}", rng.below(keys));
        let deadline = Instant::now() + OP_DEADLINE;
        if rng.below(2) == 0 {
            n += 1;
            record_put(&mut client, &history, key, format!("c{c}-{n}"), deadline).await;
        } else {
            record_get(&mut client, &history, key, deadline).await;
        }
    }
}

/// One linearizable read of each key, recorded (a lost acknowledged write
/// shows here).
pub async fn read_every_key(sim: &SimCluster, keys: u64, history: &Recorder) {
    let mut client = Recorded(sim.client());
    for k in 0..keys {
        let deadline = Instant::now() + Duration::from_secs(10);
        record_get(&mut client, history, format!("k{k}"), deadline).await;
    }
}
