//! The wire protocol and the replicated commands; it names nothing else
//! of the crate.
//!
//! - **One envelope**: a [`Request`] goes to one partition's group
//!   ([`GroupRequest`]: Raft's messages, a client's calls) or to the node
//!   ([`NodeRequest`]: hosting a replica, beats, the controller's changes
//!   and listings, [`admin`]'s data).
//! - **Frames**: a `u32` length, little endian, then the message in
//!   `bincode`. A client sends one request at a time and reads its answer;
//!   nodes send batch frames of many requests with ids (`net`).
//! - The log's entries are [`Command`]s: a client's [`Put`], a
//!   reassignment's state, the controller's changes. Nothing of the
//!   service's own lives in the user's keyspace.
//! - Keys map to partitions by [`partition_of`], fixed forever.

pub mod admin;

use std::collections::BTreeMap;

use openraft10::error::RaftError;
use openraft10::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft10::type_config::alias::{SnapshotMetaOf, VoteOf};
use quorumlog_raft::kraft::voters::{ControlRecord, Reassignment};
use serde::{de::DeserializeOwned, Deserialize, Deserializer, Serialize, Serializer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

openraft10::declare_raft_types!(
    /// The cluster's types: entries are [`Command`]s, applying one answers
    /// a [`Reply`], node ids are `u64`, nodes `BasicNode` (their address),
    /// openraft's default (advanced) leader ids.
    pub TypeConfig:
        D = Command,
        R = Reply,
);

/// One step of a snapshot transfer (openraft 0.10 hands the network a
/// whole snapshot; the service sends it chunk by chunk): the leader's
/// vote, the snapshot's meta and size, and `bytes` of its file at
/// `position` (none in the first request, which asks where to start: a
/// follower that holds part of it durably resumes there).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotChunk {
    /// The leader's vote.
    pub vote: VoteOf<TypeConfig>,
    /// The snapshot's meta.
    pub meta: SnapshotMetaOf<TypeConfig>,
    /// Its file's size.
    pub size: u64,
    /// Where `bytes` go.
    pub position: u64,
    /// Bytes of the file.
    pub bytes: Vec<u8>,
}

/// A follower's answer to a [`SnapshotChunk`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum SnapshotStep {
    /// Send the bytes from here.
    Next(u64),
    /// The file arrived whole, verified, and openraft installed it.
    Installed(SnapshotResponse<TypeConfig>),
}

/// Names one client request: the client (a random id it picked) and the
/// request's number in that client's sequence (from 1; one request at a
/// time per client). A retried request carries the same id, so the state
/// machine applies it once and answers the retry with the first result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RequestId {
    /// The client.
    pub client: u64,
    /// The request's number, from 1.
    pub seq: u64,
}

/// A write: `key = value`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Put {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
    /// The request it answers, deduplicated by the state machine; `None`
    /// for a write whose retries may apply again (the benchmark's).
    pub request: Option<RequestId>,
}

impl Put {
    /// A write without a request id.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Put {
        Put {
            key: key.into(),
            value: value.into(),
            request: None,
        }
    }
}

impl std::fmt::Display for Put {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

/// The reassignment state a [`Command::Reassignment`] replicates (`None`:
/// finished or cancelled back). On the wire and in snapshots it is the
/// store's own control-record encoding.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReassignmentState(pub Option<Reassignment>);

impl Serialize for ReassignmentState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ControlRecord::Reassignment(self.0.clone())
            .encode()
            .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ReassignmentState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bytes = Vec::<u8>::deserialize(d)?;
        match ControlRecord::decode(&bytes) {
            Some(ControlRecord::Reassignment(r)) => Ok(ReassignmentState(r)),
            _ => Err(serde::de::Error::custom("not a reassignment record")),
        }
    }
}

