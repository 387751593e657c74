//! [`Group`]: one Raft group's handle in a [`Node`](super::Node), the
//! one door a Raft library's storage talks to: appends at the library's
//! offsets, reads of exactly a range, truncation never below the commit
//! point, purges whose epoch is the log's and never past the latest
//! snapshot, a high watermark that never moves back, the election state,
//! snapshots, metadata, durability waits and completions. Each rule is
//! stated and checked here once.
//!
//! The door (25 methods): `id`, `identity`, `poisoned`, `quorum_state`,
//! `persist_quorum_state`, `app_metadata`, `write_app_metadata`,
//! `max_batch_bytes` (this module); `append`, `wait_durable`,
//! `on_durable`, `on_node_durable`, `truncate_to`, `purge`,
//! `set_high_watermark` (`append`); `extent`, `read_entries`, `epoch_at` (`read`);
//! `create_snapshot`, `snapshots`, `snapshot`, `install_snapshot`,
//! `installs`, `discard_install`, `retain_snapshots` (`snapshots`).

mod append;
mod read;
mod snapshots;

use std::path::PathBuf;
use std::sync::Arc;

pub(crate) use append::{check_purge_bound, check_purge_epoch};
pub use append::{Encode, Purge, Records};
use quorumlog_checkpoint::{DataDir, Offset, QuorumState, SmallFile};
use quorumlog_snapshot::SnapshotStore;
pub use read::Extent;
use snapshots::continues;
pub use snapshots::{GroupInstall, GroupSnapshot, GroupWriter};

use super::index::GroupState;
use super::record::{Header, Kind};
use super::Inner;
use crate::error::{Error, Result};
use crate::types::Identity;

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
        // The last handle of the node stops its background thread.
        self.inner.signal.0.release();
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
        inner.signal.0.acquire();
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

    /// [`Group::with`] after taking in what the log made durable below
    /// `log_flushed` (read before the node's lock: the log's lock is never
    /// taken under it): the group's pending appends leave its queue, and a
    /// queued high watermark whose round is durable becomes the durable
    /// one. `f` is also given the shared end of a queued high watermark
    /// still waiting for its round.
    fn with_flushed<T>(
        &self,
        log_flushed: u64,
        f: impl FnOnce(&mut GroupState, Option<u64>) -> T,
    ) -> Result<T> {
        let mut st = self.inner.state();
        let (g, queued) = self.flushed_in(&mut st, log_flushed)?;
        Ok(f(g, queued.map(|(_, end)| end)))
    }

    /// [`Group::with_flushed`] under a lock the caller holds: the group's
    /// state and its high watermark still queued, if any (its value and
    /// its shared end).
    fn flushed_in<'s>(
        &self,
        st: &'s mut super::NodeState,
        log_flushed: u64,
    ) -> Result<(&'s mut GroupState, Option<(u64, u64)>)> {
        let super::NodeState {
            groups, queued_hw, ..
        } = st;
        let g = groups
            .get_mut(&self.id)
            .ok_or(Error::UnknownGroup { group: self.id })?;
        g.flushed(log_flushed);
        let mut queued = None;
        if let Some(&(v, end)) = queued_hw.get(&self.id) {
            if end <= log_flushed {
                g.durable_hw = Some(g.durable_hw.map_or(v, |d| d.max(v)));
                queued_hw.remove(&self.id);
            } else {
                queued = Some((v, end));
            }
        }
        Ok((g, queued))
    }

    fn header(&self, kind: Kind, offset: u64, epoch: u64) -> Header {
        Header {
            kind,
            group: self.id,
            offset,
            epoch,
            control: false,
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

    /// The node's identity as formatted.
    pub(crate) fn meta(&self) -> quorumlog_checkpoint::Meta {
        self.inner.dd.meta()
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
