//! Everything openraft-0.10-specific about how its values live in the
//! store, in one place:
//!
//! - **epochs** ([`EpochLeaderId`]): with the standard leader id
//!   (`leader_id_std`: one leader per term, a node votes once per term) the
//!   epoch is the term, and a log id's committed leader id is the term
//!   alone; with the advanced one (`leader_id_adv`, openraft's default: a
//!   node may vote twice in one term, for a candidate with a greater node
//!   id) the epoch is the whole leader id, `term << 32 | node id`, so the
//!   leader's node id is recoverable from the log's epochs, and the
//!   store's rule of one vote and one leader per epoch is openraft's rule
//!   of one per leader id. Epochs order as openraft's votes and log ids do
//!   in both (tested exhaustively, `tests/mapping.rs`);
//! - **entries**: one record per entry, at offset = index, in a batch whose
//!   epoch is the entry's; the record is the entry in `bincode`;
//! - **vote** ↔ the store's quorum state: the epoch is the vote's; an
//!   uncommitted vote is the vote cast (`voted`), a committed one the
//!   leader (`leader`); openraft has no directory ids: the vote's is
//!   `DirectoryId(node + 1)`, fixed per node, never zero;
//! - **last purged log id**: the application-metadata file (the log does
//!   not keep the leader below its start).

use openraft10::impls::{leader_id_adv, leader_id_std, Vote};
use openraft10::vote::RaftLeaderId;
use openraft10::{LogId, RaftTypeConfig};
use quorumlog_raft::vote::{pack_leader, unpack_leader};
use quorumlog_raft::{Epoch, NodeId, QuorumState};
use serde::{de::DeserializeOwned, Deserialize, Serialize};

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
            "leader id (term {}, node {}) does not fit an epoch (advanced leader ids: both must be below 2^32)",
            self.term, self.node_id
        )
    }
}

impl std::error::Error for MappingError {}

/// A leader id kind the store can hold: how its leader ids and committed
/// leader ids (those in log ids) become store epochs and back.
pub trait EpochLeaderId: RaftLeaderId<Term = u64, NodeId = u64> + Copy {
    /// The epoch of a leader id (a vote's).
    ///
    /// # Errors
    /// `MappingError` if it does not fit.
    fn epoch(&self) -> Result<Epoch, MappingError>;

    /// The epoch of a committed leader id (a log id's).
    ///
    /// # Errors
    /// `MappingError` if it does not fit.
    fn committed_epoch(c: &Self::Committed) -> Result<Epoch, MappingError>;

    /// The committed leader id an epoch holds.
    fn committed_of(epoch: Epoch) -> Self::Committed;

    /// The leader id of `epoch` for a vote cast for `node` (the node is
    /// part of the epoch with advanced leader ids).
    fn of_epoch(epoch: Epoch, node: u64) -> Self;
}

fn packed(term: u64, node_id: u64) -> Result<Epoch, MappingError> {
    pack_leader(term, node_id).ok_or(MappingError { term, node_id })
}

impl EpochLeaderId for leader_id_adv::LeaderId<u64, u64> {
    fn epoch(&self) -> Result<Epoch, MappingError> {
        packed(self.term, self.node_id)
    }

    fn committed_epoch(c: &Self::Committed) -> Result<Epoch, MappingError> {
        packed(c.term, c.node_id)
    }

    fn committed_of(epoch: Epoch) -> Self::Committed {
        let (term, node_id) = unpack_leader(epoch);
        leader_id_adv::LeaderId { term, node_id }
    }

    fn of_epoch(epoch: Epoch, _node: u64) -> Self {
        Self::committed_of(epoch)
    }
}

impl EpochLeaderId for leader_id_std::LeaderId<u64, u64> {
    fn epoch(&self) -> Result<Epoch, MappingError> {
        Ok(Epoch(self.term))
    }

    fn committed_epoch(c: &Self::Committed) -> Result<Epoch, MappingError> {
        Ok(Epoch(c.term))
    }

    fn committed_of(epoch: Epoch) -> Self::Committed {
        <Self as RaftLeaderId>::new(epoch.0, 0).to_committed()
    }

    fn of_epoch(epoch: Epoch, node: u64) -> Self {
        leader_id_std::LeaderId {
            term: epoch.0,
            voted_for: node,
        }
    }
}

