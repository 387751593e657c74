//! One node: its store (formatted on first start), its state machine, its
//! Raft, and a TCP server for Raft RPCs and client requests.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Raft};
use quorumlog_checkpoint::{ClusterId, DirectoryId, Meta, NodeId, SharedFs};
use quorumlog_io::RealFs;
use quorumlog_log::{LogOptions, SyncPolicy};
use quorumlog_openraft::LogStore;
use quorumlog_raft::{Identity, Store, StoreOptions};
use tokio::net::{TcpListener, TcpStream};

use crate::machine::KvMachine;
use crate::network::TcpNetwork;
use crate::proto::{read_frame, write_frame, PutError, Request, Response, Status, TypeConfig};

/// How a node runs.
#[derive(Debug, Clone)]
pub struct NodeArgs {
    /// Its id.
    pub id: u64,
    /// Its data directory.
    pub dir: PathBuf,
    /// Where it listens.
    pub listen: String,
    /// Every member: id and address (itself included).
    pub peers: Vec<(u64, String)>,
    /// Initialize the cluster with `peers` on the first start.
    pub init: bool,
}

/// The store options the nodes use.
pub fn store_options() -> StoreOptions {
    StoreOptions {
        log: LogOptions::default(),
        sync: SyncPolicy::GroupCommit,
    }
}

/// Opens node `id`'s store in `dir` (formatting it if blank); returns it,
/// whether it was fresh, and how long opening took.
///
/// # Errors
/// The store's, as text.
pub fn open_store(
    fs: &SharedFs,
    dir: &std::path::Path,
    id: u64,
) -> Result<(Arc<Store>, bool, u64), String> {
    let t0 = Instant::now();
    let fresh = !dir.join("meta").exists();
    if fresh {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        // A fresh directory id at every format: a node back with an empty
        // disk is not the voter it was.
        let meta = Meta::new(ClusterId(7), NodeId(id), DirectoryId::random());
        Store::format(fs, dir, meta, None, &store_options()).map_err(|e| e.to_string())?;
    }
    // The directory must be this node's of this cluster: another node's,
    // or another cluster's, is refused before anything in it changes.
    let expect = Identity::node(ClusterId(7), NodeId(id));
    let (store, _) = Store::open(fs, dir, &expect, &store_options()).map_err(|e| e.to_string())?;
    let ms = u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok((Arc::new(store), fresh, ms))
}

/// A running node's parts.
#[derive(Clone)]
pub struct Running {
    /// Its id.
    pub id: u64,
    /// Its Raft.
    pub raft: Raft<TypeConfig>,
    /// Its state machine.
    pub machine: KvMachine,
    /// How long opening the store took.
    pub open_ms: u64,
    /// Its data directory's id.
    pub directory: DirectoryId,
}

/// Starts node `id` over `store` with `network`.
///
/// # Errors
/// openraft's or the store's, as text.
pub async fn start<N>(
    id: u64,
    store: Arc<Store>,
    network: N,
    open_ms: u64,
) -> Result<Running, String>
where
    N: openraft::network::RaftNetworkFactory<TypeConfig>,
{
    let directory = store.me().directory_id;
    let log = LogStore::new_bounded(Arc::clone(&store), id).map_err(|e| e.to_string())?;
    let machine = KvMachine::open(store).map_err(|e| e.to_string())?;
    let raft = Raft::new(id, crate::raft_config(), network, log, machine.clone())
        .await
        .map_err(|e| e.to_string())?;
    Ok(Running {
        id,
        raft,
        machine,
        open_ms,
        directory,
    })
}

