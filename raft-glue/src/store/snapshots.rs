//! The store's snapshots: checked creation, chunk reads for the leader,
//! resumable installs that make the log continue the snapshot, retention,
//! and the snapshot-bounded cleaning of the log prefix.

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_log::DurableLog;
use quorumlog_snapshot::{
    Install, Retention, SnapshotId, SnapshotInfo, SnapshotWriter, WriterOptions,
};

use super::Store;
use crate::error::{Error, Result};

/// The magic of the envelope a snapshot's stored metadata may have: the
/// magic, a `u32` length, that many bytes of the store's own state (the
/// `KRaft` wing's voter set), then the caller's metadata.
pub(crate) const ENVELOPE_MAGIC: &[u8; 4] = b"QLSC";

/// The stored metadata holding `state` (the store's part) and `user`.
pub(crate) fn envelope(state: &[u8], user: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + state.len() + user.len());
    out.extend_from_slice(ENVELOPE_MAGIC);
    out.extend_from_slice(&quorumlog_io::codec::u32_len(state.len()).to_le_bytes());
    out.extend_from_slice(state);
    out.extend_from_slice(user);
    out
}

/// Splits stored metadata into the store's part (if it has an envelope)
/// and the caller's.
pub(crate) fn split_envelope(stored: &[u8]) -> (Option<&[u8]>, &[u8]) {
    let parsed = stored
        .strip_prefix(ENVELOPE_MAGIC.as_slice())
        .and_then(|rest| {
            let (len, rest) = rest.split_first_chunk::<4>()?;
            rest.split_at_checked(usize::try_from(u32::from_le_bytes(*len)).ok()?)
        });
    match parsed {
        Some((state, user)) => (Some(state), user),
        None => (None, stored),
    }
}

/// The caller's part of stored metadata.
fn user_metadata(stored: &[u8]) -> &[u8] {
    split_envelope(stored).1
}

