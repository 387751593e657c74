//! [`SnapshotFiles`]: a state machine's snapshots as quorumlog snapshot
//! files. A snapshot covering openraft's log up to `last_log_id` is the
//! store snapshot ending at `last_log_id.index + 1` in its term, with
//! openraft's `SnapshotMeta` as its metadata; it is written in checksummed
//! chunks, synced and published before `save` returns; with
//! `LogStore::new_bounded`, the log is deleted only as far as a snapshot
//! file covers it, so a power cut never leaves entries below the log start
//! without one (openraft 0.9 issues a purge while an install is still
//! running).
//!
//! Not shared with the 0.10 adapter: 0.9's snapshot types (`SnapshotMeta`,
//! `Snapshot` over a stream) are not 0.10's (`SnapshotData` on the state
//! machine); both write the group's snapshot files through its own checks.

use std::sync::Arc;

use openraft::{ErrorSubject, ErrorVerb, SnapshotMeta, StorageError, StorageIOError};
use quorumlog_raft::{options::Retention, options::WriterOptions, SnapshotId};
use quorumlog_raft::{Epoch, Group, Offset};
use serde::{de::DeserializeOwned, Serialize};

use crate::{SnapshotStream, StoreError};

fn snap_error(verb: ErrorVerb, e: &(dyn std::error::Error + 'static)) -> StoreError {
    StorageError::from(StorageIOError::new(
        ErrorSubject::Snapshot(None),
        verb,
        openraft::AnyError::from_dyn(e, None),
    ))
}

/// A stored snapshot: openraft's meta and the state machine's bytes.
pub type Stored<N> = (SnapshotMeta<u64, N>, Vec<u8>);

/// The snapshots of one store (or group), for a state machine.
#[derive(Debug)]
pub struct SnapshotFiles {
    store: Arc<Group>,
    /// Snapshots kept (the latest always).
    pub keep: usize,
}

impl Clone for SnapshotFiles {
    fn clone(&self) -> Self {
        SnapshotFiles {
            store: Arc::clone(&self.store),
            keep: self.keep,
        }
    }
}

impl SnapshotFiles {
    /// The snapshot files of `store`; the two latest are kept.
    pub fn new(store: Arc<Group>) -> Self {
        SnapshotFiles { store, keep: 2 }
    }

    /// The store snapshot id of openraft's snapshot: it ends after
    /// `last_log_id`, in that entry's epoch (its leader id, as the log's).
    fn id_of<N: openraft::Node>(meta: &SnapshotMeta<u64, N>) -> Result<SnapshotId, StoreError> {
        meta.last_log_id.map_or(
            Ok(SnapshotId {
                end_offset: Offset(0),
                epoch: Epoch(0),
            }),
            |l| {
                Ok(SnapshotId {
                    end_offset: Offset(l.index + 1),
                    epoch: crate::mapping::epoch_of(&l.leader_id)
                        .map_err(|e| snap_error(ErrorVerb::Write, &e))?,
                })
            },
        )
    }

    /// Writes `data`, the state machine's own snapshot (built from applied,
    /// so committed, entries), through the store's checked creation: it is
    /// refused beyond the high watermark and unless the log holds its last
    /// entry in its term. Durable on return; a snapshot with the same last
    /// log id already there is kept (it covers the same entries). Older
    /// snapshots beyond `keep` are deleted.
    ///
    /// # Errors
    /// The store's refusal (`SnapshotRefused`); I/O (which poisons the
    /// store).
    pub fn save_built<N>(&self, meta: &SnapshotMeta<u64, N>, data: &[u8]) -> Result<(), StoreError>
    where
        N: openraft::Node + Serialize,
    {
        let id = Self::id_of(meta)?;
        if self.store.snapshot(id).is_err() {
            let m = bincode::serialize(meta).map_err(|e| snap_error(ErrorVerb::Write, &e))?;
            let mut w = self
                .store
                .create_snapshot(id.end_offset, id.epoch, &m, WriterOptions::default())
                .map_err(|e| snap_error(ErrorVerb::Write, &e))?;
            w.write(data)
                .map_err(|e| snap_error(ErrorVerb::Write, &e))?;
            w.freeze().map_err(|e| snap_error(ErrorVerb::Write, &e))?;
        }
        self.after_save()
    }

    /// Installs `file`, a snapshot file received from the leader (its
    /// [`SnapshotFiles::file`]), through the store's install: verified
    /// whole before it is published, then the log made to continue it.
    ///
    /// # Errors
    /// A file that does not verify (nothing is published); I/O.
    pub fn save_received<N>(
        &self,
        meta: &SnapshotMeta<u64, N>,
        file: &[u8],
    ) -> Result<(), StoreError>
    where
        N: openraft::Node,
    {
        let id = Self::id_of(meta)?;
        if self.store.snapshot(id).is_err() {
            let mut install = self
                .store
                .install_snapshot(id, file.len() as u64)
                .map_err(|e| snap_error(ErrorVerb::Write, &e))?;
            let from = usize::try_from(install.position()).unwrap_or(usize::MAX);
            if let Some(rest) = file.get(from..) {
                if !rest.is_empty() {
                    install
                        .write_chunk(install.position(), rest)
                        .map_err(|e| snap_error(ErrorVerb::Write, &e))?;
                }
            }
            install
                .finish()
                .map_err(|e| snap_error(ErrorVerb::Write, &e))?;
        }
        self.after_save()
    }

    /// A purge waiting for a snapshot that covers it goes on now
    /// (`LogStore::new_bounded`); old snapshots go.
    fn after_save(&self) -> Result<(), StoreError> {
        crate::log_store::physical_cut(&self.store, crate::PurgeMode::CoveredBySnapshot)
            .map_err(|e| snap_error(ErrorVerb::Write, &*e))?;
        self.store
            .retain_snapshots(Retention {
                keep_latest: self.keep.max(1),
                max_total_bytes: None,
            })
            .map_err(|e| snap_error(ErrorVerb::Write, &e))?;
        Ok(())
    }

    /// The snapshot file `meta` names, as on disk: what a follower's
    /// [`SnapshotFiles::save_received`] takes.
    ///
    /// # Errors
    /// It is not here; I/O.
    pub fn file<N: openraft::Node>(
        &self,
        meta: &SnapshotMeta<u64, N>,
    ) -> Result<Vec<u8>, StoreError> {
        let id = Self::id_of(meta)?;
        self.store
            .snapshot(id)
            .and_then(|s| s.file())
            .map_err(|e| snap_error(ErrorVerb::Read, &e))
    }

    /// The stream a follower receives for the snapshot `meta` names: its
    /// file, read from disk as openraft reads the stream.
    ///
    /// # Errors
    /// It is not here.
    pub fn sending<N: openraft::Node>(
        &self,
        meta: &SnapshotMeta<u64, N>,
    ) -> Result<SnapshotStream, StoreError> {
        let id = Self::id_of(meta)?;
        SnapshotStream::sending(Arc::clone(&self.store), id)
            .map_err(|e| snap_error(ErrorVerb::Read, &e))
    }

    /// A stream receiving a snapshot from the leader straight into this
    /// store's install (durable chunk by chunk; resumed after a restart).
    pub fn receiving(&self) -> SnapshotStream {
        SnapshotStream::receiving(Arc::clone(&self.store))
    }

    /// Finishes a received stream ([`SnapshotFiles::receiving`]): the
    /// snapshot is verified and published, it must be the one `meta`
    /// names, then the log continues it and old snapshots go.
    ///
    /// # Errors
    /// A snapshot that does not verify (nothing is published), another
    /// snapshot than `meta`'s; I/O.
    pub fn finish_received<N: openraft::Node>(
        &self,
        meta: &SnapshotMeta<u64, N>,
        stream: SnapshotStream,
    ) -> Result<(), StoreError> {
        let want = Self::id_of(meta)?;
        let got = stream
            .finish_received()
            .map_err(|e| snap_error(ErrorVerb::Write, &e))?;
        if got != want {
            return Err(snap_error(
                ErrorVerb::Write,
                &std::io::Error::other(format!("received snapshot {got}, expected {want}")),
            ));
        }
        self.after_save()
    }

    /// The latest snapshot's meta (its data is not read).
    ///
    /// # Errors
    /// Metadata that does not decode.
    pub fn latest_meta<N>(&self) -> Result<Option<SnapshotMeta<u64, N>>, StoreError>
    where
        N: openraft::Node + DeserializeOwned,
    {
        let Some(id) = self.store.extent().latest_snapshot else {
            return Ok(None);
        };
        let m = self
            .store
            .snapshot(id)
            .and_then(|s| s.metadata())
            .map_err(|e| snap_error(ErrorVerb::Read, &e))?;
        let meta = bincode::deserialize(&m).map_err(|e| snap_error(ErrorVerb::Read, &e))?;
        Ok(Some(meta))
    }

    /// The latest snapshot: its meta and its data, verified.
    ///
    /// # Errors
    /// A snapshot that does not verify or whose metadata does not decode.
    pub fn latest<N>(&self) -> Result<Option<Stored<N>>, StoreError>
    where
        N: openraft::Node + DeserializeOwned,
    {
        let Some(id) = self.store.extent().latest_snapshot else {
            return Ok(None);
        };
        let (m, data) = self
            .store
            .snapshot(id)
            .and_then(|s| s.read())
            .map_err(|e| snap_error(ErrorVerb::Read, &e))?;
        let meta = bincode::deserialize(&m).map_err(|e| snap_error(ErrorVerb::Read, &e))?;
        Ok(Some((meta, data)))
    }
}
