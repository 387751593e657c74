//! The leader's pure reassignment state machine ([`next_step`]), the
//! planners of a new target or a cancel, and the listing.

use std::collections::BTreeMap;

use quorumlog_checkpoint::{Offset, Voter};

use super::history::ControlState;
use super::record::{Reassignment, VoterEntry, VoterError, VoterSet};

/// A replica of an adding voter, as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddingReplica {
    /// The replica.
    pub entry: VoterEntry,
    /// A voter already (promoted), or still following as an observer.
    pub promoted: bool,
    /// How far its durable end is behind the high watermark, in offsets
    /// (`None` before its first fetch).
    pub lag: Option<u64>,
}

/// What [`status`] returns: a reassignment's listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReassignmentStatus {
    /// Every replica taking part: the current voters and the adding ones.
    pub replicas: Vec<VoterEntry>,
    /// The current (latest) voter set.
    pub voters: VoterSet,
    /// The replicas being added, with their state.
    pub adding: Vec<AddingReplica>,
    /// The voters being removed (still voters or not).
    pub removing: Vec<Voter>,
    /// Whether it is a cancelled reassignment rolling back.
    pub rollback: bool,
    /// Milliseconds since it started.
    pub elapsed_ms: u64,
}

/// The leader's next move in a reassignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do.
    Idle,
    /// An earlier change is not committed yet.
    WaitForCommit,
    /// An adding replica is not caught up yet.
    CatchingUp(Voter),
    /// Append this voter set (one voter added or removed).
    Append(VoterSet),
    /// The voter set is the target: append the reassignment's end.
    Finish,
    /// This leader is no longer a voter and its removal is committed:
    /// resign.
    Resign,
}

/// What [`next_step`] looks at.
#[derive(Debug, Clone)]
pub struct StepInput<'a> {
    /// The latest control state.
    pub latest: &'a ControlState,
    /// Whether every control record is committed.
    pub all_committed: bool,
    /// The leader.
    pub leader: Voter,
    /// Each replica's acknowledged durable end, from its fetches: a
    /// replica that never acknowledged a position has no entry (never a
    /// default such as 0: that would count a replica holding nothing as
    /// caught up on a short log).
    pub progress: &'a BTreeMap<Voter, Offset>,
    /// The high watermark.
    pub high_watermark: Offset,
    /// How far behind the high watermark an adding replica may be and
    /// still count as caught up.
    pub max_lag: u64,
}

/// The leader's pure reassignment state machine: the next voter-set change
/// (one at a time, each only once the previous one is committed). Order:
/// voters replaced by a new directory of the same node are removed first
/// (a node is in a set once); each adding replica is promoted once caught
/// up; only then are the removing voters removed, the leader last; then
/// the reassignment ends, and a leader that is no longer a voter resigns.
pub fn next_step(input: &StepInput<'_>) -> Step {
    let step = plan_step(input);
    // A leader that is no longer a voter changes no voter set (its
    // removal is committed or in flight: a voter leads the rest); it may
    // still append the reassignment's end.
    let outside = input
        .latest
        .voters
        .as_ref()
        .is_some_and(|l| !l.contains(input.leader));
    match step {
        Step::Append(_) | Step::CatchingUp(_) if outside => Step::Resign,
        s => s,
    }
}

/// [`next_step`] before the rule for a leader outside the voter set.
fn plan_step(input: &StepInput<'_>) -> Step {
    if !input.all_committed {
        return Step::WaitForCommit;
    }
    let Some(latest) = &input.latest.voters else {
        return Step::Idle;
    };
    let Some(r) = &input.latest.reassignment else {
        return if latest.contains(input.leader) {
            Step::Idle
        } else {
            Step::Resign
        };
    };
    let adding = r.adding();
    let removing = r.removing();
    let replaced = removing
        .iter()
        .filter(|v| adding.iter().any(|a| a.voter.node_id == v.node_id));
    for v in replaced {
        if latest.contains(*v) {
            if let Some(next) = latest.without(*v) {
                return guarded(input, next);
            }
        }
    }
    for a in &adding {
        if latest.contains(a.voter) {
            continue;
        }
        return if caught_up(input, a.voter) {
            guarded(input, latest.with(a.clone()))
        } else {
            Step::CatchingUp(a.voter)
        };
    }
    let mut order: Vec<Voter> = removing.clone();
    order.sort_by_key(|v| (*v == input.leader, v.node_id));
    for v in order {
        if latest.contains(v) {
            if let Some(next) = latest.without(v) {
                return guarded(input, next);
            }
        }
    }
    Step::Finish
}