impl Store {
    /// Starts a local snapshot of the state below `end_offset`, whose last
    /// entry has `epoch`: refused above the high watermark (only committed
    /// state is snapshotted) and unless the log holds that entry with that
    /// epoch (or it is the log start's own snapshot). Stream the state into
    /// the writer and freeze it: only then is it listed.
    ///
    /// # Errors
    /// `SnapshotRefused`; `Snapshot` (it exists already; I/O).
    pub fn create_snapshot(
        &self,
        end_offset: Offset,
        epoch: Epoch,
        metadata: &[u8],
        options: WriterOptions,
    ) -> Result<StoreWriter<'_>> {
        // A caller's metadata that happens to begin like the envelope is
        // wrapped, so it reads back as it was given.
        let stored = if metadata.starts_with(ENVELOPE_MAGIC) {
            envelope(&[], metadata)
        } else {
            metadata.to_vec()
        };
        self.create_snapshot_stored(end_offset, epoch, &stored, options)
    }

    /// [`Store::create_snapshot`] with `stored` written as the snapshot's
    /// metadata as it is (the `KRaft` wing's envelope around the caller's).
    pub(crate) fn create_snapshot_stored(
        &self,
        end_offset: Offset,
        epoch: Epoch,
        stored: &[u8],
        options: WriterOptions,
    ) -> Result<StoreWriter<'_>> {
        self.guarded(|| {
            let id = SnapshotId { end_offset, epoch };
            let hw = self
                .log
                .high_watermark()
                .unwrap_or(self.log.log_start_offset());
            if end_offset > hw {
                return Err(Error::SnapshotRefused {
                    id,
                    why: "beyond the high watermark",
                });
            }
            let last = end_offset.0.checked_sub(1).map(Offset);
            let matches = match last {
                // The snapshot of nothing (a state machine that applied
                // nothing yet).
                None => epoch == Epoch(0) || self.snapshots.get(id).is_some(),
                Some(o) if o >= self.log.log_start_offset() => self.log.epoch_at(o) == Some(epoch),
                // At or below the log start: the snapshot there must exist.
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
            Ok(StoreWriter {
                store: self,
                writer: self.snapshots.create(id, stored, options)?,
            })
        })
    }

    /// After a snapshot was installed from the leader (its install
    /// finished): the log is made to continue the snapshot. If the log
    /// holds the snapshot's last entry with its epoch, the log is kept
    /// (its prefix goes later, by cleaning); otherwise it restarts, empty,
    /// at the snapshot's end. Returns the snapshot.
    ///
    /// # Errors
    /// `NoSnapshot`; the log's errors.
    pub fn truncate_to_latest_snapshot(&self) -> Result<SnapshotId> {
        self.guarded(|| {
            let Some(latest) = self.snapshots.latest().map(|s| s.id) else {
                return Err(Error::NoSnapshot);
            };
            if !continues_snapshot(&self.log, latest) {
                self.log
                    .truncate_fully_and_start_at(latest.end_offset, Some(latest.epoch))?;
                if let Some(l) = &self.listener {
                    l.after_restart_at(self, latest);
                }
            }
            Ok(latest)
        })
    }

    /// Reads up to `max_bytes` of snapshot `id` from byte `position` (the
    /// leader's side of a chunked transfer).
    ///
    /// # Errors
    /// `Snapshot(NotFound | OutOfRange…)`; I/O.
    pub fn read_snapshot_chunk(
        &self,
        id: SnapshotId,
        position: u64,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        self.guarded(|| Ok(self.snapshots.read_chunk(id, position, max_bytes)?))
    }

    /// Starts, or resumes after a restart (see
    /// [`crate::OpenReport::installs_in_progress`]), the install of snapshot `id`
    /// of `total_size` bytes received from the leader; its
    /// [`StoreInstall::finish`] publishes it and makes the log continue it.
    ///
    /// # Errors
    /// `Snapshot(NotNewer)` unless newer than the latest snapshot; I/O.
    pub fn install_snapshot(
        &self,
        id: SnapshotId,
        total_size: u64,
    ) -> Result<StoreInstall<&Store>> {
        self.guarded(|| {
            Ok(StoreInstall {
                store: self,
                install: self.snapshots.begin_install(id, total_size)?,
            })
        })
    }

    /// [`Store::install_snapshot`] holding the store by `Arc`: for an
    /// install driven from a stream that must own what it uses (openraft's
    /// snapshot data).
    ///
    /// # Errors
    /// As [`Store::install_snapshot`].
    pub fn install_snapshot_owned(
        self: &std::sync::Arc<Self>,
        id: SnapshotId,
        total_size: u64,
    ) -> Result<StoreInstall<std::sync::Arc<Store>>> {
        self.guarded(|| {
            Ok(StoreInstall {
                store: std::sync::Arc::clone(self),
                install: self.snapshots.begin_install(id, total_size)?,
            })
        })
    }

    /// Discards the unfinished install of `id` (the leader moved on).
    ///
    /// # Errors
    /// I/O.
    pub fn discard_install(&self, id: SnapshotId) -> Result<()> {
        self.guarded(|| Ok(self.snapshots.discard_install(id)?))
    }

    /// The size of snapshot `id`'s file, in bytes.
    ///
    /// # Errors
    /// `Snapshot(NotFound)`.
    pub fn snapshot_size(&self, id: SnapshotId) -> Result<u64> {
        self.snapshots
            .get(id)
            .map(|s| s.size_bytes)
            .ok_or(Error::Snapshot(quorumlog_snapshot::Error::NotFound(id)))
    }

    /// Whether snapshot `id` is durable here.
    pub fn has_snapshot(&self, id: SnapshotId) -> bool {
        self.snapshots.get(id).is_some()
    }

    /// Snapshot `id`, verified whole: the caller's metadata (as given to
    /// [`Store::create_snapshot`]) and its state.
    ///
    /// # Errors
    /// `Snapshot(NotFound | Corruption…)`; I/O.
    pub fn read_snapshot(&self, id: SnapshotId) -> Result<(Vec<u8>, Vec<u8>)> {
        self.guarded(|| {
            let mut r = self.snapshots.reader(id)?;
            let metadata = user_metadata(&r.header().metadata).to_vec();
            Ok((metadata, r.read_to_end()?))
        })
    }

    /// Snapshot `id`'s metadata as the caller gave it (its state is not
    /// read).
    ///
    /// # Errors
    /// `Snapshot(NotFound | Corruption…)`; I/O.
    pub fn snapshot_metadata(&self, id: SnapshotId) -> Result<Vec<u8>> {
        self.guarded(|| {
            let r = self.snapshots.reader(id)?;
            Ok(user_metadata(&r.header().metadata).to_vec())
        })
    }

    /// Snapshot `id`'s file as it is on disk: what a follower's
    /// [`Store::install_snapshot`] takes, in chunks or whole (verified
    /// there before it is published).
    ///
    /// # Errors
    /// `Snapshot(NotFound)`; I/O.
    pub fn snapshot_file(&self, id: SnapshotId) -> Result<Vec<u8>> {
        self.guarded(|| {
            let mut out = Vec::new();
            loop {
                let chunk = self.snapshots.read_chunk(id, out.len() as u64, 1 << 20)?;
                if chunk.is_empty() {
                    return Ok(out);
                }
                out.extend_from_slice(&chunk);
            }
        })
    }

    /// The latest durable snapshot's id.
    pub fn latest_snapshot(&self) -> Option<SnapshotId> {
        self.snapshots.latest().map(|s| s.id)
    }

    /// The earliest durable snapshot's id.
    pub fn earliest_snapshot(&self) -> Option<SnapshotId> {
        self.snapshots.earliest().map(|s| s.id)
    }

    /// Deletes old snapshots as `retention` says; the latest (which covers
    /// the log start: cleaning never passes it) is always kept.
    ///
    /// # Errors
    /// `Snapshot` (I/O).
    pub fn retain_snapshots(&self, retention: Retention) -> Result<Vec<SnapshotId>> {
        self.guarded(|| Ok(self.snapshots.retain(retention)?))
    }

    /// Deletes the log prefix below `up_to`, never past the end of the
    /// latest durable snapshot (invariant 7); returns the log start after.
    ///
    /// # Errors
    /// The log's (an I/O error poisons it).
    ///
    /// The log start keeps the epoch of the entry below it
    /// ([`Store::last_purged`]), at any cut.
    pub fn clean_log_prefix(&self, up_to: Offset) -> Result<Offset> {
        self.guarded(|| {
            let Some(latest) = self.snapshots.latest() else {
                return Ok(self.log.log_start_offset());
            };
            let bound = up_to
                .min(latest.id.end_offset)
                .min(self.log.log_end_offset());
            if bound > self.log.log_start_offset() {
                self.log.truncate_prefix_to(bound)?;
                self.after_extent();
                // What a snapshot holds is committed: the start never
                // passes the watermark.
                self.raise_high_watermark(bound)?;
            }
            Ok(self.log.log_start_offset())
        })
    }

    /// The id of the last entry deleted below the log start (offset and
    /// epoch), for Raft libraries that persist a "last purged" log id:
    /// `None` when nothing was deleted. The log records it with its start
    /// at every prefix deletion and restart at a snapshot; for a start
    /// written before that record existed, the snapshot ending at the log
    /// start answers.
    pub fn last_purged(&self) -> Option<(Offset, Epoch)> {
        self.log.last_purged().or_else(|| {
            let start = self.log.log_start_offset();
            let below = Offset(start.0.checked_sub(1)?);
            self.snapshots
                .list()
                .into_iter()
                .find(|s| s.id.end_offset == start)
                .map(|s| (below, s.id.epoch))
        })
    }
}

