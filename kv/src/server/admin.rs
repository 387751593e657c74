//! What an operator sees of the partitioned service: each node's view of
//! the partitions it hosts ([`node_view`]), the reassignments in progress
//! with each adding replica's progress ([`list`]), and the metrics
//! ([`metrics()`]), with their text forms.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use openraft10::async_runtime::WatchReceiver;
use openraft10::ServerState;
use quorumlog_raft::{Group, Isolation, Offset};

use crate::server::host::Host;
use crate::wire::admin::{
    Adding, AddingState, Listing, Metrics, NodeView, PartitionView, ReplicaLag,
};
use crate::wire::{NodeRequest, Refusal, Request, Response};

/// How far behind its leader's last entry a voter may be and still count
/// as in sync (for under-replication; the reassignment's promotion uses
/// [`crate::replica::reassign::MAX_LAG`] behind the commit point).
pub const IN_SYNC_LAG: u64 = 1_000;

/// Most bytes read from a leader's log to count a replica's lag in bytes
/// (beyond it the count is a lower bound).
pub const LAG_BYTES_READ: u64 = 64 << 20;

fn lag_bytes(store: &Group, matched: Option<u64>, last: u64) -> u64 {
    let from = matched.map_or(0, |m| m + 1);
    let mut bytes = 0;
    let start = store.extent().start.0;
    if from < start {
        if let Some(id) = store.extent().latest_snapshot {
            bytes += store.snapshot(id).map_or(0, |s| s.info().size_bytes);
        }
    }
    let mut at = from.max(start);
    while at <= last && bytes < LAG_BYTES_READ {
        let Ok(entries) = store.read_entries(
            Offset(at),
            Offset(last + 1),
            LAG_BYTES_READ - bytes,
            Isolation::Uncommitted,
        ) else {
            break;
        };
        let Some(end) = entries.last().map(|e| e.offset.0 + 1) else {
            break;
        };
        bytes += entries.iter().map(|e| e.bytes.len() as u64).sum::<u64>();
        at = end;
    }
    bytes
}

