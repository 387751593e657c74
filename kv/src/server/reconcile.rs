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
//!   ([`crate::replica::reassign::drive`]): an adding replica's node hosts the
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

use crate::machine::control::Controller;
use crate::server::host::{Host, Partition};
use crate::wire::admin::{Control, NodeInfo, Pending, Replica};
use crate::wire::Refusal;

/// How often the controller's state is looked at without a change of the
/// partition's own.
pub const POLL: Duration = Duration::from_millis(300);

type Nodes = std::collections::BTreeMap<u64, NodeInfo>;

/// What [`step`] answers for a replica its node's controller replica no
/// longer names (the caller may retire it).
const REMOVED: &str = "not a replica by the controller";

fn is_leader(part: &Partition) -> bool {
    part.raft.metrics().borrow_watched().current_leader == Some(part.id)
}

/// Drives partition `part`'s reassignments on this node for as long as
/// its Raft runs (see the module documentation).
///
/// A step runs when something it looks at may have changed: the
/// partition's leader, state or membership, or the controller's state
/// (anything its replica on this node applies). While a reassignment of
/// the partition is under way it also runs on every change of the
/// partition's replication progress (a learner catching up) and every
/// [`POLL`]; an idle partition's step never runs on its own writes.
pub async fn run(host: Arc<Host>, part: Partition) {
    let Some(p) = part.partition else {
        return;
    };
    let mut server = part.raft.server_metrics();
    let mut data = part.raft.data_metrics();
    let mut control = host.controller.raft.data_metrics();
    loop {
        server.borrow_and_update();
        data.borrow_and_update();
        control.borrow_and_update();
        // The step holds the partition's gate: a host stopping waits for it.
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
            Err(e) => tracing::debug!("partition {p}: {e}"),
        }
        let busy = part.machine.reassignment().is_some()
            || host
                .controller
                .machine
                .with_controller(|c| c.partitions.get(&p).is_some_and(|r| r.pending.is_some()));
        let changed = async {
            if busy {
                tokio::select! {
                    r = server.changed() => r.is_ok(),
                    r = data.changed() => r.is_ok(),
                    r = control.changed() => r.is_ok(),
                    () = tokio::time::sleep(POLL) => true,
                }
            } else {
                tokio::select! {
                    r = server.changed() => r.is_ok(),
                    r = control.changed() => r.is_ok(),
                    () = tokio::time::sleep(IDLE_POLL) => true,
                }
            }
        };
        if !changed.await || part.raft.metrics().borrow_watched().running_state.is_err() {
            return; // Raft stopped.
        }
    }
}

/// How often an idle partition's step runs without a change (a step that
/// failed, a removed replica's retirement waiting for quiet).
pub const IDLE_POLL: Duration = Duration::from_secs(2);

/// Whether this node is a replica of `p` by its controller replica's
/// record (or the record names no settled set yet).
fn listed(ctl: &Controller, p: u32, node: u64) -> bool {
    ctl.partitions
        .get(&p)
        .is_none_or(|r| r.pending.is_some() || r.replicas.iter().any(|x| x.node == node))
}

/// One step (see the module documentation).
///
/// # Errors
/// A step that failed (a node that did not answer, a write that did not
/// commit); the next step tries again. `REMOVED` for a replica the
/// controller no longer names, whatever it thinks it is (the caller may
/// retire it).
pub async fn step(host: &Arc<Host>, part: &Partition) -> Result<(), Refusal> {
    let Some(p) = part.partition else {
        return Ok(());
    };
    let (listed, pending, nodes) = host.controller.machine.with_controller(|c| {
        (
            listed(c, p, host.id),
            c.partitions.get(&p).and_then(|r| r.pending.clone()),
            c.nodes.clone(),
        )
    });
    if !listed {
        host.throttle.set_adding(p, []);
        return Err(Refusal::Refused {
            reason: REMOVED.into(),
        });
    }
    if !is_leader(part) {
        host.throttle.set_adding(p, []);
        return Ok(());
    }
    if let Some(pending) = &pending {
        if pending.generation > part.machine.generation() {
            start(&nodes, part, pending).await?;
        }
    }
    let (voters, _) = crate::replica::reassign::voters(part);
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
    // its old replica meanwhile hosts a new one. Asked, with a backoff
    // while it does not answer: every adding replica's node, and every
    // voter's node that acknowledged nothing to this leader (it may not
    // host the partition: `Host::host` makes a voter only where that is
    // safe). A node that does not answer is not waited for: the others'
    // steps go on.
    let silent = unacknowledged(part, &voters);
    let asks = adding
        .iter()
        .map(|n| (*n, false))
        .chain(silent.into_iter().map(|n| (n, true)));
    for (n, voter) in asks {
        if n == host.id || !ask_due(host.id, p, n) {
            continue;
        }
        if let Some(addr) = nodes.get(&n).map(|i| i.addr.clone()) {
            let wait = Duration::from_millis(500);
            let r = crate::server::host_on(&host.router, &addr, p, voter, wait).await;
            asked(host.id, p, n, r.is_ok() && !voter);
            if let Err(e) = r {
                tracing::debug!("partition {p}: node {n} cannot host it yet: {e}");
            }
        }
    }
    host.throttle.set_adding(p, adding);
    crate::replica::reassign::drive(part).await?;
    match pending {
        Some(pending) => report_if_done(host, &nodes, part, p, &pending).await,
        None => Ok(()),
    }
}

