//! Nodes in one process over an in-memory network: the end-to-end
//! benchmark (E1: the same cluster persisted by different log stores) and
//! the whole-cluster power-loss test. Each node still has its own log
//! store; only the network is a function call.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use openraft::error::{
    ClientWriteError, InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, Config, Raft};

use crate::machine::KvMachine;
use crate::proto::{Put, PutError, TypeConfig};

/// The in-memory network: each node's Raft by id; a node absent (not
/// started, or shut down) is unreachable.
#[derive(Clone, Default)]
pub struct Router {
    nodes: Arc<RwLock<BTreeMap<u64, Raft<TypeConfig>>>>,
}

impl Router {
    fn get(&self, id: u64) -> Option<Raft<TypeConfig>> {
        self.nodes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned()
    }

    fn set(&self, id: u64, raft: Option<Raft<TypeConfig>>) {
        let mut nodes = self.nodes.write().unwrap_or_else(PoisonError::into_inner);
        match raft {
            Some(r) => nodes.insert(id, r),
            None => nodes.remove(&id),
        };
    }
}

impl RaftNetworkFactory<TypeConfig> for Router {
    type Network = RouterPeer;

    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> RouterPeer {
        RouterPeer {
            target,
            router: self.clone(),
        }
    }
}

/// One node's view of a peer.
pub struct RouterPeer {
    target: u64,
    router: Router,
}

type Rpc<T, E = RaftError<u64>> = Result<T, RPCError<u64, BasicNode, E>>;

impl RouterPeer {
    fn raft<E: std::error::Error>(&self) -> Result<Raft<TypeConfig>, RPCError<u64, BasicNode, E>> {
        self.router.get(self.target).ok_or_else(|| {
            RPCError::Unreachable(Unreachable::new(&std::io::Error::from(
                std::io::ErrorKind::NotConnected,
            )))
        })
    }
}

impl RaftNetwork<TypeConfig> for RouterPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<u64>> {
        let target = self.target;
        self.raft()?
            .append_entries(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>> {
        let target = self.target;
        self.raft()?
            .install_snapshot(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }

    async fn vote(&mut self, rpc: VoteRequest<u64>, _option: RPCOption) -> Rpc<VoteResponse<u64>> {
        let target = self.target;
        self.raft()?
            .vote(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(target, e)))
    }
}

/// Nodes running in this process.
pub struct LocalCluster {
    router: Router,
    /// Each node's Raft and state machine.
    pub nodes: BTreeMap<u64, (Raft<TypeConfig>, KvMachine)>,
}

/// The membership of nodes `ids` (addresses are names: the network is in
/// memory).
pub fn members(ids: &[u64]) -> BTreeMap<u64, BasicNode> {
    ids.iter()
        .map(|id| {
            (
                *id,
                BasicNode {
                    addr: format!("local-{id}"),
                },
            )
        })
        .collect()
}

impl LocalCluster {
    /// Starts nodes from their log stores and state machines; the first
    /// initializes the cluster of all of them if `init`.
    ///
    /// # Errors
    /// openraft's, as text.
    pub async fn start<L>(
        parts: Vec<(u64, L, KvMachine)>,
        config: Arc<Config>,
        init: bool,
    ) -> Result<LocalCluster, String>
    where
        L: RaftLogStorage<TypeConfig>,
    {
        let router = Router::default();
        let ids: Vec<u64> = parts.iter().map(|(id, _, _)| *id).collect();
        let mut nodes = BTreeMap::new();
        for (id, log, machine) in parts {
            let raft = Raft::new(
                id,
                Arc::clone(&config),
                router.clone(),
                log,
                machine.clone(),
            )
            .await
            .map_err(|e| e.to_string())?;
            router.set(id, Some(raft.clone()));
            nodes.insert(id, (raft, machine));
        }
        if init {
            if let Some((raft, _)) = ids.first().and_then(|id| nodes.get(id)) {
                raft.initialize(members(&ids))
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(LocalCluster { router, nodes })
    }

    /// The leader every running node agrees on, waiting up to `limit`.
    pub async fn leader(&self, limit: Duration) -> Option<u64> {
        let t0 = tokio::time::Instant::now();
        while t0.elapsed() < limit {
            let seen: Vec<Option<u64>> = self
                .nodes
                .values()
                .map(|(r, _)| r.metrics().borrow().current_leader)
                .collect();
            if let Some(Some(l)) = seen.first() {
                if seen.iter().all(|x| *x == Some(*l)) {
                    return Some(*l);
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    }

    /// Writes `put` through node `via` (the leader, or a node that
    /// redirects to it); returns the index of its log entry, applied on
    /// the leader when this returns.
    ///
    /// # Errors
    /// `NotLeader` with the leader's id (its "address" is `local-<id>`);
    /// `Failed`.
    pub async fn put(&self, via: u64, put: Put) -> Result<u64, PutError> {
        let Some((raft, _)) = self.nodes.get(&via) else {
            return Err(PutError::NotLeader(None));
        };
        match raft.client_write(put).await {
            Ok(r) => Ok(r.log_id.index),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => Err(
                PutError::NotLeader(f.leader_id.map(|l| (l, format!("local-{l}")))),
            ),
            Err(e) => Err(PutError::Failed(e.to_string())),
        }
    }

    /// Waits until every node applied at least `index` (up to `limit`);
    /// returns whether they did.
    pub async fn applied(&self, index: u64, limit: Duration) -> bool {
        let t0 = tokio::time::Instant::now();
        while t0.elapsed() < limit {
            if self
                .nodes
                .values()
                .all(|(_, m)| m.applied().is_some_and(|a| a >= index))
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    /// Stops every node.
    pub async fn shutdown(self) {
        for (id, (raft, _)) in self.nodes {
            self.router.set(id, None);
            let _ = raft.shutdown().await;
        }
    }
}
