//! A node of the partitioned service: one process, one data directory (a
//! `quorumlog_raft::Node`: one shared log, one group commit), a Raft per
//! partition it hosts and one for the controller, and a TCP server that
//! routes each request to its partition.
//!
//! On the first start with `init`, the node creates the groups of the
//! partitions the placement gives it and of the controller; the first
//! replica of each partition initializes it, node `min(peers)` the
//! controller, and once every node answers it writes the cluster's
//! creation (nodes, directories, placement) to the controller. Later
//! starts run a Raft for every group in the directory. A node asked to
//! host a partition ([`Host::host`]) creates its group empty: the
//! partition's leader fills it (entries, or a snapshot).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use openraft10::async_runtime::WatchReceiver;
use quorumlog_openraft10::{LogStore, COMMIT_PERSIST_EVERY};
use quorumlog_raft::{
    ClusterId, DirectoryId, Identity, Meta, Node, NodeId, NodeOptions, Offset, RealFs, SharedFs,
};
use tokio::net::{TcpListener, TcpStream};

use crate::error::{Error, Result};
use crate::machine::KvMachine;
use crate::net::throttle::Throttle;
use crate::net::{read_any, write_answers, Answer, Frame, PartitionNetwork, Router};
use crate::replica::{self, Running};
use crate::server::{group_id, partition_of_group, placement, CONTROLLER, CONTROLLER_GROUP};
use crate::wire::admin::{AlterError, Control};
use crate::wire::{Command, GroupRequest, NodeRequest, Read, Refusal, Reply, Request, Response};

/// How a node of the partitioned service runs.
#[derive(Debug, Clone)]
pub struct HostArgs {
    /// Its id.
    pub id: u64,
    /// The cluster's id (checked against the data directory's).
    pub cluster: u128,
    /// Its data directory (formatted if blank or absent).
    pub dir: PathBuf,
    /// Where it listens.
    pub listen: String,
    /// Every node: id and address (itself included).
    pub peers: Vec<(u64, String)>,
    /// Partitions (used at creation).
    pub partitions: u32,
    /// Replicas per partition (used at creation).
    pub replication: usize,
    /// Create the cluster on the first start.
    pub init: bool,
    /// The reassignment throttle, bytes/s (0: none).
    pub throttle: u64,
    /// Entries between a partition's snapshots.
    pub snapshot_every: u64,
    /// The shared log's segment size in bytes; 0: the log's default
    /// (128 MiB, two prepared ahead). A smaller one prepares none ahead
    /// and caps a batch at a quarter of it (tests on simulated disks).
    pub segment_bytes: u64,
    /// Serve the storage's metrics for Prometheus on this address.
    pub metrics_addr: Option<String>,
}

/// A partition's Raft on this node.
pub type Partition = Running;

/// A partition's Raft holds its gate shared for each call into it;
/// retiring the partition takes it whole (waiting for the calls in flight)
/// before shutting the Raft, so nothing calls a Raft that is shutting down
/// (openraft 0.10.0-alpha.37 panics when two calls race a stopped core).
type Gate = Arc<tokio::sync::RwLock<bool>>;

#[derive(Clone)]
struct Hosted {
    part: Partition,
    group: u64,
    gate: Gate,
    /// When a leader's append (or snapshot) last reached it, in ms since
    /// the host started.
    last_leader_rpc: Arc<std::sync::atomic::AtomicU64>,
}

/// How long a replica must have heard no leader before it may be retired.
pub const RETIRE_QUIET: Duration = Duration::from_secs(3);

