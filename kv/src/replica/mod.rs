//! One replica: one Raft group on one `Group` of a node (or on any log
//! storage, for the benchmark's peers), its state machine, how it answers
//! a group's requests (Raft's, a client's), its writes and its
//! linearizable reads, and the voter reassignment it drives
//! ([`reassign`]).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft10::async_runtime::WatchReceiver;
use openraft10::error::{ClientWriteError, LinearizableReadError, RaftError};
use openraft10::storage::{RaftLogReader, RaftLogStorage, Snapshot};
use openraft10::{BasicNode, Raft, ReadPolicy, ServerState};
use quorumlog_openraft10::LogStore;
use quorumlog_raft::{DirectoryId, Group, Node};

use crate::error::{Error, Result};
use crate::machine::{Incoming, KvMachine};
use crate::wire::{
    Command, GroupRequest, Put, Read, Refusal, Reply, Response, SnapshotChunk, SnapshotStep,
    Status, TypeConfig,
};

pub mod reassign;

/// Entries between snapshots by default.
pub const SNAPSHOT_EVERY: u64 = 20_000;

/// The openraft configuration every node runs with: heartbeats every
/// 100 ms, elections after 300–600 ms of silence, a snapshot every
/// `snapshot_every` entries keeping 1,000 behind it, and no leader
/// restored in its old term after a restart.
///
/// # Panics
/// Never: the values are valid.
pub fn raft_config(snapshot_every: u64) -> std::sync::Arc<openraft10::Config> {
    let config = openraft10::Config {
        cluster_name: "quorumlog-kv".into(),
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        snapshot_policy: openraft10::SnapshotPolicy::LogsSinceLast(snapshot_every.max(1)),
        max_in_snapshot_log_to_keep: 1_000,
        max_payload_entries: 1_000,
        // `enable_leader_restore` is left to `raft_config`, which turns it
        // off: a restarted leader runs an election instead of taking its
        // old term back (openraft 0.10 replicates entries the leader has
        // not yet made durable; the in-process fault test lost
        // acknowledged writes with it on; docs/decisions.md).
        // Replicate an entry as soon as `append` returns, while the
        // leader's own round syncs it: a write then waits for one sync,
        // not the leader's and then a follower's.
        broadcast_submitted_on_append: Some(true),
        ..Default::default()
    };
    #[expect(clippy::expect_used, reason = "a fixed, valid configuration")]
    quorumlog_openraft10::raft_config(config).expect("a valid configuration")
}

/// A node's Raft (of a one-group store, or of a partition's group).
pub type KvRaft = Raft<TypeConfig, KvMachine>;

/// How long a node waits to confirm its leadership for a read, or for a
/// status, before answering `NoQuorum`.
pub const CONFIRM_WAIT: Duration = Duration::from_secs(2);

/// A running node's parts (of the single-group service, or one
/// partition's on a node of the partitioned service).
pub struct Running {
    /// Its id.
    pub id: u64,
    /// Its Raft.
    pub raft: KvRaft,
    /// Its state machine.
    pub machine: KvMachine,
    /// How long opening the store took, in milliseconds.
    pub open_ms: u64,
    /// Its data directory's id.
    pub directory: DirectoryId,
    /// Its term and last log index when it started (see [`read_floor`]).
    pub started: (u64, u64),
    /// The snapshot being received from the leader, between its chunks.
    pub incoming: Arc<tokio::sync::Mutex<Option<Incoming>>>,
    /// When a quorum last acknowledged this node as leader (a write
    /// committed or a read confirmed), in ms of [`clock_ms`].
    pub confirmed: Arc<std::sync::atomic::AtomicU64>,
    /// The partition it is (the partitioned service): an adding replica's
    /// node is asked to host it before it joins as a learner.
    pub partition: Option<u32>,
    /// Where a node's directory id is known without asking it (the
    /// partitioned service's controller); `None`: the node is asked.
    pub directories: Option<Directories>,
    /// Whether a node is alive by the node-level beats (the partitioned
    /// service); `None`: every node counts as alive.
    pub alive: Option<Alive>,
    /// The node its group lives on (its shared log's counts for the
    /// status); `None` for the benchmark's other log stores.
    pub node: Option<Arc<Node>>,
}

