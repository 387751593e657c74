//! The offline voter-set rewrite for an openraft 0.10 group that lost its
//! majority (what Kafka's metadata-recovery tooling and etcd's
//! `--force-new-cluster` do): on one surviving replica, with its Raft
//! stopped, the replica takes a vote above everything in its log as its
//! own leader, without a quorum, and appends a membership entry naming the
//! new voters. openraft runs on the last membership in the log, committed
//! or not, so once restarted the survivor is the quorum of the new set (a
//! set of one elects itself at once), commits its entries, and takes
//! members back with `add_learner` and `change_membership`.
//!
//! It overrides Raft: entries only the lost replicas held are gone for
//! good; an uncommitted membership change is replaced; the learners of the
//! old membership are not carried over. Run it on one survivor only, the
//! one with the longest log.
//!
//! [`survey`] reads what a rewrite would override, changing nothing;
//! [`recover_quorum`] writes the rewrite, durably.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::Arc;

use openraft10::entry::RaftEntry;
use openraft10::impls::Vote;
use openraft10::storage::{IOFlushed, RaftLogStorage};
use openraft10::type_config::alias::{LogIdOf, OneshotOf, SnapshotMetaOf};
use openraft10::type_config::async_runtime::Oneshot;
use openraft10::vote::RaftLeaderId;
use openraft10::{LogId, Membership, RaftLogReader, RaftTypeConfig};
use quorumlog_raft::Group;
use serde::{de::DeserializeOwned, Serialize};

use crate::mapping::EpochLeaderId;
use crate::{LogStore, SnapshotFiles};

/// Entries read per step of the backward scan for the last membership.
const SCAN_STEP: u64 = 1024;

/// Where the membership in force was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembershipSource {
    /// A membership entry of the log (committed or not).
    Log,
    /// The latest snapshot's metadata (the log holds no membership entry
    /// above it).
    Snapshot,
}

/// What a rewrite would override: the replica's state as found.
#[derive(Debug, Clone)]
pub struct Survey<C: RaftTypeConfig> {
    /// The vote on file.
    pub vote: Option<C::Vote>,
    /// The last log id (the last purged one if the log is empty).
    pub last_log_id: Option<LogIdOf<C>>,
    /// The commit point on file (entries above it were never known
    /// committed here).
    pub committed: Option<LogIdOf<C>>,
    /// The membership in force; `None`: the group was never initialized.
    pub membership: Option<InForce<C>>,
}

/// The membership in force, and where it was found.
#[derive(Debug, Clone)]
pub struct InForce<C: RaftTypeConfig> {
    /// The id of the entry that holds it (of the snapshot's last entry
    /// when found in a snapshot).
    pub log_id: Option<LogIdOf<C>>,
    /// The voters (one config, or two while a change is joint) and
    /// learners.
    pub membership: Membership<u64, C::Node>,
    /// The log or the snapshot.
    pub source: MembershipSource,
}

/// What [`recover_quorum`] wrote.
#[derive(Debug, Clone)]
pub struct Recovered<C: RaftTypeConfig> {
    /// The state it overrode.
    pub before: Survey<C>,
    /// The vote it saved: this replica's, committed, in a term above every
    /// term the log and the old vote held.
    pub vote: C::Vote,
    /// The membership entry's log id.
    pub log_id: LogIdOf<C>,
    /// The new voters.
    pub voters: BTreeSet<u64>,
}

/// Reads what a rewrite of `log`'s group would override, changing nothing.
///
/// Every entry of the log is decoded on the way back to the last
/// membership, so a log that is not `C`'s (another Raft library's, or
/// other node and payload types) fails here, before anything is written.
///
/// Opens no Raft and writes nothing (not even the end of an interrupted
/// purge, which [`LogStore::new`] would complete).
///
/// # Errors
/// The store's, and entries or a snapshot that do not decode as `C`'s.
pub async fn survey<C>(store: Arc<Group>, me: u64) -> io::Result<Survey<C>>
where
    C: RaftTypeConfig<NodeId = u64, Term = u64, Vote = Vote<<C as RaftTypeConfig>::LeaderId>>,
    C::LeaderId: EpochLeaderId,
    C::Entry: Serialize + DeserializeOwned + Clone,
    SnapshotMetaOf<C>: DeserializeOwned,
{
    surveyed(&mut LogStore::unrepaired(store, me)).await
}

