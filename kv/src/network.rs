//! openraft's network over TCP: one connection per peer, reopened after
//! an error; each RPC is a request frame and its response frame. A
//! snapshot goes chunk by chunk ([`send_snapshot`]).

use std::future::Future;
use std::sync::Arc;

use openraft10::error::{NetworkError, RPCError, StreamingError, Unreachable};
use openraft10::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft10::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft10::type_config::alias::{SnapshotOf, VoteOf};
use openraft10::BasicNode;
use tokio::net::TcpStream;

use crate::machine::KvSnapshot;
use crate::parts::throttle::Throttle;
use crate::proto::{
    read_frame, write_frame, Request, Response, SnapshotChunk, SnapshotStep, TypeConfig,
};

/// Bytes of a snapshot per request.
pub const SNAPSHOT_CHUNK: usize = 1 << 20;

/// Makes a [`TcpPeer`] per target.
#[derive(Debug, Clone, Default)]
pub struct TcpNetwork;

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpPeer;

    async fn new_client(&mut self, _target: u64, node: &BasicNode) -> TcpPeer {
        TcpPeer {
            addr: node.addr.clone(),
            conn: None,
            route: None,
        }
    }
}

/// Makes a [`TcpPeer`] per target for one partition's Raft (the
/// partitioned service): its requests are tagged with the partition, and
/// those to a replica being added pass the node's reassignment throttle.
#[derive(Debug, Clone)]
pub struct PartitionNetwork {
    /// The partition.
    pub partition: u32,
    /// The node's throttle.
    pub throttle: Arc<Throttle>,
}

impl RaftNetworkFactory<TypeConfig> for PartitionNetwork {
    type Network = TcpPeer;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> TcpPeer {
        TcpPeer {
            addr: node.addr.clone(),
            conn: None,
            route: Some(Route {
                partition: self.partition,
                target,
                throttle: Arc::clone(&self.throttle),
            }),
        }
    }
}

#[derive(Debug)]
struct Route {
    partition: u32,
    target: u64,
    throttle: Arc<Throttle>,
}

/// The connection to one peer.
#[derive(Debug)]
pub struct TcpPeer {
    addr: String,
    conn: Option<TcpStream>,
    route: Option<Route>,
}

type Rpc<T> = Result<T, RPCError<TypeConfig>>;

/// A peer that answers requests: what [`send_snapshot`] sends through.
pub trait Call {
    /// Sends `req`, returns the answer.
    fn call(
        &mut self,
        req: Request,
        option: &RPCOption,
    ) -> impl Future<Output = std::io::Result<Response>> + Send;
}

impl Call for TcpPeer {
    /// An I/O error drops the connection. A partition's request is tagged
    /// with it; one to a replica being added first takes its bytes from
    /// the node's throttle (a heartbeat too: it is that replica's traffic).
    async fn call(&mut self, req: Request, option: &RPCOption) -> std::io::Result<Response> {
        let req = match &self.route {
            None => req,
            Some(route) => {
                if route.throttle.applies(route.partition, route.target) {
                    let bytes = bincode::serialized_size(&req).unwrap_or(0);
                    route.throttle.take(bytes).await;
                }
                Request::Partition {
                    partition: route.partition,
                    request: Box::new(req),
                }
            }
        };
        let req = &req;
        let ttl = option.hard_ttl();
        let r = tokio::time::timeout(ttl, async {
            if self.conn.is_none() {
                let s = TcpStream::connect(&self.addr).await?;
                s.set_nodelay(true)?;
                self.conn = Some(s);
            }
            let Some(s) = self.conn.as_mut() else {
                return Err(std::io::Error::other("no connection"));
            };
            write_frame(s, req).await?;
            read_frame(s).await
        })
        .await
        .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut)));
        if r.is_err() {
            self.conn = None;
        }
        match r {
            Ok(Response::NotHosted(p)) => Err(std::io::Error::other(format!(
                "{} does not host partition {p}",
                self.addr
            ))),
            r => r,
        }
    }
}