/// Whether replica `v` counts as caught up: the leader, or a replica whose
/// *acknowledged* durable end (a `progress` entry: what it reported, never
/// a default) is within `max_lag` of the high watermark. A replica that
/// acknowledged nothing is catching up, however short the log is.
fn caught_up(input: &StepInput<'_>, v: Voter) -> bool {
    v == input.leader
        || input
            .progress
            .get(&v)
            .is_some_and(|end| input.high_watermark.0.saturating_sub(end.0) <= input.max_lag)
}

/// `Append(next)` when the caught-up replicas of `next` are a majority of
/// it (its new majority can commit without waiting for anyone behind);
/// else `CatchingUp` of a replica of `next` that is behind. No voter set
/// is entered whose majority needs a replica that has not caught up.
fn guarded(input: &StepInput<'_>, next: VoterSet) -> Step {
    let caught = next.voters().filter(|v| caught_up(input, *v)).count();
    if caught * 2 > next.len() {
        return Step::Append(next);
    }
    let behind = next.voters().find(|v| !caught_up(input, *v));
    match behind {
        Some(v) => Step::CatchingUp(v),
        None => Step::Append(next),
    }
}

/// Plans `alter_voters(Some(target))` from the current voter set and the
/// pending reassignment: a new reassignment (replacing a pending one that
/// is not completing: it is cancelled and the new one starts from the
/// current set, as `KIP-455` does).
///
/// # Errors
/// `NoVoterSet`, `Empty`/`DuplicateNode`/`TooLarge` (through the target's
/// construction), `NoMajorityPath`, `Completing`.
pub fn plan_reassignment(
    latest: &ControlState,
    target: VoterSet,
    now_ms: u64,
) -> Result<Reassignment, VoterError> {
    let current = latest.voters.as_ref().ok_or(VoterError::NoVoterSet)?;
    if let Some(p) = &latest.reassignment {
        if p.completing(current) {
            return Err(VoterError::Completing);
        }
    }
    let replaced = current
        .voters()
        .filter(|v| target.of_node(v.node_id).is_some_and(|t| t != *v))
        .count();
    if (current.len() - replaced) * 2 <= current.len() {
        return Err(VoterError::NoMajorityPath {
            replaced,
            current: current.len(),
        });
    }
    Ok(Reassignment {
        original: current.clone(),
        target,
        rollback: false,
        started_ms: now_ms,
    })
}

/// Plans `alter_voters(None)`: a rollback to the set before the pending
/// reassignment (its promoted replicas removed again).
///
/// # Errors
/// `NoReassignment`; `Completing` once its removals began; a rollback
/// already running is `Completing` too.
pub fn plan_cancel(latest: &ControlState, now_ms: u64) -> Result<Reassignment, VoterError> {
    let current = latest.voters.as_ref().ok_or(VoterError::NoVoterSet)?;
    let p = latest
        .reassignment
        .as_ref()
        .ok_or(VoterError::NoReassignment)?;
    if p.completing(current) {
        return Err(VoterError::Completing);
    }
    Ok(Reassignment {
        original: current.clone(),
        target: p.original.clone(),
        rollback: true,
        started_ms: now_ms,
    })
}

/// The listing of `latest`'s reassignment, if one is in progress.
pub fn status(
    latest: &ControlState,
    progress: &BTreeMap<Voter, Offset>,
    high_watermark: Offset,
    now_ms: u64,
) -> Option<ReassignmentStatus> {
    let r = latest.reassignment.as_ref()?;
    let voters = latest.voters.clone()?;
    let adding: Vec<AddingReplica> = r
        .adding()
        .into_iter()
        .map(|entry| AddingReplica {
            promoted: voters.contains(entry.voter),
            lag: progress
                .get(&entry.voter)
                .map(|end| high_watermark.0.saturating_sub(end.0)),
            entry,
        })
        .collect();
    let mut replicas: Vec<VoterEntry> = voters.entries().to_vec();
    for a in &adding {
        if !voters.contains(a.entry.voter) {
            replicas.push(a.entry.clone());
        }
    }
    replicas.sort_by_key(|e| (e.voter.node_id, e.voter.directory_id));
    Some(ReassignmentStatus {
        replicas,
        voters,
        adding,
        removing: r.removing(),
        rollback: r.rollback,
        elapsed_ms: now_ms.saturating_sub(r.started_ms),
    })
}