/// Initializes a new cluster of `peers` (ignored if already initialized).
///
/// # Errors
/// openraft's, as text (other than "already initialized").
pub async fn initialize(raft: &Raft<TypeConfig>, peers: &[(u64, String)]) -> Result<(), String> {
    let members: BTreeMap<u64, BasicNode> = peers
        .iter()
        .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
        .collect();
    match raft.initialize(members).await {
        Ok(()) | Err(RaftError::APIError(_)) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs a node until the process is killed.
///
/// # Errors
/// Opening the store, starting Raft, binding the address.
pub async fn run(args: NodeArgs) -> Result<(), String> {
    let fs: SharedFs = Arc::new(RealFs::new());
    let (store, fresh, open_ms) = open_store(&fs, &args.dir, args.id)?;
    let node = start(args.id, store, TcpNetwork, open_ms).await?;
    if args.init && fresh {
        initialize(&node.raft, &args.peers).await?;
    }
    let driver = node.clone();
    tokio::spawn(async move {
        // The leader drives a reassignment in progress, a step at a time.
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            if let Err(e) = crate::reassign::drive(&driver).await {
                tracing::warn!("reassignment step: {e}");
            }
        }
    });
    let listener = TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("listen on {}: {e}", args.listen))?;
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            continue;
        };
        let _ = conn.set_nodelay(true);
        let node = node.clone();
        tokio::spawn(async move {
            let _ = serve(conn, &node).await;
        });
    }
}

async fn serve(mut conn: TcpStream, node: &Running) -> std::io::Result<()> {
    loop {
        let req: Request = read_frame(&mut conn).await?;
        let resp = answer(node, req).await;
        write_frame(&mut conn, &resp).await?;
    }
}

/// The node's answer to `req`.
pub async fn answer(node: &Running, req: Request) -> Response {
    match req {
        Request::Append(rpc) => Response::Append(node.raft.append_entries(rpc).await),
        Request::Vote(rpc) => Response::Vote(node.raft.vote(rpc).await),
        Request::Snapshot(rpc) => Response::Snapshot(node.raft.install_snapshot(rpc).await),
        Request::Put(put) => Response::Put(match node.raft.client_write(put).await {
            Ok(r) => Ok(r.log_id.index),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => Err(
                PutError::NotLeader(f.leader_id.zip(f.leader_node.map(|n| n.addr))),
            ),
            Err(e) => Err(PutError::Failed(e.to_string())),
        }),
        Request::Get(key) => Response::Get(node.machine.get(&key)),
        Request::Dump => Response::Dump(node.machine.dump()),
        Request::Reassign(target) => Response::Reassign(reassign_request(node, target).await),
        Request::Reassignments => Response::Reassignments(
            crate::reassign::list(node, now_ms())
                .await
                .map(|s| crate::reassign::describe(s.as_ref())),
        ),
        Request::Status => {
            let m = node.raft.metrics().borrow().clone();
            let membership = m.membership_config.membership();
            Response::Status(Status {
                directory: node.directory.0,
                voters: membership.voter_ids().collect(),
                nodes: membership
                    .nodes()
                    .map(|(id, n)| (*id, n.addr.clone()))
                    .collect(),
                id: node.id,
                leader: m.current_leader,
                term: m.current_term,
                applied: m.last_applied.map(|l| l.index),
                last_log: m.last_log_index,
                open_ms: node.open_ms,
                fatal: m.running_state.as_ref().err().map(ToString::to_string),
            })
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A reassignment request: addresses of members come from the membership.
async fn reassign_request(
    node: &Running,
    target: Option<Vec<(u64, Option<String>)>>,
) -> Result<(), String> {
    let target = match target {
        None => None,
        Some(t) => {
            let known: BTreeMap<u64, String> = node
                .raft
                .metrics()
                .borrow()
                .membership_config
                .membership()
                .nodes()
                .map(|(id, n)| (*id, n.addr.clone()))
                .collect();
            let mut out = Vec::new();
            for (id, addr) in t {
                let addr = addr
                    .or_else(|| known.get(&id).cloned())
                    .ok_or_else(|| format!("node {id}: no address (pass --peers {id}=ADDR)"))?;
                out.push((id, addr));
            }
            Some(out)
        }
    };
    crate::reassign::request(node, target, now_ms()).await
}