/// A log entry's command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A client's write.
    Put(Put),
    /// The voter reassignment in progress, replacing the previous state.
    Reassignment(ReassignmentState),
    /// A partition's reassignment started (or replaced, or cancelled back)
    /// for the controller's `generation` of its target (the partitioned
    /// service's controller).
    Reassign {
        /// The partition's reassignment state.
        state: ReassignmentState,
        /// The controller's generation it carries out.
        generation: u64,
    },
    /// A change of the partitioned service's controller state (only in
    /// the controller group).
    Control(crate::wire::admin::Control),
}

impl std::fmt::Display for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Put(p) => write!(f, "put {p}"),
            Command::Reassignment(r) => write!(f, "reassignment {:?}", r.0.is_some()),
            Command::Reassign { state, generation } => {
                write!(
                    f,
                    "reassign {:?} (generation {generation})",
                    state.0.is_some()
                )
            }
            Command::Control(c) => write!(f, "control {c:?}"),
        }
    }
}

/// What applying a command answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// A write applied at log index `index`: this entry's, or for a retry
    /// the entry that applied the request first.
    Put {
        /// The index of the entry that applied it.
        index: u64,
    },
    /// A request older than its client's latest applied one (the client
    /// gave up on it): not applied.
    Superseded,
    /// Nothing to answer (a reassignment state).
    Done,
    /// A controller change: accepted (the generation it took), or refused
    /// whole with a reason per refused partition (nothing changed).
    Control(Result<u64, Vec<(u32, crate::wire::admin::AlterError)>>),
}

/// What a node is asked: one envelope, addressed to one of its groups
/// or to the node itself.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// To partition `partition`'s Raft group on the node asked (the
    /// controller's: [`CONTROLLER`]).
    Group {
        /// The partition.
        partition: u32,
        /// What its group is asked.
        body: GroupRequest,
    },
    /// To the node itself.
    Node(NodeRequest),
}

impl Request {
    /// `body` for partition `partition`'s group.
    pub fn group(partition: u32, body: GroupRequest) -> Request {
        Request::Group { partition, body }
    }
}

/// What one Raft group on a node is asked: Raft's messages from its
/// leader or candidates, and a client's calls.
#[derive(Debug, Serialize, Deserialize)]
pub enum GroupRequest {
    /// Raft: append entries (and heartbeats).
    Append(AppendEntriesRequest<TypeConfig>),
    /// Raft: a vote request.
    Vote(VoteRequest<TypeConfig>),
    /// Raft: a pre-vote request.
    PreVote(VoteRequest<TypeConfig>),
    /// Raft: a step of a snapshot transfer.
    Snapshot(SnapshotChunk),
    /// Raft: a leader hands its leadership over (it is leaving the voters).
    TransferLeader(TransferLeaderRequest<TypeConfig>),
    /// Client: a write, acknowledged once committed and applied.
    Put(Put),
    /// Client: a key's value. Linearizable unless `stale`: answered by the
    /// leader once it has confirmed with a quorum that it still leads and
    /// has applied everything committed when it was asked. `stale`: any
    /// replica's own state machine, at the index it has applied.
    Get {
        /// The key.
        key: String,
        /// Any replica's own value, possibly behind.
        stale: bool,
    },
    /// Client: every key and value this replica has applied.
    Dump,
    /// Client: this replica's Raft state.
    Status,
}

