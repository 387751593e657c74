//! Snapshots for openraft 0.10 as quorumlog snapshot files.
//!
//! 0.10 puts `SnapshotData` on the state machine and hands the network a
//! whole `Snapshot` to send; how the bytes travel is the application's.
//! Here:
//!
//! - [`SnapshotData`] is the state machine's `SnapshotData`: a published
//!   [`SnapshotFile`] of one store (or group), by id, holding no bytes (the
//!   sender reads it chunk by chunk, [`SnapshotFile::read_chunk`]); or a
//!   download received whole and verified, not yet published.
//! - [`SnapshotFiles::save_built`] writes a snapshot the state machine
//!   built (checksummed chunks, synced and published before it returns).
//!   openraft 0.10 purges the log only once the snapshot covering it is
//!   built or installed (its purge command waits for that), so the log is
//!   never cut below a snapshot file.
//! - [`SnapshotFiles::receive`] starts, or after a restart resumes, a
//!   download into the store's install: each chunk is durable when
//!   [`Receiver::write_chunk`] returns, bytes the install already holds
//!   are skipped. Once the whole file is there, [`Receiver::verified`]
//!   checks it without publishing it: a file that does not verify is
//!   removed and the call fails, so a corrupt transfer is a failed RPC the
//!   leader retries, never a state machine error (which openraft treats as
//!   fatal). The network then calls `Raft::install_full_snapshot` with it.
//! - [`SnapshotFiles::installed`] is the state machine's
//!   `install_snapshot`: only there, after openraft has made the leader's
//!   vote durable, is a download published and the log made to continue
//!   it. (Publishing it in the network, before openraft saw the vote, can
//!   leave a log whose last entry is a newer leader's than the durable
//!   vote, which openraft 0.10 refuses to restart from.) It checks the
//!   snapshot is the one openraft's meta names and returns the state in
//!   it, verified.
//!
//! The snapshot id is the store's: a snapshot covering openraft's log up
//! to `last_log_id` ends at `last_log_id.index + 1`, in that entry's epoch
//! ([`EpochLeaderId`]); openraft's `SnapshotMeta` is the file's metadata.

use std::io;
use std::sync::Arc;

use openraft10::storage::Snapshot;
use openraft10::type_config::alias::{CommittedLeaderIdOf, SnapshotMetaOf};
use openraft10::RaftTypeConfig;
use quorumlog_raft::{
    options::Retention, options::WriterOptions, Epoch, Group, GroupInstall, Offset, SnapshotId,
};
use serde::{de::DeserializeOwned, Serialize};

use crate::mapping::EpochLeaderId;