/// A running node of the partitioned service.
pub struct Host {
    /// Its id.
    pub id: u64,
    /// Its address.
    pub addr: String,
    /// Its data directory's id.
    pub directory: DirectoryId,
    /// Its shared log and groups.
    pub node: Arc<Node>,
    /// The controller group's Raft.
    pub controller: Partition,
    controller_gate: Gate,
    /// The partitions it hosts.
    partitions: RwLock<BTreeMap<u32, Hosted>>,
    /// Its reassignment throttle.
    pub throttle: Arc<Throttle>,
    /// Its connections to the other nodes.
    pub router: Router,
    /// What it heard from the other nodes; its partitions' election
    /// timers.
    pub liveness: crate::server::liveness::Liveness,
    config: Arc<openraft10::Config>,
    /// How long opening the directory took, ms.
    pub open_ms: u64,
    started: Instant,
    stopped: std::sync::atomic::AtomicBool,
    creating: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("id", &self.id)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// The openraft configuration of a partition: the service's without a
/// ticker (quiet partitions: no heartbeats, no election timer; elections
/// are `parts::liveness`'s), elections given 1–2 s.
///
/// # Panics
/// Never: the values are valid.
pub fn partition_config(snapshot_every: u64) -> Arc<openraft10::Config> {
    let base = crate::raft_config(snapshot_every);
    let config = openraft10::Config {
        enable_tick: false,
        heartbeat_interval: 200,
        election_timeout_min: 1000,
        election_timeout_max: 2000,
        ..(*base).clone()
    };
    #[expect(clippy::expect_used, reason = "a fixed, valid configuration")]
    quorumlog_openraft10::raft_config(config).expect("a valid configuration")
}

fn ms_since(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Host {
    /// Opens (or formats) the node's directory and starts every group's
    /// Raft in it; on a first start with `init`, creates the cluster.
    ///
    /// # Errors
    /// Opening or formatting the directory; starting a Raft.
    pub async fn start(fs: &SharedFs, args: &HostArgs) -> Result<Arc<Host>> {
        let t0 = Instant::now();
        let (node, fresh) = open_or_format(fs, args)?;
        let directory = node.identity().directory_id.unwrap_or(DirectoryId(0));
        let node = Arc::new(node);
        LEADER_THREAD.with_borrow_mut(|l| {
            if let Some(nodes) = l {
                nodes.push(Arc::downgrade(&node));
            }
        });
        let placed = placed(args);
        if fresh {
            node.create_group(CONTROLLER_GROUP, Offset(0))?;
            if args.init {
                for (p, set) in placed.iter().enumerate() {
                    if set.contains(&args.id) {
                        let p = u32::try_from(p).unwrap_or(u32::MAX);
                        node.create_group(group_id(p, 0), Offset(0))?;
                    }
                }
            }
        }
        let throttle = Arc::new(Throttle::new(args.throttle));
        let router = Router::new(Arc::clone(&throttle));
        for (id, addr) in &args.peers {
            router.learn(*id, addr);
        }
        let config = partition_config(args.snapshot_every);
        let open_ms = ms_since(t0);
        let controller = start_group(
            &node,
            args.id,
            CONTROLLER_GROUP,
            CONTROLLER,
            &router,
            &config,
            open_ms,
            directory,
        )
        .await?;
        let host = Arc::new(Host {
            id: args.id,
            addr: args.listen.clone(),
            directory,
            node: Arc::clone(&node),
            controller,
            controller_gate: Arc::new(tokio::sync::RwLock::new(true)),
            partitions: RwLock::new(BTreeMap::new()),
            throttle,
            router,
            liveness: crate::server::liveness::Liveness::default(),
            config,
            open_ms,
            started: Instant::now(),
            creating: tokio::sync::Mutex::new(()),
            stopped: std::sync::atomic::AtomicBool::new(false),
        });
        for (p, g) in latest_incarnations(&node) {
            host.start_partition(p, g).await?;
        }
        if fresh && args.init {
            host.create(args, placed).await?;
        } else if fresh {
            // A node new to the cluster, or back with an empty disk: the
            // controller learns its directory.
            tokio::spawn(register(Arc::clone(&host)));
        }
        tokio::spawn(crate::server::liveness::run(Arc::clone(&host)));
        tokio::spawn(crate::server::reconcile::adopt(Arc::clone(&host)));
        Ok(host)
    }

    /// The first start of a new cluster: the first replica of each
    /// partition initializes it, the lowest node id the controller, and
    /// then writes the cluster's creation.
    async fn create(self: &Arc<Self>, args: &HostArgs, placed: Vec<Vec<u64>>) -> Result<()> {
        let addr_of = |id: u64| {
            args.peers
                .iter()
                .find(|(i, _)| *i == id)
                .map(|(_, a)| a.clone())
                .unwrap_or_default()
        };
        let min = args.peers.iter().map(|(id, _)| *id).min();
        if min == Some(self.id) {
            replica::initialize(&self.controller.raft, &args.peers).await?;
            let _ = self.controller.raft.trigger().elect(false).await;
        }
        for (p, set) in placed.iter().enumerate() {
            if set.first() == Some(&self.id) {
                let members: Vec<(u64, String)> =
                    set.iter().map(|id| (*id, addr_of(*id))).collect();
                if let Some(part) = self.partition(u32::try_from(p).unwrap_or(0)) {
                    replica::initialize(&part.raft, &members).await?;
                    let _ = part.raft.trigger().elect(false).await;
                }
            }
        }
        if min == Some(self.id) {
            tokio::spawn(create_cluster(Arc::clone(self), args.peers.clone(), placed));
        }
        Ok(())
    }

    /// Partition `p`'s Raft here, if it hosts it.
    pub fn partition(&self, p: u32) -> Option<Partition> {
        if p == CONTROLLER {
            return Some(self.controller.clone());
        }
        self.partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&p)
            .map(|h| h.part.clone())
    }

    /// Partition `p`'s Raft (or the controller's), its gate held open:
    /// every call into a Raft holds it (`None`: not hosted, retiring, or
    /// the host stopped).
    pub async fn enter(
        &self,
        p: u32,
    ) -> Option<(Partition, tokio::sync::OwnedRwLockReadGuard<bool>)> {
        if p == CONTROLLER {
            let open = Arc::clone(&self.controller_gate).read_owned().await;
            return (*open).then(|| (self.controller.clone(), open));
        }
        let hosted = self
            .partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&p)
            .cloned()?;
        let open = hosted.gate.read_owned().await;
        (*open).then_some((hosted.part, open))
    }

