//! Everything openraft-specific about how its values live in the store,
//! in one place (an adapter for openraft 0.10 would change this module and
//! the trait glue, not the store):
//!
//! - **entries**: one record per entry, at offset = index, in a batch whose
//!   epoch is the entry's term; the record is the entry (log id with its
//!   leader's node id, and payload) in `bincode`, so openraft gets back
//!   exactly the log id it wrote;
//! - **vote** ↔ the `quorum-state` file: the term is the epoch; an
//!   uncommitted vote is the vote cast (`voted`), a committed one the known
//!   leader (`leader`). openraft may replace an uncommitted vote for one
//!   node by a committed vote for another in the same term (the leader
//!   elected there); that keeps the vote cast and records the leader, which
//!   the file's rules allow (one vote and one leader per epoch). openraft
//!   has no directory ids: the vote's is `DirectoryId(node + 1)`, fixed
//!   per node, never zero;
//! - **last purged log id** (openraft needs the leader's node id, which the
//!   log does not keep below its start): the application-metadata file.

use openraft::{CommittedLeaderId, Entry, LogId, RaftTypeConfig, Vote};
use quorumlog_checkpoint::{DirectoryId, Epoch, NodeId, QuorumState};
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

/// The quorum state that records `vote`, from the durable state `prev`.
pub fn vote_to_state(prev: &QuorumState, vote: &Vote<u64>) -> QuorumState {
    let term = Epoch(vote.leader_id.term);
    let node = NodeId(vote.leader_id.node_id);
    let cast = quorumlog_checkpoint::Vote {
        node_id: node,
        directory_id: DirectoryId(u128::from(node.0) + 1),
    };
    let same_term = prev.epoch == term;
    let (voted, leader) = if vote.committed {
        // The leader of the term: the vote cast in it (if any) stays.
        (prev.voted.filter(|_| same_term), Some(node))
    } else {
        (Some(cast), prev.leader.filter(|_| same_term))
    };
    QuorumState {
        epoch: term,
        leader,
        voted,
        voters: prev.voters.clone(),
    }
}

/// The vote the quorum state records (`None` when nothing was ever saved).
///
/// A state with an epoch but neither a vote nor a leader (only the store's
/// own rules write one) reads as a vote for `me`: never a vote openraft
/// did not cast elsewhere, so it cannot lead to two votes in a term.
pub fn state_to_vote(state: &QuorumState, me: u64) -> Option<Vote<u64>> {
    let term = state.epoch.0;
    match (state.leader, state.voted) {
        (Some(leader), _) => Some(Vote::new_committed(term, leader.0)),
        (None, Some(v)) => Some(Vote::new(term, v.node_id.0)),
        (None, None) if term > 0 => Some(Vote::new(term, me)),
        (None, None) => None,
    }
}

/// The term and the node id of a log id.
pub fn term_of(log_id: &LogId<u64>) -> (u64, u64) {
    (log_id.leader_id.term, log_id.leader_id.node_id)
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
