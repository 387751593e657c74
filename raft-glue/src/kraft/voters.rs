//! The voter set and its reassignment, as control records in the log
//! (`KIP-853`'s voter records, `KIP-455`'s reassignment semantics).
//!
//! - A [`VoterSet`] is the complete set of voters, each a (node id,
//!   directory id) pair with an optional endpoint. A node that comes back
//!   with an empty disk has a new directory id: it is not the voter it was.
//! - A [`Reassignment`] is the durable state of a change of the set:
//!   original, target, `adding = target − original`, `removing = original −
//!   target` (by voter identity), whether it is a rollback (a cancelled
//!   reassignment returning to the set before it), and when it started.
//! - [`ControlHistory`] keeps both by offset: the state in force at any
//!   offset, the latest (used at once, as in single-server changes) and the
//!   committed (below the high watermark). Suffix truncation rolls it back;
//!   a prefix cut keeps the state in force at the new log start.
//! - [`next_step`] is the leader's pure state machine: from the replicas'
//!   fetch progress and the high watermark, the next voter-set change to
//!   append (one at a time), and when to finish or resign.
//!
//! Record layout (inside a control batch, little-endian):
//!
//! ```text
//! voter set      "QLCV" version u8 (1) count u32
//!                count × (node id u64, directory id u128, endpoint length u16, endpoint UTF-8)
//! reassignment   "QLCR" version u8 (1) active u8 (0 | 1)
//!                if active: rollback u8, started ms u64, original (a voter-set body), target (a voter-set body)
//! ```
//!
//! Other control records (leader changes, snapshot markers) do not start
//! with these magics and are ignored here.

use std::collections::{BTreeMap, BTreeSet};

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
/// [`ControlState`] (a set and a reassignment's two) in a snapshot's
/// metadata, and the voter-history file (1 MiB), which the store checks
/// again, whole, before each control record is written.
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
    /// The record would not fit in the voter-history file with the
    /// records already there (nothing was written): take a snapshot and
    /// clean the log prefix, which folds old records into one state.
    #[error("the voter history would hold {bytes} bytes, over its {max}-byte limit")]
    HistoryFull {
        /// The file's size with the record.
        bytes: usize,
        /// The limit.
        max: usize,
    },
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
    fn with(&self, e: VoterEntry) -> VoterSet {
        let mut v = self.0.clone();
        v.push(e);
        v.sort_by_key(|e| e.voter.node_id);
        VoterSet(v)
    }

    /// This set without `v` (it may become empty: the caller checks).
    fn without(&self, v: Voter) -> Option<VoterSet> {
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

/// The voter set and reassignment in force after some prefix of the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlState {
    /// The voter set (none before the first voter-set record).
    pub voters: Option<VoterSet>,
    /// The reassignment in progress.
    pub reassignment: Option<Reassignment>,
}

impl ControlState {
    fn apply(&mut self, rec: &ControlRecord) {
        match rec {
            ControlRecord::VoterSet(s) => self.voters = Some(s.clone()),
            ControlRecord::Reassignment(r) => self.reassignment.clone_from(r),
        }
    }

    /// Encodes the state as a record sequence (a voter set, then a
    /// reassignment), for snapshots and the history file.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for rec in [
            self.voters.clone().map(ControlRecord::VoterSet),
            Some(ControlRecord::Reassignment(self.reassignment.clone())),
        ]
        .into_iter()
        .flatten()
        {
            let bytes = rec.encode();
            out.extend_from_slice(&u32_len(bytes.len()).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// Decodes [`ControlState::encode`]'s bytes.
    pub fn decode(bytes: &[u8]) -> Option<ControlState> {
        let mut r = Reader::new(bytes);
        let mut st = ControlState::default();
        while r.remaining() > 0 {
            let len = usize::try_from(r.u32().ok()?).ok()?;
            st.apply(&ControlRecord::decode(r.bytes(len).ok()?)?);
        }
        Some(st)
    }
}

/// The control records by offset, above a base state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlHistory {
    /// The offset the base state is in force at (the log start, or a
    /// snapshot's end), and that state.
    base: (Offset, ControlState),
    /// Records at offsets at or above the base offset.
    records: BTreeMap<Offset, ControlRecord>,
}

