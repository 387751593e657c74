//! A group's snapshots: one snapshot directory per group, as a store's;
//! local snapshots only of committed entries the log holds, installs
//! checked against the log before they replace it, retention, and the
//! cleaning of the log prefix a snapshot covers.

use std::sync::Arc;

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_snapshot::{
    Install, Retention, SnapshotId, SnapshotInfo, SnapshotWriter, WriterOptions,
};

use super::Group;
use crate::error::{Error, Result};
use crate::node::index::GroupState;
use crate::node::record::Kind;

impl Group {
    pub(super) fn reset_at(&self, id: SnapshotId) -> Result<()> {
        let h = self.header(Kind::Reset, id.end_offset.0, id.epoch.0);
        self.inner.control(h, None, |_| Ok(()))?;
        Ok(())
    }

    // --- Snapshots: one snapshot directory per group, as a store's. ---

    /// Starts a local snapshot of the state below `end_offset`, whose last
    /// entry has `epoch`: refused above the high watermark and unless the
    /// group's log holds that entry with that epoch.
    ///
    /// # Errors
    /// `SnapshotRefused`; `Snapshot` (it exists already; I/O).
    pub fn create_snapshot(
        &self,
        end_offset: Offset,
        epoch: Epoch,
        metadata: &[u8],
        options: WriterOptions,
    ) -> Result<GroupWriter<'_>> {
        self.inner.check_poisoned()?;
        let id = SnapshotId { end_offset, epoch };
        let (hw, start, at_last) = self.with(|g| {
            let last = end_offset.0.checked_sub(1);
            (
                g.hw.unwrap_or(g.start),
                g.start,
                last.and_then(|o| g.epoch_at(o)),
            )
        })?;
        if end_offset.0 > hw {
            return Err(Error::SnapshotRefused {
                id,
                why: "beyond the high watermark",
            });
        }
        let matches = match end_offset.0.checked_sub(1) {
            None => epoch == Epoch(0) || self.snapshots.get(id).is_some(),
            Some(o) if o >= start => at_last == Some(epoch.0),
            _ => self
                .snapshots
                .latest_covering(end_offset)
                .is_some_and(|s| s.id == id),
        };
        if !matches {
            return Err(Error::SnapshotRefused {
                id,
                why: "the epoch is not the log's at its last offset",
            });
        }
        let writer = self.snapshots.create(id, metadata, options);
        Ok(GroupWriter {
            group: self,
            writer: self.inner.note(writer.map_err(Error::from))?,
        })
    }

    /// The latest snapshot (internal: callers read it from the extent).
    pub(crate) fn latest(&self) -> Option<SnapshotId> {
        self.snapshots.latest().map(|s| s.id)
    }

    /// The published snapshots, oldest first.
    pub fn snapshots(&self) -> Vec<SnapshotInfo> {
        self.snapshots.list()
    }

    /// Published snapshot `id`, to read.
    ///
    /// # Errors
    /// `Snapshot(NotFound)`.
    pub fn snapshot(&self, id: SnapshotId) -> Result<GroupSnapshot<'_>> {
        let info = self
            .snapshots
            .get(id)
            .ok_or(Error::Snapshot(quorumlog_snapshot::Error::NotFound(id)))?;
        Ok(GroupSnapshot { group: self, info })
    }

    /// Starts, or resumes after a restart, the install of snapshot `id` of
    /// `total_size` bytes from the leader; its [`GroupInstall::finish`]
    /// publishes it and makes the group's log continue it. The install
    /// holds the group by `Arc` (a download driven from a stream owns
    /// what it uses).
    ///
    /// # Errors
    /// `SnapshotRefused` for one ending below the log start, or one the
    /// log does not continue below the high watermark;
    /// `Snapshot(NotNewer)`; I/O.
    pub fn install_snapshot(
        self: &Arc<Self>,
        id: SnapshotId,
        total_size: u64,
    ) -> Result<GroupInstall> {
        self.inner.check_poisoned()?;
        self.check_install(id)?;
        Ok(GroupInstall {
            group: Arc::clone(self),
            install: self.snapshots.begin_install(id, total_size)?,
        })
    }

    /// Refuses an install that would break the log: one ending below the
    /// log start (a gap no snapshot covers), or one the log does not
    /// continue while committed entries lie past its end (they would be
    /// removed: a Raft library's mistake, never a leader's snapshot).
    fn check_install(&self, id: SnapshotId) -> Result<()> {
        let (start, conflicts) = self.with(|g| {
            let committed = g.hw.unwrap_or(g.start);
            (g.start, !continues(g, id) && committed > id.end_offset.0)
        })?;
        if id.end_offset.0 < start {
            return Err(Error::SnapshotRefused {
                id,
                why: "it ends below the log start",
            });
        }
        if conflicts {
            return Err(Error::SnapshotRefused {
                id,
                why: "committed entries past its end conflict with it",
            });
        }
        Ok(())
    }

    /// Unfinished installs (resumable), with the bytes each holds.
    ///
    /// # Errors
    /// I/O.
    pub fn installs(&self) -> Result<Vec<(SnapshotId, u64)>> {
        Ok(self.snapshots.installs()?)
    }

    /// Discards the unfinished install of `id`.
    ///
    /// # Errors
    /// I/O.
    pub fn discard_install(&self, id: SnapshotId) -> Result<()> {
        Ok(self.snapshots.discard_install(id)?)
    }

    /// After an install: the group's log is made to continue the latest
    /// snapshot (kept if it holds its last entry with its epoch, otherwise
    /// restarted, empty, at its end).
    fn continue_latest(&self) -> Result<SnapshotId> {
        let latest = self.latest().ok_or(Error::NoSnapshot)?;
        if !self.with(|g| continues(g, latest))? {
            self.reset_at(latest)?;
        }
        self.raise_high_watermark(latest.end_offset)?;
        Ok(latest)
    }

    /// Deletes snapshots `retention` does not keep; returns them.
    ///
    /// # Errors
    /// I/O.
    pub fn retain_snapshots(&self, retention: Retention) -> Result<Vec<SnapshotId>> {
        Ok(self.snapshots.retain(retention)?)
    }
}