/// A node's directory id by its node id, if known.
pub type Directories = Arc<dyn Fn(u64) -> Option<DirectoryId> + Send + Sync>;

/// Whether a node is alive (heard from lately), by its node id.
pub type Alive = Arc<dyn Fn(u64) -> bool + Send + Sync>;

impl Clone for Running {
    fn clone(&self) -> Self {
        Running {
            id: self.id,
            raft: self.raft.clone(),
            machine: self.machine.clone(),
            open_ms: self.open_ms,
            directory: self.directory,
            started: self.started,
            incoming: Arc::clone(&self.incoming),
            confirmed: Arc::clone(&self.confirmed),
            partition: self.partition,
            directories: self.directories.clone(),
            alive: self.alive.clone(),
            node: self.node.clone(),
        }
    }
}

/// Starts node `id` over `store` with `network` and `config`.
///
/// # Errors
/// openraft's or the store's.
pub async fn start<N>(
    id: u64,
    store: Arc<Group>,
    network: N,
    open_ms: u64,
    config: Arc<openraft10::Config>,
) -> Result<Running>
where
    N: openraft10::network::RaftNetworkFactory<TypeConfig>,
    N::Network:
        openraft10::network::NetSnapshot<TypeConfig, SnapshotData = crate::machine::KvSnapshot>,
{
    let every = Some(quorumlog_openraft10::COMMIT_PERSIST_EVERY);
    start_persisting(id, store, network, open_ms, config, every).await
}

/// As [`start`], making the commit point durable every `commit_persist`
/// (`None`: only at the log's segment rolls and clean close).
///
/// # Errors
/// openraft's or the store's.
pub async fn start_persisting<N>(
    id: u64,
    store: Arc<Group>,
    network: N,
    open_ms: u64,
    config: Arc<openraft10::Config>,
    commit_persist: Option<std::time::Duration>,
) -> Result<Running>
where
    N: openraft10::network::RaftNetworkFactory<TypeConfig>,
    N::Network:
        openraft10::network::NetSnapshot<TypeConfig, SnapshotData = crate::machine::KvSnapshot>,
{
    let directory = store.identity().directory_id.unwrap_or(DirectoryId(0));
    let log = LogStore::new(Arc::clone(&store), id)?.persist_commit_every(commit_persist);
    let machine = KvMachine::open(store)?;
    start_with(id, log, machine, network, config, open_ms, directory).await
}

/// Starts node `id` over any log storage (the benchmark's peers).
///
/// # Errors
/// openraft's.
pub async fn start_with<L, N>(
    id: u64,
    log: L,
    machine: KvMachine,
    network: N,
    config: Arc<openraft10::Config>,
    open_ms: u64,
    directory: DirectoryId,
) -> Result<Running>
where
    L: RaftLogStorage<TypeConfig>,
    N: openraft10::network::RaftNetworkFactory<TypeConfig>,
    N::Network:
        openraft10::network::NetSnapshot<TypeConfig, SnapshotData = crate::machine::KvSnapshot>,
{
    // From the storage itself: openraft's first metrics may not show it.
    let mut log = log;
    let last = log
        .get_log_state()
        .await?
        .last_log_id
        .map_or(0, |l| l.index);
    let term = log
        .get_log_reader()
        .await
        .read_vote()
        .await?
        .map_or(0, |v| v.leader_id.term);
    let started = (term, last);
    let raft = Raft::new(id, config, network, log, machine.clone())
        .await
        .map_err(Error::raft)?;
    Ok(Running {
        id,
        raft,
        machine,
        open_ms,
        directory,
        started,
        incoming: Arc::new(tokio::sync::Mutex::new(None)),
        confirmed: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        partition: None,
        directories: None,
        alive: None,
        node: None,
    })
}

