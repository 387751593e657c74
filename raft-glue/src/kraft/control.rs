//! The store's voter-set history and reassignment ([`crate::voters`]).
//!
//! Kept in memory by offset ([`ControlHistory`]) and updated by every log
//! change: control records appended by the leader or a follower are
//! noted, a suffix truncation rolls the history back, a prefix cut folds
//! what it deletes into the state at the new start, and a log restarted at
//! a snapshot takes the state the snapshot carries (its metadata holds the
//! state in force at its end, [`snapshot_user_metadata`]).
//!
//! Open rebuilds the history without scanning the whole log: the
//! `voter-history` file holds the records by offset and the offset up to
//! which they are complete (`scanned_to`); each record is checked against
//! the log (a record the log no longer holds, truncated or lost in a
//! crash, drops it and everything after), and only the log past
//! `scanned_to` is scanned. The file is rewritten whenever a control record
//! is appended and at close, so a reopen scans at most what was appended
//! since the last of those.

use std::collections::BTreeMap;

use quorumlog_checkpoint::{Epoch, Offset, Voter};
use quorumlog_io::codec::{u32_len, Reader};
use quorumlog_log::{walk_records, AppendInfo, BatchRef, DurableLog, WalkBatches};
use quorumlog_snapshot::SnapshotStore;

use super::voters::{
    next_step, plan_cancel, plan_reassignment, status, ControlHistory, ControlRecord, ControlState,
    ReassignmentStatus, Step, StepInput, VoterError, VoterSet,
};
use super::KraftReplica;
use crate::error::{Error, Result};
use crate::store::{envelope, split_envelope, LogListener, Store, ENVELOPE_MAGIC};

/// The voter-history file is rewritten (on a high-watermark update) once
/// the log grew this many entries past the offset it covers, so a reopen
/// after a crash scans at most about this much of the log for voter
/// records.
pub const VOTER_HISTORY_EVERY: u64 = 65_536;
const FILE_VERSION: u8 = 1;
/// The voter-history file's limit: the data directory's small-file limit.
const MAX_VOTER_HISTORY_BYTES: usize = quorumlog_checkpoint::MAX_SMALL_FILE_BYTES;

/// Refuses a control change while an earlier one is uncommitted.
fn changes_committed(c: &Control, hw: Offset) -> Result<()> {
    match c.history.latest_change() {
        Some(o) if o >= hw => Err(Error::Voters(VoterError::ChangeInFlight(o))),
        _ => Ok(()),
    }
}

/// The history and how far it is known complete.
#[derive(Debug, Default)]
pub(super) struct Control {
    pub(super) history: ControlHistory,
    /// Every control record below this offset is in `history` (those still
    /// in the log).
    pub(super) scanned_to: Offset,
    /// The history is complete up to the log end (the open's scan got
    /// there), so saving may advance `scanned_to` to it.
    pub(super) complete: bool,
}

/// Splits a snapshot's stored metadata into the control state it carries
/// (voter set and reassignment at its end, written by
/// [`KraftReplica::create_snapshot`] when there is one) and the caller's own
/// metadata.
pub fn snapshot_user_metadata(stored: &[u8]) -> (Option<ControlState>, &[u8]) {
    match split_envelope(stored) {
        (Some(state), user) => match ControlState::decode(state) {
            Some(state) => (Some(state), user),
            None => (None, stored),
        },
        (None, user) => (None, user),
    }
}

/// The metadata stored for a snapshot whose end has `state` in force.
pub(super) fn wrap_snapshot_metadata(state: &ControlState, user: &[u8]) -> Vec<u8> {
    if *state == ControlState::default() && !user.starts_with(ENVELOPE_MAGIC) {
        return user.to_vec();
    }
    envelope(&state.encode(), user)
}

/// The control state a snapshot carries (none if it carries none, or
/// cannot be read: its own open reports that).
pub(super) fn snapshot_state(
    snapshots: &SnapshotStore,
    id: quorumlog_snapshot::SnapshotId,
) -> ControlState {
    snapshots
        .reader(id)
        .ok()
        .and_then(|r| snapshot_user_metadata(&r.header().metadata).0)
        .unwrap_or_default()
}

