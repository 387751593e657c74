//! The key-value state machine. It lives in memory; its snapshots are
//! quorumlog snapshot files (`SnapshotFiles`), written and synced before
//! openraft purges the log they cover, and it restarts from the latest
//! one (openraft re-applies the committed entries after it, up to the
//! commit point the adapter persisted).
//!
//! It holds the keys and values, openraft's membership, the voter
//! reassignment in progress (a [`Command::Reassignment`], never a key), and
//! the clients' sessions: per client the latest request applied and its
//! result, so a retried write is applied once and answered as the first
//! time. Sessions are part of every snapshot. At most [`MAX_SESSIONS`]
//! are kept; beyond that the client whose latest request is oldest is
//! forgotten (the same one on every replica: eviction follows the log),
//! and a retry of that client's request could apply again.

pub mod control;

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::TryStreamExt;
use openraft10::storage::{EntryResponder, RaftStateMachine, Snapshot};
use openraft10::type_config::alias::{
    EntryOf, LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf,
};
use openraft10::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use quorumlog_openraft10::{Receiver, SnapshotData, SnapshotFiles};
use quorumlog_raft::Group;
use serde::{Deserialize, Serialize};

use crate::wire::{Command, Put, ReassignmentState, Reply, RequestId, TypeConfig};
use control::Controller;
use quorumlog_raft::kraft::voters::Reassignment;

/// Client sessions kept at most (see the module documentation).
pub const MAX_SESSIONS: usize = 10_000;

/// One client's latest applied request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Session {
    seq: u64,
    /// The index of the entry that applied it.
    index: u64,
}

/// The clients' sessions, bounded, evicted by age of their latest request.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Sessions {
    by_client: BTreeMap<u64, Session>,
    /// (index of the client's latest request, client): the eviction order.
    by_age: std::collections::BTreeSet<(u64, u64)>,
}

impl Sessions {
    /// What a request already applied answers, if it did.
    fn replay(&self, r: RequestId) -> Option<Reply> {
        let s = self.by_client.get(&r.client)?;
        match r.seq.cmp(&s.seq) {
            std::cmp::Ordering::Equal => Some(Reply::Put { index: s.index }),
            std::cmp::Ordering::Less => Some(Reply::Superseded),
            std::cmp::Ordering::Greater => None,
        }
    }

    fn record(&mut self, r: RequestId, index: u64) {
        if let Some(old) = self
            .by_client
            .insert(r.client, Session { seq: r.seq, index })
        {
            self.by_age.remove(&(old.index, r.client));
        }
        self.by_age.insert((index, r.client));
        while self.by_client.len() > MAX_SESSIONS {
            let Some((_, client)) = self.by_age.pop_first() else {
                break;
            };
            self.by_client.remove(&client);
        }
    }
}

fn io_err(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

/// What the machine holds (and a snapshot contains).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct State {
    last_applied: Option<LogIdOf<TypeConfig>>,
    membership: StoredMembershipOf<TypeConfig>,
    data: BTreeMap<String, String>,
    reassignment: ReassignmentState,
    sessions: Sessions,
    /// The controller generation the partition's reassignment carries
    /// out (the partitioned service).
    generation: u64,
    /// The controller state (the partitioned service's controller group).
    control: Controller,
}

impl State {
    fn apply_put(&mut self, put: Put, index: u64) -> Reply {
        if let Some(r) = put.request {
            if let Some(reply) = self.sessions.replay(r) {
                return reply;
            }
            self.sessions.record(r, index);
        }
        self.data.insert(put.key, put.value);
        Reply::Put { index }
    }
}

/// The machine's snapshot data: a snapshot file of its store, or (for the
/// benchmark's other log stores) the state's bytes in memory.
#[derive(Debug)]
pub enum KvSnapshot {
    /// A published snapshot file, read chunk by chunk as it is sent.
    File(SnapshotData),
    /// The state in memory.
    Memory(Arc<Vec<u8>>),
}

impl KvSnapshot {
    /// The bytes a transfer sends.
    pub fn size(&self) -> u64 {
        match self {
            KvSnapshot::File(f) => f.size(),
            KvSnapshot::Memory(b) => b.len() as u64,
        }
    }

