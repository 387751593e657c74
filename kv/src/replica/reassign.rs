//! Reassignment of the cluster's voters (issue 14) over openraft's
//! membership, driven by the same pure state machine as the store's
//! (`quorumlog_raft::kraft::voters::next_step`).
//!
//! - The voters are openraft's voter ids, each with the directory id of
//!   its data directory (asked of the node: a node back with an empty disk
//!   has a new one) and its address.
//! - The reassignment's durable state is replicated through Raft as a
//!   command of its own (`Command::Reassignment`, the store's control-record
//!   encoding), held by the state machine beside the keys, never among
//!   them; it survives restarts and a new leader finds it.
//! - Each step is an openraft membership change: an adding replica joins
//!   as a learner (the observer) and is promoted by `change_membership`
//!   once within [`MAX_LAG`] of the commit index; removals are
//!   `change_membership` too, the leader last (openraft's leader steps
//!   down once a membership without it commits). One change at a time:
//!   nothing starts while a membership change is not applied.
//! - The partition's reconcile loop (`server::reconcile`) takes a step
//!   when its Raft state or the controller's changes, and on a poll while
//!   a reassignment is under way.

use std::collections::{BTreeMap, BTreeSet};

use openraft10::async_runtime::WatchReceiver;
use openraft10::BasicNode;
use quorumlog_raft::kraft::voters::{
    next_step, plan_reassignment, ControlState, Reassignment, Step, StepInput, VoterEntry, VoterSet,
};
use quorumlog_raft::{DirectoryId, NodeId, Offset, Voter};

use crate::replica::Running;
use crate::wire::{Command, ReassignmentState, Refusal};

fn refused(e: impl std::fmt::Display) -> Refusal {
    Refusal::Refused {
        reason: e.to_string(),
    }
}

fn failed(e: impl std::fmt::Display) -> Refusal {
    Refusal::Failed {
        reason: e.to_string(),
    }
}

/// How far behind the commit index an adding replica may be to be
/// promoted.
pub const MAX_LAG: u64 = 64;

/// What the leader sees: the control state (voters with directories, the
/// reassignment), addresses, each replica's durable end, the commit end,
/// and whether the last membership change is applied.
struct View {
    state: ControlState,
    addrs: BTreeMap<u64, String>,
    progress: BTreeMap<Voter, Offset>,
    committed_end: Offset,
    settled: bool,
}

/// The directory id of node `id` at `addr` (this node's own from its
/// store).
fn directory(node: &Running, id: u64, addr: &str) -> Result<DirectoryId, Refusal> {
    if id == node.id {
        return Ok(node.directory);
    }
    node.directories
        .as_ref()
        .and_then(|d| d(id))
        .ok_or_else(|| failed(format!("node {id} at {addr}: directory not known yet")))
}

/// The leader's view: the reassignment record from the state machine, the
/// voter set and progress from openraft's metrics. Metrics lag the state
/// machine (a membership change can be applied, and its
/// `change_membership` returned, before they show it), so the view waits
/// for metrics that have applied at least what the machine had when the
/// record was read: a cancel or a new target is never planned from the
/// voter set before a promotion or removal that already happened.
async fn view(node: &Running) -> Result<View, Refusal> {
    let reassignment = node.machine.reassignment();
    let floor = node.machine.applied();
    let m = node
        .raft
        .wait(Some(std::time::Duration::from_secs(5)))
        .applied_index_at_least(floor, "metrics catch up with the state machine")
        .await
        .map_err(failed)?;
    let membership = m.membership_config.membership().clone();
    let addrs: BTreeMap<u64, String> = membership
        .nodes()
        .map(|(id, n)| (*id, n.addr.clone()))
        .collect();
    let mut entries = Vec::new();
    let mut dirs = BTreeMap::new();
    for id in membership.voter_ids() {
        let addr = addrs.get(&id).cloned().unwrap_or_default();
        let dir = directory(node, id, &addr)?;
        dirs.insert(id, dir);
        entries.push(VoterEntry {
            voter: Voter {
                node_id: NodeId(id),
                directory_id: dir,
            },
            endpoint: Some(addr),
        });
    }
    let voters = VoterSet::new(entries).map_err(refused)?;
    let applied = m.last_applied.map_or(0, |l| l.index + 1);
    let mut progress = BTreeMap::new();
    for (id, matched) in m.replication.clone().unwrap_or_default() {
        let dir = if let Some(d) = dirs.get(&id) {
            *d
        } else {
            let addr = addrs.get(&id).cloned().unwrap_or_default();
            match directory(node, id, &addr) {
                Ok(d) => d,
                Err(_) => continue,
            }
        };
        // Only what the replica acknowledged, from a node alive by the
        // node-level beats: one never replicated to, or on a node down (it
        // keeps its last position in the metrics), has no progress (the
        // plan counts it as catching up).
        let Some(end) = matched.map(|l| l.index + 1) else {
            continue;
        };
        if id != node.id && !node.alive.as_ref().is_none_or(|alive| alive(id)) {
            continue;
        }
        progress.insert(
            Voter {
                node_id: NodeId(id),
                directory_id: dir,
            },
            Offset(end),
        );
    }
    let settled = m
        .membership_config
        .log_id()
        .is_none_or(|l| l.index < applied);
    Ok(View {
        state: ControlState {
            voters: Some(voters),
            reassignment,
        },
        addrs,
        progress,
        committed_end: Offset(applied),
        settled,
    })
}

