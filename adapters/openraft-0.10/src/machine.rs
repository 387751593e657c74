//! A state machine whose snapshots are its group's snapshot files:
//! [`FileMachine`] keeps an application's state ([`AppState`]) in memory,
//! applies openraft's entries to it, and writes each snapshot openraft asks
//! for as a snapshot file of the group ([`SnapshotFiles`]). A restarted
//! machine starts from the latest file, and openraft replays the log after
//! it.
//!
//! The whole state is serialised into every snapshot (bincode), so it suits
//! a state that fits in memory; a larger one implements openraft's
//! `RaftStateMachine` itself over the same [`SnapshotFiles`] calls this
//! module makes (`save_built`, `installed`, `current`, `latest`).
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//!
//! use quorumlog_io::SimFs; // `quorumlog_raft::RealFs::new()` on a real disk
//! use quorumlog_openraft10::{openraft, AppState, FileMachine};
//! use quorumlog_raft::{ClusterId, DirectoryId, Identity, Meta, Node, NodeId, NodeOptions, Offset, SharedFs};
//!
//! openraft::declare_raft_types!(pub Config: D = String, R = u64);
//!
//! /// The lines written so far; a write answers with how many there are.
//! #[derive(Default, Clone, serde::Serialize, serde::Deserialize)]
//! struct Lines(Vec<String>);
//!
//! impl AppState<Config> for Lines {
//!     fn apply(&mut self, line: String) -> u64 {
//!         self.0.push(line);
//!         self.0.len() as u64
//!     }
//! }
//!
//! let fs: SharedFs = Arc::new(SimFs::new(1));
//! let meta = Meta::new(ClusterId(1), NodeId(1), DirectoryId(2));
//! Node::format(&fs, Path::new("/n1"), meta, &NodeOptions::default()).unwrap();
//! let (node, _) = Node::open(&fs, Path::new("/n1"), &Identity::of(&meta), &NodeOptions::default()).unwrap();
//! node.create_group(7, Offset(0)).unwrap();
//! // Raft::new(id, config, network, log, machine.clone()) takes it.
//! let machine = FileMachine::<Config, Lines>::new(Arc::new(node.group(7).unwrap())).unwrap();
//! assert_eq!(machine.read(|lines| lines.0.len()), 0); // a new group: no snapshot yet
//! ```

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::{Stream, TryStreamExt};
use openraft10::storage::{EntryResponder, RaftStateMachine};
use openraft10::type_config::alias::{
    CommittedLeaderIdOf, LogIdOf, SnapshotMetaOf, StoredMembershipOf,
};
use openraft10::{EntryPayload, OptionalSend, RaftSnapshotBuilder, RaftTypeConfig};
use quorumlog_raft::Group;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::mapping::EpochLeaderId;
use crate::snapshot::{FileSnapshot, SnapshotData, SnapshotFiles};

/// An application's state: what the committed entries build.
pub trait AppState<C: RaftTypeConfig>:
    Default + Clone + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// Applies one committed entry's data, in log order; the result is the
    /// client's response (`Raft::client_write`). Blank and membership
    /// entries answer `C::R::default()`.
    fn apply(&mut self, data: C::D) -> C::R;
}

/// What a state machine's committed entries build: the log id applied
/// last, the membership, and the application's state. It is what a
/// [`FileMachine`] snapshot holds, and the one place an entry is folded in
/// ([`Applied::apply`]); a state machine of your own can keep one too.
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound(serialize = "S: Serialize", deserialize = "S: DeserializeOwned"))]
pub struct Applied<C: RaftTypeConfig, S> {
    /// The log id applied last.
    pub last: Option<LogIdOf<C>>,
    /// The membership as of it.
    pub membership: StoredMembershipOf<C>,
    /// The application's state.
    pub state: S,
}

impl<C: RaftTypeConfig, S: Clone> Clone for Applied<C, S> {
    fn clone(&self) -> Self {
        Applied {
            last: self.last.clone(),
            membership: self.membership.clone(),
            state: self.state.clone(),
        }
    }
}

impl<C: RaftTypeConfig, S: Default> Default for Applied<C, S> {
    fn default() -> Self {
        Applied {
            last: None,
            membership: StoredMembershipOf::<C>::default(),
            state: S::default(),
        }
    }
}

impl<C, S> Applied<C, S>
where
    C: RaftTypeConfig<Entry = EntryOf<C>>,
    C::R: Default,
    S: AppState<C>,
{
    /// Folds in one committed entry, in log order: a normal entry's data
    /// goes to [`AppState::apply`], a membership entry becomes the
    /// membership; blank and membership entries answer `C::R::default()`.
    pub fn apply(&mut self, entry: EntryOf<C>) -> C::R {
        self.last = Some(entry.log_id.clone());
        match entry.payload {
            EntryPayload::Blank => C::R::default(),
            EntryPayload::Normal(data) => self.state.apply(data),
            EntryPayload::Membership(m) => {
                self.membership = StoredMembershipOf::<C>::new(Some(entry.log_id), m);
                C::R::default()
            }
        }
    }
}