    fn heard_leader(&self, p: u32) {
        if let Some(h) = self
            .partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&p)
        {
            h.last_leader_rpc
                .store(ms_since(self.started), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The partitions it hosts.
    pub fn hosted(&self) -> Vec<(u32, Partition)> {
        self.partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(p, h)| (*p, h.part.clone()))
            .collect()
    }

    async fn start_partition(self: &Arc<Self>, p: u32, group: u64) -> Result<()> {
        let part = start_group(
            &self.node,
            self.id,
            group,
            p,
            &self.router,
            &self.config,
            self.open_ms,
            self.directory,
        )
        .await?;
        let mut part = part;
        let controller = self.controller.machine.clone();
        part.directories = Some(Arc::new(move |id| {
            controller.with_controller(|c| c.nodes.get(&id).map(|n| DirectoryId(n.directory)))
        }));
        let host = Arc::downgrade(self);
        part.alive = Some(Arc::new(move |id| {
            host.upgrade()
                .is_some_and(|h| id == h.id || h.liveness.node_alive(id))
        }));
        let hosted = Hosted {
            part: part.clone(),
            group,
            gate: Arc::new(tokio::sync::RwLock::new(true)),
            last_leader_rpc: Arc::new(std::sync::atomic::AtomicU64::new(ms_since(self.started))),
        };
        self.partitions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(p, hosted);
        tokio::spawn(crate::server::reconcile::run(Arc::clone(self), part));
        Ok(())
    }

    /// Retires this node's replica of partition `p` if it is no longer one
    /// of the partition's replicas: the controller's record (read on its
    /// leader, confirmed by a quorum) names neither it nor a reassignment
    /// in progress, and no leader has sent it anything for
    /// [`RETIRE_QUIET`] (a leader replicating to it, as a voter or a
    /// learner, heartbeats it far more often). Returns whether it retired.
    pub async fn retire_if_removed(self: &Arc<Self>, p: u32) -> bool {
        let quiet = |host: &Host| {
            host.partitions
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&p)
                .is_some_and(|h| {
                    let last = h.last_leader_rpc.load(std::sync::atomic::Ordering::Relaxed);
                    ms_since(host.started).saturating_sub(last)
                        > u64::try_from(RETIRE_QUIET.as_millis()).unwrap_or(u64::MAX)
                })
        };
        if !quiet(self) {
            return false;
        }
        let removed = |r: &crate::wire::admin::PartitionRecord| {
            r.pending.is_none() && !r.replicas.iter().any(|x| x.node == self.id)
        };
        match self.controller_record(p).await {
            Ok(Some(r)) if removed(&r) => {}
            _ => return false,
        }
        let _one = self.creating.lock().await;
        let Some(hosted) = self
            .partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&p)
            .cloned()
        else {
            return false;
        };
        // The gate closed first: every leader RPC answered so far has been
        // counted, and none is answered from here on, so the check below
        // is conclusive (a leader that matched this replica's log is never
        // left facing an empty one, which openraft forbids: "follower log
        // reversion").
        let mut gate = hosted.gate.write().await;
        *gate = false;
        if !quiet(self) {
            *gate = true;
            return false;
        }
        drop(gate);
        self.retire_locked(p).await;
        true
    }

    /// The controller's leader as this node knows it: id and address.
    fn controller_leader(&self) -> Option<(u64, String)> {
        let m = self.controller.raft.metrics().borrow_watched().clone();
        m.current_leader.and_then(|l| {
            m.membership_config
                .membership()
                .nodes()
                .find(|(id, _)| **id == l)
                .map(|(id, n)| (*id, n.addr.clone()))
        })
    }

    /// Partition `p`'s controller record from the controller's leader.
    ///
    /// # Errors
    /// No leader answered.
    pub async fn controller_record(
        &self,
        p: u32,
    ) -> Result<Option<crate::wire::admin::PartitionRecord>, Refusal> {
        match self.controller_leader() {
            Some((l, _)) if l == self.id => match self.enter(CONTROLLER).await {
                Some((c, _open)) => record(&c, p).await,
                None => Err(stopped()),
            },
            Some((_, addr)) => {
                let req = Request::Node(NodeRequest::Record { partition: p });
                match self
                    .router
                    .call_addr(&addr, req, Duration::from_secs(2))
                    .await
                {
                    Ok(Response::Record(r)) => r,
                    _ => Err(Refusal::NoQuorum),
                }
            }
            None => Err(Refusal::NotLeader { leader: None }),
        }
    }

    /// Retires this node's replica of partition `p`: its Raft stops once
    /// the calls in flight into it ended, and its group is dropped (at
    /// once, or as soon as the last handle closes; a restart drops what is
    /// left). A removed replica that kept running would campaign with
    /// ever higher terms, and when added back later would depose the
    /// partition's leader with them.
    async fn retire_locked(self: &Arc<Self>, p: u32) {
        let hosted = self
            .partitions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&p);
        let Some(hosted) = hosted else {
            return;
        };
        *hosted.gate.write().await = false;
        let _ = hosted.part.raft.shutdown().await;
        tracing::info!("partition {p}: replica retired (group {:#x})", hosted.group);
        let node = Arc::clone(&self.node);
        let group = hosted.group;
        drop(hosted);
        tokio::spawn(async move {
            for _ in 0..120 {
                match node.drop_group(group) {
                    Err(quorumlog_raft::Error::GroupInUse { .. }) => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    _ => return,
                }
            }
        });
    }

    /// Hosts partition `p`: its group is created empty and its Raft
    /// started, to be filled by the partition's leader. A partition hosted
    /// already is left as it is.
    ///
    /// An adding replica (`voter` false) is a new incarnation when an
    /// older one was dropped: a learner votes for no one, and is promoted
    /// only once it acknowledged the log. A voter (`voter` true) is made
    /// only on a directory that never held the partition (incarnation 0,
    /// neither present nor dropped), of a node that never had another
    /// directory (`NodeInfo::original`): it never acknowledged an entry
    /// or granted a vote, so it starts as any voter starts. A voter whose
    /// directory held the partition and lost it is refused: made anew, it
    /// could vote a candidate without committed entries into leadership;
    /// it is replaced instead (`alter`).
    ///
    /// # Errors
    /// `Refused` for a voter whose directory held the partition before;
    /// creating the group; starting its Raft.
    pub async fn host(self: &Arc<Self>, p: u32, voter: bool) -> Result<(), Refusal> {
        let _one = self.creating.lock().await;
        if p == CONTROLLER || self.partition(p).is_some() {
            return Ok(());
        }
        let failed = |e: Error| Refusal::Failed {
            reason: e.to_string(),
        };
        let original = self.controller.machine.with_controller(|c| {
            c.nodes
                .get(&self.id)
                .is_some_and(|n| n.original() && n.directory == self.directory.0)
        });
        if voter && !original {
            return Err(Refusal::Refused {
                reason: format!(
                    "node {} is not on its first directory: a voter is never made anew (replace it)",
                    self.id
                ),
            });
        }
        let mut incarnation = 0;
        let group = loop {
            let g = group_id(p, incarnation);
            match self.node.create_group(g, Offset(0)) {
                Ok(()) => break g,
                Err(
                    quorumlog_raft::Error::GroupDropped { .. }
                    | quorumlog_raft::Error::GroupExists { .. },
                ) if voter => {
                    return Err(Refusal::Refused {
                        reason: format!(
                            "node {} held partition {p} before and does not now: a voter is never made anew (replace it)",
                            self.id
                        ),
                    })
                }
                Err(
                    quorumlog_raft::Error::GroupDropped { .. }
                    | quorumlog_raft::Error::GroupExists { .. },
                ) if incarnation < u32::MAX => incarnation += 1,
                Err(e) => return Err(failed(e.into())),
            }
        };
        self.start_partition(p, group).await.map_err(failed)
    }

    /// Sends controller change `c` to the controller's leader (this node's
    /// own if it leads); the reply of `c` as applied.
    ///
    /// # Errors
    /// No leader reachable within `wait`.
    pub async fn to_controller(
        &self,
        c: Control,
        wait: Duration,
    ) -> Result<Result<u64, Vec<(u32, AlterError)>>, Refusal> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut last = Refusal::NoQuorum;
        while tokio::time::Instant::now() < deadline {
            let r = match self.controller_leader() {
                Some((l, _)) if l == self.id => self.control_here(c.clone()).await,
                Some((_, addr)) => {
                    let req = Request::Node(NodeRequest::Control(c.clone()));
                    let ttl = deadline.saturating_duration_since(tokio::time::Instant::now());
                    match self.router.call_addr(&addr, req, ttl).await {
                        Ok(Response::Control(r)) => r,
                        Ok(_) => Err(Refusal::Failed {
                            reason: format!("{addr}: unexpected answer"),
                        }),
                        Err(e) => Err(Refusal::Failed {
                            reason: e.to_string(),
                        }),
                    }
                }
                None => Err(Refusal::NotLeader { leader: None }),
            };
            match r {
                Ok(reply) => return Ok(reply),
                Err(e) => last = e,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(last)
    }

    /// Writes controller change `c` on this node's controller Raft (leader
    /// only), its gate held.
    async fn control_here(
        &self,
        c: Control,
    ) -> Result<Result<u64, Vec<(u32, AlterError)>>, Refusal> {
        match self.enter(CONTROLLER).await {
            Some((controller, _open)) => control(&controller, c).await,
            None => Err(stopped()),
        }
    }

    /// Whether [`Host::stop`] was called.
    pub fn stopped(&self) -> bool {
        self.stopped.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops the node as a power cut would find it stopped: no call enters
    /// a Raft any more (the calls in flight end first), then every Raft
    /// shuts down. Connections get no further answers. The caller cuts
    /// the disk's power between [`Host::drain`] and this, if it wants.
    pub async fn stop(&self) {
        self.drain().await;
        for (_, h) in self.hosted_all() {
            let _ = h.part.raft.shutdown().await;
        }
        let _ = self.controller.raft.shutdown().await;
    }

    /// Closes every gate once the calls in flight through it ended: no
    /// call enters a Raft from now on.
    pub async fn drain(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::Relaxed);
        for (_, h) in self.hosted_all() {
            *h.gate.write().await = false;
        }
        *self.controller_gate.write().await = false;
    }

    fn hosted_all(&self) -> Vec<(u32, Hosted)> {
        self.partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(p, h)| (*p, h.clone()))
            .collect()
    }

    /// This node's answer to `req`.
    pub async fn answer(self: &Arc<Self>, req: Request) -> Response {
        match req {
            Request::Group { partition, body } => self.answer_group(partition, body).await,
            Request::Node(req) => self.answer_node(req).await,
        }
    }

    /// Partition `partition`'s group's answer to `body`.
    async fn answer_group(self: &Arc<Self>, partition: u32, body: GroupRequest) -> Response {
        match self.enter(partition).await {
            Some((part, _open)) => {
                // Counted before it is answered (see `retire_if_removed`).
                if matches!(body, GroupRequest::Append(_) | GroupRequest::Snapshot(_)) {
                    self.heard_leader(partition);
                }
                let answer = replica::answer(&part, body).await;
                self.redirect(partition, answer)
            }
            None => match body {
                // A client's request: to the node that leads it, if
                // known, or any other.
                GroupRequest::Put(_) => Response::Put(Err(Refusal::NotLeader {
                    leader: self.leader_hint(partition),
                })),
                GroupRequest::Get { .. } => Response::Get(Err::<Read, _>(Refusal::NotLeader {
                    leader: self.leader_hint(partition),
                })),
                _ => Response::NotHosted(partition),
            },
        }
    }

    /// The node's own answer to `req`.
    async fn answer_node(self: &Arc<Self>, req: NodeRequest) -> Response {
        match req {
            NodeRequest::Host { partition, voter } => {
                Response::Done(self.host(partition, voter).await)
            }
            NodeRequest::Status => match self.enter(CONTROLLER).await {
                Some((c, _open)) => Response::Status(replica::status(&c).await),
                None => Response::NotHosted(CONTROLLER),
            },
            NodeRequest::Control(c) => Response::Control(self.control_here(c).await),
            NodeRequest::Record { partition } => match self.enter(CONTROLLER).await {
                Some((c, _open)) => Response::Record(record(&c, partition).await),
                None => Response::Record(Err(stopped())),
            },
            NodeRequest::List { partitions } => match self.enter(CONTROLLER).await {
                Some((_, _open)) => {
                    Response::List(crate::server::admin::list(self, &partitions).await)
                }
                None => Response::List(Err(stopped())),
            },
            NodeRequest::Partitions => Response::Partitions(crate::server::admin::node_view(self)),
            NodeRequest::Metrics => Response::Metrics(crate::server::admin::metrics(self)),
            NodeRequest::Beat { from, leads } => {
                self.liveness.heard(from, &leads);
                Response::Beat(crate::server::liveness::leading(self))
            }
            NodeRequest::Throttle { bytes_per_sec } => {
                self.throttle.set_rate(bytes_per_sec);
                Response::Done(Ok(()))
            }
        }
    }

    /// The node other than this one whose beats claim partition `p`, and
    /// its address.
    fn leader_hint(&self, p: u32) -> Option<(u64, String)> {
        let id = self.liveness.leader_of(p).filter(|l| *l != self.id)?;
        Some((id, self.router.addr(id)?))
    }

    /// A client's refusal (not the leader, or no quorum for a read) names
    /// the node whose beats claim the partition, if any, over what the
    /// replica itself believes: a replica that lost track of its leader,
    /// or was removed and not yet retired, sends the client on at once.
    fn redirect(&self, p: u32, answer: Response) -> Response {
        let hinted = || {
            self.leader_hint(p).map(|leader| Refusal::NotLeader {
                leader: Some(leader),
            })
        };
        match answer {
            Response::Put(Err(r @ Refusal::NotLeader { .. })) => {
                Response::Put(Err(hinted().unwrap_or(r)))
            }
            Response::Get(Err(r @ (Refusal::NotLeader { .. } | Refusal::NoQuorum))) => {
                Response::Get(Err(hinted().unwrap_or(r)))
            }
            other => other,
        }
    }

    /// Serves `listen` until the process ends.
    ///
    /// # Errors
    /// Binding the address.
    pub async fn serve(self: Arc<Self>) -> Result<()> {
        let listener = TcpListener::bind(&self.addr)
            .await
            .map_err(|e| Error::io(format!("listen on {}", self.addr), e))?;
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                continue;
            };
            let _ = conn.set_nodelay(true);
            let host = Arc::clone(&self);
            tokio::spawn(async move {
                let _ = serve_conn(conn, &host).await;
            });
        }
    }
}