/// The control records of a portable batch (none unless it is a control
/// batch holding records of this module's kinds).
fn batch_records(b: &BatchRef<'_>) -> Vec<(Offset, ControlRecord)> {
    if !b.is_control() {
        return Vec::new();
    }
    b.to_vecs()
        .unwrap_or_default()
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let rec = ControlRecord::decode(r)?;
            Some((Offset(b.base_offset().0 + i as u64), rec))
        })
        .collect()
}

fn encode_file(c: &Control) -> Vec<u8> {
    let mut out = vec![FILE_VERSION];
    out.extend_from_slice(&c.history.base_offset().0.to_le_bytes());
    out.extend_from_slice(&c.scanned_to.0.to_le_bytes());
    let base = c.history.base_state().encode();
    out.extend_from_slice(&u32_len(base.len()).to_le_bytes());
    out.extend_from_slice(&base);
    for (o, rec) in c.history.records() {
        let bytes = rec.encode();
        out.extend_from_slice(&o.0.to_le_bytes());
        out.extend_from_slice(&u32_len(bytes.len()).to_le_bytes());
        out.extend_from_slice(&bytes);
    }
    out
}

fn decode_file(bytes: &[u8]) -> Option<Control> {
    let mut r = Reader::new(bytes);
    if r.u8().ok()? != FILE_VERSION {
        return None;
    }
    let base_offset = Offset(r.u64().ok()?);
    let scanned_to = Offset(r.u64().ok()?);
    let len = usize::try_from(r.u32().ok()?).ok()?;
    let base = ControlState::decode(r.bytes(len).ok()?)?;
    let mut history = ControlHistory::new(base_offset, base);
    while r.remaining() > 0 {
        let o = Offset(r.u64().ok()?);
        let len = usize::try_from(r.u32().ok()?).ok()?;
        history.record(o, ControlRecord::decode(r.bytes(len).ok()?)?);
    }
    Some(Control {
        history,
        scanned_to,
        complete: false,
    })
}

/// Whether the log holds exactly `rec` at `o`.
fn log_holds(log: &DurableLog, o: Offset, rec: &ControlRecord) -> bool {
    let Ok(walked) = walk_records(log, o, Offset(o.0 + 1), 1, WalkBatches::Control) else {
        return false;
    };
    walked
        .records
        .iter()
        .any(|r| r.offset == o && ControlRecord::decode(&r.bytes).as_ref() == Some(rec))
}

/// Rebuilds the history at open (see the module documentation); returns
/// it and the part of the log scanned, if any. Never refuses the open:
/// damage the scan meets ends it (the log reports it to its readers).
pub(super) fn rebuild(
    file: Option<&[u8]>,
    log: &DurableLog,
    snapshots: &SnapshotStore,
) -> (Control, Option<(Offset, Offset)>) {
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    let at_start = snapshots
        .latest()
        .filter(|s| s.id.end_offset == start)
        .map(|s| snapshot_state(snapshots, s.id));
    let mut c = match file.and_then(decode_file) {
        Some(mut c) if c.history.base_offset() <= start => {
            c.history.cut_prefix(start);
            c.history.truncate_to(end);
            let first_missing = c
                .history
                .records()
                .find(|(o, r)| !log_holds(log, *o, r))
                .map(|(o, _)| o);
            if let Some(o) = first_missing {
                c.history.truncate_to(o);
                c.scanned_to = c.scanned_to.min(o);
            }
            c.scanned_to = c.scanned_to.clamp(start, end);
            c
        }
        _ => Control {
            history: ControlHistory::new(start, ControlState::default()),
            scanned_to: start,
            complete: false,
        },
    };
    // A snapshot ending at the log start is authoritative there (the log
    // may have been restarted at it, past whatever the file knew).
    if let Some(state) = at_start {
        if c.history.state_at(start) != state || c.history.base_offset() != start {
            let records: Vec<(Offset, ControlRecord)> =
                c.history.records().map(|(o, r)| (o, r.clone())).collect();
            c.history.restart(start, state);
            for (o, r) in records {
                c.history.record(o, r);
            }
        }
    }
    let from = c.scanned_to;
    let mut at = from;
    while at < end {
        // A batch that does not read back (damage the log's lazy recovery
        // has not met yet) ends the scan: the open is not refused for it
        // (the log reports it to whoever reads there), and the next open
        // scans from here again. User batches are skipped undecoded.
        let Ok(walked) = walk_records(log, at, end, 4 << 20, WalkBatches::Control) else {
            break;
        };
        for r in walked.records {
            if let Some(rec) = ControlRecord::decode(&r.bytes) {
                c.history.record(r.offset, rec);
            }
        }
        if walked.next <= at {
            break;
        }
        at = walked.next;
    }
    c.scanned_to = at;
    c.complete = at >= end;
    (c, (at > from).then_some((from, at)))
}