    /// Up to `max` bytes from `position`.
    ///
    /// # Errors
    /// The file is gone (a newer snapshot replaced it); I/O.
    pub fn read_chunk(&self, position: u64, max: usize) -> io::Result<Vec<u8>> {
        match self {
            KvSnapshot::File(f) => f.read_chunk(position, max),
            KvSnapshot::Memory(b) => {
                let from = usize::try_from(position).unwrap_or(usize::MAX).min(b.len());
                let to = from.saturating_add(max).min(b.len());
                Ok(b.get(from..to).unwrap_or_default().to_vec())
            }
        }
    }
}

/// A snapshot being received ([`KvMachine::receive`]).
#[derive(Debug)]
pub enum Incoming {
    /// Into the store's install: durable per chunk, resumable, verified.
    File(Receiver),
    /// Into memory.
    Memory {
        /// The bytes so far.
        bytes: Vec<u8>,
        /// The size announced.
        size: u64,
        /// The last log id of the snapshot it is.
        last: Option<LogIdOf<TypeConfig>>,
    },
}

impl Incoming {
    /// The next byte it needs.
    pub fn position(&self) -> u64 {
        match self {
            Incoming::File(r) => r.position(),
            Incoming::Memory { bytes, .. } => bytes.len() as u64,
        }
    }

    /// Takes `bytes` at `position` (bytes it holds already are skipped).
    ///
    /// # Errors
    /// A gap; more than announced; I/O.
    pub fn write_chunk(&mut self, position: u64, chunk: &[u8]) -> io::Result<()> {
        match self {
            Incoming::File(r) => r.write_chunk(position, chunk),
            Incoming::Memory { bytes, size, .. } => {
                let have = bytes.len() as u64;
                if position > have || position + chunk.len() as u64 > *size {
                    return Err(io::Error::other(format!(
                        "snapshot chunk at {position} of {} bytes; holding {have} of {size}",
                        chunk.len()
                    )));
                }
                let skip = usize::try_from(have - position).unwrap_or(usize::MAX);
                bytes.extend_from_slice(chunk.get(skip..).unwrap_or_default());
                Ok(())
            }
        }
    }

    /// The whole snapshot, verified and published (a file).
    ///
    /// # Errors
    /// Incomplete; a file that does not verify (nothing is published).
    pub fn finish(self) -> io::Result<KvSnapshot> {
        match self {
            Incoming::File(r) => r.verified().map(KvSnapshot::File),
            Incoming::Memory { bytes, size, .. } => {
                if bytes.len() as u64 != size {
                    return Err(io::Error::other("snapshot incomplete"));
                }
                Ok(KvSnapshot::Memory(Arc::new(bytes)))
            }
        }
    }
}

/// A snapshot kept in memory.
type Held = Option<(SnapshotMetaOf<TypeConfig>, Arc<Vec<u8>>)>;

/// The state machine (clones share it). It keeps its snapshots as its
/// group's snapshot files (the single-group service's one group, or a
/// partition's group of the partitioned service).
#[derive(Debug)]
pub struct KvMachine {
    state: Arc<Mutex<State>>,
    /// Where snapshots go: quorumlog snapshot files, or (for the
    /// benchmark's other log stores) memory.
    files: Option<SnapshotFiles>,
    held: Arc<Mutex<Held>>,
    /// Every membership this machine applied since it started: (log index,
    /// its voter sets: one, or two while joint). Not in snapshots: what a
    /// test or an operator reads back of the changes it saw.
    memberships: Arc<Mutex<Vec<MembershipSeen>>>,
}

/// A membership a machine applied: its log index and voter sets (one, or
/// two while joint).
pub type MembershipSeen = (u64, Vec<Vec<u64>>);

impl Clone for KvMachine {
    fn clone(&self) -> Self {
        KvMachine {
            state: Arc::clone(&self.state),
            files: self.files.clone(),
            held: Arc::clone(&self.held),
            memberships: Arc::clone(&self.memberships),
        }
    }
}

impl KvMachine {
    /// A machine whose snapshots stay in memory (for log stores other than
    /// quorumlog, in the benchmark).
    pub fn in_memory() -> Self {
        KvMachine {
            state: Arc::new(Mutex::new(State::default())),
            files: None,
            held: Arc::new(Mutex::new(None)),
            memberships: Arc::default(),
        }
    }
}