async fn surveyed<C>(log: &mut LogStore<C>) -> io::Result<Survey<C>>
where
    C: RaftTypeConfig<NodeId = u64, Term = u64, Vote = Vote<<C as RaftTypeConfig>::LeaderId>>,
    C::LeaderId: EpochLeaderId,
    C::Entry: Serialize + DeserializeOwned + Clone,
    SnapshotMetaOf<C>: DeserializeOwned,
{
    let vote = log.read_vote().await?;
    let state = log.get_log_state().await?;
    let committed = log.read_committed().await?;
    let start = state.last_purged_log_id.as_ref().map_or(0, |l| l.index + 1);
    let end = state.last_log_id.as_ref().map_or(0, |l| l.index + 1);
    let mut membership = None;
    let mut hi = end;
    while hi > start && membership.is_none() {
        let lo = hi.saturating_sub(SCAN_STEP).max(start);
        let entries = log.try_get_log_entries(lo..hi).await?;
        if entries.len() as u64 != hi - lo {
            return Err(io::Error::other(format!(
                "the log between {lo} and {hi} read back {} entries",
                entries.len()
            )));
        }
        for (i, e) in (lo..hi).rev().zip(entries.iter().rev()) {
            if e.index() != i {
                return Err(io::Error::other(format!(
                    "the entry at {i} says it is at {}: not this Raft's log",
                    e.index()
                )));
            }
            if membership.is_none() {
                if let Some(m) = e.get_membership() {
                    membership = Some(InForce {
                        log_id: Some(e.log_id()),
                        membership: m,
                        source: MembershipSource::Log,
                    });
                }
            }
        }
        hi = lo;
    }
    if membership.is_none() {
        let files = SnapshotFiles::new(Arc::clone(log.store()));
        if let Some(snap) = files.current::<C>()? {
            let m = &snap.meta.last_membership;
            membership = Some(InForce {
                log_id: m.log_id().clone(),
                membership: m.membership().clone(),
                source: MembershipSource::Snapshot,
            });
        }
    }
    Ok(Survey {
        vote,
        last_log_id: state.last_log_id,
        committed,
        membership,
    })
}

/// Rewrites the voters of `log`'s group to `voters` (node id and node),
/// offline: this replica's vote, committed, in the term after every term
/// on file, then a membership entry of `voters` at the log's end, both
/// durable on return. The replica's Raft must not be running (the store's
/// directory lock keeps another process out; within a process, the
/// caller's duty: no other `LogStore` of `store` may be in use).
///
/// # Errors
/// `InvalidInput` when `voters` does not name this replica (it must lead
/// the recovered quorum) or is empty; [`survey`]'s; the store's.
pub async fn recover_quorum<C>(
    store: Arc<Group>,
    me: u64,
    voters: BTreeMap<u64, C::Node>,
) -> io::Result<Recovered<C>>
where
    C: RaftTypeConfig<NodeId = u64, Term = u64, Vote = Vote<<C as RaftTypeConfig>::LeaderId>>,
    C::LeaderId: EpochLeaderId,
    C::Entry: Serialize + DeserializeOwned + Clone,
    SnapshotMetaOf<C>: DeserializeOwned,
{
    if !voters.contains_key(&me) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the new voters must include this replica (node {me}), which leads the recovered quorum"),
        ));
    }
    let mut log = LogStore::<C>::new(store, me)?;
    let before = surveyed(&mut log).await?;
    let ids: BTreeSet<u64> = voters.keys().copied().collect();
    let membership = Membership::new(vec![ids.clone()], voters)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    let vote_term = before.vote.as_ref().map_or(0, |v| v.leader_id.term());
    let log_term = before.last_log_id.as_ref().map_or(0, term_of::<C>);
    let term = vote_term.max(log_term) + 1;
    let vote = Vote::new_committed(term, me);
    let leader = C::LeaderId::new(term, me);
    // The mapping must hold this leader's epoch: refuse before writing.
    leader
        .epoch()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    let index = before.last_log_id.as_ref().map_or(0, |l| l.index + 1);
    let log_id = LogId::new(leader.to_committed(), index);
    log.save_vote(&vote).await?;
    let (tx, rx) = OneshotOf::<C>::channel();
    log.append(
        [C::Entry::new_membership(log_id.clone(), membership)],
        IOFlushed::signal(tx),
    )
    .await?;
    rx.await
        .map_err(|e| io::Error::other(format!("the append's completion was dropped: {e:?}")))??;
    tracing::warn!(
        target: "quorumlog::election",
        term,
        index,
        voters = ?ids,
        "openraft group's voters rewritten offline (recover-quorum)"
    );
    Ok(Recovered {
        before,
        vote,
        log_id,
        voters: ids,
    })
}

/// The term of a log id's leader.
fn term_of<C>(l: &LogIdOf<C>) -> u64
where
    C: RaftTypeConfig<NodeId = u64, Term = u64>,
    C::LeaderId: EpochLeaderId,
{
    C::LeaderId::committed_epoch(&l.leader_id).map_or(0, |e| C::LeaderId::of_epoch(e, 0).term())
}

impl<C: RaftTypeConfig> Survey<C> {
    /// The old voters (each config of a joint one), if any.
    pub fn voters(&self) -> Vec<BTreeSet<u64>>
    where
        C: RaftTypeConfig<NodeId = u64>,
    {
        self.membership
            .as_ref()
            .map(|f| f.membership.get_joint_config().clone())
            .unwrap_or_default()
    }
}
