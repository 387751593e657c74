//! Voter sets and reassignments, and their record codecs (the layout is
//! in the parent module's documentation).

use std::collections::BTreeSet;

use quorumlog_checkpoint::{DirectoryId, NodeId, Offset, Voter};
use quorumlog_io::codec::{u32_len, Reader};

const VOTER_SET_MAGIC: &[u8; 4] = b"QLCV";
const REASSIGNMENT_MAGIC: &[u8; 4] = b"QLCR";
const VERSION: u8 = 1;
/// The most voters one set may hold.
pub const MAX_VOTERS: usize = 1024;
/// The longest endpoint, in bytes.
pub const MAX_ENDPOINT_BYTES: usize = 1024;
/// The largest encoded voter set, in bytes (what binds first for sets
/// with endpoints). It is chosen so that everything a set reaches holds
/// it with room to spare: a control record in one log batch, a
/// [`super::ControlState`] (a set and a reassignment's two) in a snapshot's
/// metadata.
pub const MAX_VOTER_SET_BYTES: usize = 16 * 1024;

/// Why a voter set or a reassignment request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VoterError {
    /// A voter set must hold at least one voter.
    #[error("the voter set is empty")]
    Empty,
    /// A node may appear once in a set (a node with a new directory id
    /// replaces its old voter; it does not join beside it).
    #[error("node {0} appears more than once")]
    DuplicateNode(NodeId),
    /// More than [`MAX_VOTERS`] voters, an endpoint longer than
    /// [`MAX_ENDPOINT_BYTES`], or more than [`MAX_VOTER_SET_BYTES`]
    /// encoded.
    #[error("the voter set is too large")]
    TooLarge,
    /// The target replaces (same node id, new directory id) so many voters
    /// that, once they are removed (which must come first), the voters
    /// left are not a majority of the current set: no sequence of
    /// single-voter changes keeps a majority of live voters.
    #[error(
        "the target replaces {replaced} of {current} voters: no path keeps a majority of the current set"
    )]
    NoMajorityPath {
        /// Voters replaced by a new directory of the same node.
        replaced: usize,
        /// Voters in the current set.
        current: usize,
    },
    /// The reassignment is removing voters (or rolling back): it can no
    /// longer be cancelled or replaced.
    #[error("the reassignment is completing (its removals have begun); it cannot be cancelled or replaced")]
    Completing,
    /// No reassignment is in progress to cancel.
    #[error("no reassignment is in progress")]
    NoReassignment,
    /// An earlier voter change is not committed yet.
    #[error("an earlier voter change (at offset {0}) is not committed yet")]
    ChangeInFlight(Offset),
    /// There is no voter set yet (the cluster was never bootstrapped).
    #[error("there is no voter set yet")]
    NoVoterSet,
    /// The node (with that directory) is not a voter of the latest set:
    /// it may not stand for election, and a node back with an empty disk
    /// (a new directory id) is not the voter it was.
    #[error("{0:?} is not a voter of the latest set")]
    NotAVoter(Voter),
}

/// One voter with its endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoterEntry {
    /// The voter's identity.
    pub voter: Voter,
    /// Where it listens, if known.
    pub endpoint: Option<String>,
}

impl VoterEntry {
    /// A voter without an endpoint.
    pub fn new(node: u64, directory: u128) -> VoterEntry {
        VoterEntry {
            voter: Voter {
                node_id: NodeId(node),
                directory_id: DirectoryId(directory),
            },
            endpoint: None,
        }
    }
}

/// The size of a set's encoded body (`encode_body`).
fn encoded_set_bytes(entries: &[VoterEntry]) -> usize {
    4 + entries
        .iter()
        .map(|e| 8 + 16 + 2 + e.endpoint.as_ref().map_or(0, String::len))
        .sum::<usize>()
}

/// A complete voter set: non-empty, each node once, ordered by node id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoterSet(Vec<VoterEntry>);

impl VoterSet {
    /// The set of `entries`.
    ///
    /// # Errors
    /// `Empty`, `DuplicateNode`, `TooLarge`.
    pub fn new(mut entries: Vec<VoterEntry>) -> Result<VoterSet, VoterError> {
        if entries.is_empty() {
            return Err(VoterError::Empty);
        }
        if entries.len() > MAX_VOTERS
            || entries.iter().any(|e| {
                e.endpoint
                    .as_ref()
                    .is_some_and(|p| p.len() > MAX_ENDPOINT_BYTES)
            })
        {
            return Err(VoterError::TooLarge);
        }
        if encoded_set_bytes(&entries) > MAX_VOTER_SET_BYTES {
            return Err(VoterError::TooLarge);
        }
        entries.sort_by_key(|e| e.voter.node_id);
        if let Some(w) = entries
            .windows(2)
            .find(|w| matches!(w, [a, b] if a.voter.node_id == b.voter.node_id))
        {
            return Err(VoterError::DuplicateNode(
                w.first().map_or(NodeId(0), |e| e.voter.node_id),
            ));
        }
        Ok(VoterSet(entries))
    }

    /// The voters, ordered by node id.
    pub fn entries(&self) -> &[VoterEntry] {
        &self.0
    }