impl KvMachine {
    /// The machine of `store`, restored from its latest snapshot.
    ///
    /// # Errors
    /// A snapshot that does not verify or decode.
    pub fn open(store: Arc<Group>) -> io::Result<Self> {
        let files = SnapshotFiles::new(store);
        let state = match files.latest::<TypeConfig>()? {
            Some((_, data)) => bincode::deserialize(&data).map_err(io_err)?,
            None => State::default(),
        };
        Ok(KvMachine {
            state: Arc::new(Mutex::new(state)),
            files: Some(files),
            held: Arc::new(Mutex::new(None)),
            memberships: Arc::default(),
        })
    }

    /// Starts (or resumes) receiving the snapshot `meta` names, `size`
    /// bytes: into the store's install, or memory.
    ///
    /// # Errors
    /// The store refuses the install; I/O.
    pub fn receive(&self, meta: &SnapshotMetaOf<TypeConfig>, size: u64) -> io::Result<Incoming> {
        match &self.files {
            Some(files) => files.receive::<TypeConfig>(meta, size).map(Incoming::File),
            None => Ok(Incoming::Memory {
                bytes: Vec::new(),
                size,
                last: meta.last_log_id,
            }),
        }
    }

    /// Whether an incoming snapshot is the one `meta` names.
    pub fn receiving(incoming: &Incoming, meta: &SnapshotMetaOf<TypeConfig>) -> bool {
        match incoming {
            Incoming::File(r) => {
                SnapshotFiles::id_of::<TypeConfig>(meta).is_ok_and(|id| id == r.id())
            }
            Incoming::Memory { last, .. } => *last == meta.last_log_id,
        }
    }

    /// Keeps the snapshot this machine built of its state `data`; returns
    /// what a follower receives for it.
    fn keep_built(
        &self,
        meta: &SnapshotMetaOf<TypeConfig>,
        data: Vec<u8>,
    ) -> io::Result<KvSnapshot> {
        if let Some(files) = &self.files {
            return files
                .save_built::<TypeConfig>(meta, &data)
                .map(|f| KvSnapshot::File(SnapshotData::File(f)));
        }
        let data = Arc::new(data);
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((meta.clone(), Arc::clone(&data)));
        Ok(KvSnapshot::Memory(data))
    }

    /// The state in a snapshot openraft installs (received whole and
    /// verified by the network before).
    fn keep_received(
        &self,
        meta: &SnapshotMetaOf<TypeConfig>,
        got: KvSnapshot,
    ) -> io::Result<Vec<u8>> {
        match (&self.files, got) {
            (Some(files), KvSnapshot::File(d)) => files.installed::<TypeConfig>(meta, d),
            (None, KvSnapshot::Memory(data)) => {
                *self.held.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some((meta.clone(), Arc::clone(&data)));
                Ok(data.to_vec())
            }
            _ => Err(io::Error::other(
                "a snapshot of the other kind (file or memory) than this machine keeps",
            )),
        }
    }