fn is_leader(node: &Running) -> bool {
    node.raft.metrics().borrow_watched().current_leader == Some(node.id)
}

/// The reassignment from the current voters to `target` (ids with
/// addresses), each target node asked its directory.
fn plan_to(
    node: &Running,
    v: &View,
    target: Vec<(u64, String)>,
    now_ms: u64,
) -> Result<Reassignment, Refusal> {
    let mut entries = Vec::new();
    for (id, addr) in target {
        let dir = directory(node, id, &addr)?;
        entries.push(VoterEntry {
            voter: Voter {
                node_id: NodeId(id),
                directory_id: dir,
            },
            endpoint: Some(addr),
        });
    }
    let set = VoterSet::new(entries).map_err(refused)?;
    plan_reassignment(&v.state, set, now_ms).map_err(refused)
}

/// Starts the reassignment of this partition's voters to `target` that
/// carries out the controller's `generation` (the partitioned service):
/// from the current voters, replacing a pending reassignment. A pending
/// one whose removals began is not replaced: `Completing`, and the caller
/// tries again once it finished.
///
/// # Errors
/// Not the leader; a membership change in flight; a refused plan; a node
/// that cannot be asked its directory; the write.
pub async fn request_generation(
    node: &Running,
    target: Vec<(u64, String)>,
    generation: u64,
    now_ms: u64,
) -> Result<(), Refusal> {
    crate::replica::confirm_leadership(node).await?;
    let v = view(node).await?;
    if !v.settled {
        return Err(Refusal::MembershipInFlight);
    }
    let r = plan_to(node, &v, target, now_ms)?;
    crate::replica::write(
        node,
        Command::Reassign {
            state: ReassignmentState(Some(r)),
            generation,
        },
    )
    .await
    .map(|_| ())
}

/// The voters (node ids) of the membership this node has applied, and
/// whether that membership change is applied (no change in flight).
pub fn voters(node: &Running) -> (BTreeSet<u64>, bool) {
    let m = node.raft.metrics().borrow_watched().clone();
    let applied = m.last_applied.map_or(0, |l| l.index + 1);
    let settled = m
        .membership_config
        .log_id()
        .is_none_or(|l| l.index < applied);
    (
        m.membership_config.membership().voter_ids().collect(),
        settled,
    )
}

async fn write_state(node: &Running, r: Option<Reassignment>) -> Result<(), Refusal> {
    crate::replica::write(node, Command::Reassignment(ReassignmentState(r)))
        .await
        .map(|_| ())
}

/// Runs the next step on the leader (nothing elsewhere); returns it.
///
/// # Errors
/// openraft's membership calls or the write.
pub async fn drive(node: &Running) -> Result<Step, Refusal> {
    // Nothing pending (the common case): no node is asked anything.
    if node.machine.reassignment().is_none() || !is_leader(node) {
        return Ok(Step::Idle);
    }
    crate::replica::ensure_lease(node).await?;
    let v = view(node).await?;
    let Some(latest) = v.state.voters.clone() else {
        return Ok(Step::Idle);
    };
    let me = Voter {
        node_id: NodeId(node.id),
        directory_id: node.directory,
    };
    let step = next_step(&StepInput {
        latest: &v.state,
        all_committed: v.settled,
        leader: me,
        progress: &v.progress,
        high_watermark: v.committed_end,
        max_lag: MAX_LAG,
    });
    match &step {
        Step::Append(next) => {
            for a in next.entries().iter().filter(|e| !latest.contains(e.voter)) {
                ensure_learner(node, &v, a).await?;
            }
            let ids: BTreeSet<u64> = next.voters().map(|x| x.node_id.0).collect();
            node.raft
                .change_membership(ids, false)
                .await
                .map_err(failed)?;
        }
        Step::CatchingUp(a) => {
            let entry = v
                .state
                .reassignment
                .as_ref()
                .and_then(|r| r.target.entries().iter().find(|e| e.voter == *a).cloned());
            if let Some(e) = entry {
                ensure_learner(node, &v, &e).await?;
            }
        }
        Step::Finish => write_state(node, None).await?,
        Step::Idle | Step::WaitForCommit | Step::Resign => {}
    }
    Ok(step)
}

/// Adds `e` as a learner unless it is a member already.
async fn ensure_learner(node: &Running, v: &View, e: &VoterEntry) -> Result<(), Refusal> {
    let id = e.voter.node_id.0;
    if v.addrs.contains_key(&id) {
        return Ok(());
    }
    // A partition's adding replica: its node was asked to host it
    // before this step (`server::reconcile::step`).
    let addr = e.endpoint.clone().unwrap_or_default();
    node.raft
        .add_learner(id, BasicNode { addr }, false)
        .await
        .map(|_| ())
        .map_err(failed)
}
