//! openraft's network over TCP: one connection per peer, reopened after
//! an error; each RPC is a request frame and its response frame.

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use tokio::net::TcpStream;

use crate::proto::{read_frame, write_frame, Request, Response, TypeConfig};

/// Makes a [`TcpPeer`] per target.
#[derive(Debug, Clone, Default)]
pub struct TcpNetwork;

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpPeer;

    async fn new_client(&mut self, _target: u64, node: &BasicNode) -> TcpPeer {
        TcpPeer {
            addr: node.addr.clone(),
            conn: None,
        }
    }
}

/// The connection to one peer.
#[derive(Debug)]
pub struct TcpPeer {
    addr: String,
    conn: Option<TcpStream>,
}

type Rpc<T, E = RaftError<u64>> = Result<T, RPCError<u64, BasicNode, E>>;

impl TcpPeer {
    /// Sends `req`, returns the answer; an I/O error drops the connection.
    async fn call(&mut self, req: &Request, option: &RPCOption) -> std::io::Result<Response> {
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
        r
    }
}

fn unreachable<E: std::error::Error>(e: &std::io::Error) -> RPCError<u64, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(e))
}

fn unexpected<E: std::error::Error>() -> RPCError<u64, BasicNode, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(
        "unexpected response",
    )))
}

impl RaftNetwork<TypeConfig> for TcpPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<AppendEntriesResponse<u64>> {
        match self.call(&Request::Append(rpc), &option).await {
            Ok(Response::Append(r)) => {
                r.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(0, e)))
            }
            Ok(_) => Err(unexpected()),
            Err(e) => Err(unreachable(&e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Rpc<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>> {
        match self.call(&Request::Snapshot(rpc), &option).await {
            Ok(Response::Snapshot(r)) => {
                r.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(0, e)))
            }
            Ok(_) => Err(unexpected()),
            Err(e) => Err(unreachable(&e)),
        }
    }

    async fn vote(&mut self, rpc: VoteRequest<u64>, option: RPCOption) -> Rpc<VoteResponse<u64>> {
        match self.call(&Request::Vote(rpc), &option).await {
            Ok(Response::Vote(r)) => {
                r.map_err(|e| RPCError::RemoteError(openraft::error::RemoteError::new(0, e)))
            }
            Ok(_) => Err(unexpected()),
            Err(e) => Err(unreachable(&e)),
        }
    }
}