/// What a node itself is asked: by the other nodes (hosting a replica,
/// beats, the controller's changes), by an operator or a client.
#[derive(Debug, Serialize, Deserialize)]
pub enum NodeRequest {
    /// The node's status (its controller replica's Raft state, its log's
    /// syncs).
    Status,
    /// Node to node: create partition `partition`'s group here, empty, to
    /// receive its log: an adding replica (a new incarnation if an older
    /// one was dropped), or a voter (only on a directory that never held
    /// the partition: a voter that forgot what it acknowledged is never
    /// made anew).
    Host {
        /// The partition.
        partition: u32,
        /// Asked for a voter.
        voter: bool,
    },
    /// To the controller's leader: change the controller state (alter
    /// reassignments, cancel them all, a finished reassignment).
    Control(crate::wire::admin::Control),
    /// To the controller's leader: partition `partition`'s record, read
    /// linearizably.
    Record {
        /// The partition.
        partition: u32,
    },
    /// To the controller's leader: the reassignments in progress (those
    /// of `partitions`, or all if empty), with each adding replica's
    /// progress from its partition's leader.
    List {
        /// The partitions asked about (all if empty).
        partitions: Vec<u32>,
    },
    /// Every partition this node hosts, as it sees it (leader, voters,
    /// learners, commit point; lag per replica where it leads).
    Partitions,
    /// This node's metrics (for the partitions it leads, and its
    /// reassignment traffic).
    Metrics,
    /// This node's reassignment throttle in bytes/s (0: none).
    Throttle {
        /// Bytes per second of catch-up traffic to adding replicas.
        bytes_per_sec: u64,
    },
    /// Node to node: node `from` is alive and leads these partitions, in
    /// these terms (answered with the same of the node asked). One per
    /// pair of nodes every beat, for all partitions.
    Beat {
        /// The node sending it.
        from: u64,
        /// The partitions it leads and their terms.
        leads: Vec<(u32, u64)>,
    },
}

/// Why a node did not do what it was asked. `NotLeader` and `NoQuorum`
/// are certain: the request was not carried out by that call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    /// This node does not lead; the leader, if known (id, address).
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// The leader it knows of.
        leader: Option<(u64, String)>,
    },
    /// This node could not confirm with a quorum that it leads.
    #[error("no quorum confirmed this node's leadership")]
    NoQuorum,
    /// A membership change is not applied yet; try again.
    #[error("a membership change is in flight")]
    MembershipInFlight,
    /// The request is invalid here (a reassignment plan the rules refuse,
    /// a node without an address).
    #[error("refused: {reason}")]
    Refused {
        /// Why.
        reason: String,
    },
    /// Raft or the store failed while carrying it out: a write may or may
    /// not have applied.
    #[error("failed: {reason}")]
    Failed {
        /// Why.
        reason: String,
    },
}

/// A read's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    /// The value, if the key has one.
    pub value: Option<String>,
    /// The log index the answering state machine had applied.
    pub applied: u64,
    /// The node that answered.
    pub node: u64,
}

/// A node's Raft state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Status {
    /// The node's id.
    pub id: u64,
    /// The leader it last heard of (the winner of the latest vote it knows,
    /// which may have been deposed since).
    pub leader: Option<u64>,
    /// Whether it leads now: a quorum confirmed it while answering.
    pub leading: bool,
    /// Its term.
    pub term: u64,
    /// The last index its state machine applied.
    pub applied: Option<u64>,
    /// Its last log index.
    pub last_log: Option<u64>,
    /// How long opening its store took at start, in milliseconds.
    pub open_ms: u64,
    /// Why its Raft stopped, if it did (a storage failure is fatal).
    pub fatal: Option<String>,
    /// Its data directory's id (a new one after an empty disk).
    pub directory: u128,
    /// The voters of the membership it knows.
    pub voters: Vec<u64>,
    /// Every member it knows (voters and learners), with addresses.
    pub nodes: Vec<(u64, String)>,
    /// Its log's sync rounds since it started: how many, and the upper
    /// bounds (ms) of the buckets holding their median and 99th
    /// percentile latency.
    pub syncs: u64,
    /// See [`Status::syncs`].
    pub sync_p50_ms: Option<f64>,
    /// See [`Status::syncs`].
    pub sync_p99_ms: Option<f64>,
}

