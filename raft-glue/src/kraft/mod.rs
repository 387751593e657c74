//! The `KRaft` wing: [`KraftReplica`], a replica of a `KRaft`-style
//! quorum (KIP-595 elections, KIP-853 voter records, KIP-455
//! reassignment) over one [`Store`], which it owns. It holds what only
//! that protocol needs: the election state with its transitions and
//! restart rules, leader appends refused outside the epoch this node
//! leads, followers' raw-batch appends and fetch validation, the voter
//! history and reassignment. The store tells it of every log change
//! through a listener, so the history follows truncations, cuts and
//! restarts; a store no wing owns (openraft, raft-rs) pays nothing for any
//! of it.
//!
//! Its parts:
//! - [`election`]: typed transitions, each durable before it returns
//!   (through the store's data directory: one writer of the quorum state);
//! - [`commit`]: the leader's progress tracker over the voters' durable
//!   offsets;
//! - [`fetch`]: a follower's fetch position validated with `KRaft`'s
//!   semantics;
//! - [`compaction`]: leader-coordinated cleaning with retention caps;
//! - [`voters`]: voter sets and reassignments as control records and the
//!   leader's reassignment state machine; `control` keeps their history.
//!
//! What it writes at open: the election state moved up to the log's last
//! epoch (`KRaft`'s restart rule), and the voter-history file when the open
//! scanned log past it; at close, the voter-history file when it holds
//! records. What blocks, and for how long: election transitions one atomic
//! small-file replace (two file syncs and a directory sync); leader and
//! follower appends one buffered write; `append_durable` until its sync
//! round; `read`, `validate_offset_and_epoch` never a sync.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use quorumlog_checkpoint::{Epoch, Offset, SharedFs};
use quorumlog_log::{AppendInfo, DurableLog, ReadBatches};
use quorumlog_snapshot::WriterOptions;

pub mod commit;
pub mod compaction;
mod control;
pub mod election;
pub mod fetch;
mod recover;
pub mod voters;

pub use control::{snapshot_user_metadata, VOTER_HISTORY_EVERY};
pub use recover::QuorumRecovery;

use crate::error::Result;
use crate::store::{Identity, OpenReport, Store, StoreOptions, StoreWriter};
use election::Election;
use fetch::{validate_offset_and_epoch, FetchPosition};

/// A replica of a `KRaft`-style quorum over one store (see the module
/// documentation). It dereferences to its [`Store`] for what every Raft
/// library shares (reads of entries, the high watermark, snapshots and
/// installs, durability waits); its own methods are the protocol's.
#[derive(Debug)]
pub struct KraftReplica {
    store: Store,
    election: Mutex<Election>,
    control: Arc<control::Shared>,
}

const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<KraftReplica>();
};

impl std::ops::Deref for KraftReplica {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.store
    }
}

impl KraftReplica {
    /// Opens the store of `dir` ([`Store::open`]: identity first, then
    /// reconciliation), then the wing: the election state under `KRaft`'s
    /// restart rules and the voter history, rebuilt from its file checked
    /// against the log plus a scan of what the file does not cover.
    ///
    /// # Errors
    /// As [`Store::open`]; `Checkpoint` if the election write-back fails.
    pub fn open(
        fs: &SharedFs,
        dir: &std::path::Path,
        expect: &Identity,
        options: &StoreOptions,
    ) -> Result<(KraftReplica, OpenReport)> {
        let (store, mut report) = Store::open(fs, dir, expect, options)?;
        let (replica, scanned) = KraftReplica::over(store)?;
        report.voter_scan = scanned;
        Ok((replica, report))
    }

    /// The wing over an open `store` (see [`KraftReplica::open`]); returns
    /// it and the part of the log scanned for voter records, if any.
    ///
    /// # Errors
    /// `Checkpoint` if the election write-back or the voter-history write
    /// fails.
    pub fn over(mut store: Store) -> Result<(KraftReplica, Option<(Offset, Offset)>)> {
        let election =
            store.guarded(|| Election::open(Arc::clone(&store.dd), store.log.last_epoch()))?;
        let file = store.dd.voter_history();
        let (history, scanned) = control::rebuild(file.as_deref(), &store.log, &store.snapshots);
        let control = Arc::new(control::Shared::new(history));
        store.set_listener(Arc::clone(&control) as Arc<dyn crate::store::LogListener>);
        let replica = KraftReplica {
            store,
            election: Mutex::new(election),
            control,
        };
        if scanned.is_some() {
            replica.save_control()?;
        }
        Ok((replica, scanned))
    }

    /// Closes cleanly: the voter-history file (when it holds anything),
    /// then the store ([`Store::close`]).
    ///
    /// # Errors
    /// As the file's write and the store's close.
    pub fn close(self) -> Result<()> {
        let any = self.control().history.records().next().is_some();
        if self.store.poisoned().is_none() && (any || self.store.dd.voter_history().is_some()) {
            self.save_control()?;
        }
        self.store.close()
    }

