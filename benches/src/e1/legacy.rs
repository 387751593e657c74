//! E1's reference: the same three-node cluster on openraft 0.9 with
//! quorumlog's 0.9 adapter (`quorumlog-openraft`, whose `append` waits for
//! each round in turn, as 0.9's `RaftCore` does), and a small in-memory
//! state machine (keys and values; snapshots in memory). The network is a
//! call into the target's Raft.

#![allow(
    clippy::result_large_err,
    reason = "openraft 0.9's storage traits return its `StorageError`"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StoredMembership,
};
use quorumlog_checkpoint::SharedFs;
use quorumlog_io::RealFs;
use quorumlog_openraft::LogStore;
use serde::{Deserialize, Serialize};

use super::{E1Result, Limit};
use crate::systems::BenchError;

/// A write: `key = value`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Put09 {
    key: String,
    value: String,
}

impl std::fmt::Display for Put09 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.key)
    }
}

openraft::declare_raft_types!(
    /// The reference cluster's types (openraft 0.9).
    pub Config09:
        D = Put09,
        R = (),
);

type Raft09 = openraft::Raft<Config09>;

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct State {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    data: BTreeMap<String, String>,
}

/// The latest snapshot, in memory.
type Held = Option<(SnapshotMeta<u64, BasicNode>, Vec<u8>)>;

/// The in-memory state machine (clones share it).
#[derive(Debug, Clone, Default)]
struct Machine {
    state: Arc<Mutex<State>>,
    snapshot: Arc<Mutex<Held>>,
}

fn sm_err(e: &dyn std::error::Error) -> StorageError<u64> {
    openraft::StorageIOError::write_state_machine(openraft::AnyError::error(e.to_string())).into()
}

impl Machine {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl RaftSnapshotBuilder<Config09> for Machine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<Config09>, StorageError<u64>> {
        let s = self.state().clone();
        let data = bincode::serialize(&s).map_err(|e| sm_err(&e))?;
        let meta = SnapshotMeta {
            last_log_id: s.last_applied,
            last_membership: s.membership.clone(),
            snapshot_id: format!("{}", s.last_applied.map_or(0, |l| l.index)),
        };
        *self.snapshot.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((meta.clone(), data.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<Config09> for Machine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        let s = self.state();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<Config09>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut s = self.state();
        let mut out = Vec::new();
        for e in entries {
            s.last_applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(p) => {
                    s.data.insert(p.key, p.value);
                }
                EntryPayload::Membership(m) => {
                    s.membership = StoredMembership::new(Some(e.log_id), m);
                }
            }
            out.push(());
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let data = snapshot.into_inner();
        *self.state() = bincode::deserialize(&data).map_err(|e| sm_err(&e))?;
        *self.snapshot.lock().unwrap_or_else(PoisonError::into_inner) = Some((meta.clone(), data));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<Config09>>, StorageError<u64>> {
        Ok(self
            .snapshot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .map(|(meta, data)| Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(data)),
            }))
    }
}

/// Every Raft by node id.
#[derive(Clone, Default)]
struct Router(Arc<RwLock<BTreeMap<u64, Raft09>>>);

impl Router {
    fn get(&self, id: u64) -> Option<Raft09> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned()
    }
}

struct Peer {
    router: Router,
    target: u64,
}

type Rpc<T, E = RaftError<u64>> = Result<T, RPCError<u64, BasicNode, E>>;

impl Peer {
    fn raft<E: std::error::Error>(&self) -> Result<Raft09, RPCError<u64, BasicNode, E>> {
        self.router.get(self.target).ok_or_else(|| {
            RPCError::Unreachable(Unreachable::new(&std::io::Error::from(
                std::io::ErrorKind::NotConnected,
            )))
        })
    }
}

impl RaftNetworkFactory<Config09> for Router {
    type Network = Peer;

    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> Peer {
        Peer {
            router: self.clone(),
            target,
        }
    }
}

impl RaftNetwork<Config09> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<Config09>,
        _option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<u64>> {
        let t = self.target;
        self.raft()?
            .append_entries(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(t, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<Config09>,
        _option: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>> {
        let t = self.target;
        self.raft()?
            .install_snapshot(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(t, e)))
    }

    async fn vote(&mut self, rpc: VoteRequest<u64>, _option: RPCOption) -> Rpc<VoteResponse<u64>> {
        let t = self.target;
        self.raft()?
            .vote(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(t, e)))
    }
}

fn config() -> Result<Arc<openraft::Config>, BenchError> {
    let c = openraft::Config {
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(quorumlog_kv::SNAPSHOT_EVERY),
        max_in_snapshot_log_to_keep: 1_000,
        max_payload_entries: 1_000,
        ..Default::default()
    };
    Ok(Arc::new(
        c.validate().map_err(|e| BenchError::from(e.to_string()))?,
    ))
}

async fn start(dir: &Path) -> Result<(Router, u64), BenchError> {
    let fs: SharedFs = Arc::new(RealFs::new());
    let router = Router::default();
    for id in 1..=3u64 {
        let d = dir.join(format!("node-{id}"));
        std::fs::create_dir_all(&d)?;
        // A one-group node; the group keeps it maintained.
        let (_node, store, _, _) = quorumlog_kv::cluster::open_store(&fs, &d, 1, id)
            .map_err(|e| BenchError::from(e.to_string()))?;
        let log = LogStore::<Config09>::new_bounded(store, id)
            .map_err(|e| BenchError::from(e.to_string()))?;
        let raft = Raft09::new(id, config()?, router.clone(), log, Machine::default())
            .await
            .map_err(|e| BenchError::from(e.to_string()))?;
        router
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, raft);
    }
    let first = router.get(1).ok_or_else(|| BenchError::from("no node 1"))?;
    let members: BTreeSet<u64> = (1..=3).collect();
    first
        .initialize(members)
        .await
        .map_err(|e| BenchError::from(e.to_string()))?;
    let leader = first
        .wait(Some(Duration::from_secs(10)))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .map_err(|e| BenchError::from(e.to_string()))?
        .current_leader
        .ok_or_else(|| BenchError::from("no leader"))?;
    Ok((router, leader))
}

/// E1 on openraft 0.9 (see the module documentation).
///
/// # Errors
/// The cluster could not start or elect a leader.
pub fn run(
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
        let (router, leader_id) = start(dir).await?;
        let leader = router
            .get(leader_id)
            .ok_or_else(|| BenchError::from("no leader"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let value = "v".repeat(value_bytes);
        let tasks: Vec<_> = (0..clients)
            .map(|c| {
                let (leader, stop, acked, value) = (
                    leader.clone(),
                    Arc::clone(&stop),
                    Arc::clone(&acked),
                    value.clone(),
                );
                tokio::spawn(async move {
                    let mut lat = Vec::new();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let put = Put09 {
                            key: format!("c{c}-{n}"),
                            value: value.clone(),
                        };
                        let t0 = Instant::now();
                        if leader.client_write(put).await.is_ok() {
                            lat.push(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
                            acked.fetch_add(1, Ordering::Relaxed);
                            n += 1;
                        }
                    }
                    lat
                })
            })
            .collect();
        let (result, writing) = super::measure(limit, &acked, &stop, tasks).await;
        let rafts: Vec<Raft09> = router
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for r in rafts {
            let _ = r.shutdown().await;
        }
        Ok((result, writing))
    })
}
