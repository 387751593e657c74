//! Shared by the adapter's tests: a type config, a small key-value state
//! machine keeping its snapshots with `SnapshotFiles`, and store setup.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    unreachable_pub,
    reason = "test code: a panic is a failed assertion"
)]

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta, StorageError, StoredMembership,
};
use quorumlog_checkpoint::{ClusterId, DirectoryId, Meta, NodeId, SharedFs};
use quorumlog_log::{LogOptions, SyncPolicy};
use quorumlog_openraft::{LogStore, SnapshotFiles};
use quorumlog_raft::{Store, StoreOptions};
use serde::{Deserialize, Serialize};

openraft::declare_raft_types!(
    pub TypeConfig:
        D = Put,
        R = Option<String>,
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

pub const DIR: &str = "/data";

pub fn options() -> StoreOptions {
    StoreOptions {
        log: LogOptions {
            segment_size_bytes: 64 << 10,
            max_batch_bytes: 32 << 10,
            prefill_segments: 0,
            ..LogOptions::default()
        },
        sync: SyncPolicy::GroupCommit,
    }
}

pub fn meta(node: u64) -> Meta {
    Meta::new(
        ClusterId(1),
        NodeId(node),
        DirectoryId(u128::from(node) + 1),
    )
}

/// Formats (if `fresh`) and opens node `node`'s store in `dir`.
pub fn open_store(fs: &SharedFs, dir: &Path, node: u64, fresh: bool) -> Arc<Store> {
    if fresh {
        Store::format(fs, dir, meta(node), None, &options()).unwrap();
    }
    Arc::new(Store::open(fs, dir, &options()).unwrap().0)
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct State {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, openraft::BasicNode>,
    data: BTreeMap<String, String>,
}

/// An in-memory key-value state machine; snapshots are store snapshot
/// files.
#[derive(Debug, Clone)]
pub struct KvMachine {
    state: Arc<Mutex<State>>,
    files: SnapshotFiles,
}

impl KvMachine {
    /// A machine over `store`'s snapshots, restored from the latest one.
    pub fn new(store: Arc<Store>) -> Self {
        let files = SnapshotFiles::new(store);
        let state = files
            .latest::<openraft::BasicNode>()
            .unwrap()
            .map(|(_, data)| bincode::deserialize(&data).unwrap())
            .unwrap_or_default();
        KvMachine {
            state: Arc::new(Mutex::new(state)),
            files,
        }
    }

    pub fn get(&self, key: &str) -> Option<String> {
        self.state.lock().unwrap().data.get(key).cloned()
    }
}

type Error = StorageError<u64>;

impl RaftSnapshotBuilder<TypeConfig> for KvMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, Error> {
        let state = self.state.lock().unwrap().clone();
        let data = bincode::serialize(&state).unwrap();
        let meta = SnapshotMeta {
            last_log_id: state.last_applied,
            last_membership: state.membership.clone(),
            snapshot_id: format!("{}", state.last_applied.map_or(0, |l| l.index + 1)),
        };
        self.files.save(&meta, &data)?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for KvMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<
        (
            Option<LogId<u64>>,
            StoredMembership<u64, openraft::BasicNode>,
        ),
        Error,
    > {
        let s = self.state.lock().unwrap();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Option<String>>, Error>
    where
        I: IntoIterator<Item = openraft::Entry<TypeConfig>> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let mut s = self.state.lock().unwrap();
        let mut out = Vec::new();
        for e in entries {
            s.last_applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => out.push(None),
                EntryPayload::Normal(put) => {
                    out.push(s.data.insert(put.key, put.value));
                }
                EntryPayload::Membership(m) => {
                    s.membership = StoredMembership::new(Some(e.log_id), m);
                    out.push(None);
                }
            }
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, Error> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, openraft::BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), Error> {
        let data = snapshot.into_inner();
        let state: State = bincode::deserialize(&data).unwrap();
        self.files.save(meta, &data)?;
        *self.state.lock().unwrap() = state;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, Error> {
        Ok(self
            .files
            .latest::<openraft::BasicNode>()?
            .map(|(meta, data)| Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(data)),
            }))
    }
}

/// A log store and state machine for node `node` over `store`.
pub fn parts(store: &Arc<Store>, node: u64) -> (LogStore<TypeConfig>, KvMachine) {
    (
        LogStore::new(Arc::clone(store), node).unwrap(),
        KvMachine::new(Arc::clone(store)),
    )
}
