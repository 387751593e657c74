//! The 0.10 adapter tests' types and state machine: keys and values in
//! memory, snapshots in memory (the tests are about the log store).
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test binary uses part of it; the type config names `Put` publicly"
)]

pub mod net;

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::{Stream, TryStreamExt};
use openraft10::storage::{EntryResponder, RaftStateMachine, Snapshot};
use openraft10::type_config::alias::{LogIdOf, SnapshotMetaOf, StoredMembershipOf};
use openraft10::{EntryPayload, OptionalSend, RaftSnapshotBuilder, RaftTypeConfig};
use quorumlog_raft::{Identity, SharedFs, Store, StoreOptions, SyncPolicy};
use serde::{Deserialize, Serialize};

openraft10::declare_raft_types!(
    /// Advanced leader ids (openraft's default): a node may vote twice in a term.
    pub Adv:
        D = Put,
        R = (),
);

openraft10::declare_raft_types!(
    /// Standard leader ids: one leader per term, the epoch is the term.
    pub Std:
        D = Put,
        R = (),
        LeaderId = openraft10::impls::leader_id_std::LeaderId<u64, u64>,
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

/// A one-group store in `dir`, formatted if `fresh`.
pub(crate) fn open_store(fs: &SharedFs, dir: &Path, node: u64, fresh: bool) -> Arc<Store> {
    let meta = quorumlog_raft::Meta::new(
        quorumlog_raft::ClusterId(1),
        quorumlog_raft::NodeId(node),
        quorumlog_raft::DirectoryId(u128::from(node) + 1),
    );
    let options = StoreOptions {
        log: quorumlog_raft::LogOptions {
            segment_size_bytes: 64 << 10,
            max_batch_bytes: 32 << 10,
            prefill_segments: 0,
            ..quorumlog_raft::LogOptions::default()
        },
        sync: SyncPolicy::GroupCommit,
    };
    if fresh {
        Store::format(fs, dir, meta, None, &options).unwrap();
    }
    Arc::new(
        Store::open(fs, dir, &Identity::of(&meta), &options)
            .unwrap()
            .0,
    )
}

struct State<C: RaftTypeConfig> {
    last_applied: Option<LogIdOf<C>>,
    membership: StoredMembershipOf<C>,
    data: BTreeMap<String, String>,
}

impl<C: RaftTypeConfig> Clone for State<C> {
    fn clone(&self) -> Self {
        State {
            last_applied: self.last_applied.clone(),
            membership: self.membership.clone(),
            data: self.data.clone(),
        }
    }
}

impl<C: RaftTypeConfig> Default for State<C> {
    fn default() -> Self {
        State {
            last_applied: None,
            membership: StoredMembershipOf::<C>::default(),
            data: BTreeMap::new(),
        }
    }
}

type Held<C> = Option<(SnapshotMetaOf<C>, BTreeMap<String, String>)>;

/// The state machine (clones share it); snapshots are the data itself.
pub(crate) struct Machine<C: RaftTypeConfig> {
    state: Arc<Mutex<State<C>>>,
    held: Arc<Mutex<Held<C>>>,
}

impl<C: RaftTypeConfig> Clone for Machine<C> {
    fn clone(&self) -> Self {
        Machine {
            state: Arc::clone(&self.state),
            held: Arc::clone(&self.held),
        }
    }
}

impl<C: RaftTypeConfig> Machine<C> {
    pub(crate) fn new() -> Self {
        Machine {
            state: Arc::new(Mutex::new(State::default())),
            held: Arc::new(Mutex::new(None)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<C>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn held(&self) -> MutexGuard<'_, Held<C>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        self.lock().data.get(key).cloned()
    }
}

impl<C> RaftSnapshotBuilder<C> for Machine<C>
where
    C: RaftTypeConfig<
        D = Put,
        R = (),
        Entry = openraft10::Entry<
            openraft10::type_config::alias::CommittedLeaderIdOf<C>,
            EntryPayload<Put, <C as RaftTypeConfig>::NodeId, <C as RaftTypeConfig>::Node>,
        >,
    >,
{
    type SnapshotData = BTreeMap<String, String>;

    async fn build_snapshot(
        &mut self,
    ) -> Result<
        Snapshot<
            openraft10::type_config::alias::CommittedLeaderIdOf<C>,
            C::NodeId,
            C::Node,
            Self::SnapshotData,
        >,
        io::Error,
    > {
        let state = self.lock().clone();
        let meta = SnapshotMetaOf::<C> {
            last_log_id: state.last_applied.clone(),
            last_membership: state.membership.clone(),
        };
        *self.held() = Some((meta.clone(), state.data.clone()));
        Ok(Snapshot {
            meta,
            snapshot: state.data,
        })
    }
}

impl<C> RaftStateMachine<C> for Machine<C>
where
    C: RaftTypeConfig<
        D = Put,
        R = (),
        Entry = openraft10::Entry<
            openraft10::type_config::alias::CommittedLeaderIdOf<C>,
            EntryPayload<Put, <C as RaftTypeConfig>::NodeId, <C as RaftTypeConfig>::Node>,
        >,
    >,
{
    type SnapshotData = BTreeMap<String, String>;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<C>>, StoredMembershipOf<C>), io::Error> {
        let s = self.lock();
        Ok((s.last_applied.clone(), s.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<C>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((e, responder)) = entries.try_next().await? {
            {
                let mut s = self.lock();
                s.last_applied = Some(e.log_id.clone());
                match e.payload {
                    EntryPayload::Blank => {}
                    EntryPayload::Normal(p) => {
                        s.data.insert(p.key, p.value);
                    }
                    EntryPayload::Membership(m) => {
                        s.membership = StoredMembershipOf::<C>::new(Some(e.log_id.clone()), m);
                    }
                }
            }
            if let Some(r) = responder {
                r.send(());
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<C>,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        let mut s = self.lock();
        s.last_applied.clone_from(&meta.last_log_id);
        s.membership.clone_from(&meta.last_membership);
        s.data.clone_from(&snapshot);
        drop(s);
        *self.held() = Some((meta.clone(), snapshot));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<
        Option<
            Snapshot<
                openraft10::type_config::alias::CommittedLeaderIdOf<C>,
                C::NodeId,
                C::Node,
                Self::SnapshotData,
            >,
        >,
        io::Error,
    > {
        Ok(self.held().clone().map(|(meta, data)| Snapshot {
            meta,
            snapshot: data,
        }))
    }
}