fn unreachable(e: &std::io::Error) -> RPCError<TypeConfig> {
    RPCError::Unreachable(Unreachable::new(e))
}

fn unexpected() -> RPCError<TypeConfig> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(
        "unexpected response",
    )))
}

/// Sends `snapshot` to `peer`, chunk by chunk
/// from where the follower asks: the first request carries no bytes and
/// learns where the follower's durable copy ends; the last makes it verify
/// the file and install it.
///
/// # Errors
/// A call that fails or a follower's refusal (the leader starts again
/// later); the leader's snapshot file gone (a newer one replaced it).
pub async fn send_snapshot<P: Call>(
    peer: &mut P,
    vote: VoteOf<TypeConfig>,
    snapshot: &SnapshotOf<TypeConfig, KvSnapshot>,
    option: &RPCOption,
) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
    let size = snapshot.snapshot.size();
    let mut position = 0;
    let mut bytes = Vec::new();
    loop {
        let req = Request::Snapshot(SnapshotChunk {
            vote,
            meta: snapshot.meta.clone(),
            size,
            position,
            bytes: std::mem::take(&mut bytes),
        });
        match peer.call(req, option).await {
            Ok(Response::Snapshot(Ok(SnapshotStep::Installed(r)))) => return Ok(r),
            Ok(Response::Snapshot(Ok(SnapshotStep::Next(at)))) => {
                position = at;
                bytes = snapshot
                    .snapshot
                    .read_chunk(at, SNAPSHOT_CHUNK)
                    .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?;
                if bytes.is_empty() {
                    return Err(StreamingError::Network(NetworkError::new(
                        &std::io::Error::other("the snapshot file ended before its size"),
                    )));
                }
            }
            Ok(Response::Snapshot(Err(refused))) => {
                return Err(StreamingError::Network(NetworkError::new(
                    &std::io::Error::other(refused),
                )))
            }
            Ok(_) => {
                return Err(StreamingError::Network(NetworkError::new(
                    &std::io::Error::other("unexpected response"),
                )))
            }
            Err(e) => return Err(StreamingError::Unreachable(Unreachable::new(&e))),
        }
    }
}

impl RaftNetworkV2<TypeConfig> for TcpPeer {
    type SnapshotData = KvSnapshot;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<TypeConfig>> {
        match self.call(Request::Append(rpc), &option).await {
            Ok(Response::Append(r)) => r.map_err(|e| RPCError::Network(NetworkError::new(&e))),
            Ok(_) => Err(unexpected()),
            Err(e) => Err(unreachable(&e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<VoteResponse<TypeConfig>> {
        match self.call(Request::Vote(rpc), &option).await {
            Ok(Response::Vote(r)) => r.map_err(|e| RPCError::Network(NetworkError::new(&e))),
            Ok(_) => Err(unexpected()),
            Err(e) => Err(unreachable(&e)),
        }
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<VoteResponse<TypeConfig>> {
        match self.call(Request::PreVote(rpc), &option).await {
            Ok(Response::Vote(r)) => r.map_err(|e| RPCError::Network(NetworkError::new(&e))),
            Ok(_) => Err(unexpected()),
            Err(e) => Err(unreachable(&e)),
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<TransferLeaderResponse<TypeConfig>> {
        match self.call(Request::TransferLeader(req), &option).await {
            Ok(Response::TransferLeader(r)) => {
                r.map_err(|e| RPCError::Network(NetworkError::new(&std::io::Error::other(e))))
            }
            Ok(_) => Err(unexpected()),
            Err(e) => Err(unreachable(&e)),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: VoteOf<TypeConfig>,
        snapshot: SnapshotOf<TypeConfig, KvSnapshot>,
        _cancel: impl Future<Output = openraft10::error::ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        send_snapshot(self, vote, &snapshot, &option).await
    }
}