/// Whether `log` continues snapshot `id` (so it is kept): it holds the
/// snapshot's last entry with the snapshot's epoch; or it starts at or
/// above the snapshot's end and is empty or begins in an epoch not older
/// than the snapshot's (epochs never decrease along a log, so an older one
/// there diverged; a start above the end is a gap that open refuses). The
/// snapshot of an empty prefix is continued by any log.
pub(super) fn continues_snapshot(log: &DurableLog, id: SnapshotId) -> bool {
    let start = log.log_start_offset();
    match id.end_offset.0.checked_sub(1).map(Offset) {
        None => true,
        Some(last) if last < start => log.epoch_at(start).is_none_or(|e| e >= id.epoch),
        Some(last) => log.epoch_at(last) == Some(id.epoch),
    }
}

/// A snapshot download through the store ([`Store::install_snapshot`], or
/// [`Store::install_snapshot_owned`] for one that outlives a borrow): each
/// chunk is durable when written, a restart resumes from the last one,
/// and [`StoreInstall::finish`] publishes the snapshot then truncates the
/// log to it (a crash between the two is completed at open).
#[derive(Debug)]
pub struct StoreInstall<S: std::ops::Deref<Target = Store>> {
    store: S,
    install: Install,
}

impl<S: std::ops::Deref<Target = Store>> StoreInstall<S> {
    /// The snapshot being installed.
    pub fn id(&self) -> SnapshotId {
        self.install.id()
    }