/// Initializes a new cluster of `peers` (ignored if already initialized).
///
/// # Errors
/// openraft's (other than "already initialized").
pub async fn initialize(raft: &KvRaft, peers: &[(u64, String)]) -> Result<()> {
    let members: BTreeMap<u64, BasicNode> = peers
        .iter()
        .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
        .collect();
    match raft.initialize(members).await {
        Ok(()) | Err(RaftError::APIError(_)) => Ok(()),
        Err(e) => Err(Error::raft(e)),
    }
}

fn leader_of(f: &openraft10::error::ForwardToLeader<TypeConfig>) -> Option<(u64, String)> {
    f.leader_id
        .zip(f.leader_node.as_ref().map(|n| n.addr.clone()))
}

/// A write through Raft: the index of the entry that applied it.
///
/// # Errors
/// `NotLeader` (refused before it was appended, or cut from this node's log
/// by a newer leader: certainly not applied); `Failed` otherwise.
pub async fn write(node: &Running, command: Command) -> Result<u64, Refusal> {
    match write_reply(node, command).await? {
        (_, Reply::Put { index }) | (index, Reply::Done | Reply::Control(_)) => Ok(index),
        (_, Reply::Superseded) => Err(Refusal::Refused {
            reason: "a later request of this client was applied".into(),
        }),
    }
}

/// A write through Raft: the index of its entry and what applying it
/// answered.
///
/// # Errors
/// As [`write()`].
pub async fn write_reply(node: &Running, command: Command) -> Result<(u64, Reply), Refusal> {
    ensure_lease(node).await?;
    match node.raft.client_write(command).await {
        Ok(r) => {
            node.confirmed.store(clock_ms(), Ordering::Relaxed);
            Ok((r.log_id.index, r.data))
        }
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
            // A leader whose lease lapsed after all (the next call
            // confirms first).
            node.confirmed.store(0, Ordering::Relaxed);
            Err(Refusal::NotLeader {
                leader: leader_of(&f),
            })
        }
        Err(e) => Err(Refusal::Failed {
            reason: e.to_string(),
        }),
    }
}

/// Milliseconds on this process's monotonic clock.
pub fn clock_ms() -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let base = BASE.get_or_init(Instant::now);
    u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// How long after a quorum's last acknowledgement a leader writes without
/// confirming first: half openraft's leader lease (its election timeout),
/// within which the lease certainly holds.
pub const LEASE_TRUSTED: Duration = Duration::from_millis(500);

/// Makes sure a leader's lease holds before it writes. openraft refuses a
/// write (and a membership change) from a leader that no quorum
/// acknowledged within its lease. A partition that wrote nothing for a
/// while sends no heartbeats (quiet partitions, `parts::liveness`), so
/// its leader first confirms with a heartbeat round to a quorum (the
/// same as a linearizable read does), which renews the lease. A busy
/// leader skips it. A node that does not lead is left to the write's own
/// refusal.
///
/// # Errors
/// `NotLeader`; `NoQuorum` (no quorum within [`CONFIRM_WAIT`]).
pub async fn ensure_lease(node: &Running) -> Result<(), Refusal> {
    let last = node.confirmed.load(Ordering::Relaxed);
    let trusted = u64::try_from(LEASE_TRUSTED.as_millis()).unwrap_or(0);
    if clock_ms().saturating_sub(last) < trusted
        || node.raft.metrics().borrow_watched().state != ServerState::Leader
    {
        return Ok(());
    }
    let confirmed = node.raft.ensure_linearizable(ReadPolicy::ReadIndex);
    match tokio::time::timeout(CONFIRM_WAIT, confirmed).await {
        Ok(Ok(_)) => {
            node.confirmed.store(clock_ms(), Ordering::Relaxed);
            Ok(())
        }
        Ok(Err(e)) => Err(not_confirmed(&e)),
        Err(_) => Err(Refusal::NoQuorum),
    }
}