impl ControlHistory {
    /// A history starting at `offset` in `state`.
    pub fn new(offset: Offset, state: ControlState) -> ControlHistory {
        ControlHistory {
            base: (offset, state),
            records: BTreeMap::new(),
        }
    }

    /// The base offset.
    pub fn base_offset(&self) -> Offset {
        self.base.0
    }

    /// The state in force at the base offset.
    pub fn base_state(&self) -> &ControlState {
        &self.base.1
    }

    /// The records, in offset order.
    pub fn records(&self) -> impl Iterator<Item = (Offset, &ControlRecord)> {
        self.records.iter().map(|(o, r)| (*o, r))
    }

    /// Notes record `rec` at `offset` (at or above the base).
    pub fn record(&mut self, offset: Offset, rec: ControlRecord) {
        if offset >= self.base.0 {
            self.records.insert(offset, rec);
        }
    }

    /// The state in force at `offset`: every record at or below it
    /// applied (a record is in force from its own offset on).
    pub fn state_at(&self, offset: Offset) -> ControlState {
        let mut st = self.base.1.clone();
        for (_, rec) in self.records.range(..=offset) {
            st.apply(rec);
        }
        st
    }

    /// The latest state (every record applied).
    pub fn latest(&self) -> ControlState {
        self.state_at(Offset(u64::MAX))
    }

    /// The state committed below `high_watermark`.
    pub fn committed(&self, high_watermark: Offset) -> ControlState {
        match high_watermark.0.checked_sub(1) {
            Some(last) => self.state_at(Offset(last)),
            None => self.base.1.clone(),
        }
    }

    /// The offset of the latest voter-set record, if any is in the history
    /// (not the base).
    pub fn latest_voter_change(&self) -> Option<Offset> {
        self.records
            .iter()
            .rev()
            .find(|(_, r)| matches!(r, ControlRecord::VoterSet(_)))
            .map(|(o, _)| *o)
    }

    /// The latest record of any kind, if any.
    pub fn latest_change(&self) -> Option<Offset> {
        self.records.keys().next_back().copied()
    }

    /// Suffix truncation: records at or above `offset` are gone.
    pub fn truncate_to(&mut self, offset: Offset) {
        self.records.split_off(&offset);
    }

    /// Prefix cut: the state in force just below `start` becomes the base.
    pub fn cut_prefix(&mut self, start: Offset) {
        if start <= self.base.0 {
            return;
        }
        let keep = self.records.split_off(&start);
        for rec in self.records.values() {
            self.base.1.apply(rec);
        }
        self.records = keep;
        self.base.0 = start;
    }

    /// Restart at `offset` in `state` (a log restarted at a snapshot).
    pub fn restart(&mut self, offset: Offset, state: ControlState) {
        *self = ControlHistory::new(offset, state);
    }
}

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

/// What [`crate::Store::list_reassignment`] returns.
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
    /// Each replica's durable end, from its fetches.
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
                return Step::Append(next);
            }
        }
    }
    for a in &adding {
        if latest.contains(a.voter) {
            continue;
        }
        let behind = input
            .progress
            .get(&a.voter)
            .map(|end| input.high_watermark.0.saturating_sub(end.0));
        return match behind {
            Some(lag) if lag <= input.max_lag => Step::Append(latest.with(a.clone())),
            _ => Step::CatchingUp(a.voter),
        };
    }
    let mut order: Vec<Voter> = removing.clone();
    order.sort_by_key(|v| (*v == input.leader, v.node_id));
    for v in order {
        if latest.contains(v) {
            if let Some(next) = latest.without(v) {
                return Step::Append(next);
            }
        }
    }
    Step::Finish
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
