//! [`Group`]: one group's handle in a [`Node`](super::Node), the same
//! door as [`Store`](crate::Store) (appends at the library's offsets,
//! reads of exactly a range, truncation never below the commit point, a
//! high watermark that never moves back, the election state, snapshots,
//! metadata, durability waits and completions).

mod append;
mod read;
mod snapshots;

use std::path::PathBuf;
use std::sync::Arc;

pub(crate) use append::{check_purge_bound, check_purge_epoch};
use quorumlog_checkpoint::{DataDir, Offset, QuorumState, SmallFile, Voter};
use quorumlog_snapshot::SnapshotStore;
use snapshots::continues;
pub use snapshots::{GroupInstall, GroupWriter};

use super::index::GroupState;
use super::record::{Header, Kind};
use super::Inner;
use crate::error::{Error, Result};
use crate::store::Identity;

/// Where group `id`'s snapshots live: `snapshots/<id>/`.
pub(crate) fn snapshot_dir(dd: &DataDir, id: u64) -> PathBuf {
    dd.snapshots_dir().join(format!("{id:020}"))
}

/// One group of a node. Dropping it releases the group for another
/// handle.
#[derive(Debug)]
pub struct Group {
    pub(super) inner: Arc<Inner>,
    id: u64,
    snapshots: SnapshotStore,
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(g) = self.inner.state().groups.get_mut(&self.id) {
            g.owned = false;
        }
    }
}

impl Group {
    /// Opens the handle (its owner flag is already set) and reconciles the
    /// group with its snapshots.
    pub(super) fn open(inner: Arc<Inner>, id: u64) -> Result<Group> {
        let dir = snapshot_dir(&inner.dd, id);
        let snapshots = match SnapshotStore::open(inner.dd.fs().clone(), &dir) {
            Ok(s) => s,
            Err(e) => {
                if let Some(g) = inner.state().groups.get_mut(&id) {
                    g.owned = false;
                }
                return Err(e.into());
            }
        };
        let group = Group {
            inner,
            id,
            snapshots,
        };
        if let Some(latest) = group.snapshots.latest().map(|s| s.id) {
            if !group.with(|g| continues(g, latest))? {
                group.reset_at(latest)?;
            }
            let start = group.with(|g| g.start)?;
            if start > latest.end_offset.0 {
                return Err(Error::MissingSnapshot {
                    log_start: Offset(start),
                    latest: Some(latest),
                });
            }
            group.raise_high_watermark(latest.end_offset)?;
        }
        Ok(group)
    }

    /// Runs `f` on the group's state under the node's lock.
    fn with<T>(&self, f: impl FnOnce(&mut GroupState) -> T) -> Result<T> {
        let mut st = self.inner.state();
        match st.groups.get_mut(&self.id) {
            Some(g) => Ok(f(g)),
            None => Err(Error::UnknownGroup { group: self.id }),
        }
    }

    fn header(&self, kind: Kind, offset: u64, epoch: u64) -> Header {
        Header {
            kind,
            group: self.id,
            offset,
            epoch,
        }
    }

    /// The group's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The node's identity.
    pub fn identity(&self) -> Identity {
        Identity::of(&self.inner.dd.meta())
    }

    /// This replica as a voter: its node id and directory id.
    pub fn me(&self) -> Voter {
        let meta = self.inner.dd.meta();
        Voter {
            node_id: meta.node_id,
            directory_id: meta.directory_id,
        }
    }

    /// The failure that poisoned the node, if one did.
    pub fn poisoned(&self) -> Option<quorumlog_io::Failure> {
        self.inner.dd.poisoned()
    }

    /// The durable election state.
    pub fn quorum_state(&self) -> QuorumState {
        self.with(|g| g.vote.clone()).unwrap_or_default()
    }

    /// Replaces the election state with `next`, checked by the same rules
    /// as a store's (the epoch never regresses, one vote and one leader per
    /// epoch); durable on return. It is one record of the shared log: the
    /// votes of many groups share the round that syncs them.
    ///
    /// # Errors
    /// `Checkpoint(StateRegression…)` for a refused transition (nothing
    /// changes); `Poisoned`; I/O.
    pub fn persist_quorum_state(&self, next: &QuorumState) -> Result<()> {
        let body = next.encode_body();
        let h = self.header(Kind::Vote, 0, next.epoch.0);
        let id = self.id;
        self.inner.control(h, Some(&body), |st| {
            let g = st
                .groups
                .get(&id)
                .ok_or(Error::UnknownGroup { group: id })?;
            Ok(g.vote.check_transition(next)?)
        })?;
        tracing::info!(
            target: "quorumlog::election",
            group = id,
            epoch = next.epoch.0,
            leader = ?next.leader,
            voted = ?next.voted,
            "election state persisted"
        );
        Ok(())
    }

    /// The node's shared log's counts and latency histograms (every
    /// group's appends share its rounds).
    pub fn log_stats(&self) -> quorumlog_log::LogStats {
        self.inner.log.stats()
    }

    /// The Raft library's own metadata, if ever written.
    pub fn app_metadata(&self) -> Option<Vec<u8>> {
        self.with(|g| g.app_meta.clone()).ok().flatten()
    }

    /// Replaces the Raft library's metadata, durable on return.
    ///
    /// # Errors
    /// `Log(BatchTooLarge)` above [`Group::max_batch_bytes`]; `Poisoned`; I/O.
    pub fn write_app_metadata(&self, bytes: &[u8]) -> Result<()> {
        let h = self.header(Kind::AppMetadata, 0, 0);
        self.inner.control(h, Some(bytes), |_| Ok(()))?;
        Ok(())
    }

    /// The largest batch of entries one append may hold, in bytes.
    pub fn max_batch_bytes(&self) -> u64 {
        self.inner.log.options().max_batch_bytes - super::NODE_BATCH_OVERHEAD as u64
    }
}