    /// The store this replica owns.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Starts a local snapshot as [`Store::create_snapshot`], storing with
    /// it the voter set and reassignment in force at its end (an install
    /// elsewhere restarts its history from them).
    ///
    /// # Errors
    /// As [`Store::create_snapshot`].
    pub fn create_snapshot(
        &self,
        end_offset: Offset,
        epoch: Epoch,
        metadata: &[u8],
        options: WriterOptions,
    ) -> Result<StoreWriter<'_>> {
        let stored =
            control::wrap_snapshot_metadata(&self.control_state_at_end(end_offset), metadata);
        self.store
            .create_snapshot_stored(end_offset, epoch, &stored, options)
    }

    /// The election state (transitions are durable before they return).
    pub fn election(&self) -> MutexGuard<'_, Election> {
        self.election.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs a leader append `f` on the log, unless the store is poisoned or
    /// this node does not durably lead `epoch`.
    fn as_leader(
        &self,
        epoch: Epoch,
        f: impl FnOnce(&DurableLog) -> quorumlog_log::Result<AppendInfo>,
    ) -> Result<AppendInfo> {
        self.store.guarded(|| {
            self.election().check_leader_append(epoch)?;
            Ok(f(&self.store.log)?)
        })
    }

    /// Appends `records` as the leader of `epoch`; refused unless this node
    /// durably leads `epoch` (and has not resigned). Returns before the
    /// records are durable.
    ///
    /// # Errors
    /// `WrongRole`; the log's refusals and failures.
    pub fn append_as_leader<R: AsRef<[u8]>>(
        &self,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        self.as_leader(epoch, |log| log.append_as_leader(epoch, records))
    }

    /// As [`KraftReplica::append_as_leader`], returning once the records are
    /// durable (group commit).
    ///
    /// # Errors
    /// As [`KraftReplica::append_as_leader`]; `Poisoned` after a failed sync.
    pub fn append_durable<R: AsRef<[u8]>>(
        &self,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        self.as_leader(epoch, |log| log.append_durable(epoch, records))
    }

    /// Appends control records (leader change, voter set, snapshot markers)
    /// as the leader of `epoch`, in a batch flagged so they can never be
    /// confused with user records.
    ///
    /// # Errors
    /// As [`KraftReplica::append_as_leader`].
    pub fn append_control<R: AsRef<[u8]>>(
        &self,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        self.as_leader(epoch, |log| log.append_control(epoch, records))
    }

    /// Appends `records` in `epoch` at `base_offset` (the log end), for
    /// Raft libraries that assign indexes themselves; through the same
    /// write-combining queue as leader appends. The epoch must be one this
    /// node leads durably.
    ///
    /// # Errors
    /// `WrongRole`; `Log(NonContiguous)` unless `base_offset` is the log
    /// end; the log's refusals and failures.
    pub fn append_at<R: AsRef<[u8]>>(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        self.as_leader(epoch, |log| log.append_at(base_offset, epoch, records))
    }

    /// Appends batches exactly as the leader's [`KraftReplica::read`] returned
    /// them (`BatchRef::raw`), verified and written without re-encoding.
    ///
    /// # Errors
    /// `Log(InvalidRawBatch | NonContiguous | EpochRegression)` (nothing
    /// written); I/O.
    pub fn append_as_follower(&self, raw_batches: &[&[u8]]) -> Result<AppendInfo> {
        self.store.guarded(|| {
            let info = self.store.log.append_raw(raw_batches)?;
            self.note_appended(raw_batches)?;
            Ok(info)
        })
    }

    /// A follower told its log diverges (`FetchPosition::Diverging {
    /// end_offset, epoch }`): truncates to where its own log and the
    /// leader's agree, as `KRaft` does: the end of this log's largest epoch
    /// not newer than `epoch`, and never past the leader's `end_offset`
    /// nor this log's end. Returns the new log end.
    ///
    /// # Errors
    /// As [`Store::truncate_to`] (never below the high watermark).
    pub fn truncate_to_diverging(&self, end_offset: Offset, epoch: Epoch) -> Result<Offset> {
        self.store.guarded(|| {
            let end = self.store.log.log_end_offset();
            let local = self
                .log
                .end_offset_for_epoch(epoch)
                .map_or(self.store.log.log_start_offset(), |(_, o)| o);
            let to = local.min(end_offset).min(end);
            if to < end {
                self.store.truncate_to(to)?;
            }
            Ok(self.store.log.log_end_offset())
        })
    }

    /// Where a leader's fetch handling and compaction see its log
    /// ([`compaction::LeaderCompaction::safe_log_start`]).
    pub fn log_extent(&self) -> compaction::LogExtent {
        compaction::LogExtent::of(&self.store.log)
    }

    /// Reads whole verified batches from the one holding `from`.
    ///
    /// # Errors
    /// `Log(OffsetOutOfRange)` outside the log; corruption; I/O.
    pub fn read(&self, from: Offset, max_bytes: u64) -> Result<ReadBatches> {
        self.store
            .guarded(|| Ok(self.store.log.read(from, max_bytes)?))
    }

    /// For Raft's log matching: the largest epoch `<= epoch` in the log and
    /// the offset where it ends; `None` if every epoch in the log is newer.
    pub fn end_offset_for_epoch(&self, epoch: Epoch) -> Option<(Epoch, Offset)> {
        self.store.log.end_offset_for_epoch(epoch)
    }

    /// Validates a follower's fetch position against this log and its
    /// snapshots ([`validate_offset_and_epoch`]).
    ///
    /// # Errors
    /// `OffsetOutOfRange` below the log start with no snapshot.
    pub fn validate_offset_and_epoch(&self, offset: Offset, epoch: Epoch) -> Result<FetchPosition> {
        self.store.guarded(|| {
            let start = self.store.log.log_start_offset();
            let ids = (
                self.store
                    .snapshots
                    .list()
                    .into_iter()
                    .map(|s| s.id)
                    .find(|id| id.end_offset == start),
                self.store.snapshots.latest().map(|s| s.id),
            );
            validate_offset_and_epoch(&self.log, ids, offset, epoch)
        })
    }
}