fn stopped() -> Refusal {
    Refusal::Failed {
        reason: "the node is stopping".into(),
    }
}

/// Serves one connection: a client's plain requests one at a time, in
/// order; a peer's batched ones each at once, answered as they finish.
/// A stopped host answers nothing more.
async fn serve_conn(conn: TcpStream, host: &Arc<Host>) -> std::io::Result<()> {
    let (mut rd, wr) = conn.into_split();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(write_answers(wr, rx));
    loop {
        let frame = read_any::<_, Request>(&mut rd).await?;
        if host.stopped() {
            return Ok(());
        }
        match frame {
            Frame::Plain(req) => {
                let resp = host.answer(req).await;
                if host.stopped() || tx.send(Answer::Plain(resp)).is_err() {
                    return Ok(());
                }
            }
            Frame::Batch(items) => {
                for (id, req) in items {
                    let (host, tx) = (Arc::clone(host), tx.clone());
                    tokio::spawn(async move {
                        let resp = host.answer(req).await;
                        if !host.stopped() {
                            let _ = tx.send(Answer::Tagged(id, resp));
                        }
                    });
                }
            }
        }
    }
}

/// Writes controller change `c` on this node's controller Raft (leader
/// only): the reply of `c` as applied. An `Alter` without a time takes
/// this node's clock.
async fn control(
    controller: &Partition,
    c: Control,
) -> Result<Result<u64, Vec<(u32, AlterError)>>, Refusal> {
    let c = match c {
        Control::Alter { targets, now_ms: 0 } => Control::Alter {
            targets,
            now_ms: replica::now_ms(),
        },
        c => c,
    };
    match replica::write_reply(controller, Command::Control(c)).await? {
        (_, Reply::Control(r)) => Ok(r),
        (_, other) => Err(Refusal::Failed {
            reason: format!("unexpected reply {other:?}"),
        }),
    }
}