/// The log id of `index` in `epoch`.
pub fn log_id<L: EpochLeaderId>(epoch: Epoch, index: u64) -> LogId<L::Committed> {
    LogId::new(L::committed_of(epoch), index)
}

/// The record bytes of `entry`.
///
/// # Errors
/// What `bincode` reports.
pub fn encode_entry<E: Serialize>(entry: &E) -> Result<Vec<u8>, bincode::Error> {
    bincode::serialize(entry)
}

/// The size of [`encode_entry`]'s bytes, without encoding.
///
/// # Errors
/// As bincode's.
pub fn encoded_size<E: Serialize>(entry: &E) -> Result<u64, bincode::Error> {
    bincode::serialized_size(entry)
}

/// [`encode_entry`] appended to `out` (straight into a batch body: the
/// entry's only copy before the batch).
///
/// # Errors
/// As bincode's.
pub fn encode_entry_into<E: Serialize>(out: &mut Vec<u8>, entry: &E) -> Result<(), bincode::Error> {
    bincode::serialize_into(out, entry)
}

/// The entry a record holds.
///
/// # Errors
/// What `bincode` reports (bytes that are not an entry).
pub fn decode_entry<E: DeserializeOwned>(bytes: &[u8]) -> Result<E, bincode::Error> {
    bincode::deserialize(bytes)
}

/// Why a vote cannot be recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VoteRefused {
    /// Its leader id does not fit an epoch.
    Unmappable(MappingError),
    /// openraft's order puts it below the vote on file (or beside it:
    /// incomparable, a second vote in one standard term).
    Regression {
        /// The vote on file.
        current: String,
        /// The vote refused.
        proposed: String,
    },
}

impl std::fmt::Display for VoteRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VoteRefused::Unmappable(e) => e.fmt(f),
            VoteRefused::Regression { current, proposed } => {
                write!(
                    f,
                    "vote {proposed} is not at or above the vote on file {current}"
                )
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
pub fn vote_to_state<L: EpochLeaderId>(
    prev: &QuorumState,
    vote: &Vote<L>,
    me: u64,
) -> Result<QuorumState, VoteRefused> {
    let epoch = vote.leader_id.epoch().map_err(VoteRefused::Unmappable)?;
    if let Some(current) = state_to_vote::<L>(prev, me) {
        let at_least = matches!(
            vote.partial_cmp(&current),
            Some(std::cmp::Ordering::Greater | std::cmp::Ordering::Equal)
        );
        if !at_least {
            return Err(VoteRefused::Regression {
                current: current.to_string(),
                proposed: vote.to_string(),
            });
        }
    }
    Ok(quorumlog_raft::vote::library_vote(
        prev,
        epoch,
        Some(NodeId(*vote.leader_id.node_id())),
        vote.committed,
    ))
}

/// The vote the quorum state records (`None` when nothing was ever saved).
///
/// A state with an epoch but neither a vote nor a leader (the store's own
/// restart rule writes one, moving the epoch up to the log's last) reads as
/// an uncommitted vote in that epoch: for the node the epoch holds with
/// advanced leader ids, for `me` with standard ones (so this node never
/// votes for another in that term: never a second vote in one term).
pub fn state_to_vote<L: EpochLeaderId>(state: &QuorumState, me: u64) -> Option<Vote<L>> {
    let committed = state.leader.is_some();
    let node = match (state.leader, state.voted) {
        (Some(leader), _) => leader.0,
        (None, Some(v)) => v.node_id.0,
        (None, None) if state.epoch.0 > 0 => me,
        (None, None) => return None,
    };
    Some(Vote {
        leader_id: L::of_epoch(state.epoch, node),
        committed,
    })
}

/// What the adapter keeps in the application-metadata file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct AppMeta<C: RaftTypeConfig> {
    /// The last log id openraft purged.
    pub last_purged: Option<openraft10::type_config::alias::LogIdOf<C>>,
}

impl<C: RaftTypeConfig> Default for AppMeta<C> {
    fn default() -> Self {
        AppMeta { last_purged: None }
    }
}

impl<C: RaftTypeConfig> AppMeta<C> {
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
    pub fn decode(bytes: Option<&[u8]>) -> Result<Self, bincode::Error> {
        bytes.map_or(Ok(AppMeta::default()), bincode::deserialize)
    }
}
