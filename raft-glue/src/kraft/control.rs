//! The wing's voter-set history and reassignment ([`crate::kraft::voters`]).
//!
//! Kept in memory by offset ([`ControlHistory`]) and updated by every log
//! change the wing makes: control entries appended by the leader or a
//! follower are noted, a suffix truncation rolls the history back, a
//! prefix cleaning folds what it deletes into the state at the new start,
//! and an install restarts it in the state the snapshot carries (its
//! metadata holds the state in force at its end,
//! [`snapshot_user_metadata`]).
//!
//! Open rebuilds it from the group: the state at the log start (the
//! snapshot ending there, else the base the wing recorded in the group's
//! application metadata before its last cleaning, else none), then the
//! control entries of the log, read from their own batches (the node's
//! index flags them: user batches are not read). There is no cache file
//! to keep in step with the log.

use std::collections::BTreeMap;

use quorumlog_checkpoint::{Epoch, Offset, Voter};
use quorumlog_io::codec::u32_len;
use quorumlog_log::AppendInfo;
use quorumlog_snapshot::SnapshotId;

use super::voters::{
    next_step, plan_cancel, plan_reassignment, ControlHistory, ControlRecord, ControlState, Step,
    StepInput, VoterError, VoterSet,
};
use super::KraftReplica;
use crate::error::{Error, Result};
use crate::Group;

/// The magic of the envelope a snapshot's stored metadata may have: the
/// magic, a `u32` length, that many bytes of the wing's voter state, then
/// the caller's metadata.
const ENVELOPE_MAGIC: &[u8; 4] = b"QLSC";
/// The magic of the wing's base record in its group's application
/// metadata: the magic, the offset (`u64`), the voter state there.
const BASE_MAGIC: &[u8; 4] = b"QLKB";

/// Refuses a control change while an earlier one is uncommitted.
fn changes_committed(c: &Control, hw: Offset) -> Result<()> {
    match c.history.latest_change() {
        Some(o) if o >= hw => Err(Error::Voters(VoterError::ChangeInFlight(o))),
        _ => Ok(()),
    }
}

/// The history.
#[derive(Debug, Default)]
pub(super) struct Control {
    pub(super) history: ControlHistory,
}

impl Control {
    /// The state in force at `end` (what a snapshot ending there carries).
    pub(super) fn state_at_end(&self, end: Offset) -> ControlState {
        match end.0.checked_sub(1) {
            Some(last) => self.history.state_at(Offset(last)),
            None => self.history.base_state().clone(),
        }
    }
}

/// The stored metadata `state` and `user` in an envelope.
fn envelope(state: &[u8], user: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + state.len() + user.len());
    out.extend_from_slice(ENVELOPE_MAGIC);
    out.extend_from_slice(&u32_len(state.len()).to_le_bytes());
    out.extend_from_slice(state);
    out.extend_from_slice(user);
    out
}

/// Splits a snapshot's stored metadata into the control state it carries
/// (voter set and reassignment at its end, written by
/// [`KraftReplica::create_snapshot`] when there is one) and the caller's own
/// metadata.
pub fn snapshot_user_metadata(stored: &[u8]) -> (Option<ControlState>, &[u8]) {
    let parsed = stored
        .strip_prefix(ENVELOPE_MAGIC.as_slice())
        .and_then(|rest| {
            let (len, rest) = rest.split_first_chunk::<4>()?;
            rest.split_at_checked(usize::try_from(u32::from_le_bytes(*len)).ok()?)
        });
    match parsed {
        Some(([], user)) => (None, user),
        Some((state, user)) => match ControlState::decode(state) {
            Some(state) => (Some(state), user),
            None => (None, stored),
        },
        None => (None, stored),
    }
}

/// The metadata stored for a snapshot whose end has `state` in force (a
/// caller's metadata that begins like the envelope is wrapped, so it reads
/// back as it was given).
pub(super) fn wrap_snapshot_metadata(state: &ControlState, user: &[u8]) -> Vec<u8> {
    if *state == ControlState::default() {
        if user.starts_with(ENVELOPE_MAGIC) {
            return envelope(&[], user);
        }
        return user.to_vec();
    }
    envelope(&state.encode(), user)
}

/// The control state snapshot `id` carries (none if it carries none or
/// cannot be read: its reader reports that).
fn snapshot_state(group: &Group, id: SnapshotId) -> ControlState {
    group
        .snapshot(id)
        .and_then(|s| s.metadata())
        .ok()
        .and_then(|m| snapshot_user_metadata(&m).0)
        .unwrap_or_default()
}