/// The index a linearizable read on a confirmed leader must wait for
/// beyond openraft's read index, if any.
///
/// openraft 0.9 restarts a node whose saved vote is its own committed one
/// as leader of the same term, without an election, and takes as its read
/// index the larger of the commit point it recovered and the first entry
/// it proposed in that term. The commit point it recovered may be older
/// than entries it had committed, and acknowledged, before the restart;
/// those are in its log. So while a node is in the term it started with,
/// a read also waits until it applied its log as it was at start (found by
/// the soak on real processes: reads after a whole-cluster kill returned
/// values overwritten before it). A leader of a later term proposed a
/// first entry after all of those, and needs no floor.
///
/// The term is taken from the metrics, which may lag: a lag can only keep
/// the floor longer than needed (never drop it too early), and the floor
/// is moot once the machine applied that far. (The first version also
/// asked the metrics whether this node leads, which lags the other way:
/// a restarted leader confirmed by a quorum while its metrics did not yet
/// name it served a read below the floor, found by the in-process fault
/// test's staggered restart.)
pub fn read_floor(node: &Running) -> Option<u64> {
    let (term, last) = node.started;
    let in_start_term = node.raft.metrics().borrow_watched().current_term == term;
    let applied = node.machine.applied().unwrap_or(0);
    (in_start_term && last > applied).then_some(last)
}

/// Confirms that this node leads (a quorum answered its heartbeat) and
/// that its state machine applied everything committed when asked (and
/// the [`read_floor`]).
///
/// # Errors
/// `NotLeader`; `NoQuorum` (no quorum within [`CONFIRM_WAIT`]); `Failed`.
pub async fn confirm_leadership(node: &Running) -> Result<(), Refusal> {
    let confirmed = async {
        node.raft
            .ensure_linearizable(ReadPolicy::ReadIndex)
            .await
            .map_err(|e| not_confirmed(&e))?;
        node.confirmed.store(clock_ms(), Ordering::Relaxed);
        if let Some(floor) = read_floor(node) {
            node.raft
                .wait(None)
                .applied_index_at_least(Some(floor), "the log as it was at start")
                .await
                .map_err(|e| Refusal::Failed {
                    reason: e.to_string(),
                })?;
        }
        Ok(())
    };
    tokio::time::timeout(CONFIRM_WAIT, confirmed)
        .await
        .unwrap_or(Err(Refusal::NoQuorum))
}

fn not_confirmed(e: &RaftError<TypeConfig, LinearizableReadError<TypeConfig>>) -> Refusal {
    match e {
        RaftError::APIError(LinearizableReadError::ForwardToLeader(f)) => Refusal::NotLeader {
            leader: leader_of(f),
        },
        RaftError::APIError(LinearizableReadError::QuorumNotEnough(_)) => Refusal::NoQuorum,
        e => Refusal::Failed {
            reason: e.to_string(),
        },
    }
}

/// A read: linearizable (after [`confirm_leadership`]) or stale.
///
/// # Errors
/// As [`confirm_leadership`], for a linearizable read.
pub async fn read(node: &Running, key: &str, stale: bool) -> Result<Read, Refusal> {
    if !stale {
        confirm_leadership(node).await?;
    }
    let (value, applied) = node.machine.read(key);
    Ok(Read {
        value,
        applied,
        node: node.id,
    })
}

