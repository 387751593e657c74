//! Nodes in one process over an in-memory network (feature `cluster`):
//! the end-to-end benchmark (E1: the same cluster persisted by different
//! log stores), the whole-cluster power-loss test and the fault tests.
//! Each node still has its own log store; only the network is a function
//! call. Client requests take the service's own path ([`replica::answer`]),
//! through [`LocalTransport`] and the same [`crate::client::Client`].
//!
//! Faults: a node stopped (its Raft shut down, unreachable) and started
//! again from its store; links cut between nodes (both directions) and
//! healed. Clients always reach every running node: a leader cut off from
//! the others still hears its clients, which is the case a stale read
//! would come from.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use openraft10::async_runtime::WatchReceiver;
use openraft10::error::{NetworkError, RPCError, StreamingError, Unreachable};
use openraft10::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft10::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft10::storage::RaftLogStorage;
use openraft10::type_config::alias::{SnapshotOf, VoteOf};
use openraft10::{BasicNode, Config};
use quorumlog_raft::DirectoryId;
use tokio::time::Instant;

use crate::client::{CallError, Transport};
use crate::error::{Error, Result};
use crate::machine::{KvMachine, KvSnapshot};
use crate::net::{send_snapshot, Call};
use crate::replica::{self, KvRaft, Running};
use crate::wire::{GroupRequest, NodeRequest, Put, Refusal, Request, Response, TypeConfig};

/// A running node's door: calls into its Raft hold it shared; stopping the
/// node takes it whole (waiting for the calls in flight) and shuts it, so
/// nothing calls a Raft that is shutting down (openraft 0.10.0-alpha.37
/// panics when two calls race a stopped core).
type Gate = Arc<tokio::sync::RwLock<bool>>;

/// A call into a node, holding its gate open.
type Entered = (Running, tokio::sync::OwnedRwLockReadGuard<bool>);

#[derive(Default)]
struct Net {
    nodes: BTreeMap<u64, (Running, Gate)>,
    /// Cut links, each as (lower id, higher id).
    cut: BTreeSet<(u64, u64)>,
}

/// The in-memory network: each running node by id, and the cut links.
#[derive(Clone, Default)]
pub struct Router {
    net: Arc<RwLock<Net>>,
}

impl Router {
    fn node(&self, id: u64) -> Option<(Running, Gate)> {
        self.net
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .nodes
            .get(&id)
            .cloned()
    }

    /// Node `id`, its gate held open (`None`: down or stopping).
    async fn enter(&self, id: u64) -> Option<Entered> {
        let (node, gate) = self.node(id)?;
        let open = gate.read_owned().await;
        (*open).then_some((node, open))
    }

    /// Whether `from` reaches `to` (not cut off, running).
    fn reaches(&self, from: u64, to: u64) -> bool {
        let net = self.net.read().unwrap_or_else(PoisonError::into_inner);
        !net.cut.contains(&(from.min(to), from.max(to))) && net.nodes.contains_key(&to)
    }

    /// Node `to` as node `from` reaches it, its gate held open (`None`:
    /// down, stopping or cut off).
    async fn peer(&self, from: u64, to: u64) -> Option<Entered> {
        if !self.reaches(from, to) {
            return None;
        }
        self.enter(to).await
    }

    fn insert(&self, id: u64, node: Running) {
        let gate = Arc::new(tokio::sync::RwLock::new(true));
        self.net
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .nodes
            .insert(id, (node, gate));
    }

    /// Takes node `id` off the network once the calls in flight into it
    /// ended; later calls find it down.
    async fn remove(&self, id: u64) {
        let gate = self
            .net
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .nodes
            .remove(&id)
            .map(|(_, g)| g);
        if let Some(g) = gate {
            *g.write().await = false;
        }
    }
}

/// One node's network: its id and the router.
#[derive(Clone)]
pub struct NodeNetwork {
    me: u64,
    router: Router,
}