/// Records `state` as the voter state at `offset` (before a cleaning
/// moves the log start there), durably, in the group's application
/// metadata.
pub(super) fn save_base(group: &Group, offset: Offset, state: &ControlState) -> Result<()> {
    let mut out = BASE_MAGIC.to_vec();
    out.extend_from_slice(&offset.0.to_le_bytes());
    out.extend_from_slice(&state.encode());
    group.write_app_metadata(&out)
}

fn decode_base(bytes: &[u8]) -> Option<(Offset, ControlState)> {
    let rest = bytes.strip_prefix(BASE_MAGIC.as_slice())?;
    let (o, state) = rest.split_first_chunk::<8>()?;
    Some((Offset(u64::from_le_bytes(*o)), ControlState::decode(state)?))
}

/// Rebuilds the history of `group` (see the module documentation).
///
/// # Errors
/// The reads of the control entries.
pub(super) fn rebuild(group: &Group) -> Result<Control> {
    let x = group.extent();
    let at_start = group
        .snapshots()
        .into_iter()
        .find(|s| s.id.end_offset == x.start)
        .map(|s| snapshot_state(group, s.id));
    let saved = group.app_metadata().and_then(|m| decode_base(&m));
    let (base, state) = match (at_start, saved) {
        (Some(state), _) => (x.start, state),
        // A base past the start: the cleaning that recorded it did not
        // happen (a crash between): the state is known from there.
        (None, Some((o, state))) if o <= x.queued_end => (o.max(x.start), state),
        _ => (x.start, ControlState::default()),
    };
    let mut history = ControlHistory::new(base, state);
    for e in group.control_entries(base)? {
        if let Some(rec) = ControlRecord::decode(&e.bytes) {
            history.record(e.offset, rec);
        }
    }
    Ok(Control { history })
}

/// The history behind its lock.
#[derive(Debug)]
pub(super) struct Shared(std::sync::Mutex<Control>);

