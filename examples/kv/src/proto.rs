//! The wire protocol: one frame per message (a `u32` length, little
//! endian, then the message in `bincode`), a request and its response on
//! one connection, in order.

use std::collections::BTreeMap;

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

openraft::declare_raft_types!(
    /// The cluster's types: writes are [`Put`]s, node ids `u64`, nodes
    /// `BasicNode` (their address).
    pub TypeConfig:
        D = Put,
        R = (),
        SnapshotData = quorumlog_openraft::SnapshotStream,
);

/// A write: `key = value`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Put {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
}

impl std::fmt::Display for Put {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

/// What a node is asked.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// Raft: append entries (and heartbeats).
    Append(AppendEntriesRequest<TypeConfig>),
    /// Raft: a vote request.
    Vote(VoteRequest<u64>),
    /// Raft: a snapshot chunk.
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// Client: a write, acknowledged once committed and applied.
    Put(Put),
    /// Client: this node's own value for a key (no leader check).
    Get(String),
    /// Client: every key and value this node has applied.
    Dump,
    /// Client: this node's Raft state.
    Status,
    /// Admin: reassign the voters to these nodes (ids, with an address for
    /// any node not a member yet), replacing a pending reassignment;
    /// `None` cancels the pending one. Leader only.
    Reassign(Option<Vec<(u64, Option<String>)>>),
    /// Admin: the reassignment in progress. Leader only.
    Reassignments,
}

/// Why a write was not acknowledged.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PutError {
    /// This node does not lead; the leader, if known (id, address).
    NotLeader(Option<(u64, String)>),
    /// Raft failed the write.
    Failed(String),
}

/// A node's Raft state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Status {
    /// The node's id.
    pub id: u64,
    /// The leader it knows.
    pub leader: Option<u64>,
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
}

/// A node's answer.
#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    /// To [`Request::Append`].
    Append(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    /// To [`Request::Vote`].
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    /// To [`Request::Snapshot`].
    Snapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    /// To [`Request::Put`]: the write's log index, applied on the leader.
    Put(Result<u64, PutError>),
    /// To [`Request::Get`].
    Get(Option<String>),
    /// To [`Request::Dump`].
    Dump(BTreeMap<String, String>),
    /// To [`Request::Status`].
    Status(Status),
    /// To [`Request::Reassign`]: accepted (committed), or why not.
    Reassign(Result<(), String>),
    /// To [`Request::Reassignments`]: the listing as text, or why not.
    Reassignments(Result<String, String>),
}

/// Largest frame accepted (a snapshot chunk or a batch of entries).
const MAX_FRAME: u32 = 256 << 20;

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