/// The node's status; `leading` only if a quorum confirms it now.
pub async fn status(node: &Running) -> Status {
    let m = node.raft.metrics().borrow_watched().clone();
    let leading = m.state == ServerState::Leader
        && matches!(
            tokio::time::timeout(
                CONFIRM_WAIT,
                node.raft.get_read_log_id(ReadPolicy::ReadIndex)
            )
            .await,
            Ok(Ok(_))
        );
    let membership = m.membership_config.membership();
    let stats = node
        .node
        .as_ref()
        .map(|n| n.stats().log)
        .unwrap_or_default();
    Status {
        syncs: stats.syncs,
        sync_p50_ms: stats.sync_latency.quantile(0.5).map(|s| s * 1e3),
        sync_p99_ms: stats.sync_latency.quantile(0.99).map(|s| s * 1e3),
        directory: node.directory.0,
        voters: membership.voter_ids().collect(),
        nodes: membership
            .nodes()
            .map(|(id, n)| (*id, n.addr.clone()))
            .collect(),
        id: node.id,
        leader: m.current_leader,
        leading,
        term: m.current_term,
        applied: m.last_applied.map(|l| l.index),
        last_log: m.last_log_index,
        open_ms: node.open_ms,
        fatal: m.running_state.as_ref().err().map(ToString::to_string),
    }
}

/// The replica's answer to `req`.
pub async fn answer(node: &Running, req: GroupRequest) -> Response {
    match req {
        GroupRequest::Append(rpc) => Response::Append(node.raft.append_entries(rpc).await),
        GroupRequest::Vote(rpc) => Response::Vote(node.raft.vote(rpc).await),
        GroupRequest::PreVote(rpc) => Response::Vote(node.raft.pre_vote(rpc).await),
        GroupRequest::Snapshot(chunk) => Response::Snapshot(receive_snapshot(node, chunk).await),
        GroupRequest::TransferLeader(req) => Response::TransferLeader(
            node.raft
                .handle_transfer_leader(req)
                .await
                .map_err(|e| e.to_string()),
        ),
        GroupRequest::Put(put) => Response::Put(write(node, Command::Put(put)).await),
        GroupRequest::Get { key, stale } => Response::Get(read(node, &key, stale).await),
        GroupRequest::Dump => Response::Dump(node.machine.dump()),
        GroupRequest::Status => Response::Status(status(node).await),
    }
}

/// One step of a snapshot transfer from the leader: the bytes go into the
/// incoming snapshot (started, or resumed, for the snapshot `chunk` names);
/// once it holds the whole file, the file is verified and published, then
/// openraft installs it. A failure drops the incoming snapshot (a file
/// that did not verify is gone; one cut short stays durable, and the next
/// transfer resumes it).
async fn receive_snapshot(node: &Running, chunk: SnapshotChunk) -> Result<SnapshotStep, String> {
    let mut incoming = node.incoming.lock().await;
    let current = incoming
        .take()
        .filter(|i| KvMachine::receiving(i, &chunk.meta) && chunk.position > 0);
    let mut rx = match current {
        Some(rx) => rx,
        None => node
            .machine
            .receive(&chunk.meta, chunk.size)
            .map_err(|e| e.to_string())?,
    };
    if !chunk.bytes.is_empty() {
        rx.write_chunk(chunk.position, &chunk.bytes)
            .map_err(|e| e.to_string())?;
    }
    if rx.position() < chunk.size {
        let next = rx.position();
        *incoming = Some(rx);
        return Ok(SnapshotStep::Next(next));
    }
    drop(incoming);
    let data = rx.finish().map_err(|e| e.to_string())?;
    let snapshot = Snapshot {
        meta: chunk.meta,
        snapshot: data,
    };
    node.raft
        .install_full_snapshot(chunk.vote, snapshot)
        .await
        .map(SnapshotStep::Installed)
        .map_err(|e| e.to_string())
}

/// Milliseconds since the Unix epoch (a reassignment's start time).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A write of `key = value` without a request id (tests, benchmarks).
///
/// # Errors
/// As [`write()`].
pub async fn put(node: &Running, key: &str, value: &str) -> Result<u64, Refusal> {
    write(node, Command::Put(Put::new(key, value))).await
}