    /// Applies one committed entry; its reply.
    ///
    /// # Panics
    /// If `e` is not the entry after the last applied (each entry is
    /// applied once, in index order: openraft's contract).
    pub fn apply_one(&self, e: EntryOf<TypeConfig>) -> Reply {
        let mut s = self.lock();
        assert!(
            s.last_applied.is_none_or(|l| e.log_id.index == l.index + 1),
            "entry {} applied after {:?}: each once, in index order",
            e.log_id.index,
            s.last_applied.map(|l| l.index)
        );
        s.last_applied = Some(e.log_id);
        match e.payload {
            EntryPayload::Blank => Reply::Done,
            EntryPayload::Normal(Command::Put(put)) => s.apply_put(put, e.log_id.index),
            EntryPayload::Normal(Command::Reassignment(r)) => {
                s.reassignment = r;
                Reply::Done
            }
            EntryPayload::Normal(Command::Reassign { state, generation }) => {
                s.reassignment = state;
                s.generation = s.generation.max(generation);
                Reply::Done
            }
            EntryPayload::Normal(Command::Control(c)) => Reply::Control(s.control.apply(c)),
            EntryPayload::Membership(m) => {
                let sets = m
                    .get_joint_config()
                    .iter()
                    .map(|set| set.iter().copied().collect())
                    .collect();
                self.memberships
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((e.log_id.index, sets));
                s.membership = StoredMembershipOf::<TypeConfig>::new(Some(e.log_id), m);
                Reply::Done
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<String> {
        self.lock().data.get(key).cloned()
    }

    /// The value of `key` and the index applied when it was read.
    pub fn read(&self, key: &str) -> (Option<String>, u64) {
        let s = self.lock();
        (
            s.data.get(key).cloned(),
            s.last_applied.map_or(0, |l| l.index),
        )
    }

    /// The voter reassignment in progress, as applied.
    pub fn reassignment(&self) -> Option<Reassignment> {
        self.lock().reassignment.0.clone()
    }

    /// The controller generation the partition's reassignment state
    /// carries out (0: none yet).
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Every membership applied since the machine started, in order: (log
    /// index, voter sets: one, or two while joint).
    pub fn membership_history(&self) -> Vec<MembershipSeen> {
        self.memberships
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The store its snapshots go to (`None`: kept in memory).
    pub fn store(&self) -> Option<&Arc<Group>> {
        self.files.as_ref().map(SnapshotFiles::store)
    }

    /// The controller state (the controller group's machine).
    pub fn controller(&self) -> Controller {
        self.lock().control.clone()
    }

    /// `f` of the controller state, without a copy of it.
    pub fn with_controller<R>(&self, f: impl FnOnce(&Controller) -> R) -> R {
        f(&self.lock().control)
    }

    /// How many client sessions the machine keeps.
    pub fn sessions(&self) -> usize {
        self.lock().sessions.by_client.len()
    }

    /// Every key and value.
    pub fn dump(&self) -> BTreeMap<String, String> {
        self.lock().data.clone()
    }

    /// The last applied index.
    pub fn applied(&self) -> Option<u64> {
        self.lock().last_applied.map(|l| l.index)
    }
}

impl RaftSnapshotBuilder<TypeConfig> for KvMachine {
    type SnapshotData = KvSnapshot;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<TypeConfig, KvSnapshot>, io::Error> {
        let state = self.lock().clone();
        let data = bincode::serialize(&state).map_err(io_err)?;
        let meta = SnapshotMetaOf::<TypeConfig> {
            last_log_id: state.last_applied,
            last_membership: state.membership.clone(),
        };
        let sent = self.keep_built(&meta, data)?;
        Ok(Snapshot {
            meta,
            snapshot: sent,
        })
    }
}

impl RaftStateMachine<TypeConfig> for KvMachine {
    type SnapshotData = KvSnapshot;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<TypeConfig>>, StoredMembershipOf<TypeConfig>), io::Error> {
        let s = self.lock();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: futures_util::Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>>
            + Unpin
            + OptionalSend,
    {
        while let Some((e, responder)) = entries.try_next().await? {
            let reply = self.apply_one(e);
            if let Some(r) = responder {
                r.send(reply);
            }
        }
        Ok(())
    }

    async fn try_create_snapshot_builder(&mut self, _force: bool) -> Option<Self::SnapshotBuilder> {
        Some(self.clone())
    }

    // Required by the trait, deprecated by openraft 0.10: openraft calls
    // `try_create_snapshot_builder` above.
    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<TypeConfig>,
        snapshot: KvSnapshot,
    ) -> Result<(), io::Error> {
        let data = self.keep_received(meta, snapshot)?;
        let state: State = bincode::deserialize(&data).map_err(io_err)?;
        *self.lock() = state;
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TypeConfig, KvSnapshot>>, io::Error> {
        match &self.files {
            Some(files) => Ok(files.current::<TypeConfig>()?.map(|s| Snapshot {
                meta: s.meta,
                snapshot: KvSnapshot::File(s.snapshot),
            })),
            None => Ok(self
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
                .map(|(meta, data)| Snapshot {
                    meta,
                    snapshot: KvSnapshot::Memory(data),
                })),
        }
    }
}