    /// The next byte expected (where a resumed download continues).
    pub fn position(&self) -> u64 {
        self.install.position()
    }

    /// The announced total size.
    pub fn total_size(&self) -> u64 {
        self.install.total_size()
    }

    /// Writes `bytes` at `position` (the next expected byte), durably.
    ///
    /// # Errors
    /// `Snapshot(WrongPosition | Oversize)` (nothing written); I/O.
    pub fn write_chunk(&mut self, position: u64, bytes: &[u8]) -> Result<()> {
        let install = &mut self.install;
        self.store
            .guarded(|| Ok(install.write_chunk(position, bytes)?))
    }

    /// Verifies the whole file without publishing it (a receiver checks a
    /// download before it hands it to the Raft library, which publishes it
    /// with [`StoreInstall::finish`] once it accepted the leader's vote).
    ///
    /// # Errors
    /// `Snapshot(Incomplete)`; `Snapshot(Corruption)` (the file stays;
    /// `finish` removes it); I/O.
    pub fn verify(&self) -> Result<()> {
        Ok(self.install.verify()?)
    }

    /// Verifies and publishes the snapshot, then makes the log continue it
    /// ([`Store::truncate_to_latest_snapshot`]).
    ///
    /// # Errors
    /// `Snapshot(Incomplete)`; `Snapshot(Corruption)` (the partial file is
    /// removed: start over); `BelowHighWatermark`; I/O.
    pub fn finish(self) -> Result<SnapshotInfo> {
        let StoreInstall { store, install } = self;
        store.guarded(|| {
            let id = install.id();
            // A snapshot the log does not continue restarts the log at its
            // end: never below what is committed.
            let hw = store.log.high_watermark().unwrap_or(Offset(0));
            if !continues_snapshot(&store.log, id) && hw > id.end_offset {
                return Err(Error::BelowHighWatermark {
                    offset: id.end_offset,
                    high_watermark: hw,
                });
            }
            let info = install.finish()?;
            store.truncate_to_latest_snapshot()?;
            store.raise_high_watermark(info.id.end_offset)?;
            Ok(info)
        })
    }
}

/// A local snapshot being written through the store
/// ([`Store::create_snapshot`]): listed only once frozen; a failure of
/// either call poisons the store.
#[derive(Debug)]
pub struct StoreWriter<'a> {
    store: &'a Store,
    writer: SnapshotWriter,
}

impl StoreWriter<'_> {
    /// Appends `data` to the snapshot's state.
    ///
    /// # Errors
    /// I/O (which poisons the store).
    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        let writer = &mut self.writer;
        self.store.guarded(|| Ok(writer.write(data)?))
    }

    /// Syncs and publishes the snapshot.
    ///
    /// # Errors
    /// I/O (which poisons the store).
    pub fn freeze(self) -> Result<SnapshotInfo> {
        let StoreWriter { store, writer } = self;
        store.guarded(|| Ok(writer.freeze()?))
    }
}