std::thread_local! {
    /// On the thread of a [`node_runtime`]: the nodes started on it, whose
    /// rounds it leads before it parks.
    static LEADER_THREAD: std::cell::RefCell<Option<Vec<std::sync::Weak<Node>>>> =
        const { std::cell::RefCell::new(None) };
}

/// The runtime a node runs on: every task on the calling thread, which
/// also leads the node's sync rounds, each time before it parks (it has
/// nothing else to do). A node started on it ([`Host::start`]) opens its
/// directory with `SyncPolicy::CallerLed`: no append wakes the log's
/// flusher, the round of a pass's writes runs on this thread once every
/// task waits, and the completions it covers fire here, with no thread
/// hand-off either way (the flusher runs data left unled by a runtime
/// that stays busy, within 5 ms). Measured against the flusher's rounds
/// on three nodes, 64 clients: 17–34 % more writes/s at 4 to 64
/// partitions, level at 1. Elsewhere a
/// node keeps `GroupCommit`.
///
/// # Errors
/// The runtime's.
pub fn node_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    LEADER_THREAD.with_borrow_mut(|l| {
        l.get_or_insert_with(Vec::new);
    });
    tokio::runtime::Builder::new_current_thread()
        .on_thread_park(|| {
            // Failures poison the node; its waiters and completions get them.
            LEADER_THREAD.with_borrow(|l| {
                for node in l.iter().flatten().filter_map(std::sync::Weak::upgrade) {
                    let _ = node.lead_round();
                }
            });
        })
        .enable_all()
        .build()
}

