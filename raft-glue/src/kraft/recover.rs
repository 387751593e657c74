//! The offline voter-set rewrite for a quorum that lost its majority
//! (what Kafka's metadata-recovery tooling does for `KRaft`): on one
//! surviving replica, with the process stopped, this replica takes a new
//! epoch as its own leader, without a quorum, and appends a complete voter
//! set naming the survivors. Its log then carries the new set from that
//! offset, and the other survivors follow it once they fetch.
//!
//! It overrides what Raft otherwise guarantees: entries the lost replicas
//! held and this one does not are gone for good, and an uncommitted voter
//! change or reassignment is replaced. For the operator's
//! `quorumlog recover-quorum`.

use std::path::Path;

use quorumlog_checkpoint::{Epoch, Offset, SharedFs};

use super::voters::{ControlRecord, VoterError, VoterSet};
use super::KraftReplica;
use crate::error::{Error, Result};
use crate::{Identity, NodeOptions};

/// What [`recover_quorum`] overrode and wrote.
#[derive(Debug, Clone)]
pub struct QuorumRecovery {
    /// The epoch before.
    pub previous_epoch: Epoch,
    /// The epoch this replica now leads.
    pub epoch: Epoch,
    /// The voter set before (`None`: there was none).
    pub previous_voters: Option<VoterSet>,
    /// Whether a reassignment in progress was ended.
    pub ended_reassignment: bool,
    /// Where the new voter set is in the log.
    pub offset: Offset,
    /// The log's end and high watermark as found: entries above the
    /// watermark were never known committed.
    pub log_end: Offset,
    /// The high watermark, if known.
    pub high_watermark: Option<Offset>,
}

/// Rewrites the voter set of the `KRaft` node directory `dir` (which must be
/// `expect`'s) to `voters`, offline: a new epoch led by this replica,
/// a reassignment in progress ended, then the voter set, all durable.
/// Holds the directory's lock: a running replica's directory is
/// refused.
///
/// # Errors
/// `Voters(NotAVoter)` when `voters` does not name this replica (it
/// must lead the recovered quorum); `Checkpoint(Locked { holder })`
/// while the directory is open; the open's and the log's errors.
pub fn recover_quorum(
    fs: &SharedFs,
    dir: &Path,
    expect: &Identity,
    options: &NodeOptions,
    voters: VoterSet,
) -> Result<QuorumRecovery> {
    let (replica, _) = KraftReplica::open(fs, dir, expect, options)?;
    let me = replica.me();
    if !voters.contains(me) {
        return Err(Error::Voters(VoterError::NotAVoter(me)));
    }
    let previous_epoch = replica.election().epoch();
    let previous_voters = replica.control_state(super::StateAt::Latest).voters;
    let x = replica.extent();
    let (log_end, high_watermark) = (x.queued_end, x.high_watermark);
    let epoch = {
        let mut e = replica.election();
        let epoch = e.become_candidate()?;
        e.become_leader()?;
        epoch
    };
    let ended_reassignment = replica
        .control_state(super::StateAt::Latest)
        .reassignment
        .is_some();
    if ended_reassignment {
        replica.change_control(epoch, |_, _| Ok(Some(ControlRecord::Reassignment(None))))?;
    }
    let info = replica
        .change_control(epoch, |_, _| Ok(Some(ControlRecord::VoterSet(voters))))?
        .ok_or(Error::Voters(VoterError::Empty))?;
    replica.wait_durable(info.next_offset)?;
    tracing::warn!(
        target: "quorumlog::election",
        dir = %dir.display(),
        previous_epoch = previous_epoch.0,
        epoch = epoch.0,
        offset = info.base_offset.0,
        "voter set rewritten offline (recover-quorum)"
    );
    replica.close()?;
    Ok(QuorumRecovery {
        previous_epoch,
        epoch,
        previous_voters,
        ended_reassignment,
        offset: info.base_offset,
        log_end,
        high_watermark,
    })
}