fn io_err(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

/// The most bytes [`SnapshotFile::read_chunk`] returns at once by default.
pub const CHUNK_BYTES: usize = 1 << 20;

/// openraft's snapshot of a state machine with `SnapshotData =
/// SnapshotData`.
pub type FileSnapshot<C> = Snapshot<
    CommittedLeaderIdOf<C>,
    <C as RaftTypeConfig>::NodeId,
    <C as RaftTypeConfig>::Node,
    SnapshotData,
>;

/// A state machine's snapshot data on quorumlog (see the module
/// documentation).
#[derive(Debug)]
pub enum SnapshotData {
    /// A published snapshot file (built here, or the latest).
    File(SnapshotFile),
    /// A download received whole and verified, published by the state
    /// machine's install ([`SnapshotFiles::installed`]).
    Received(Receiver),
}

impl SnapshotData {
    /// The bytes a transfer sends.
    pub fn size(&self) -> u64 {
        match self {
            SnapshotData::File(f) => f.size,
            SnapshotData::Received(r) => r.size,
        }
    }

    /// Up to `max_bytes` of a published file from `position`.
    ///
    /// # Errors
    /// A download (not sent on); as [`SnapshotFile::read_chunk`].
    pub fn read_chunk(&self, position: u64, max_bytes: usize) -> io::Result<Vec<u8>> {
        match self {
            SnapshotData::File(f) => f.read_chunk(position, max_bytes),
            SnapshotData::Received(_) => Err(io::Error::other(
                "a download not yet installed is not sent on",
            )),
        }
    }
}

/// A published snapshot file of one store (the state machine's
/// `SnapshotData`; see the module documentation).
#[derive(Debug)]
pub struct SnapshotFile {
    store: Arc<Group>,
    /// Its id in the store.
    pub id: SnapshotId,
    /// Its file's size in bytes.
    pub size: u64,
}

impl Clone for SnapshotFile {
    fn clone(&self) -> Self {
        SnapshotFile {
            store: Arc::clone(&self.store),
            id: self.id,
            size: self.size,
        }
    }
}

impl SnapshotFile {
    /// Up to `max_bytes` of the file from byte `position`, as on disk (what
    /// a follower's [`Receiver::write_chunk`] takes at that position).
    ///
    /// # Errors
    /// The snapshot was deleted since (a newer one replaced it); a
    /// position beyond the file; I/O.
    pub fn read_chunk(&self, position: u64, max_bytes: usize) -> io::Result<Vec<u8>> {
        self.store
            .snapshot(self.id)
            .and_then(|s| s.read_chunk(position, max_bytes))
            .map_err(io_err)
    }
}

/// The snapshots of one store (or group), for a state machine.
#[derive(Debug)]
pub struct SnapshotFiles {
    store: Arc<Group>,
    /// Snapshots kept (the latest always).
    pub keep: usize,
    /// How built snapshots are written: the state's chunk size (each chunk
    /// checksummed; an interrupted download resumes at a chunk boundary)
    /// and compression.
    pub options: WriterOptions,
}

impl Clone for SnapshotFiles {
    fn clone(&self) -> Self {
        SnapshotFiles {
            store: Arc::clone(&self.store),
            keep: self.keep,
            options: self.options,
        }
    }
}

impl SnapshotFiles {
    /// The snapshot files of `store`; the two latest are kept, written with
    /// the default options (1 MiB chunks, uncompressed).
    pub fn new(store: Arc<Group>) -> Self {
        SnapshotFiles {
            store,
            keep: 2,
            options: WriterOptions::default(),
        }
    }

    /// The store they are in.
    pub fn store(&self) -> &Arc<Group> {
        &self.store
    }

    /// The store snapshot id of openraft's snapshot `meta`.
    ///
    /// # Errors
    /// A leader id the store's epochs cannot hold.
    pub fn id_of<C>(meta: &SnapshotMetaOf<C>) -> io::Result<SnapshotId>
    where
        C: RaftTypeConfig,
        C::LeaderId: EpochLeaderId,
    {
        match &meta.last_log_id {
            None => Ok(SnapshotId {
                end_offset: Offset(0),
                epoch: Epoch(0),
            }),
            Some(l) => Ok(SnapshotId {
                end_offset: Offset(l.index + 1),
                epoch: C::LeaderId::committed_epoch(&l.leader_id).map_err(io_err)?,
            }),
        }
    }

    fn file(&self, id: SnapshotId) -> io::Result<SnapshotFile> {
        Ok(SnapshotFile {
            store: Arc::clone(&self.store),
            id,
            size: self
                .store
                .snapshot(id)
                .map(|s| s.info().size_bytes)
                .map_err(io_err)?,
        })
    }

    /// Writes `data`, the state machine's own snapshot (built from applied,
    /// so committed, entries), through the store's checked creation: it is
    /// refused unless the log holds its last entry in its term. The entries
    /// it covers are made durable here first and the high watermark raised
    /// to them (a commit point can arrive before this node's copy of the
    /// entries is durable). Durable on return; a snapshot with the same id
    /// already there is kept (it covers the same entries). Older snapshots
    /// beyond `keep` are deleted.
    ///
    /// # Errors
    /// The store's refusal (`SnapshotRefused`); I/O (which poisons the
    /// store).
    pub fn save_built<C>(&self, meta: &SnapshotMetaOf<C>, data: &[u8]) -> io::Result<SnapshotFile>
    where
        C: RaftTypeConfig,
        C::LeaderId: EpochLeaderId,
        SnapshotMetaOf<C>: Serialize,
    {
        let id = Self::id_of::<C>(meta)?;
        if self.store.snapshot(id).is_err() {
            self.covered(id.end_offset)?;
            let m = bincode::serialize(meta).map_err(io_err)?;
            let mut w = self
                .store
                .create_snapshot(id.end_offset, id.epoch, &m, self.options)
                .map_err(io_err)?;
            w.write(data).map_err(io_err)?;
            w.freeze().map_err(io_err)?;
        }
        self.retain()?;
        self.file(id)
    }

    /// Makes the store's high watermark cover `end`, the end of what the
    /// state machine applied: openraft applies only committed entries, but
    /// with appends pipelined a commit point can arrive before this node's
    /// own copy of the entries is durable, and the adapter's
    /// `save_committed` never sets the watermark past what the log holds;
    /// so the entries are waited for here, then the watermark raised to
    /// them (a snapshot refused as beyond the watermark stops the node).
    fn covered(&self, end: Offset) -> io::Result<()> {
        if self.store.extent().high_watermark.is_some_and(|h| h >= end) {
            return Ok(());
        }
        if end > self.store.extent().queued_end {
            return Err(io::Error::other(format!(
                "a snapshot to {end} of a log that ends at {}",
                self.store.extent().queued_end
            )));
        }
        self.store.wait_durable(end).map_err(io_err)?;
        match self.store.set_high_watermark(end) {
            Ok(()) => Ok(()),
            // openraft's commit point raised it past `end` meanwhile.
            Err(_) if self.store.extent().high_watermark.is_some_and(|h| h >= end) => Ok(()),
            Err(e) => Err(io_err(e)),
        }
    }

    fn retain(&self) -> io::Result<()> {
        self.store
            .retain_snapshots(Retention {
                keep_latest: self.keep.max(1),
                max_total_bytes: None,
            })
            .map_err(io_err)?;
        Ok(())
    }

    /// The latest snapshot, as openraft's `get_current_snapshot` returns
    /// it: its meta (read from the file) and the file.
    ///
    /// # Errors
    /// Metadata that does not decode; I/O.
    pub fn current<C>(&self) -> io::Result<Option<FileSnapshot<C>>>
    where
        C: RaftTypeConfig,
        SnapshotMetaOf<C>: DeserializeOwned,
    {
        let Some(id) = self.store.extent().latest_snapshot else {
            return Ok(None);
        };
        let m = self
            .store
            .snapshot(id)
            .and_then(|s| s.metadata())
            .map_err(io_err)?;
        let meta: SnapshotMetaOf<C> = bincode::deserialize(&m).map_err(io_err)?;
        Ok(Some(Snapshot {
            meta,
            snapshot: SnapshotData::File(self.file(id)?),
        }))
    }

    /// The latest snapshot's meta and state, verified (a state machine
    /// restoring itself at start).
    ///
    /// # Errors
    /// A snapshot that does not verify or whose metadata does not decode.
    pub fn latest<C>(&self) -> io::Result<Option<(SnapshotMetaOf<C>, Vec<u8>)>>
    where
        C: RaftTypeConfig,
        SnapshotMetaOf<C>: DeserializeOwned,
    {
        let Some(id) = self.store.extent().latest_snapshot else {
            return Ok(None);
        };
        let (m, data) = self
            .store
            .snapshot(id)
            .and_then(|s| s.read())
            .map_err(io_err)?;
        Ok(Some((bincode::deserialize(&m).map_err(io_err)?, data)))
    }

    /// The state in `data`, installed by openraft as `meta` (the state
    /// machine's `install_snapshot`, after openraft made the leader's vote
    /// durable): a download is published now and the log made to continue
    /// it; the state is read back verified; old snapshots go.
    ///
    /// # Errors
    /// `data` is not this store's snapshot `meta` names; a snapshot that
    /// does not verify; the store refuses (below its high watermark); I/O.
    pub fn installed<C>(&self, meta: &SnapshotMetaOf<C>, data: SnapshotData) -> io::Result<Vec<u8>>
    where
        C: RaftTypeConfig,
        C::LeaderId: EpochLeaderId,
    {
        let want = Self::id_of::<C>(meta)?;
        let file = match data {
            SnapshotData::File(f) => f,
            SnapshotData::Received(r) => {
                if r.id != want {
                    return Err(io::Error::other(format!(
                        "installing download {}, openraft names {want}",
                        r.id
                    )));
                }
                r.finish()?
            }
        };
        if file.id != want || !Arc::ptr_eq(&file.store, &self.store) {
            return Err(io::Error::other(format!(
                "installing snapshot {} of another store, or not the one openraft names ({want})",
                file.id
            )));
        }
        let (_, data) = self
            .store
            .snapshot(want)
            .and_then(|s| s.read())
            .map_err(io_err)?;
        self.retain()?;
        Ok(data)
    }

    /// Starts, or resumes after a restart, receiving the snapshot `meta`
    /// names, `size` bytes (the sender's [`SnapshotFile::size`]).
    ///
    /// # Errors
    /// A leader id the store's epochs cannot hold; the store refuses the
    /// install (for one, a snapshot below its high watermark); I/O.
    pub fn receive<C>(&self, meta: &SnapshotMetaOf<C>, size: u64) -> io::Result<Receiver>
    where
        C: RaftTypeConfig,
        C::LeaderId: EpochLeaderId,
    {
        let id = Self::id_of::<C>(meta)?;
        if self.store.snapshot(id).is_ok() {
            return Ok(Receiver {
                files: self.clone(),
                id,
                size,
                install: None,
            });
        }
        let install = self.store.install_snapshot(id, size).map_err(io_err)?;
        Ok(Receiver {
            files: self.clone(),
            id,
            size,
            install: Some(install),
        })
    }
}

impl SnapshotFiles {
    /// Copies `from` (a sender's snapshot `meta` names, of any store)
    /// into this store chunk by chunk, `chunk_bytes` at a time, resuming
    /// where an earlier copy stopped, and verifies it unpublished: what a
    /// receiving network does before `Raft::install_full_snapshot` (the
    /// state machine's install publishes it). A network between processes
    /// does the same with [`SnapshotFiles::receive`] and the chunks it is
    /// sent.
    ///
    /// # Errors
    /// As [`SnapshotFiles::receive`] and [`Receiver::verified`]; the
    /// sender's file ends early.
    pub fn copy_in<C>(
        &self,
        meta: &SnapshotMetaOf<C>,
        from: &SnapshotData,
        chunk_bytes: usize,
    ) -> io::Result<SnapshotData>
    where
        C: RaftTypeConfig,
        C::LeaderId: EpochLeaderId,
    {
        let mut rx = self.receive::<C>(meta, from.size())?;
        while rx.position() < from.size() {
            let at = rx.position();
            let chunk = from.read_chunk(at, chunk_bytes.max(1))?;
            if chunk.is_empty() {
                return Err(io::Error::other("the sender's snapshot file ended early"));
            }
            rx.write_chunk(at, &chunk)?;
        }
        rx.verified()
    }
}

/// A snapshot being received into a store ([`SnapshotFiles::receive`]).
#[derive(Debug)]
pub struct Receiver {
    files: SnapshotFiles,
    id: SnapshotId,
    size: u64,
    /// `None`: the snapshot is here already, the rest is read past.
    install: Option<GroupInstall>,
}

impl Receiver {
    /// The snapshot being received.
    pub fn id(&self) -> SnapshotId {
        self.id
    }

    /// The next byte it needs: where a sender resumes (after a restart, what
    /// the install already holds durably).
    pub fn position(&self) -> u64 {
        self.install
            .as_ref()
            .map_or(self.size, GroupInstall::position)
    }

    /// Takes `bytes` of the file at `position`, durable on return. Bytes
    /// below [`Receiver::position`] are held already and skipped.
    ///
    /// # Errors
    /// A gap (`position` beyond what it holds); more bytes than the size
    /// announced; I/O.
    pub fn write_chunk(&mut self, position: u64, bytes: &[u8]) -> io::Result<()> {
        let Some(install) = self.install.as_mut() else {
            return Ok(());
        };
        let have = install.position();
        if position > have {
            return Err(io::Error::other(format!(
                "snapshot chunk at {position}, the install holds {have}"
            )));
        }
        let skip = usize::try_from(have - position).unwrap_or(usize::MAX);
        match bytes.get(skip..) {
            Some(rest) if !rest.is_empty() => install.write_chunk(have, rest).map_err(io_err),
            _ => Ok(()),
        }
    }

    /// Checks the whole file without publishing it; returns what to hand
    /// openraft (`Raft::install_full_snapshot`), whose install publishes it.
    ///
    /// # Errors
    /// Incomplete (the durable part stays, to resume); a file that does not
    /// verify (it is removed: the next transfer starts clean); I/O.
    pub fn verified(self) -> io::Result<SnapshotData> {
        if let Some(install) = &self.install {
            if let Err(e) = install.verify() {
                let complete = install.position() == install.total_size();
                if complete {
                    if let Some(install) = self.install {
                        // Fails as verify did, and removes the file.
                        let _ = install.finish();
                    }
                }
                return Err(io_err(e));
            }
        }
        Ok(SnapshotData::Received(self))
    }

    /// Publishes the file (verified again) and makes the log continue it.
    fn finish(self) -> io::Result<SnapshotFile> {
        if let Some(install) = self.install {
            let info = install.finish().map_err(io_err)?;
            if info.id != self.id {
                return Err(io::Error::other(format!(
                    "received snapshot {}, expected {}",
                    info.id, self.id
                )));
            }
        }
        self.files.file(self.id)
    }
}
