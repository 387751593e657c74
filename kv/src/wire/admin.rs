//! The service's administrative messages as plain data: the controller's
//! commands and records (KIP-455's alter, list and cancel), each node's
//! view of its partitions, its metrics, and their text forms.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// A node as the controller knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Where it listens.
    pub addr: String,
    /// Its data directory's id (a new one after its disk was lost).
    pub directory: u128,
    /// The first data directory it was known by (at the cluster's
    /// creation, or its first registration): while it is `directory`, the
    /// node never had another, so a partition its directory never held is
    /// one it never acknowledged anything of. 0 in a record written
    /// before the field existed (never equal: such a node is never made a
    /// voter anew).
    #[serde(default)]
    pub first: u128,
}

impl NodeInfo {
    /// Whether the node has only ever had its present directory.
    pub fn original(&self) -> bool {
        self.first == self.directory
    }
}

/// A replica: a node and the directory it was placed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Replica {
    /// The node.
    pub node: u64,
    /// Its data directory's id when the replica was placed.
    pub directory: u128,
}

/// A reassignment asked for and not finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The replica nodes before the first call (what a cancel returns to).
    pub origin: Vec<u64>,
    /// The replica nodes asked for (the origin, once cancelled).
    pub target: Vec<u64>,
    /// A cancelled reassignment rolling back to its origin.
    pub cancelled: bool,
    /// When the first call came, in the caller's milliseconds.
    pub started_ms: u64,
    /// The generation of the latest call that changed it.
    pub generation: u64,
}

/// One partition's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRecord {
    /// Its replica set, as last reported finished (or as placed).
    pub replicas: Vec<Replica>,
    /// The reassignment in progress, if any.
    pub pending: Option<Pending>,
}

impl PartitionRecord {
    /// The replica nodes.
    pub fn nodes(&self) -> Vec<u64> {
        self.replicas.iter().map(|r| r.node).collect()
    }
}

/// Why one partition of an `Alter` was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum AlterError {
    /// No such partition.
    #[error("unknown partition")]
    UnknownPartition,
    /// A target names a node the cluster does not have.
    #[error("unknown node {0}")]
    UnknownNode(u64),
    /// A target names a node twice.
    #[error("node {0} appears twice in the target")]
    DuplicateReplica(u64),
    /// The request names the partition twice.
    #[error("the partition appears twice in the request")]
    DuplicatePartition,
    /// An empty target (a cancel) for a partition with no reassignment.
    #[error("no reassignment in progress to cancel")]
    NoReassignment,
    /// The target keeps nodes whose data directory was replaced (a lost
    /// disk) for so many of the current replicas that no sequence of
    /// single-voter changes keeps a majority of live replicas.
    #[error("the target keeps {replaced} of {current} replicas on replaced directories: no majority path")]
    NoMajorityPath {
        /// Replicas whose node's directory changed and that the target keeps.
        replaced: usize,
        /// The current replicas.
        current: usize,
    },
    /// More replicas than a voter set may hold.
    #[error("the target holds {0} replicas, over the limit")]
    TooLarge(usize),
}

/// A controller change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Control {
    /// The cluster's creation: its nodes and each partition's placement
    /// (ignored once created).
    Create {
        /// Every node: id, address, data directory id.
        nodes: Vec<(u64, String, u128)>,
        /// Partition `p`'s replica nodes at `placement[p]`.
        placement: Vec<Vec<u64>>,
    },
    /// A node's address or data directory changed (it came back with an
    /// empty disk).
    Register {
        /// The node.
        node: u64,
        /// Its address.
        addr: String,
        /// Its data directory's id.
        directory: u128,
    },
    /// Targets for any number of partitions (an empty one cancels that
    /// partition's reassignment), accepted or refused as a whole.
    Alter {
        /// (partition, target replica nodes).
        targets: Vec<(u32, Vec<u64>)>,
        /// The caller's clock, in milliseconds.
        now_ms: u64,
    },
    /// Cancels every reassignment in progress.
    CancelAll,
    /// A partition's leader finished the reassignment of `generation`:
    /// its voters are `voters`.
    Completed {
        /// The partition.
        partition: u32,
        /// The generation it carried out.
        generation: u64,
        /// Its voters now.
        voters: Vec<Replica>,
    },
}

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
