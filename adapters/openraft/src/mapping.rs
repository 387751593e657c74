//! Everything openraft-specific about how its values live in the store,
//! in one place (an adapter for openraft 0.10 would change this module and
//! the trait glue, not the store):
//!
//! - **epochs**: openraft's leader id is `(term, node id)`, ordered
//!   lexicographically, and a node may vote twice in one term (for a
//!   candidate with a greater node id: openraft's default, "advanced"
//!   leader ids). The store's epoch is that whole leader id,
//!   `term << 32 | node id` ([`epoch_of`]), so the store's rule of one vote
//!   and one leader per epoch is openraft's rule of one per leader id, and
//!   epochs order as openraft's votes and log ids do. Node ids must fit in
//!   32 bits and terms in 32 bits ([`MappingError`] otherwise);
//! - **entries**: one record per entry, at offset = index, in a batch whose
//!   epoch is the entry's leader id; the record is the entry (log id and
//!   payload) in `bincode`, so openraft gets back exactly what it wrote;
//! - **vote** ↔ the `quorum-state` file: the epoch is the vote's leader id;
//!   an uncommitted vote is the vote cast (`voted`), a committed one the
//!   leader (`leader`; the vote cast, if any, stays: uncommitted then
//!   committed for the same leader id is one epoch's vote, then its
//!   leader). openraft has no directory ids: the vote's is
//!   `DirectoryId(node + 1)`, fixed per node, never zero;
//! - **last purged log id** (openraft needs the leader's node id, which the
//!   log does not keep below its start): the application-metadata file.
//!
//! Shared with the 0.10 adapter: the leader-id packing and the vote's
//! quorum state (`quorumlog_raft::vote`); the rest names openraft 0.9's
//! types (`Entry`, `LeaderId`, `Vote`), which 0.10's are not.

use openraft::{CommittedLeaderId, Entry, LeaderId, LogId, RaftTypeConfig, Vote};
use quorumlog_raft::vote::{pack_leader, unpack_leader};
use quorumlog_raft::{Epoch, NodeId, QuorumState};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// The record bytes of `entry`.
///
/// # Errors
/// What `bincode` reports.
pub fn encode_entry<C>(entry: &Entry<C>) -> Result<Vec<u8>, bincode::Error>
where
    C: RaftTypeConfig,
    Entry<C>: Serialize,
{
    bincode::serialize(entry)
}

/// The size of [`encode_entry`]'s bytes, without encoding.
///
/// # Errors
/// As bincode's.
pub fn encoded_size<C>(entry: &Entry<C>) -> Result<u64, bincode::Error>
where
    C: RaftTypeConfig,
    Entry<C>: Serialize,
{
    bincode::serialized_size(entry)
}

/// [`encode_entry`] appended to `out` (straight into a batch body: the
/// entry's only copy before the batch).
///
/// # Errors
/// As bincode's.
pub fn encode_entry_into<C>(out: &mut Vec<u8>, entry: &Entry<C>) -> Result<(), bincode::Error>
where
    C: RaftTypeConfig,
    Entry<C>: Serialize,
{
    bincode::serialize_into(out, entry)
}

/// The entry a record holds.
///
/// # Errors
/// What `bincode` reports (bytes that are not an entry).
pub fn decode_entry<C>(bytes: &[u8]) -> Result<Entry<C>, bincode::Error>
where
    C: RaftTypeConfig,
    Entry<C>: DeserializeOwned,
{
    bincode::deserialize(bytes)
}

/// A leader id openraft uses that the store's epochs cannot hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappingError {
    /// The term.
    pub term: u64,
    /// The node id.
    pub node_id: u64,
}

impl std::fmt::Display for MappingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "leader id (term {}, node {}) does not fit an epoch: both must be below 2^32",
            self.term, self.node_id
        )
    }
}

impl std::error::Error for MappingError {}

/// The store epoch of openraft's leader id (`term << 32 | node id`).
///
/// # Errors
/// `MappingError` if the term or the node id needs more than 32 bits.
pub fn epoch_of(leader: &LeaderId<u64>) -> Result<Epoch, MappingError> {
    pack_leader(leader.term, leader.node_id).ok_or(MappingError {
        term: leader.term,
        node_id: leader.node_id,
    })
}

/// The leader id (term, node id) an epoch holds ([`epoch_of`]).
pub fn leader_of(epoch: Epoch) -> (u64, u64) {
    unpack_leader(epoch)
}

/// Why a vote cannot be recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoteRefused {
    /// Its leader id does not fit an epoch.
    Unmappable(MappingError),
    /// openraft's order puts it below the vote on file (a committed vote
    /// is never replaced by the uncommitted one for the same leader id).
    Regression {
        /// The vote on file.
        current: Vote<u64>,
        /// The vote refused.
        proposed: Vote<u64>,
    },
}

impl std::fmt::Display for VoteRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VoteRefused::Unmappable(e) => e.fmt(f),
            VoteRefused::Regression { current, proposed } => {
                write!(f, "vote {proposed} is below the vote on file {current}")
            }
        }
    }
}

impl std::error::Error for VoteRefused {}

/// The quorum state that records `vote`, from the durable state `prev`.
/// The store's own rules (one vote and one leader per epoch, no epoch
/// regression) are checked when it is written; this checks openraft's
/// order on top.
///
/// # Errors
/// `VoteRefused`.
pub fn vote_to_state(prev: &QuorumState, vote: &Vote<u64>) -> Result<QuorumState, VoteRefused> {
    let epoch = epoch_of(&vote.leader_id).map_err(VoteRefused::Unmappable)?;
    if let Some(current) = state_to_vote(prev) {
        let at_least = matches!(
            vote.partial_cmp(&current),
            Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
        );
        if !at_least {
            return Err(VoteRefused::Regression {
                current,
                proposed: *vote,
            });
        }
    }
    Ok(quorumlog_raft::vote::library_vote(
        prev,
        epoch,
        Some(NodeId(vote.leader_id.node_id)),
        vote.committed,
    ))
}

/// The vote the quorum state records (`None` when nothing was ever saved).
///
/// A state with an epoch but neither a vote nor a leader (only the store's
/// own restart rule writes one, moving the epoch up to the log's last)
/// reads as an uncommitted vote for the leader id the epoch holds: never
/// below what openraft saved, never a vote for a second node.
pub fn state_to_vote(state: &QuorumState) -> Option<Vote<u64>> {
    let (term, node) = leader_of(state.epoch);
    match (state.leader, state.voted) {
        (Some(_), _) => Some(Vote::new_committed(term, node)),
        (None, Some(_)) => Some(Vote::new(term, node)),
        (None, None) if state.epoch.0 > 0 => Some(Vote::new(term, node)),
        (None, None) => None,
    }
}

/// A log id.
pub fn log_id(term: u64, node_id: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, node_id), index)
}

/// What the adapter keeps in the application-metadata file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppMeta {
    /// The last log id openraft purged.
    pub last_purged: Option<LogId<u64>>,
}

impl AppMeta {
    /// The file's bytes.
    ///
    /// # Errors
    /// What `bincode` reports.
    pub fn encode(&self) -> Result<Vec<u8>, bincode::Error> {
        bincode::serialize(self)
    }

    /// The metadata in `bytes` (none written yet: the default).
    ///
    /// # Errors
    /// What `bincode` reports (bytes that are not this metadata).
    pub fn decode(bytes: Option<&[u8]>) -> Result<AppMeta, bincode::Error> {
        bytes.map_or(Ok(AppMeta::default()), bincode::deserialize)
    }
}