impl RaftNetworkFactory<TypeConfig> for NodeNetwork {
    type Network = RouterPeer;

    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> RouterPeer {
        RouterPeer {
            me: self.me,
            target,
            router: self.router.clone(),
        }
    }
}

/// One node's view of a peer.
pub struct RouterPeer {
    me: u64,
    target: u64,
    router: Router,
}

type Rpc<T> = Result<T, RPCError<TypeConfig>>;

/// The target's own error, as a failed call.
fn remote(target: u64, e: &impl std::fmt::Display) -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(format!(
        "node {target}: {e}"
    ))))
}

fn down() -> std::io::Error {
    std::io::Error::from(std::io::ErrorKind::NotConnected)
}

impl RouterPeer {
    async fn target(&self) -> Result<Entered, RPCError<TypeConfig>> {
        self.router
            .peer(self.me, self.target)
            .await
            .ok_or_else(|| RPCError::Unreachable(Unreachable::new(&down())))
    }

    /// An answer that crosses a link cut meanwhile is lost.
    fn back<T>(&self, r: T) -> Result<T, RPCError<TypeConfig>> {
        if self.router.reaches(self.me, self.target) {
            Ok(r)
        } else {
            Err(RPCError::Unreachable(Unreachable::new(&down())))
        }
    }
}

impl Call for RouterPeer {
    /// The target's answer, as the TCP server gives it (a snapshot chunk
    /// goes through [`replica::answer`]); lost if the link is cut meanwhile.
    async fn call(&mut self, req: GroupRequest, _option: &RPCOption) -> std::io::Result<Response> {
        let (node, open) = self
            .router
            .peer(self.me, self.target)
            .await
            .ok_or_else(down)?;
        let bytes = bincode::serialize(&req).map_err(std::io::Error::other)?;
        let req: GroupRequest = bincode::deserialize(&bytes).map_err(std::io::Error::other)?;
        let r = replica::answer(&node, req).await;
        drop(open);
        if self.router.reaches(self.me, self.target) {
            Ok(r)
        } else {
            Err(down())
        }
    }
}