/// A node's answer.
#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    /// To [`GroupRequest::Append`].
    Append(Result<AppendEntriesResponse<TypeConfig>, RaftError<TypeConfig>>),
    /// To [`GroupRequest::Vote`] and [`GroupRequest::PreVote`].
    Vote(Result<VoteResponse<TypeConfig>, RaftError<TypeConfig>>),
    /// To [`GroupRequest::Snapshot`]: the next step, or why the transfer failed
    /// (the leader starts it again).
    Snapshot(Result<SnapshotStep, String>),
    /// To [`GroupRequest::TransferLeader`].
    TransferLeader(Result<TransferLeaderResponse<TypeConfig>, String>),
    /// To [`GroupRequest::Put`]: the index of the entry that applied it.
    Put(Result<u64, Refusal>),
    /// To [`GroupRequest::Get`].
    Get(Result<Read, Refusal>),
    /// To [`GroupRequest::Dump`].
    Dump(BTreeMap<String, String>),
    /// To [`GroupRequest::Status`] and [`NodeRequest::Status`].
    Status(Status),
    /// To a [`Request::Group`] for a partition this node does not
    /// host.
    NotHosted(u32),
    /// To [`NodeRequest::Host`], [`NodeRequest::Throttle`]: done, or why not.
    Done(Result<(), Refusal>),
    /// To [`NodeRequest::Control`]: the reply of the change as applied.
    Control(Result<Result<u64, Vec<(u32, crate::wire::admin::AlterError)>>, Refusal>),
    /// To [`NodeRequest::Record`].
    Record(Result<Option<crate::wire::admin::PartitionRecord>, Refusal>),
    /// To [`NodeRequest::List`].
    List(Result<Vec<crate::wire::admin::Listing>, Refusal>),
    /// To [`NodeRequest::Partitions`].
    Partitions(crate::wire::admin::NodeView),
    /// To [`NodeRequest::Metrics`].
    Metrics(crate::wire::admin::Metrics),
    /// To [`NodeRequest::Beat`]: the partitions the node asked leads, and
    /// their terms.
    Beat(Vec<(u32, u64)>),
}

/// Largest frame accepted (a snapshot chunk or a batch of entries).
pub const MAX_FRAME: u32 = 256 << 20;

/// Writes `msg` as one frame.
///
/// # Errors
/// I/O; a message `bincode` cannot encode.
pub async fn write_frame<W, T>(w: &mut W, msg: &T) -> std::io::Result<()>
where
    W: tokio::io::AsyncWrite + Unpin,
    T: Serialize,
{
    let bytes = bincode::serialize(msg).map_err(std::io::Error::other)?;
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|l| *l <= MAX_FRAME)
        .ok_or_else(|| std::io::Error::other("frame too large"))?;
    w.write_all(&len.to_le_bytes()).await?;
    w.write_all(&bytes).await?;
    w.flush().await
}

/// Reads one frame.
///
/// # Errors
/// I/O (`UnexpectedEof` when the peer closed); an oversized frame; bytes
/// that do not decode.
pub async fn read_frame<R, T>(r: &mut R) -> std::io::Result<T>
where
    R: tokio::io::AsyncRead + Unpin,
    T: DeserializeOwned,
{
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::other("frame too large"));
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf).await?;
    bincode::deserialize(&buf).map_err(std::io::Error::other)
}

/// The controller group's partition number (its group id on the shared
/// log is `CONTROLLER_GROUP` (`server`)).
pub const CONTROLLER: u32 = u32::MAX;

/// The partition of `key` among `partitions`: FNV-1a (64-bit) of its
/// bytes, modulo the count. Stable across processes, versions and
/// platforms: the same key always lives in the same partition.
pub fn partition_of(key: &str, partitions: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    u32::try_from(h % u64::from(partitions.max(1))).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: the key-to-partition map never changes (golden values)
    /// and spreads keys over every partition.
    #[test]
    fn the_partition_of_a_key_is_stable_and_spread() {
        assert_eq!(partition_of("", 64), (0xcbf2_9ce4_8422_2325u64 % 64) as u32);
        let golden: Vec<u32> = ["a", "key-1", "user/42"]
            .iter()
            .map(|k| partition_of(k, 64))
            .collect();
        // FNV-1a("a") = 0xaf63dc4c8601ec8c, the published test vector.
        assert_eq!(golden, vec![12, 38, 33]);
        let mut seen = [0u32; 64];
        for i in 0..64_000 {
            seen[partition_of(&format!("k{i}"), 64) as usize] += 1;
        }
        assert!(seen.iter().all(|n| (700..1300).contains(n)), "{seen:?}");
    }
}