impl Shared {
    pub(super) fn new(c: Control) -> Shared {
        Shared(std::sync::Mutex::new(c))
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Control> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Which control state [`KraftReplica::control_state`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateAt {
    /// Every record appended (in force at once).
    Latest,
    /// The records below the high watermark.
    Committed,
    /// The records at or below an offset.
    At(Offset),
}

impl KraftReplica {
    pub(super) fn control(&self) -> std::sync::MutexGuard<'_, Control> {
        self.control.lock()
    }

    /// Notes control records appended at `base` (those of the voter
    /// kinds enter the history).
    pub(super) fn note_control<'r>(&self, base: Offset, records: impl Iterator<Item = &'r [u8]>) {
        let mut c = self.control();
        for (i, r) in records.enumerate() {
            if let Some(rec) = ControlRecord::decode(r) {
                c.history.record(Offset(base.0 + i as u64), rec);
            }
        }
    }

    /// The high watermark, or 0.
    fn hw(&self) -> Offset {
        self.group.extent().high_watermark.unwrap_or(Offset(0))
    }

    /// The control state (voter set, reassignment) in force
    /// ([`StateAt::Latest`]: every record, used at once, as single-server
    /// changes are), committed ([`StateAt::Committed`]: the records below
    /// the high watermark), or at an offset ([`StateAt::At`]).
    pub fn control_state(&self, at: StateAt) -> ControlState {
        let c = self.control();
        match at {
            StateAt::Latest => c.history.latest(),
            StateAt::Committed => c.history.committed(self.hw()),
            StateAt::At(offset) => c.history.state_at(offset),
        }
    }

    /// One control change, atomic under the history's lock from the check
    /// to the record: `plan` sees the history and the high watermark and
    /// returns the record to append (or `None`, or a refusal); the record
    /// is appended as the leader of `epoch` and noted before the lock is
    /// released, so two concurrent changes can never both pass a check
    /// ("one change at a time", docs/design.md §10). Lock order: the
    /// history, then the election.
    pub(super) fn change_control(
        &self,
        epoch: Epoch,
        plan: impl FnOnce(&Control, Offset) -> Result<Option<ControlRecord>>,
    ) -> Result<Option<AppendInfo>> {
        let mut c = self.control();
        let Some(rec) = plan(&c, self.hw())? else {
            return Ok(None);
        };
        let info = {
            let election = self.election();
            election.check_leader_append(epoch)?;
            let base = self.group.extent().queued_end;
            self.group
                .append_flagged(base, epoch, &[rec.encode()], true)?
        };
        c.history.record(info.base_offset, rec);
        drop(c);
        self.group.write_queued()?;
        Ok(Some(info))
    }

    /// Appends a complete voter set as the leader of `epoch` (used at
    /// once). The first one bootstraps the quorum.
    ///
    /// # Errors
    /// `Voters(ChangeInFlight)` while an earlier control change is
    /// uncommitted; `WrongRole`; the log's errors.
    pub fn append_voter_set(&self, epoch: Epoch, set: VoterSet) -> Result<AppendInfo> {
        let info = self.change_control(epoch, |c, hw| {
            changes_committed(c, hw)?;
            Ok(Some(ControlRecord::VoterSet(set)))
        })?;
        Ok(info.unwrap_or_else(|| unreachable!("a voter set is always appended")))
    }

    /// Starts a reassignment to `target`, replacing a pending one (which
    /// is cancelled: the new one starts from the current set); `None`
    /// cancels the pending one (a rollback to the set before it). Durable
    /// as a control record; the leader then drives it
    /// ([`KraftReplica::drive_reassignment`]).
    ///
    /// # Errors
    /// `Voters(NoVoterSet | NoMajorityPath | Completing | NoReassignment |
    /// ChangeInFlight)`; `WrongRole` on a non-leader.
    pub fn alter_voters(
        &self,
        epoch: Epoch,
        target: Option<VoterSet>,
        now_ms: u64,
    ) -> Result<AppendInfo> {
        self.election().check_leader_append(epoch)?;
        let info = self.change_control(epoch, |c, hw| {
            changes_committed(c, hw)?;
            let latest = c.history.latest();
            let r = match target {
                Some(t) => plan_reassignment(&latest, t, now_ms)?,
                None => plan_cancel(&latest, now_ms)?,
            };
            Ok(Some(ControlRecord::Reassignment(Some(r))))
        })?;
        Ok(info.unwrap_or_else(|| unreachable!("a reassignment is always appended")))
    }

    /// Runs the reassignment's next step as the leader `leader` of `epoch`
    /// ([`next_step`]): appends the next voter set or the reassignment's
    /// end, or resigns; returns the step. The step is decided and its
    /// record appended under one hold of the history's lock.
    ///
    /// # Errors
    /// As the append; `WrongRole` if this node does not lead `epoch`.
    pub fn drive_reassignment(
        &self,
        epoch: Epoch,
        leader: Voter,
        progress: &BTreeMap<Voter, Offset>,
        max_lag: u64,
    ) -> Result<Step> {
        let mut decided = Step::Idle;
        self.change_control(epoch, |c, hw| {
            let latest = c.history.latest();
            let step = next_step(&StepInput {
                latest: &latest,
                all_committed: c.history.latest_change().is_none_or(|o| o < hw),
                leader,
                progress,
                high_watermark: hw,
                max_lag,
            });
            let rec = match &step {
                Step::Append(set) => Some(ControlRecord::VoterSet(set.clone())),
                Step::Finish => Some(ControlRecord::Reassignment(None)),
                Step::Resign | Step::Idle | Step::WaitForCommit | Step::CatchingUp(_) => None,
            };
            decided = step;
            Ok(rec)
        })?;
        if decided == Step::Resign {
            let mut e = self.election();
            e.check_leader_append(epoch)?;
            e.resign();
        }
        Ok(decided)
    }

    /// Answers a vote request of `candidate` (node and directory) for
    /// `epoch`, whose log ends at `candidate_log`, sent to `addressed_to`:
    /// the voter the candidate's set names for this node (`KIP-853`'s voter
    /// directory id in the request). A node back with an empty disk has a
    /// new directory id and is not that voter: it refuses, changing
    /// nothing. The candidate need not be in this replica's own set (its
    /// view may be stale: the candidate counts only votes of its set's
    /// voters). The rest is [`super::election::Election::grant_vote`], against this
    /// replica's log (its last epoch, or its snapshot's for an empty log).
    ///
    /// # Errors
    /// `Voters(NotAVoter)` (nothing changes, no epoch adopted); as
    /// `Election::grant_vote`.
    pub fn grant_vote_to(
        &self,
        epoch: Epoch,
        candidate: Voter,
        addressed_to: Voter,
        candidate_log: super::election::LogPosition,
    ) -> Result<super::election::VoteDecision> {
        if addressed_to != self.me() {
            return Err(Error::Voters(VoterError::NotAVoter(addressed_to)));
        }
        let ours = self.log_position();
        self.election().grant_vote(
            epoch,
            (candidate.node_id, Some(candidate.directory_id)),
            candidate_log,
            ours,
        )
    }

    /// Stands for election: refused unless this replica ([`KraftReplica::me`]) is
    /// a voter of the latest set (once one is known); returns the new
    /// epoch.
    ///
    /// # Errors
    /// `Voters(NotAVoter)`; as `Election::become_candidate`.
    pub fn become_candidate(&self) -> Result<Epoch> {
        let me = self.me();
        if self
            .control_state(StateAt::Latest)
            .voters
            .is_some_and(|s| !s.contains(me))
        {
            return Err(Error::Voters(VoterError::NotAVoter(me)));
        }
        self.election().become_candidate()
    }
}
