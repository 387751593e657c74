//! Each partition's leader carries out the controller's target for it.
//!
//! On every change of the partition's Raft state, and every 300 ms (the
//! controller's changes do not show in the partition's metrics), the
//! leader compares the controller's pending reassignment for its
//! partition, as its own controller replica has applied it, with the
//! generation its partition's state machine carries out:
//!
//! - a newer generation starts a reassignment from the current voters to
//!   the target (replacing one in progress, unless that one is already
//!   removing voters: it then finishes first, and the new target starts
//!   from where it ended). A controller replica that lags only ever shows
//!   an older generation, which is ignored: a target never moves back.
//! - the partition's reassignment is driven one voter change at a time
//!   ([`crate::reassign::drive`]): an adding replica's node hosts the
//!   partition, joins as a learner, is promoted once caught up; removals
//!   come last, the leader's own last.
//! - once the voters are the target and nothing is pending, the leader
//!   reports `Completed` to the controller.
//!
//! The replicas being added and not yet promoted are marked in the node's
//! throttle: only their traffic passes it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use openraft10::async_runtime::WatchReceiver;

use crate::parts::control::{Control, Controller, Pending, Replica};
use crate::parts::host::{Host, Partition};
use crate::proto::Refusal;

/// How often the controller's state is looked at without a change of the
/// partition's own.
pub const POLL: Duration = Duration::from_millis(300);

/// What [`step`] answers for a replica its node's controller replica no
/// longer names (the caller may retire it).
const REMOVED: &str = "not a replica by the controller";

fn is_leader(part: &Partition) -> bool {
    part.raft.metrics().borrow_watched().current_leader == Some(part.id)
}

/// Drives partition `part`'s reassignments on this node for as long as
/// its Raft runs (see the module documentation).
pub async fn run(host: Arc<Host>, part: Partition) {
    let mut metrics = part.raft.metrics();
    loop {
        metrics.borrow_and_update();
        // The step holds the partition's gate: a host stopping waits for it.
        let Some(p) = part.partition else {
            return;
        };
        let Some((_, open)) = host.enter(p).await else {
            return; // Retired, or the host stopped.
        };
        let r = step(&host, &part).await;
        drop(open);
        match r {
            Ok(()) => {}
            // Retiring takes the gate whole: outside the step.
            Err(Refusal::Refused { reason }) if reason == REMOVED => {
                if host.retire_if_removed(p).await {
                    return;
                }
            }
            Err(e) => tracing::debug!("partition {:?}: {e}", part.partition),
        }
        if let Ok(Err(_)) = tokio::time::timeout(POLL, metrics.changed()).await {
            return; // Raft stopped.
        }
        if part.raft.metrics().borrow_watched().running_state.is_err() {
            return;
        }
    }
}

/// One step (see the module documentation).
///
/// # Errors
/// A step that failed (a node that did not answer, a write that did not
/// commit); the next step tries again.
pub async fn step(host: &Arc<Host>, part: &Partition) -> Result<(), Refusal> {
    let Some(p) = part.partition else {
        return Ok(());
    };
    let ctl = host.controller.machine.controller();
    if !is_leader(part) {
        host.throttle.set_adding(p, []);
        // Not a replica by this node's controller replica: ask the
        // controller's leader, and retire it if so.
        let removed = ctl
            .partitions
            .get(&p)
            .is_some_and(|r| r.pending.is_none() && !r.replicas.iter().any(|x| x.node == host.id));
        if removed {
            return Err(Refusal::Refused {
                reason: REMOVED.into(),
            });
        }
        return Ok(());
    }
    let pending = ctl.partitions.get(&p).and_then(|r| r.pending.clone());
    if let Some(pending) = &pending {
        if pending.generation > part.machine.generation() {
            start(&ctl, part, pending).await?;
        }
    }
    let (voters, _) = crate::reassign::voters(part);
    let adding: Vec<u64> = part
        .machine
        .reassignment()
        .map(|r| {
            r.adding()
                .iter()
                .map(|e| e.voter.node_id.0)
                .filter(|n| !voters.contains(n))
                .collect()
        })
        .unwrap_or_default();
    // Every step, not only before the learner joins: a node that retired
    // its old replica meanwhile hosts a new one.
    // A node that does not answer is not waited for: the others' steps go
    // on (it is the stuck replica a new target may drop).
    for n in &adding {
        if let Some(addr) = ctl.nodes.get(n).map(|i| i.addr.clone()) {
            if let Err(e) = crate::parts::host_on(&addr, p, Duration::from_millis(500)).await {
                tracing::debug!("partition {p}: node {n} cannot host it yet: {e}");
            }
        }
    }
    host.throttle.set_adding(p, adding);
    crate::reassign::drive(part).await?;
    match pending {
        Some(pending) => report_if_done(host, &ctl, part, p, &pending).await,
        None => Ok(()),
    }
}

/// Starts the reassignment of `pending`'s generation.
async fn start(ctl: &Controller, part: &Partition, pending: &Pending) -> Result<(), Refusal> {
    let target: Vec<(u64, String)> = pending
        .target
        .iter()
        .map(|n| {
            let addr = ctl.nodes.get(n).map(|i| i.addr.clone()).unwrap_or_default();
            (*n, addr)
        })
        .collect();
    let now = crate::node::now_ms();
    match crate::reassign::request_generation(part, target, pending.generation, now).await {
        // Removals begun: it finishes first.
        Err(Refusal::Refused { reason }) if reason.contains("completing") => Ok(()),
        r => r,
    }
}

/// Reports `pending` done to the controller if the voters are its target
/// and nothing is left to do.
async fn report_if_done(
    host: &Arc<Host>,
    ctl: &Controller,
    part: &Partition,
    p: u32,
    pending: &Pending,
) -> Result<(), Refusal> {
    let (voters, settled) = crate::reassign::voters(part);
    let target: BTreeSet<u64> = pending.target.iter().copied().collect();
    let done = settled
        && voters == target
        && part.machine.reassignment().is_none()
        && part.machine.generation() == pending.generation;
    if done {
        let voters = voters
            .iter()
            .map(|n| Replica {
                node: *n,
                directory: ctl.nodes.get(n).map_or(0, |i| i.directory),
            })
            .collect();
        host.to_controller(
            Control::Completed {
                partition: p,
                generation: pending.generation,
                voters,
            },
            Duration::from_secs(2),
        )
        .await?
        .map_err(|e| Refusal::Failed {
            reason: format!("{e:?}"),
        })?;
    }
    Ok(())
}
