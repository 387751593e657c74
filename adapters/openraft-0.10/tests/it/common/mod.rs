//! The 0.10 adapter tests' types: keys and values on the adapter's
//! `FileMachine` (snapshots as the group's snapshot files), and an
//! in-memory machine for openraft's suite.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test binary uses part of it; the type config names `Put` publicly"
)]

pub mod member;

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::{Stream, TryStreamExt};
use openraft10::storage::{EntryResponder, RaftStateMachine};
use openraft10::type_config::alias::{LogIdOf, SnapshotMetaOf, StoredMembershipOf};
use openraft10::{EntryPayload, OptionalSend, RaftSnapshotBuilder, RaftTypeConfig};
use quorumlog_openraft10::{AppState, Applied, EpochLeaderId, FileMachine, SnapshotFiles};
use quorumlog_raft::{Group, Identity, Node, NodeOptions, Offset, SharedFs};
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

/// A one-group node in `dir` (group 1, at openraft's first index 0),
/// formatted if `fresh`: its group's handle, which keeps the node
/// running.
pub(crate) fn open_store(fs: &SharedFs, dir: &Path, node: u64, fresh: bool) -> Arc<Group> {
    let meta = quorumlog_raft::Meta::new(
        quorumlog_raft::ClusterId(1),
        quorumlog_raft::NodeId(node),
        quorumlog_raft::DirectoryId(u128::from(node) + 1),
    );
    let options = NodeOptions::with_segment_bytes(64 << 10);
    if fresh {
        Node::format(fs, dir, meta, &options).unwrap();
    }
    let (n, _) = Node::open(fs, dir, &Identity::of(&meta), &options).unwrap();
    if fresh {
        n.create_group(1, Offset(0)).unwrap();
    }
    Arc::new(n.group(1).unwrap())
}

/// The test configurations' entries.
pub(crate) trait TestConfig:
    RaftTypeConfig<
    NodeId = u64,
    D = Put,
    R = (),
    Entry = openraft10::Entry<
        openraft10::type_config::alias::CommittedLeaderIdOf<Self>,
        EntryPayload<Put, u64, <Self as RaftTypeConfig>::Node>,
    >,
>
where
    Self::LeaderId: EpochLeaderId,
{
}

impl TestConfig for Adv {}
impl TestConfig for Std {}

