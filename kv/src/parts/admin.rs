//! What an operator sees of the partitioned service: each node's view of
//! the partitions it hosts ([`node_view`]), the reassignments in progress
//! with each adding replica's progress ([`list`]), and the metrics
//! ([`metrics()`]), with their text forms.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use openraft10::async_runtime::WatchReceiver;
use openraft10::ServerState;
use quorumlog_raft::{Group, Isolation, Offset};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::parts::host::Host;
use crate::proto::{NodeRequest, Refusal, Request, Response};

/// How far behind its leader's last entry a voter may be and still count
/// as in sync (for under-replication; the reassignment's promotion uses
/// [`crate::reassign::MAX_LAG`] behind the commit point).
pub const IN_SYNC_LAG: u64 = 1_000;

/// Most bytes read from a leader's log to count a replica's lag in bytes
/// (beyond it the count is a lower bound).
pub const LAG_BYTES_READ: u64 = 64 << 20;

/// One replica as its partition's leader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaLag {
    /// The replica's node.
    pub node: u64,
    /// The last index it holds, as the leader knows (`None`: not yet).
    pub matched: Option<u64>,
    /// Entries it lacks of the leader's log (`None`: unknown).
    pub entries: Option<u64>,
    /// Bytes of those entries (and of the snapshot, if it is below the
    /// log's start).
    pub bytes: Option<u64>,
}

/// One partition as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionView {
    /// The partition.
    pub partition: u32,
    /// The leader it knows of.
    pub leader: Option<u64>,
    /// Whether this node is the leader (by its own state).
    pub leading: bool,
    /// Its term.
    pub term: u64,
    /// The voters of the membership it applied.
    pub voters: Vec<u64>,
    /// The learners of that membership.
    pub learners: Vec<u64>,
    /// Its last log index.
    pub last_log: Option<u64>,
    /// The last index applied (the high watermark, on the leader).
    pub applied: Option<u64>,
    /// Per replica, where this node leads.
    pub lags: Vec<ReplicaLag>,
    /// Whether its state machine has a reassignment pending.
    pub reassigning: bool,
    /// Its replicas being added (target minus origin) if reassigning.
    pub adding: Vec<u64>,
}

/// One node's view of every partition it hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeView {
    /// The node.
    pub node: u64,
    /// Its data directory's id.
    pub directory: u128,
    /// Its partitions.
    pub partitions: Vec<PartitionView>,
}

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

/// An adding replica's state in a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AddingState {
    /// Following as a learner, catching up.
    CatchingUp,
    /// A voter now.
    Promoted,
    /// Its node does not answer: it cannot catch up until it is back (or
    /// a new target drops it).
    NodeDown,
    /// Its node answers but does not host the partition yet.
    NotHosted,
}

/// An adding replica in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Adding {
    /// Its node.
    pub node: u64,
    /// Its state.
    pub state: AddingState,
    /// Entries it lacks (`None`: unknown).
    pub lag_entries: Option<u64>,
    /// Bytes it lacks (`None`: unknown).
    pub lag_bytes: Option<u64>,
}

/// One reassigning partition (KIP-455's `ListPartitionReassignments`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    /// The partition.
    pub partition: u32,
    /// Every replica taking part: the origin, the target and the current
    /// voters.
    pub replicas: Vec<u64>,
    /// The voters now (as the leader applied them; `None`: no leader
    /// answered).
    pub voters: Option<Vec<u64>>,
    /// The set before the first call.
    pub origin: Vec<u64>,
    /// The set asked for (the origin once cancelled).
    pub target: Vec<u64>,
    /// Replicas being added (target minus origin), with their progress.
    pub adding: Vec<Adding>,
    /// Replicas being removed (origin minus target).
    pub removing: Vec<u64>,
    /// A cancelled reassignment rolling back.
    pub cancelled: bool,
    /// Milliseconds since the first call.
    pub elapsed_ms: u64,
    /// Its generation.
    pub generation: u64,
    /// The partition's leader, if one answered.
    pub leader: Option<u64>,
}

