//! The adapter tests' own state machine, like openraft's memstore: keys and
//! values in memory, snapshots as quorumlog snapshot files
//! ([`SnapshotFiles`]) or, for the storage suite, in memory. Small on
//! purpose: the tests are about the log store, not a service.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, OptionalSend,
    RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use quorumlog_openraft::{SnapshotFiles, SnapshotStream};
use quorumlog_raft::Group;
use serde::{Deserialize, Serialize};

openraft::declare_raft_types!(
    /// The tests' types: entries are [`Put`]s.
    pub TypeConfig:
        D = Put,
        R = (),
        SnapshotData = SnapshotStream,
);

/// A write: `key = value`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Put {
    pub key: String,
    pub value: String,
}

impl std::fmt::Display for Put {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.key, self.value)
    }
}

type Error = StorageError<u64>;

fn sm_error(verb: ErrorVerb, e: &(dyn std::error::Error + 'static)) -> Error {
    StorageIOError::new(
        ErrorSubject::StateMachine,
        verb,
        AnyError::from_dyn(e, None),
    )
    .into()
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct State {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    data: BTreeMap<String, String>,
}

type Held = Option<(SnapshotMeta<u64, BasicNode>, Vec<u8>)>;

/// The state machine (clones share it).
#[derive(Debug, Clone)]
pub struct Machine {
    state: Arc<Mutex<State>>,
    files: Option<SnapshotFiles>,
    held: Arc<Mutex<Held>>,
}

impl Machine {
    /// The machine of `store`, restored from its latest snapshot file.
    pub fn open(store: Arc<Group>) -> Result<Self, Error> {
        let files = SnapshotFiles::new(store);
        let state = match files.latest::<BasicNode>()? {
            Some((_, data)) => {
                bincode::deserialize(&data).map_err(|e| sm_error(ErrorVerb::Read, &e))?
            }
            None => State::default(),
        };
        Ok(Machine {
            state: Arc::new(Mutex::new(state)),
            files: Some(files),
            held: Arc::new(Mutex::new(None)),
        })
    }

    /// A machine whose snapshots stay in memory.
    pub fn in_memory() -> Self {
        Machine {
            state: Arc::new(Mutex::new(State::default())),
            files: None,
            held: Arc::new(Mutex::new(None)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<String> {
        self.lock().data.get(key).cloned()
    }
}

impl RaftSnapshotBuilder<TypeConfig> for Machine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, Error> {
        let state = self.lock().clone();
        let data = bincode::serialize(&state).map_err(|e| sm_error(ErrorVerb::Write, &e))?;
        let meta = SnapshotMeta {
            last_log_id: state.last_applied,
            last_membership: state.membership.clone(),
            snapshot_id: format!("{}", state.last_applied.map_or(0, |l| l.index + 1)),
        };
        let stream = match &self.files {
            Some(files) => {
                files.save_built(&meta, &data)?;
                files.sending(&meta)?
            }
            None => {
                *self.held() = Some((meta.clone(), data.clone()));
                SnapshotStream::Memory(Cursor::new(data))
            }
        };
        Ok(Snapshot {
            meta,
            snapshot: Box::new(stream),
        })
    }
}

impl RaftStateMachine<TypeConfig> for Machine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), Error> {
        let s = self.lock();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<()>, Error>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut s = self.lock();
        let mut out = Vec::new();
        for e in entries {
            s.last_applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(p) => {
                    s.data.insert(p.key, p.value);
                }
                EntryPayload::Membership(m) => {
                    s.membership = StoredMembership::new(Some(e.log_id), m);
                }
            }
            out.push(());
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
        let data = match (&self.files, *snapshot) {
            (Some(files), received) => {
                files.finish_received(meta, received)?;
                match files.latest::<BasicNode>()? {
                    Some((m, data)) if m.last_log_id == meta.last_log_id => data,
                    _ => {
                        return Err(sm_error(
                            ErrorVerb::Read,
                            &std::io::Error::other("the installed snapshot is not the latest"),
                        ))
                    }
                }
            }
            (None, SnapshotStream::Memory(c)) => {
                let data = c.into_inner();
                *self.held() = Some((meta.clone(), data.clone()));
                data
            }
            (None, _) => {
                return Err(sm_error(
                    ErrorVerb::Read,
                    &std::io::Error::other("a memory machine received a snapshot file"),
                ))
            }
        };
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
                .held()
                .clone()
                .map(|(meta, data)| (meta, SnapshotStream::Memory(Cursor::new(data)))),
        };
        Ok(latest.map(|(meta, stream)| Snapshot {
            meta,
            snapshot: Box::new(stream),
        }))
    }
}