/// The history behind its lock, shared by the wing and the store's
/// listener (through which it follows every log change).
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

    /// Rewrites the `voter-history` file from the history (complete up to
    /// the log end).
    pub(super) fn save(&self, store: &Store) -> Result<()> {
        let bytes = {
            let mut c = self.lock();
            if c.complete {
                c.scanned_to = store.log.log_end_offset();
            }
            encode_file(&c)
        };
        Ok(store.dd.write_voter_history(&bytes)?)
    }
}

impl LogListener for Shared {
    /// Records past the log's end are gone, records below its start fold
    /// into the state at the start.
    fn after_extent(&self, store: &Store) {
        let (start, end) = (store.log.log_start_offset(), store.log.log_end_offset());
        let mut c = self.lock();
        c.history.truncate_to(end);
        c.history.cut_prefix(start);
        c.scanned_to = c.scanned_to.clamp(start, end);
    }

    /// The history restarts in the state the snapshot carries.
    fn after_restart_at(&self, store: &Store, id: quorumlog_snapshot::SnapshotId) {
        let state = snapshot_state(&store.snapshots, id);
        let mut c = self.lock();
        c.history.restart(id.end_offset, state);
        c.scanned_to = id.end_offset;
        c.complete = true;
    }

    /// Rewrites the voter-history file when the high watermark (so the
    /// log) grew [`VOTER_HISTORY_EVERY`] entries past what it covers: one
    /// comparison under the history's lock on every other update.
    fn after_high_watermark(&self, store: &Store, offset: Offset) -> Result<()> {
        let due = {
            let c = self.lock();
            c.complete && offset.0.saturating_sub(c.scanned_to.0) >= VOTER_HISTORY_EVERY
        };
        if due {
            self.save(store)?;
        }
        Ok(())
    }
}

