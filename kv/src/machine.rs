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

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    BasicNode, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend,
    RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use quorumlog_openraft::{SnapshotFiles, SnapshotStream};
use quorumlog_raft::Store;
use serde::{Deserialize, Serialize};

use crate::proto::{Command, Put, ReassignmentState, Reply, RequestId, TypeConfig};
use quorumlog_raft::voters::Reassignment;

type Error = StorageError<u64>;

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

fn sm_error(verb: ErrorVerb, e: &dyn std::error::Error) -> Error {
    StorageIOError::new(
        ErrorSubject::StateMachine,
        verb,
        openraft::AnyError::error(e.to_string()),
    )
    .into()
}

/// What the machine holds (and a snapshot contains).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct State {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    data: BTreeMap<String, String>,
    reassignment: ReassignmentState,
    sessions: Sessions,
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

/// A snapshot kept in memory.
type Held = Option<(SnapshotMeta<u64, BasicNode>, Vec<u8>)>;

/// The state machine (clones share it).
#[derive(Debug, Clone)]
pub struct KvMachine {
    state: Arc<Mutex<State>>,
    /// Where snapshots go: quorumlog snapshot files, or (for the
    /// benchmark's other log stores) memory.
    files: Option<SnapshotFiles>,
    held: Arc<Mutex<Held>>,
}

impl KvMachine {
    /// The machine of `store`, restored from its latest snapshot.
    ///
    /// # Errors
    /// A snapshot that does not verify or decode.
    pub fn open(store: Arc<Store>) -> Result<Self, Error> {
        let files = SnapshotFiles::new(store);
        let state = match files.latest::<BasicNode>()? {
            Some((_, data)) => {
                bincode::deserialize(&data).map_err(|e| sm_error(ErrorVerb::Read, &e))?
            }
            None => State::default(),
        };
        Ok(KvMachine {
            state: Arc::new(Mutex::new(state)),
            files: Some(files),
            held: Arc::new(Mutex::new(None)),
        })
    }

    /// A machine whose snapshots stay in memory (for log stores other than
    /// quorumlog, in the benchmark).
    pub fn in_memory() -> Self {
        KvMachine {
            state: Arc::new(Mutex::new(State::default())),
            files: None,
            held: Arc::new(Mutex::new(None)),
        }
    }

    /// Keeps the snapshot this machine built of its state `data`; returns
    /// what a follower receives for it: the snapshot file, streamed from
    /// disk (verified by the follower's install), or in memory the state.
    fn keep_built(
        &self,
        meta: &SnapshotMeta<u64, BasicNode>,
        data: Vec<u8>,
    ) -> Result<SnapshotStream, Error> {
        if let Some(files) = &self.files {
            files.save_built(meta, &data)?;
            return files.sending(meta);
        }
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((meta.clone(), data.clone()));
        Ok(SnapshotStream::Memory(Cursor::new(data)))
    }

    /// Keeps a snapshot received from the leader (what its `keep_built`
    /// returned, written into `received` as it arrived); returns its state.
    fn keep_received(
        &self,
        meta: &SnapshotMeta<u64, BasicNode>,
        received: SnapshotStream,
    ) -> Result<Vec<u8>, Error> {
        if let Some(files) = &self.files {
            files.finish_received(meta, received)?;
            return match files.latest::<BasicNode>()? {
                Some((m, data)) if m.last_log_id == meta.last_log_id => Ok(data),
                _ => Err(sm_error(
                    ErrorVerb::Read,
                    &std::io::Error::other("the installed snapshot is not the latest"),
                )),
            };
        }
        let SnapshotStream::Memory(c) = received else {
            return Err(sm_error(
                ErrorVerb::Read,
                &std::io::Error::other("a memory machine received a snapshot file"),
            ));
        };
        let data = c.into_inner();
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((meta.clone(), data.clone()));
        Ok(data)
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
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, Error> {
        let state = self.lock().clone();
        let data = bincode::serialize(&state).map_err(|e| sm_error(ErrorVerb::Write, &e))?;
        let meta = SnapshotMeta {
            last_log_id: state.last_applied,
            last_membership: state.membership.clone(),
            snapshot_id: format!("{}", state.last_applied.map_or(0, |l| l.index + 1)),
        };
        let sent = self.keep_built(&meta, data)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(sent),
        })
    }
}

impl RaftStateMachine<TypeConfig> for KvMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), Error> {
        let s = self.lock();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Reply>, Error>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut s = self.lock();
        let mut out = Vec::new();
        for e in entries {
            s.last_applied = Some(e.log_id);
            out.push(match e.payload {
                EntryPayload::Blank => Reply::Done,
                EntryPayload::Normal(Command::Put(put)) => s.apply_put(put, e.log_id.index),
                EntryPayload::Normal(Command::Reassignment(r)) => {
                    s.reassignment = r;
                    Reply::Done
                }
                EntryPayload::Membership(m) => {
                    s.membership = StoredMembership::new(Some(e.log_id), m);
                    Reply::Done
                }
            });
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotStream>, Error> {
        Ok(Box::new(match &self.files {
            Some(files) => files.receiving(),
            None => SnapshotStream::Memory(Cursor::new(Vec::new())),
        }))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<SnapshotStream>,
    ) -> Result<(), Error> {
        let data = self.keep_received(meta, *snapshot)?;
        let state: State =
            bincode::deserialize(&data).map_err(|e| sm_error(ErrorVerb::Read, &e))?;
        *self.lock() = state;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, Error> {
        let latest = match &self.files {
            Some(files) => match files.latest_meta::<BasicNode>()? {
                Some(meta) => {
                    let stream = files.sending(&meta)?;
                    Some((meta, stream))
                }
                None => None,
            },
            None => self
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
                .map(|(meta, data)| (meta, SnapshotStream::Memory(Cursor::new(data)))),
        };
        Ok(latest.map(|(meta, stream)| Snapshot {
            meta,
            snapshot: Box::new(stream),
        }))
    }
}