/// Opens the node's directory, formatting it if there is none (with a
/// new directory id); whether it was formatted now.
fn open_or_format(fs: &SharedFs, args: &HostArgs) -> Result<(Node, bool)> {
    let expect = Identity::node(ClusterId(args.cluster), NodeId(args.id));
    let mut options = if args.segment_bytes > 0 {
        NodeOptions::with_segment_bytes(args.segment_bytes)
    } else {
        NodeOptions::default()
    };
    if LEADER_THREAD.with_borrow(Option::is_some) {
        // This thread leads the rounds ([`node_runtime`]).
        options.sync = quorumlog_raft::SyncPolicy::CallerLed;
    }
    match Node::open(fs, &args.dir, &expect, &options) {
        Ok((node, _)) => Ok((node, false)),
        Err(e) if e.is_not_formatted() => {
            fs.create_dir_all(&args.dir)
                .map_err(|e| Error::io(format!("create {}", args.dir.display()), e))?;
            let meta = Meta::new(
                ClusterId(args.cluster),
                NodeId(args.id),
                DirectoryId::random(),
            );
            Node::format(fs, &args.dir, meta, &options)?;
            Ok((Node::open(fs, &args.dir, &expect, &options)?.0, true))
        }
        Err(e) => Err(e.into()),
    }
}