/// The voters (other than the leader) that acknowledged nothing to this
/// leader.
fn unacknowledged(part: &Partition, voters: &BTreeSet<u64>) -> Vec<u64> {
    let m = part.raft.metrics().borrow_watched().clone();
    let replication = m.replication.unwrap_or_default();
    voters
        .iter()
        .copied()
        .filter(|n| *n != part.id && replication.get(n).is_none_or(Option::is_none))
        .collect()
}

/// Hosts, for as long as `host` runs, every partition its controller
/// replica names this node a replica of (in its set or a pending target)
/// that it does not host, where [`Host::host`] may make it as a voter: a
/// replica the partition counts on but that cannot answer (made a voter
/// by an older version before it acknowledged anything) is made at once
/// by its own node, without a leader (one that no election can win
/// without it has none). Runs on every change of the controller's state
/// and every [`IDLE_POLL`].
pub async fn adopt(host: Arc<Host>) {
    let mut control = host.controller.raft.data_metrics();
    loop {
        control.borrow_and_update();
        if host.stopped() {
            return;
        }
        for p in unhosted(&host) {
            if let Err(e) = host.host(p, true).await {
                tracing::debug!("partition {p}: not made here: {e}");
            }
        }
        tokio::select! {
            r = control.changed() => if r.is_err() { return },
            () = tokio::time::sleep(IDLE_POLL) => {}
        }
    }
}

/// The partitions the controller's record names this node a replica of
/// that it does not host.
fn unhosted(host: &Host) -> Vec<u32> {
    let named = host.controller.machine.with_controller(|c| {
        c.partitions
            .iter()
            .filter(|(_, r)| {
                r.replicas.iter().any(|x| x.node == host.id)
                    || r.pending
                        .as_ref()
                        .is_some_and(|x| x.target.contains(&host.id))
            })
            .map(|(p, _)| *p)
            .collect::<Vec<u32>>()
    });
    named
        .into_iter()
        .filter(|p| host.partition(*p).is_none())
        .collect()
}

/// When each (host, partition, node) may be asked to host again, and the
/// pause after the next failure: from 500 ms, doubling to 30 s; cleared
/// by an answer.
type Asks = std::collections::HashMap<(u64, u32, u64), (std::time::Instant, Duration)>;

fn asks() -> std::sync::MutexGuard<'static, Asks> {
    static ASKS: std::sync::OnceLock<std::sync::Mutex<Asks>> = std::sync::OnceLock::new();
    ASKS.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether node `n` may be asked to host `p` now.
fn ask_due(me: u64, p: u32, n: u64) -> bool {
    asks()
        .get(&(me, p, n))
        .is_none_or(|(at, _)| std::time::Instant::now() >= *at)
}

/// Notes an ask's outcome: an answer clears the backoff, a failure doubles it.
fn asked(me: u64, p: u32, n: u64, answered: bool) {
    let mut a = asks();
    if answered {
        a.remove(&(me, p, n));
        return;
    }
    let pause = a
        .get(&(me, p, n))
        .map_or(Duration::from_millis(500), |(_, d)| {
            (*d * 2).min(Duration::from_secs(30))
        });
    a.insert((me, p, n), (std::time::Instant::now() + pause, pause));
}

/// Starts the reassignment of `pending`'s generation.
async fn start(nodes: &Nodes, part: &Partition, pending: &Pending) -> Result<(), Refusal> {
    let target: Vec<(u64, String)> = pending
        .target
        .iter()
        .map(|n| {
            let addr = nodes.get(n).map(|i| i.addr.clone()).unwrap_or_default();
            (*n, addr)
        })
        .collect();
    let now = crate::replica::now_ms();
    match crate::replica::reassign::request_generation(part, target, pending.generation, now).await
    {
        // Removals begun: it finishes first.
        Err(Refusal::Refused { reason }) if reason.contains("completing") => Ok(()),
        r => r,
    }
}

/// Reports `pending` done to the controller if the voters are its target
/// and nothing is left to do.
async fn report_if_done(
    host: &Arc<Host>,
    nodes: &Nodes,
    part: &Partition,
    p: u32,
    pending: &Pending,
) -> Result<(), Refusal> {
    let (voters, settled) = crate::replica::reassign::voters(part);
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
                directory: nodes.get(n).map_or(0, |i| i.directory),
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