fn io_err(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

/// The tests' application state: keys and values.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Kv(BTreeMap<String, String>);

impl<C: TestConfig> AppState<C> for Kv
where
    C::LeaderId: EpochLeaderId,
{
    fn apply(&mut self, put: Put) {
        self.0.insert(put.key, put.value);
    }
}

/// The state machine: the adapter's, its snapshots snapshot files of its
/// group.
pub type Machine<C> = FileMachine<C, Kv>;

/// Bytes per chunk of a test transfer: small, so a transfer takes many.
pub(crate) const TEST_CHUNK: usize = 4 << 10;

/// The machine of `group`, restored from its latest snapshot, its files
/// written and sent in small chunks (a test's snapshot spans many, so an
/// interrupted transfer resumes in the middle).
pub(crate) fn machine<C: TestConfig>(group: Arc<Group>) -> Machine<C>
where
    C::LeaderId: EpochLeaderId,
{
    let mut files = SnapshotFiles::new(group);
    files.options.chunk_bytes = TEST_CHUNK;
    Machine::with_files(files).unwrap()
}

/// The in-process network of the multi-group tests.
pub(crate) type GroupRouter = quorumlog_openraft10::LocalRouter<Adv, Machine<Adv>>;

/// Every (node, group)'s machine.
pub(crate) type GroupMachines = BTreeMap<(u64, u64), Machine<Adv>>;

/// Starts a Raft on each of groups `0..groups` of node `id` (created
/// first when `create`), registers it with `router`, and keeps its
/// machine in `machines`.
pub(crate) async fn start_groups(
    router: &GroupRouter,
    node: &Node,
    id: u64,
    groups: u64,
    create: bool,
    config: &Arc<openraft10::Config>,
    machines: &mut GroupMachines,
) {
    for g in 0..groups {
        if create {
            node.create_group(g, Offset(0)).unwrap();
        }
        let group: Arc<Group> = Arc::new(node.group(g).unwrap());
        let machine = machine::<Adv>(Arc::clone(&group));
        let raft = openraft10::Raft::new(
            id,
            Arc::clone(config),
            router.factory(g),
            quorumlog_openraft10::LogStore::new(group, id).unwrap(),
            machine.clone(),
        )
        .await
        .unwrap();
        router.insert_files(id, g, raft, machine.files().clone());
        machines.insert((id, g), machine);
    }
}

/// A machine's value of `key`.
pub(crate) trait Get {
    fn get(&self, key: &str) -> Option<String>;
}

impl<C: TestConfig> Get for Machine<C>
where
    C::LeaderId: EpochLeaderId,
{
    fn get(&self, key: &str) -> Option<String> {
        self.read(|kv| kv.0.get(key).cloned())
    }
}

type Held<C> = Option<(SnapshotMetaOf<C>, BTreeMap<String, String>)>;

/// A state machine whose snapshots stay in memory, for openraft's suite:
/// it applies entries its log never held and snapshots them, which the
/// store's checked snapshot creation refuses (a state no committed entry
/// of the log produced). Snapshot files are tested where openraft's order
/// holds (the cluster tests).
pub(crate) struct MemMachine<C: RaftTypeConfig> {
    state: Arc<Mutex<Applied<C, Kv>>>,
    held: Arc<Mutex<Held<C>>>,
}

impl<C: RaftTypeConfig> Clone for MemMachine<C> {
    fn clone(&self) -> Self {
        MemMachine {
            state: Arc::clone(&self.state),
            held: Arc::clone(&self.held),
        }
    }
}

impl<C: RaftTypeConfig> MemMachine<C> {
    pub(crate) fn new() -> Self {
        MemMachine {
            state: Arc::new(Mutex::new(Applied::default())),
            held: Arc::new(Mutex::new(None)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Applied<C, Kv>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn held(&self) -> MutexGuard<'_, Held<C>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        self.lock().state.0.get(key).cloned()
    }
}

impl<C: TestConfig> RaftSnapshotBuilder<C> for MemMachine<C>
where
    C::LeaderId: EpochLeaderId,
{
    type SnapshotData = BTreeMap<String, String>;

    async fn build_snapshot(
        &mut self,
    ) -> Result<
        openraft10::storage::Snapshot<
            openraft10::type_config::alias::CommittedLeaderIdOf<C>,
            C::NodeId,
            C::Node,
            Self::SnapshotData,
        >,
        io::Error,
    > {
        let applied = self.lock().clone();
        let meta = SnapshotMetaOf::<C> {
            last_log_id: applied.last.clone(),
            last_membership: applied.membership.clone(),
        };
        *self.held() = Some((meta.clone(), applied.state.0.clone()));
        Ok(openraft10::storage::Snapshot {
            meta,
            snapshot: applied.state.0,
        })
    }
}

impl<C: TestConfig> RaftStateMachine<C> for MemMachine<C>
where
    C::LeaderId: EpochLeaderId,
{
    type SnapshotData = BTreeMap<String, String>;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<C>>, StoredMembershipOf<C>), io::Error> {
        let s = self.lock();
        Ok((s.last.clone(), s.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<C>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((e, responder)) = entries.try_next().await? {
            self.lock().apply(e);
            if let Some(r) = responder {
                r.send(());
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
        meta: &SnapshotMetaOf<C>,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        let mut s = self.lock();
        s.last.clone_from(&meta.last_log_id);
        s.membership.clone_from(&meta.last_membership);
        s.state.0.clone_from(&snapshot);
        drop(s);
        *self.held() = Some((meta.clone(), snapshot));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<
        Option<
            openraft10::storage::Snapshot<
                openraft10::type_config::alias::CommittedLeaderIdOf<C>,
                C::NodeId,
                C::Node,
                Self::SnapshotData,
            >,
        >,
        io::Error,
    > {
        Ok(self
            .held()
            .clone()
            .map(|(meta, data)| openraft10::storage::Snapshot {
                meta,
                snapshot: data,
            }))
    }
}