/// The placement of the cluster's partitions over its nodes' ids.
fn placed(args: &HostArgs) -> Vec<Vec<u64>> {
    let ids: Vec<u64> = args.peers.iter().map(|(id, _)| *id).collect();
    placement(
        args.partitions,
        u64::try_from(ids.len()).unwrap_or(1),
        args.replication,
    )
    .into_iter()
    .map(|set| {
        set.iter()
            .filter_map(|i| ids.get(usize::try_from(i.saturating_sub(1)).unwrap_or(0)))
            .copied()
            .collect()
    })
    .collect()
}

/// The latest incarnation of each partition in `node` (an older one left
/// by a retirement that could not drop it yet is dropped now).
fn latest_incarnations(node: &Node) -> BTreeMap<u32, u64> {
    let mut latest: BTreeMap<u32, u64> = BTreeMap::new();
    for g in node.groups() {
        let Some((p, _)) = partition_of_group(g) else {
            continue;
        };
        let newest = latest.get(&p).map_or(g, |x| g.max(*x));
        let older = latest.insert(p, newest).map_or(g, |x| g.min(x));
        if older != newest {
            let _ = node.drop_group(older);
        }
    }
    latest
}

/// Partition `p`'s controller record, read on the controller's leader
/// once a quorum confirmed it leads (nothing committed is missing).
async fn record(
    controller: &Partition,
    p: u32,
) -> Result<Option<crate::wire::admin::PartitionRecord>, Refusal> {
    replica::confirm_leadership(controller).await?;
    Ok(controller.machine.controller().partitions.get(&p).cloned())
}