fn io_err(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

/// openraft's entries in the shape `declare_raft_types!` gives them.
pub type EntryOf<C> = openraft10::Entry<
    CommittedLeaderIdOf<C>,
    EntryPayload<
        <C as RaftTypeConfig>::D,
        <C as RaftTypeConfig>::NodeId,
        <C as RaftTypeConfig>::Node,
    >,
>;

/// A state machine over one group (see the module documentation). Clones
/// share the state: keep one to read it while openraft owns another.
pub struct FileMachine<C: RaftTypeConfig, S> {
    applied: Arc<Mutex<Applied<C, S>>>,
    files: SnapshotFiles,
}

impl<C: RaftTypeConfig, S> Clone for FileMachine<C, S> {
    fn clone(&self) -> Self {
        FileMachine {
            applied: Arc::clone(&self.applied),
            files: self.files.clone(),
        }
    }
}

impl<C: RaftTypeConfig, S> fmt::Debug for FileMachine<C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileMachine")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl<C, S> FileMachine<C, S>
where
    C: RaftTypeConfig,
    C::LeaderId: EpochLeaderId,
    S: AppState<C>,
{
    /// The machine of `group`, restored from its latest snapshot file (a
    /// new group starts from `S::default()`).
    ///
    /// # Errors
    /// The latest snapshot does not verify or does not decode; I/O.
    pub fn new(group: Arc<Group>) -> io::Result<Self> {
        Self::with_files(SnapshotFiles::new(group))
    }

    /// As [`FileMachine::new`], with `files`' options (chunk size,
    /// snapshots kept).
    ///
    /// # Errors
    /// As [`FileMachine::new`].
    pub fn with_files(files: SnapshotFiles) -> io::Result<Self> {
        let applied = match files.latest::<C>()? {
            Some((_, data)) => bincode::deserialize(&data).map_err(io_err)?,
            None => Applied::default(),
        };
        Ok(FileMachine {
            applied: Arc::new(Mutex::new(applied)),
            files,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Applied<C, S>> {
        self.applied.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the state: what the entries applied so far built (a local read;
    /// for a linearizable one, ask openraft first: `Raft::ensure_linearizable`).
    pub fn read<T>(&self, f: impl FnOnce(&S) -> T) -> T {
        f(&self.lock().state)
    }

    /// The log id applied last.
    pub fn applied(&self) -> Option<LogIdOf<C>> {
        self.lock().last.clone()
    }

    /// Its snapshot files: what a network receives a snapshot into
    /// ([`SnapshotFiles::copy_in`], [`SnapshotFiles::receive`]).
    pub fn files(&self) -> &SnapshotFiles {
        &self.files
    }
}

impl<C, S> RaftSnapshotBuilder<C> for FileMachine<C, S>
where
    C: RaftTypeConfig<Entry = EntryOf<C>>,
    C::LeaderId: EpochLeaderId,
    S: AppState<C>,
{
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<FileSnapshot<C>, io::Error> {
        let applied = self.lock().clone();
        let meta = SnapshotMetaOf::<C> {
            last_log_id: applied.last.clone(),
            last_membership: applied.membership.clone(),
        };
        let data = bincode::serialize(&applied).map_err(io_err)?;
        let file = self.files.save_built::<C>(&meta, &data)?;
        Ok(FileSnapshot::<C> {
            meta,
            snapshot: SnapshotData::File(file),
        })
    }
}

impl<C, S> RaftStateMachine<C> for FileMachine<C, S>
where
    C: RaftTypeConfig<Entry = EntryOf<C>>,
    C::R: Default,
    C::LeaderId: EpochLeaderId,
    S: AppState<C>,
{
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<C>>, StoredMembershipOf<C>), io::Error> {
        let a = self.lock();
        Ok((a.last.clone(), a.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<C>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let response = self.lock().apply(entry);
            if let Some(r) = responder {
                r.send(response);
            }
        }
        Ok(())
    }

    async fn try_create_snapshot_builder(&mut self, _force: bool) -> Option<Self::SnapshotBuilder> {
        Some(self.clone())
    }

    // Required by the trait, deprecated by openraft 0.10, which calls
    // `try_create_snapshot_builder` above.
    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<C>,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        let data = self.files.installed::<C>(meta, snapshot)?;
        let applied: Applied<C, S> = bincode::deserialize(&data).map_err(io_err)?;
        *self.lock() = applied;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<FileSnapshot<C>>, io::Error> {
        self.files.current::<C>()
    }
}