impl KraftReplica {
    pub(super) fn control(&self) -> std::sync::MutexGuard<'_, Control> {
        self.control.lock()
    }

    /// Rewrites the `voter-history` file from the history.
    pub(super) fn save_control(&self) -> Result<()> {
        self.control.save(&self.store)
    }

    /// Notes the control records of raw batches just appended (verified
    /// by the append: only their headers are parsed again, and only
    /// control batches decoded); saves the file if there were any. Nothing
    /// is allocated for a follower append without control batches.
    pub(super) fn note_appended(&self, raw_batches: &[&[u8]]) -> Result<()> {
        let found: Vec<(Offset, ControlRecord)> = raw_batches
            .iter()
            .filter_map(|b| BatchRef::from_verified_raw(b).ok())
            .flat_map(|b| batch_records(&b))
            .collect();
        if found.is_empty() {
            return Ok(());
        }
        {
            let mut c = self.control();
            for (o, rec) in found {
                c.history.record(o, rec);
            }
        }
        self.save_control()
    }

    /// The state to store with a snapshot ending at `end`.
    pub(super) fn control_state_at_end(&self, end: Offset) -> ControlState {
        let c = self.control();
        match end.0.checked_sub(1) {
            Some(last) => c.history.state_at(Offset(last)),
            None => c.history.base_state().clone(),
        }
    }

    /// The latest voter set and reassignment (in force from the moment
    /// they are appended, as single-server changes are).
    pub fn control_state(&self) -> ControlState {
        self.control().history.latest()
    }

    /// The latest voter set (`None` before the first voter-set record).
    pub fn voters(&self) -> Option<VoterSet> {
        self.control_state().voters
    }

    /// The voter set committed (below the high watermark).
    pub fn committed_voters(&self) -> Option<VoterSet> {
        let hw = self.store.log.high_watermark().unwrap_or(Offset(0));
        self.control().history.committed(hw).voters
    }

    /// The voter set in force at `offset`.
    pub fn voters_at(&self, offset: Offset) -> Option<VoterSet> {
        self.control().history.state_at(offset).voters
    }

    /// One control change, atomic under the history's lock from the check
    /// to the record: `plan` sees the history and the high watermark and
    /// returns the record to append (or `None`, or a refusal); the record
    /// is appended as the leader of `epoch` and noted before the lock is
    /// released, so two concurrent changes can never both pass a check
    /// ("one change at a time", docs/design.md §8b). Refused before
    /// anything is written when the voter-history file (which must hold
    /// every record still in the log) would outgrow its limit: a directory
    /// must never reach a state its own open cannot read back. The file is
    /// rewritten after the lock is released (it is a cache checked against
    /// the log at open, so an older copy written last loses nothing).
    pub(super) fn change_control(
        &self,
        epoch: Epoch,
        plan: impl FnOnce(&Control, Offset) -> Result<Option<ControlRecord>>,
    ) -> Result<Option<AppendInfo>> {
        let (info, file) = {
            let mut c = self.control();
            let hw = self.store.log.high_watermark().unwrap_or(Offset(0));
            let Some(rec) = plan(&c, hw)? else {
                return Ok(None);
            };
            let record = rec.encode();
            let bytes = encode_file(&c).len() + 8 + 4 + record.len();
            if bytes > MAX_VOTER_HISTORY_BYTES {
                return Err(Error::Voters(VoterError::HistoryFull {
                    bytes,
                    max: MAX_VOTER_HISTORY_BYTES,
                }));
            }
            let info = self.append_control(epoch, &[record])?;
            c.history.record(info.base_offset, rec);
            if c.complete {
                c.scanned_to = self.store.log.log_end_offset();
            }
            (info, encode_file(&c))
        };
        self.store
            .guarded(|| Ok(self.store.dd.write_voter_history(&file)?))?;
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
    /// store's log (its last epoch, or its snapshot's for an empty log).
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
        let ours = super::election::LogPosition {
            last_epoch: self
                .log
                .last_epoch()
                .or_else(|| self.store.snapshots.latest().map(|s| s.id.epoch)),
            end_offset: self.store.log.log_end_offset(),
        };
        self.election().grant_vote(
            epoch,
            (candidate.node_id, Some(candidate.directory_id)),
            candidate_log,
            ours,
        )
    }

    /// Stands for election: refused unless this replica ([`Store::me`]) is
    /// a voter of the latest set (once one is known); returns the new
    /// epoch.
    ///
    /// # Errors
    /// `Voters(NotAVoter)`; as `Election::become_candidate`.
    pub fn become_candidate(&self) -> Result<Epoch> {
        let me = self.me();
        if self.voters().is_some_and(|s| !s.contains(me)) {
            return Err(Error::Voters(VoterError::NotAVoter(me)));
        }
        self.election().become_candidate()
    }

    /// The reassignment in progress, with every replica's state.
    pub fn list_reassignment(
        &self,
        progress: &BTreeMap<Voter, Offset>,
        now_ms: u64,
    ) -> Option<ReassignmentStatus> {
        let hw = self.store.log.high_watermark().unwrap_or(Offset(0));
        status(&self.control_state(), progress, hw, now_ms)
    }
}