/// Starts the Raft of partition `p` (or the controller) over group
/// `gid`.
#[expect(clippy::too_many_arguments, reason = "one call site each")]
async fn start_group(
    node: &Arc<Node>,
    id: u64,
    gid: u64,
    p: u32,
    router: &Router,
    config: &Arc<openraft10::Config>,
    open_ms: u64,
    directory: DirectoryId,
) -> Result<Partition> {
    let group = Arc::new(node.group(gid)?);
    let log =
        LogStore::new(Arc::clone(&group), id)?.persist_commit_every(Some(COMMIT_PERSIST_EVERY));
    let machine = KvMachine::open(group)?;
    let network = PartitionNetwork {
        partition: p,
        router: router.clone(),
    };
    let mut part = replica::start_with(
        id,
        log,
        machine,
        network,
        Arc::clone(config),
        open_ms,
        directory,
    )
    .await?;
    part.partition = (p != CONTROLLER).then_some(p);
    part.node = Some(Arc::clone(node));
    Ok(part)
}

/// Writes the cluster's creation once every node answers with its
/// directory id.
async fn create_cluster(host: Arc<Host>, peers: Vec<(u64, String)>, placement: Vec<Vec<u64>>) {
    let mut nodes = Vec::new();
    for (id, addr) in &peers {
        let directory = if *id == host.id {
            host.directory.0
        } else {
            loop {
                let status = host.router.call_addr(
                    addr,
                    Request::Node(NodeRequest::Status),
                    Duration::from_secs(2),
                );
                match status.await {
                    Ok(Response::Status(s)) if s.id == *id => break s.directory,
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        };
        nodes.push((*id, addr.clone(), directory));
    }
    let c = Control::Create { nodes, placement };
    loop {
        match host.to_controller(c.clone(), Duration::from_secs(5)).await {
            Ok(_) => return,
            Err(e) => tracing::warn!("creating the cluster: {e}"),
        }
    }
}

/// Registers this node's (new) directory with the controller.
async fn register(host: Arc<Host>) {
    let c = Control::Register {
        node: host.id,
        addr: host.addr.clone(),
        directory: host.directory.0,
    };
    loop {
        match host.to_controller(c.clone(), Duration::from_secs(5)).await {
            Ok(_) => return,
            Err(e) => tracing::warn!("registering with the controller: {e}"),
        }
    }
}

/// Runs a node of the partitioned service until the process is killed.
///
/// # Errors
/// Opening the directory, starting Raft, binding the address.
pub async fn run(args: HostArgs) -> Result<()> {
    // Before the directory opens: the log registers its metrics at open.
    let registry = match &args.metrics_addr {
        Some(_) => Some(
            crate::server::prom::install()
                .map_err(|e| Error::io("metrics recorder", std::io::Error::other(e)))?,
        ),
        None => None,
    };
    let fs: SharedFs = Arc::new(RealFs::new());
    let host = Host::start(&fs, &args).await?;
    if let (Some(r), Some(addr)) = (registry, &args.metrics_addr) {
        crate::server::prom::serve(r, addr)
            .map_err(|e| Error::io(format!("metrics on {addr}"), e))?;
    }
    host.serve().await
}