async fn views(host: &Host) -> BTreeMap<u64, Option<NodeView>> {
    let ctl = host.controller.machine.controller();
    let mut out = BTreeMap::new();
    for (id, info) in &ctl.nodes {
        let view = if *id == host.id {
            Some(node_view(host))
        } else {
            let deadline = Instant::now() + Duration::from_secs(2);
            match crate::client::request(
                &info.addr,
                &Request::Node(NodeRequest::Partitions),
                deadline,
            )
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
    crate::node::confirm_leadership(&host.controller).await?;
    let ctl = host.controller.machine.controller();
    let views = views(host).await;
    let now = crate::node::now_ms();
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

/// A listing as text, a few lines per partition.
pub fn describe(listings: &[Listing]) -> String {
    if listings.is_empty() {
        return "no reassignment in progress".into();
    }
    let mut out = Vec::new();
    for l in listings {
        out.push(format!(
            "partition {}: {} for {} ms, replicas {:?}, voters {}, origin {:?} -> target {:?}",
            l.partition,
            if l.cancelled {
                "rolling back"
            } else {
                "reassigning"
            },
            l.elapsed_ms,
            l.replicas,
            l.voters
                .as_ref()
                .map_or("unknown (no leader answered)".into(), |v| format!("{v:?}")),
            l.origin,
            l.target
        ));
        for a in &l.adding {
            out.push(format!(
                "  adding   {}: {:?}, lag {} entries, {} bytes",
                a.node,
                a.state,
                a.lag_entries.map_or("?".into(), |x| x.to_string()),
                a.lag_bytes.map_or("?".into(), |x| x.to_string()),
            ));
        }
        for r in &l.removing {
            out.push(format!("  removing {r}"));
        }
    }
    out.join("\n")
}

/// A node's metrics: of the partitions it leads, and its reassignment
/// traffic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metrics {
    /// The node.
    pub node: u64,
    /// Partitions it leads.
    pub leading: u64,
    /// Of those, partitions with a voter out of sync, not counting the
    /// replicas being added by a reassignment.
    pub under_replicated: u64,
    /// Of those, partitions with a reassignment in progress.
    pub reassigning: u64,
    /// Replicas being added and not yet promoted (of those partitions).
    pub pending_additions: u64,
    /// Bytes sent to replicas being added, since the node started.
    pub bytes_moved: u64,
    /// The throttle, bytes/s (0: none).
    pub throttle: u64,
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

/// The cluster's metrics (every node's, summed) in Prometheus's text
/// format.
pub fn prometheus(nodes: &[Metrics]) -> String {
    let sum = |f: fn(&Metrics) -> u64| nodes.iter().map(f).sum::<u64>();
    let mut out = String::new();
    let rows: [(&str, &str, u64); 5] = [
        (
            "quorumlog_kv_under_replicated_partitions",
            "Partitions with a voter out of sync, not counting replicas being added",
            sum(|m| m.under_replicated),
        ),
        (
            "quorumlog_kv_reassigning_partitions",
            "Partitions with a reassignment in progress",
            sum(|m| m.reassigning),
        ),
        (
            "quorumlog_kv_pending_additions",
            "Replicas being added and not yet promoted",
            sum(|m| m.pending_additions),
        ),
        (
            "quorumlog_kv_reassignment_bytes_moved_total",
            "Bytes sent to replicas being added",
            sum(|m| m.bytes_moved),
        ),
        (
            "quorumlog_kv_leading_partitions",
            "Partitions with a leader",
            sum(|m| m.leading),
        ),
    ];
    for (name, help, value) in rows {
        let _ = write!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"
        );
    }
    out
}

/// Each partition's leader's view among `views` (the leading one of the
/// highest term; `None` where none leads).
pub fn leaders<'a>(
    views: impl IntoIterator<Item = &'a NodeView>,
) -> BTreeMap<u32, &'a PartitionView> {
    let mut out: BTreeMap<u32, &PartitionView> = BTreeMap::new();
    for v in views {
        for p in v.partitions.iter().filter(|p| p.leading) {
            let newer = out.get(&p.partition).is_none_or(|o| o.term < p.term);
            if newer {
                out.insert(p.partition, p);
            }
        }
    }
    out
}