/// Whether group state `g` continues snapshot `id` (as a store's log).
pub(super) fn continues(g: &GroupState, id: SnapshotId) -> bool {
    match id.end_offset.0.checked_sub(1) {
        None => true,
        Some(last) if last < g.start => g.epoch_at(g.start).is_none_or(|e| e >= id.epoch.0),
        Some(last) => g.epoch_at(last) == Some(id.epoch.0),
    }
}

/// A local snapshot being written ([`Group::create_snapshot`]).
#[derive(Debug)]
pub struct GroupWriter<'a> {
    group: &'a Group,
    writer: SnapshotWriter,
}

impl GroupWriter<'_> {
    /// Appends state bytes.
    ///
    /// # Errors
    /// I/O.
    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        let r = self.writer.write(data).map_err(Error::from);
        self.group.inner.note(r)
    }

    /// Syncs and publishes the snapshot.
    ///
    /// # Errors
    /// I/O.
    pub fn freeze(self) -> Result<SnapshotInfo> {
        let r = self.writer.freeze().map_err(Error::from);
        self.group.inner.note(r)
    }
}

/// A snapshot download ([`Group::install_snapshot`]): each chunk durable when written,
/// resumable after a restart.
#[derive(Debug)]
pub struct GroupInstall {
    group: Arc<Group>,
    install: Install,
}

impl GroupInstall {
    /// The snapshot being installed.
    pub fn id(&self) -> SnapshotId {
        self.install.id()
    }

    /// The bytes received so far (where the next chunk goes).
    pub fn position(&self) -> u64 {
        self.install.position()
    }

    /// The snapshot's size.
    pub fn total_size(&self) -> u64 {
        self.install.total_size()
    }

    /// Writes the chunk at `position`, durably.
    ///
    /// # Errors
    /// `Snapshot(OutOfOrder…)`; I/O.
    pub fn write_chunk(&mut self, position: u64, bytes: &[u8]) -> Result<()> {
        let r = self
            .install
            .write_chunk(position, bytes)
            .map_err(Error::from);
        self.group.inner.note(r)
    }

    /// Verifies the whole file without publishing it (see
    /// `StoreInstall::verify`).
    ///
    /// # Errors
    /// `Snapshot` (incomplete, verification, I/O).
    pub fn verify(&self) -> Result<()> {
        Ok(self.install.verify()?)
    }

    /// Verifies, publishes, then makes the group's log continue the
    /// snapshot (a crash between
    /// the two is completed when the group is next opened).
    ///
    /// # Errors
    /// `SnapshotRefused` as at its start (the log changed meanwhile);
    /// `Snapshot` (verification, I/O); the log's.
    pub fn finish(self) -> Result<SnapshotInfo> {
        self.group.check_install(self.install.id())?;
        let info = self.install.finish().map_err(Error::from);
        let info = self.group.inner.note(info)?;
        self.group.continue_latest()?;
        Ok(info)
    }
}

/// A published snapshot of a group ([`Group::snapshot`]).
#[derive(Debug)]
pub struct GroupSnapshot<'a> {
    group: &'a Group,
    info: SnapshotInfo,
}

impl GroupSnapshot<'_> {
    /// Its id and size.
    pub fn info(&self) -> SnapshotInfo {
        self.info
    }

    /// Its metadata (as given to [`Group::create_snapshot`]).
    ///
    /// # Errors
    /// `Snapshot(NotFound | Corruption…)`; I/O.
    pub fn metadata(&self) -> Result<Vec<u8>> {
        Ok(self
            .group
            .snapshots
            .reader(self.info.id)?
            .header()
            .metadata
            .clone())
    }

    /// Its metadata and data, verified.
    ///
    /// # Errors
    /// `Snapshot(NotFound)`, corruption, I/O.
    pub fn read(&self) -> Result<(Vec<u8>, Vec<u8>)> {
        let mut reader = self.group.snapshots.reader(self.info.id)?;
        let meta = reader.header().metadata.clone();
        Ok((meta, reader.read_to_end()?))
    }

    /// Up to `max_bytes` of its file from byte `position`: what another
    /// replica's install takes, chunk by chunk.
    ///
    /// # Errors
    /// `Snapshot(NotFound | OutOfRange…)`; I/O.
    pub fn read_chunk(&self, position: u64, max_bytes: usize) -> Result<Vec<u8>> {
        Ok(self
            .group
            .snapshots
            .read_chunk(self.info.id, position, max_bytes)?)
    }

    /// Its whole file as it is on disk.
    ///
    /// # Errors
    /// `Snapshot(NotFound)`; I/O.
    pub fn file(&self) -> Result<Vec<u8>> {
        let len = usize::try_from(self.info.size_bytes).unwrap_or(usize::MAX);
        self.read_chunk(0, len)
    }
}