/// Every partition this node hosts, as it sees it.
pub fn node_view(host: &Host) -> NodeView {
    let mut partitions = Vec::new();
    for (p, part) in host.hosted() {
        let m = part.raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        let learners: Vec<u64> = membership
            .nodes()
            .map(|(id, _)| *id)
            .filter(|id| !voters.contains(id))
            .collect();
        let leading = m.state == ServerState::Leader;
        let last = m.last_log_index.unwrap_or(0);
        let lags = if leading {
            let store = part.machine.store();
            m.replication
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|(node, matched)| {
                    let matched = matched.map(|l| l.index);
                    let entries = last.saturating_sub(matched.unwrap_or(0));
                    ReplicaLag {
                        node,
                        matched,
                        entries: Some(entries),
                        bytes: store.map(|s| {
                            if node == host.id || entries == 0 {
                                0
                            } else {
                                lag_bytes(s.as_ref(), matched, last)
                            }
                        }),
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let reassignment = part.machine.reassignment();
        partitions.push(PartitionView {
            partition: p,
            leader: m.current_leader,
            leading,
            term: m.current_term,
            voters: voters.into_iter().collect(),
            learners,
            last_log: m.last_log_index,
            applied: m.last_applied.map(|l| l.index),
            lags,
            reassigning: reassignment.is_some(),
            adding: reassignment
                .map(|r| r.adding().iter().map(|e| e.voter.node_id.0).collect())
                .unwrap_or_default(),
        });
    }
    NodeView {
        node: host.id,
        directory: host.directory.0,
        partitions,
    }
}

async fn views(host: &Host) -> BTreeMap<u64, Option<NodeView>> {
    let ctl = host.controller.machine.controller();
    let mut out = BTreeMap::new();
    for (id, info) in &ctl.nodes {
        let view = if *id == host.id {
            Some(node_view(host))
        } else {
            let req = Request::Node(NodeRequest::Partitions);
            match host
                .router
                .call_addr(&info.addr, req, Duration::from_secs(2))
                .await
            {
                Ok(Response::Partitions(v)) => Some(v),
                _ => None,
            }
        };
        out.insert(*id, view);
    }
    out
}

/// The reassignments in progress (of `partitions`, or all), from the
/// controller (leader only: a read confirmed with a quorum), each adding
/// replica's progress from its partition's leader.
///
/// # Errors
/// Not the controller's leader; no quorum.
pub async fn list(host: &Arc<Host>, partitions: &[u32]) -> Result<Vec<Listing>, Refusal> {
    crate::replica::confirm_leadership(&host.controller).await?;
    let ctl = host.controller.machine.controller();
    let views = views(host).await;
    let now = crate::replica::now_ms();
    let mut out = Vec::new();
    for (p, rec, pending) in ctl.reassigning() {
        if !partitions.is_empty() && !partitions.contains(&p) {
            continue;
        }
        let leader = views
            .values()
            .flatten()
            .flat_map(|v| v.partitions.iter())
            .filter(|v| v.partition == p && v.leading)
            .max_by_key(|v| v.term);
        let hosting = |node: u64| {
            views.get(&node).map(|v| {
                v.as_ref()
                    .map(|v| v.partitions.iter().any(|x| x.partition == p))
            })
        };
        let origin: BTreeSet<u64> = pending.origin.iter().copied().collect();
        let target: BTreeSet<u64> = pending.target.iter().copied().collect();
        let adding = target
            .difference(&origin)
            .map(|n| {
                let lag = leader.and_then(|l| l.lags.iter().find(|x| x.node == *n));
                let promoted = leader.is_some_and(|l| l.voters.contains(n));
                let state = match (promoted, hosting(*n)) {
                    (true, _) => AddingState::Promoted,
                    (false, Some(None) | None) => AddingState::NodeDown,
                    (false, Some(Some(false))) => AddingState::NotHosted,
                    (false, Some(Some(true))) => AddingState::CatchingUp,
                };
                Adding {
                    node: *n,
                    state,
                    lag_entries: lag.and_then(|x| x.entries),
                    lag_bytes: lag.and_then(|x| x.bytes),
                }
            })
            .collect();
        let mut replicas: BTreeSet<u64> = origin.union(&target).copied().collect();
        replicas.extend(rec.nodes());
        if let Some(l) = leader {
            replicas.extend(l.voters.iter().copied());
        }
        out.push(Listing {
            partition: p,
            replicas: replicas.into_iter().collect(),
            voters: leader.map(|l| l.voters.clone()),
            origin: pending.origin.clone(),
            target: pending.target.clone(),
            adding,
            removing: origin.difference(&target).copied().collect(),
            cancelled: pending.cancelled,
            elapsed_ms: now.saturating_sub(pending.started_ms),
            generation: pending.generation,
            leader: leader.and_then(|l| l.leader),
        });
    }
    Ok(out)
}

/// This node's metrics.
pub fn metrics(host: &Host) -> Metrics {
    let view = node_view(host);
    let mut m = Metrics {
        node: host.id,
        bytes_moved: host.throttle.moved(),
        throttle: host.throttle.rate(),
        ..Metrics::default()
    };
    for p in view.partitions.iter().filter(|p| p.leading) {
        m.leading += 1;
        let adding: BTreeSet<u64> = p.adding.iter().copied().collect();
        let out_of_sync = p.voters.iter().any(|v| {
            !adding.contains(v)
                && *v != host.id
                && p.lags
                    .iter()
                    .find(|l| l.node == *v)
                    .and_then(|l| l.matched.map(|_| l.entries.unwrap_or(u64::MAX)))
                    .is_none_or(|e| e > IN_SYNC_LAG)
        });
        m.under_replicated += u64::from(out_of_sync);
        if p.reassigning {
            m.reassigning += 1;
            m.pending_additions += p.adding.iter().filter(|a| !p.voters.contains(a)).count() as u64;
        }
    }
    m
}