    /// The voters' identities.
    pub fn voters(&self) -> impl Iterator<Item = Voter> + '_ {
        self.0.iter().map(|e| e.voter)
    }

    /// Whether `v` (node and directory) is a voter.
    pub fn contains(&self, v: Voter) -> bool {
        self.0.iter().any(|e| e.voter == v)
    }

    /// The voter of node `n`, whatever its directory.
    pub fn of_node(&self, n: NodeId) -> Option<Voter> {
        self.voters().find(|v| v.node_id == n)
    }

    /// The number of voters.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true for a valid set (kept for symmetry with `len`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The same voters (endpoints aside).
    pub fn same_voters(&self, other: &VoterSet) -> bool {
        self.voters().collect::<BTreeSet<_>>() == other.voters().collect::<BTreeSet<_>>()
    }

    /// This set with `e` added (it must not be a member by node).
    pub(super) fn with(&self, e: VoterEntry) -> VoterSet {
        let mut v = self.0.clone();
        v.push(e);
        v.sort_by_key(|e| e.voter.node_id);
        VoterSet(v)
    }

    /// This set without `v` (it may become empty: the caller checks).
    pub(super) fn without(&self, v: Voter) -> Option<VoterSet> {
        let rest: Vec<VoterEntry> = self.0.iter().filter(|e| e.voter != v).cloned().collect();
        (!rest.is_empty()).then_some(VoterSet(rest))
    }

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&u32_len(self.0.len()).to_le_bytes());
        for e in &self.0 {
            out.extend_from_slice(&e.voter.node_id.0.to_le_bytes());
            out.extend_from_slice(&e.voter.directory_id.0.to_le_bytes());
            let ep = e.endpoint.as_deref().unwrap_or("").as_bytes();
            // `VoterSet::new` bounds endpoints to `MAX_ENDPOINT_BYTES`.
            let len = u16::try_from(ep.len());
            assert!(len.is_ok(), "an endpoint is bounded by MAX_ENDPOINT_BYTES");
            out.extend_from_slice(&len.unwrap_or(u16::MAX).to_le_bytes());
            out.extend_from_slice(ep);
        }
    }

    fn decode_body(r: &mut Reader<'_>) -> Option<VoterSet> {
        let count = usize::try_from(r.u32().ok()?).ok()?;
        if count == 0 || count > MAX_VOTERS {
            return None;
        }
        let mut v = Vec::with_capacity(count);
        for _ in 0..count {
            let node = r.u64().ok()?;
            let dir = r.u128().ok()?;
            let len = usize::from(r.u16().ok()?);
            let ep = std::str::from_utf8(r.bytes(len).ok()?).ok()?;
            v.push(VoterEntry {
                voter: Voter {
                    node_id: NodeId(node),
                    directory_id: DirectoryId(dir),
                },
                endpoint: (!ep.is_empty()).then(|| ep.to_owned()),
            });
        }
        // Canonical: ordered by node id, each node once.
        let sorted = v
            .windows(2)
            .all(|w| matches!(w, [a, b] if a.voter.node_id < b.voter.node_id));
        sorted.then_some(VoterSet(v))
    }
}

/// The durable state of a reassignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reassignment {
    /// The set before the call (what a cancel returns to).
    pub original: VoterSet,
    /// The set asked for.
    pub target: VoterSet,
    /// A cancelled reassignment returning to the set before it.
    pub rollback: bool,
    /// When it started, in the caller's milliseconds.
    pub started_ms: u64,
}

impl Reassignment {
    /// `target − original`, by voter identity.
    pub fn adding(&self) -> Vec<VoterEntry> {
        self.target
            .entries()
            .iter()
            .filter(|e| !self.original.contains(e.voter))
            .cloned()
            .collect()
    }

    /// `original − target`, by voter identity.
    pub fn removing(&self) -> Vec<Voter> {
        self.original
            .voters()
            .filter(|v| !self.target.contains(*v))
            .collect()
    }

    /// Whether a removal has been made (in `latest`), or it is a rollback
    /// (all of whose steps are removals): it can no longer be cancelled.
    pub fn completing(&self, latest: &VoterSet) -> bool {
        self.rollback || self.removing().iter().any(|v| !latest.contains(*v))
    }
}

/// A control record this module reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlRecord {
    /// A complete voter set.
    VoterSet(VoterSet),
    /// A reassignment's state (`None`: finished or none).
    Reassignment(Option<Reassignment>),
}

impl ControlRecord {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            ControlRecord::VoterSet(s) => {
                out.extend_from_slice(VOTER_SET_MAGIC);
                out.push(VERSION);
                s.encode_body(&mut out);
            }
            ControlRecord::Reassignment(r) => {
                out.extend_from_slice(REASSIGNMENT_MAGIC);
                out.push(VERSION);
                match r {
                    None => out.push(0),
                    Some(r) => {
                        out.push(1);
                        out.push(u8::from(r.rollback));
                        out.extend_from_slice(&r.started_ms.to_le_bytes());
                        r.original.encode_body(&mut out);
                        r.target.encode_body(&mut out);
                    }
                }
            }
        }
        out
    }

    /// Decodes a control record's bytes: `None` for control records of
    /// other kinds (and for malformed ones, which the batch checksum makes
    /// a bug, not damage).
    pub fn decode(bytes: &[u8]) -> Option<ControlRecord> {
        let mut r = Reader::new(bytes);
        let magic = r.bytes(4).ok()?;
        if r.u8().ok()? != VERSION {
            return None;
        }
        let rec = if magic == VOTER_SET_MAGIC {
            ControlRecord::VoterSet(VoterSet::decode_body(&mut r)?)
        } else if magic == REASSIGNMENT_MAGIC {
            match r.u8().ok()? {
                0 => ControlRecord::Reassignment(None),
                1 => {
                    let rollback = match r.u8().ok()? {
                        0 => false,
                        1 => true,
                        _ => return None,
                    };
                    let started_ms = r.u64().ok()?;
                    let original = VoterSet::decode_body(&mut r)?;
                    let target = VoterSet::decode_body(&mut r)?;
                    ControlRecord::Reassignment(Some(Reassignment {
                        original,
                        target,
                        rollback,
                        started_ms,
                    }))
                }
                _ => return None,
            }
        } else {
            return None;
        };
        (r.remaining() == 0).then_some(rec)
    }
}
