//! A first end-to-end probe of openraft 0.10 on quorumlog (issue 23's E1
//! is in `compare --workloads E1`): three nodes in one process (calls as the
//! network), `CLIENTS` concurrent clients each writing 64-byte values
//! through the leader for `SECONDS`, interleaved rounds of
//!
//! - `quorumlog`: each node's log a group of its own node directory's
//!   shared log (`quorumlog_openraft10::LogStore<_>`),
//! - `memory`: openraft's own in-memory log store (the ceiling),
//!
//! both with openraft's in-memory state machine, so only the log differs.
//!
//! `cargo run --release -p quorumlog-openraft10 --example e1_probe [SECONDS] [CLIENTS] [ROUNDS]`

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft10::storage::RaftLogStorage;
use openraft10::{Config, Raft};
use openraft_memstore::{
    new_mem_store, ClientRequest, IntoMemClientRequest, MemStateMachine, TypeConfig,
};
use quorumlog_io::RealFs;
use quorumlog_openraft10::LogStore;
use quorumlog_raft::{
    ClusterId, DirectoryId, Group, Identity, Meta, Node, NodeId, NodeOptions, Offset, SharedFs,
};

type C = TypeConfig;
type R = Raft<C, Arc<MemStateMachine>>;
type Error = Box<dyn std::error::Error + Send + Sync>;

/// The adapter's in-process network (one group: 0).
type Router = quorumlog_openraft10::LocalRouter<C, Arc<MemStateMachine>>;

fn config() -> Result<Arc<Config>, Error> {
    Ok(quorumlog_openraft10::raft_config(Config {
        heartbeat_interval: 100,
        election_timeout_min: 1000,
        election_timeout_max: 2000,
        ..Config::default()
    })?)
}

async fn start_one<LS: RaftLogStorage<C>>(router: &Router, id: u64, log: LS) -> Result<(), Error> {
    let (_, sm) = new_mem_store();
    let raft = Raft::new(id, config()?, router.factory(0), log, sm).await?;
    router.insert(id, 0, raft);
    Ok(())
}

/// Initialises the cluster and returns its leader once it takes writes.
async fn elect(router: &Router) -> Result<R, Error> {
    let node =
        |id: u64| -> Result<R, Error> { router.get(id, 0).ok_or_else(|| "no such node".into()) };
    let first = node(1)?;
    first
        .initialize(std::collections::BTreeSet::from([1u64, 2, 3]))
        .await?;
    let leader_id = first
        .wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await?
        .current_leader
        .ok_or("no leader")?;
    let leader = node(leader_id)?;
    leader
        .wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.last_applied.is_some(), "its first entry applied")
        .await?;
    // Its lease holds once a quorum acknowledged: a few tries at most.
    while leader
        .client_write(ClientRequest::make_request("warm", 0))
        .await
        .is_err()
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(leader)
}

/// Writes for `seconds` with `clients` clients; acknowledged writes/s.
async fn measure(router: &Router, seconds: f64, clients: usize) -> Result<f64, Error> {
    let leader = elect(router).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (leader, stop, acked) = (leader.clone(), Arc::clone(&stop), Arc::clone(&acked));
            tokio::spawn(async move {
                let mut n = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut req = ClientRequest::make_request(format!("c{c}"), n);
                    req.status = "v".repeat(64);
                    if leader.client_write(req).await.is_ok() {
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    let done = acked.load(Ordering::Relaxed);
    let elapsed = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    for r in router.all() {
        r.shutdown().await?;
    }
    #[allow(clippy::cast_precision_loss, reason = "a rate for display")]
    Ok(done as f64 / elapsed)
}

async fn quorumlog_round(seconds: f64, clients: usize) -> Result<f64, Error> {
    let tmp = tempfile::tempdir()?;
    let fs: SharedFs = Arc::new(RealFs::new());
    let router = Router::default();
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let dir = tmp.path().join(format!("n{id}"));
        fs.create_dir_all(&dir)?;
        let meta = Meta::new(ClusterId(1), NodeId(id), DirectoryId(u128::from(id) + 1));
        let options = NodeOptions::default();
        Node::format(&fs, &dir, meta, &options)?;
        let (node, _) = Node::open(&fs, &dir, &Identity::of(&meta), &options)?;
        node.create_group(1, Offset(0))?;
        let group: Arc<Group> = Arc::new(node.group(1)?);
        start_one(&router, id, LogStore::<C>::new(group, id)?).await?;
        nodes.push(node);
    }
    let rate = measure(&router, seconds, clients).await?;
    drop(router);
    for n in nodes {
        n.close()?;
    }
    Ok(rate)
}

async fn memory_round(seconds: f64, clients: usize) -> Result<f64, Error> {
    let router = Router::default();
    for id in 1..=3u64 {
        let (log, _) = new_mem_store();
        start_one(&router, id, log).await?;
    }
    measure(&router, seconds, clients).await
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let seconds: f64 = args.get(1).map_or(Ok(3.0), |a| a.parse())?;
    let clients: usize = args.get(2).map_or(Ok(64), |a| a.parse())?;
    let rounds: usize = args.get(3).map_or(Ok(2), |a| a.parse())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let (mut q, mut m) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            // Interleaved, the order alternating round by round.
            if round % 2 == 0 {
                q.push(quorumlog_round(seconds, clients).await?);
                m.push(memory_round(seconds, clients).await?);
            } else {
                m.push(memory_round(seconds, clients).await?);
                q.push(quorumlog_round(seconds, clients).await?);
            }
            if let (Some(a), Some(b)) = (q.last(), m.last()) {
                println!("round {round}: quorumlog {a:.0} writes/s, memory {b:.0} writes/s");
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        let (qm, mm) = (median(&mut q), median(&mut m));
        println!(
            "median: quorumlog {qm:.0} writes/s, memory {mm:.0} writes/s: quorumlog / memory = {:.2}x ({clients} clients, 64 B values)",
            qm / mm
        );
        Ok::<(), Error>(())
    })
}