impl RaftNetworkV2<TypeConfig> for RouterPeer {
    type SnapshotData = KvSnapshot;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<TypeConfig>> {
        let target = self.target;
        let (node, open) = self.target().await?;
        let r = node
            .raft
            .append_entries(rpc)
            .await
            .map_err(|e| remote(target, &e))?;
        drop(open);
        self.back(r)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<VoteResponse<TypeConfig>> {
        let target = self.target;
        let (node, open) = self.target().await?;
        let r = node.raft.vote(rpc).await.map_err(|e| remote(target, &e))?;
        drop(open);
        self.back(r)
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Rpc<VoteResponse<TypeConfig>> {
        let target = self.target;
        let (node, open) = self.target().await?;
        let r = node
            .raft
            .pre_vote(rpc)
            .await
            .map_err(|e| remote(target, &e))?;
        drop(open);
        self.back(r)
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, KvSnapshot>,
        _cancel: impl std::future::Future<Output = openraft10::error::ReplicationClosed>
            + Send
            + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        send_snapshot(self, vote, &snapshot, &option).await
    }
}

/// A node's address on the in-memory network.
pub fn addr(id: u64) -> String {
    format!("local-{id}")
}

fn id_of(addr: &str) -> Option<u64> {
    addr.strip_prefix("local-")?.parse().ok()
}

/// The clients' transport: requests go to [`replica::answer`] of the node
/// named by the address (`local-<id>`), if it runs.
#[derive(Clone)]
pub struct LocalTransport {
    router: Router,
}

impl Transport for LocalTransport {
    async fn call(
        &mut self,
        addr: &str,
        req: &Request,
        deadline: Instant,
    ) -> Result<Response, CallError> {
        let entered = match id_of(addr) {
            Some(id) => self.router.enter(id).await,
            None => None,
        };
        let Some((node, _open)) = entered else {
            return Err(CallError {
                sent: false,
                error: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
            });
        };
        // The request is a copy, as if it had crossed a wire.
        let bytes = bincode::serialize(req).map_err(|e| CallError {
            sent: false,
            error: std::io::Error::other(e),
        })?;
        let req: Request = bincode::deserialize(&bytes).map_err(|e| CallError {
            sent: false,
            error: std::io::Error::other(e),
        })?;
        // One group per node here: the partition is not looked at.
        let answer = async {
            match req {
                Request::Group { body, .. } => replica::answer(&node, body).await,
                Request::Node(NodeRequest::Status) => {
                    replica::answer(&node, GroupRequest::Status).await
                }
                Request::Node(_) => Response::NotHosted(0),
            }
        };
        tokio::time::timeout_at(deadline, answer)
            .await
            .map_err(|_| CallError {
                sent: true,
                error: std::io::Error::from(std::io::ErrorKind::TimedOut),
            })
    }
}

/// Nodes running in this process.
pub struct LocalCluster {
    router: Router,
    config: Arc<Config>,
    /// Each node's Raft and state machine.
    pub nodes: BTreeMap<u64, (KvRaft, KvMachine)>,
}

/// The membership of nodes `ids` (addresses are [`addr`]s).
pub fn members(ids: &[u64]) -> BTreeMap<u64, BasicNode> {
    ids.iter()
        .map(|id| (*id, BasicNode { addr: addr(*id) }))
        .collect()
}

impl LocalCluster {
    /// Starts nodes from their log stores and state machines; the first
    /// initializes the cluster of all of them if `init`.
    ///
    /// # Errors
    /// openraft's.
    pub async fn start<L>(
        parts: Vec<(u64, L, KvMachine)>,
        config: Arc<Config>,
        init: bool,
    ) -> Result<LocalCluster>
    where
        L: RaftLogStorage<TypeConfig>,
    {
        let mut cluster = LocalCluster {
            router: Router::default(),
            config,
            nodes: BTreeMap::new(),
        };
        let ids: Vec<u64> = parts.iter().map(|(id, _, _)| *id).collect();
        for (id, log, machine) in parts {
            cluster.add(id, log, machine).await?;
        }
        if init {
            if let Some((raft, _)) = ids.first().and_then(|id| cluster.nodes.get(id)) {
                raft.initialize(members(&ids)).await.map_err(Error::raft)?;
            }
        }
        Ok(cluster)
    }

    /// Starts node `id` (again) from its log store and state machine.
    ///
    /// # Errors
    /// openraft's.
    pub async fn add<L>(&mut self, id: u64, log: L, machine: KvMachine) -> Result<()>
    where
        L: RaftLogStorage<TypeConfig>,
    {
        let network = NodeNetwork {
            me: id,
            router: self.router.clone(),
        };
        let running = replica::start_with(
            id,
            log,
            machine,
            network,
            Arc::clone(&self.config),
            0,
            DirectoryId(u128::from(id)),
        )
        .await?;
        self.nodes
            .insert(id, (running.raft.clone(), running.machine.clone()));
        // A node whose Raft stops on its own (a fatal error) is reported:
        // no fault the tests inject should stop one.
        let mut metrics = running.raft.metrics();
        tokio::spawn(async move {
            while metrics.changed().await.is_ok() {
                let stopped = metrics.borrow_watched().running_state.clone();
                if let Err(e) = stopped {
                    if !matches!(e, openraft10::error::Fatal::Stopped) {
                        eprintln!("node {id}: Raft stopped: {e}");
                    }
                    break;
                }
            }
        });
        self.router.insert(id, running);
        Ok(())
    }

    /// Takes node `id` off the network, once the calls in flight into it
    /// ended; its Raft runs on, reached by nobody. A test cutting a node's
    /// power drains it first, so no caller is inside openraft when the
    /// disk's failure stops its Raft (openraft 0.10.0-alpha.37 panics when
    /// two calls race a stopped core).
    pub async fn drain(&self, id: u64) {
        self.router.remove(id).await;
    }

    /// Stops node `id` (as a crash: nothing more reaches its store through
    /// Raft; the caller drops or crashes the store).
    pub async fn stop(&mut self, id: u64) {
        self.router.remove(id).await;
        if let Some((raft, _)) = self.nodes.remove(&id) {
            let _ = raft.shutdown().await;
        }
    }

    /// Cuts the links between node `id` and every other node (clients
    /// still reach it).
    pub fn isolate(&self, id: u64) {
        let mut net = self
            .router
            .net
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let others: Vec<u64> = self.nodes.keys().copied().filter(|o| *o != id).collect();
        for o in others {
            net.cut.insert((id.min(o), id.max(o)));
        }
    }

    /// Restores every link.
    pub fn heal(&self) {
        self.router
            .net
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .cut
            .clear();
    }

    /// The transport clients of this cluster use.
    pub fn transport(&self) -> LocalTransport {
        LocalTransport {
            router: self.router.clone(),
        }
    }

    /// Every node's address.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.keys().map(|id| addr(*id)).collect()
    }

    /// The leader every running node agrees on, waiting up to `limit`.
    pub async fn leader(&self, limit: Duration) -> Option<u64> {
        let t0 = tokio::time::Instant::now();
        while t0.elapsed() < limit {
            let seen: Vec<Option<u64>> = self
                .nodes
                .values()
                .map(|(r, _)| r.metrics().borrow_watched().current_leader)
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

    /// Writes `put` through node `via` (no redirect followed); returns the
    /// index of the entry that applied it, applied on the leader when this
    /// returns.
    ///
    /// # Errors
    /// `NotLeader` (with the leader's id and [`addr`]); `Failed`.
    pub async fn put(&self, via: u64, put: Put) -> Result<u64, Refusal> {
        let Some((node, _open)) = self.router.enter(via).await else {
            return Err(Refusal::NotLeader { leader: None });
        };
        replica::write(&node, crate::wire::Command::Put(put)).await
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
    pub async fn shutdown(mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            self.stop(id).await;
        }
    }
}

/// The group a node of the in-process cluster keeps its Raft log in.
pub const GROUP: u64 = 1;

/// Opens node `node`'s data directory of cluster `cluster` in `dir`, a
/// node with one group ([`GROUP`], openraft's first index 0), formatting
/// it when `open` finds no data directory there (with a new directory
/// id). Returns the node (keep it: it runs the checkpoints), the group,
/// whether it was formatted now, and how long opening took (ms).
///
/// # Errors
/// `Store`: another node's or cluster's directory (refused before
/// anything in it changes), a damaged one, an I/O failure.
pub fn open_store(
    fs: &quorumlog_raft::SharedFs,
    dir: &std::path::Path,
    cluster: u128,
    node: u64,
) -> Result<(
    Arc<quorumlog_raft::Node>,
    Arc<quorumlog_raft::Group>,
    bool,
    u64,
)> {
    use quorumlog_raft::{ClusterId, Identity, Meta, Node, NodeId, NodeOptions, Offset};
    let t0 = std::time::Instant::now();
    let expect = Identity::node(ClusterId(cluster), NodeId(node));
    let options = NodeOptions::default();
    let (n, fresh) = match Node::open(fs, dir, &expect, &options) {
        Ok((n, _)) => (n, false),
        Err(e) if e.is_not_formatted() => {
            fs.create_dir_all(dir)
                .map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
            let meta = Meta::new(ClusterId(cluster), NodeId(node), DirectoryId::random());
            Node::format(fs, dir, meta, &options)?;
            let (n, _) = Node::open(fs, dir, &expect, &options)?;
            n.create_group(GROUP, Offset(0))?;
            (n, true)
        }
        Err(e) => return Err(e.into()),
    };
    let group = Arc::new(n.group(GROUP)?);
    let ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok((Arc::new(n), group, fresh, ms))
}
