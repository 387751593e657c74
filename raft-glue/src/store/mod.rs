//! [`Store`]: one durable store per Raft group, the object a consensus
//! implementation talks to. It opens the data directory, the snapshots and
//! the log together and reconciles them, holds the election state, and
//! answers with `KRaft`'s log operations.
//!
//! Reconciliation at open, in order:
//! - a log that ends before the latest snapshot, or holds the snapshot's
//!   last offset in another epoch (a crash between an install's publish and
//!   its truncation), restarts, empty, at the snapshot's end (the snapshot
//!   holds everything below it, and what followed in the log diverged);
//! - with snapshots present, a log start above the latest snapshot's end is
//!   refused: entries were deleted that no snapshot covers (invariant 7);
//! - unfinished installs not newer than the latest snapshot were discarded
//!   by the snapshots' own open (they can never finish); newer ones are
//!   reported, resumable;
//! - the high watermark is raised to the latest snapshot's end if below it
//!   (a snapshot holds committed state; the watermark is made durable
//!   lazily, so a crash may find it lower); the log's own recovery already
//!   clamped one above its end.
//!
//! One poisoned state: the first I/O failure of any part (a log write or
//! sync, a checkpoint or election-state replace, a snapshot) poisons the
//! data directory, and from then on every store call, election transitions
//! included, is refused with [`Error::Poisoned`] naming it. Refusals (bad
//! input, a rule) poison nothing.
//!
//! `Store` is `Send + Sync` (asserted below): a Raft thread, an I/O thread
//! and readers share it by `Arc`. What blocks, and for how long (measured
//! on this project's test disk, a sync ≈ 75–100 µs):
//!
//! | call | blocks for |
//! |---|---|
//! | election transitions (`become_candidate`, `grant_vote` when it writes, `become_leader`, `become_follower`, `become_unattached`) | one atomic small-file replace: two file syncs and a directory sync |
//! | `append_as_leader`, `append_at`, `append_control`, `append_as_follower` | one buffered write (no sync) |
//! | `append_durable` | until its group's sync round (one device write) |
//! | `truncate_to`, `truncate_to_diverging`, `truncate_to_latest_snapshot` | a sync (and an intent replace when a page or batch is cut) |
//! | `clean_log_prefix` | a few small-file replaces and a directory sync |
//! | `create_snapshot` + writer + `freeze` | the snapshot's writes and syncs |
//! | snapshot install chunks ([`Store::install_snapshot`]) | one write and sync each; `finish` verifies, syncs, publishes, then truncates the log as `truncate_to_latest_snapshot` |
//! | `write_app_metadata` | one atomic small-file replace |
//! | `read`, `read_entries`, `validate_offset_and_epoch`, `epoch_at` | never a sync nor a device write: a sync round's direct write runs without the log's lock (tested with a write stopped in the middle), so a read waits at most for short in-memory sections |

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use quorumlog_checkpoint::{
    format_with, DataDir, Epoch, Meta, Offset, OpenOptions, QuorumState, SharedFs,
};
use quorumlog_io::Failure;
use quorumlog_log::{AppendInfo, DurableLog, SyncPolicy};
use quorumlog_snapshot::SnapshotStore;

mod control;
mod read;
mod snapshots;
mod types;

use snapshots::continues_snapshot;
pub use snapshots::{StoreInstall, StoreWriter};
pub use types::{Entry, Identity, Isolation, OnDurable, OpenReport, StoreOptions};

pub use control::{snapshot_user_metadata, VOTER_HISTORY_EVERY};

use crate::election::Election;
use crate::error::{Error, Result};

/// One durable store per Raft group.
#[derive(Debug)]
pub struct Store {
    dd: Arc<DataDir>,
    log: DurableLog,
    snapshots: SnapshotStore,
    election: Mutex<Election>,
    control: Mutex<control::Control>,
}

const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Store>();
};

impl Store {
    /// Formats `dir` for a new replica with identity `meta`; its log starts
    /// at `initial_offset` (for example 1, for a Raft whose first index is
    /// 1) or 0.
    ///
    /// # Errors
    /// As `quorumlog_checkpoint::format_with` (a formatted or foreign
    /// directory is refused); `Log` if the log cannot be created.
    pub fn format(
        fs: &SharedFs,
        dir: &Path,
        meta: Meta,
        initial_offset: Option<Offset>,
        options: &StoreOptions,
    ) -> Result<()> {
        format_with(fs, dir, meta)?;
        let dd = Arc::new(DataDir::open(fs.clone(), dir, &OpenOptions::default())?);
        let log = DurableLog::open(Arc::clone(&dd), options.log.clone(), SyncPolicy::Never)?;
        if let Some(start) = initial_offset.filter(|o| *o > Offset(0)) {
            log.truncate_fully_and_start_at(start, None)?;
        }
        log.close()?;
        Ok(())
    }

    /// Opens the store of `dir`, which must be `expect`'s, and reconciles
    /// its parts (see the module documentation). The identity is checked
    /// first: a foreign directory (another cluster, node or directory id)
    /// is refused before a byte of it changes.
    ///
    /// # Errors
    /// `Checkpoint(IdentityMismatch)` naming both values; `Checkpoint`
    /// (not formatted, locked, damaged election state…); `Log` (recovery
    /// refused, I/O); `Snapshot`; `MissingSnapshot` when entries below the
    /// log start have no snapshot (invariant 7).
    pub fn open(
        fs: &SharedFs,
        dir: &Path,
        expect: &Identity,
        options: &StoreOptions,
    ) -> Result<(Store, OpenReport)> {
        let dd = Arc::new(DataDir::open(fs.clone(), dir, &expect.open_options())?);
        let snapshots = SnapshotStore::open(fs.clone(), &dd.snapshots_dir())?;
        let log = DurableLog::open(Arc::clone(&dd), options.log.clone(), options.sync)?;
        let mut report = OpenReport {
            log: log.recovery_report(),
            restarted_at_snapshot: None,
            installs_in_progress: snapshots.installs()?,
            snapshots: snapshots.report().clone(),
            voter_scan: None,
        };
        let latest = snapshots.latest().map(|s| s.id);
        if let Some(latest) = latest {
            if !continues_snapshot(&log, latest) {
                log.truncate_fully_and_start_at(latest.end_offset, Some(latest.epoch))?;
                report.restarted_at_snapshot = Some(latest);
            }
            if log.log_start_offset() > latest.end_offset {
                return Err(Error::MissingSnapshot {
                    log_start: log.log_start_offset(),
                    latest: Some(latest),
                });
            }
            // A snapshot holds committed state: the high watermark (which
            // recovery may find lower, as it is made durable lazily) is at
            // least its end.
            if log.high_watermark().is_none_or(|h| h < latest.end_offset) {
                log.set_high_watermark(latest.end_offset)?;
            }
        }
        let last_epoch = log.last_epoch();
        let election = Election::open(Arc::clone(&dd), last_epoch)?;
        let file = dd.voter_history();
        let (control, scanned) = control::rebuild(file.as_deref(), &log, &snapshots);
        report.voter_scan = scanned;
        let store = Store {
            dd,
            log,
            snapshots,
            election: Mutex::new(election),
            control: Mutex::new(control),
        };
        if scanned.is_some() {
            store.save_control()?;
        }
        Ok((store, report))
    }

    /// The failure that poisoned the store, if one did (see the module
    /// documentation): the data directory's, which the log sets the
    /// moment its own write or sync fails and the store sets on any
    /// other part's I/O failure. A read: it changes nothing.
    pub fn poisoned(&self) -> Option<Failure> {
        self.dd.poisoned()
    }

    /// Runs `f` unless the store is poisoned; an I/O failure it returns
    /// poisons the store.
    fn guarded<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if let Some(failure) = self.poisoned() {
            return Err(Error::Poisoned(failure));
        }
        let r = f();
        if let Some(failure) = r.as_ref().err().and_then(Error::failure) {
            self.dd.poison(failure);
        }
        r
    }

    /// Closes cleanly: the log's clean-close checkpoints (the next open
    /// verifies nothing).
    ///
    /// # Errors
    /// As the log's close.
    pub fn close(self) -> Result<()> {
        let any = self.control().history.records().next().is_some();
        if self.poisoned().is_none() && (any || self.dd.voter_history().is_some()) {
            self.save_control()?;
        }
        Ok(self.log.close()?)
    }

    /// The election state (transitions are durable before they return).
    pub fn election(&self) -> MutexGuard<'_, Election> {
        self.election.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The log.
    pub fn log(&self) -> &DurableLog {
        &self.log
    }

    /// The snapshots.
    pub fn snapshots(&self) -> &SnapshotStore {
        &self.snapshots
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Arc<DataDir> {
        &self.dd
    }

    /// This directory's identity, exactly (what a reopen of it expects).
    pub fn identity(&self) -> Identity {
        Identity::of(&self.dd.meta())
    }

    /// The durable election state (epoch, vote, leader).
    pub fn quorum_state(&self) -> QuorumState {
        self.election().state().clone()
    }

    /// Replaces the election state with `next`, computed by a Raft library
    /// that owns the election (openraft's `save_vote`, raft-rs's hard
    /// state): checked by the file's rules (the epoch never regresses, one
    /// vote and one leader per epoch), durable when it returns, and seen
    /// at once by this store's own election view.
    ///
    /// # Errors
    /// `Checkpoint(StateRegression…)` for a refused transition (nothing
    /// changes); `Poisoned`; I/O (which poisons).
    pub fn persist_quorum_state(&self, next: &QuorumState) -> Result<()> {
        self.guarded(|| self.election().replace(next.clone()))
    }

    /// The largest batch the log accepts, in bytes (what one append of
    /// many entries may hold).
    pub fn max_batch_bytes(&self) -> u64 {
        self.log.options().max_batch_bytes
    }

    /// The Raft library's own metadata (openraft's last purged id and
    /// membership, raft-rs's `ConfState`), if ever written.
    pub fn app_metadata(&self) -> Option<Vec<u8>> {
        self.dd.app_metadata()
    }

    /// Replaces the Raft library's metadata atomically, durable on return.
    ///
    /// # Errors
    /// `Checkpoint(TooLarge)` above 1 MiB; I/O (which poisons).
    pub fn write_app_metadata(&self, bytes: &[u8]) -> Result<()> {
        self.guarded(|| Ok(self.dd.write_app_metadata(bytes)?))
    }

    /// Runs a leader append `f` on the log, unless the store is poisoned or
    /// this node does not durably lead `epoch`.
    fn as_leader(
        &self,
        epoch: Epoch,
        f: impl FnOnce(&DurableLog) -> quorumlog_log::Result<AppendInfo>,
    ) -> Result<AppendInfo> {
        self.guarded(|| {
            self.election().check_leader_append(epoch)?;
            Ok(f(&self.log)?)
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

    /// As [`Store::append_as_leader`], returning once the records are
    /// durable (group commit).
    ///
    /// # Errors
    /// As [`Store::append_as_leader`]; `Poisoned` after a failed sync.
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
    /// As [`Store::append_as_leader`].
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

    /// Appends `records` in `epoch` at `base_offset` (the log end) for a
    /// Raft library that owns the election and assigns indexes and terms
    /// itself (openraft, raft-rs): the same write-combining queue as leader
    /// appends, without the election check (the library checked the
    /// entries' leader). An empty log first restarts at `base_offset` if it
    /// is beyond its end (a library whose log begins above 0). Returns
    /// before the records are durable ([`Store::on_durable`]).
    ///
    /// # Errors
    /// `Log(NonContiguous)` unless `base_offset` is the log end (or an
    /// empty log's restart point); `Log(EpochRegression)`; I/O.
    pub fn append_replicated<R: AsRef<[u8]>>(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        self.replicated_at_end(base_offset, self.log.log_end_offset(), || {
            self.log.append_at(base_offset, epoch, records)
        })
    }

    /// A replicated append at `base_offset` on a log ending at `end`: an
    /// empty log first restarts there if `base_offset` is beyond it.
    fn replicated_at_end(
        &self,
        base_offset: Offset,
        end: Offset,
        append: impl FnOnce() -> quorumlog_log::Result<AppendInfo>,
    ) -> Result<AppendInfo> {
        self.guarded(|| {
            if self.log.log_start_offset() == end && base_offset > end {
                self.log.truncate_fully_and_start_at(base_offset, None)?;
            }
            Ok(append()?)
        })
    }

    /// [`Store::append_replicated`] without the write: the batch is
    /// queued for the next sync round, which writes it and makes it
    /// durable in one step ([`DurableLog::append_at_queued`]); it is not
    /// readable through the store until then (the caller serves it from
    /// its own copy). [`Store::queued_end`] counts it.
    ///
    /// # Errors
    /// As [`Store::append_replicated`].
    pub fn append_replicated_queued<R: AsRef<[u8]>>(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        self.replicated_at_end(base_offset, self.log.queued_end(), || {
            self.log.append_at_queued(base_offset, epoch, records)
        })
    }

    /// Where the next append goes, appends queued for the next sync round
    /// included ([`Store::append_replicated_queued`]).
    pub fn queued_end(&self) -> Offset {
        self.log.queued_end()
    }

    /// For a Raft library that owns compaction (openraft's `purge`):
    /// deletes every entry below `offset`, the entry at `offset - 1` being
    /// in `epoch` ([`Store::last_purged`]); past the log end the log
    /// restarts, empty, at `offset`. Unlike [`Store::clean_log_prefix`] it
    /// is not bounded by a snapshot: the library guarantees its state
    /// covers what it purges.
    ///
    /// # Errors
    /// I/O.
    pub fn purge_to(&self, offset: Offset, epoch: Epoch) -> Result<()> {
        self.guarded(|| {
            if offset <= self.log.log_start_offset() {
                return Ok(());
            }
            // Appends queued for the next round count: the restart is only
            // for a purge past everything appended.
            if offset > self.log.queued_end() {
                self.log.truncate_fully_and_start_at(offset, Some(epoch))?;
            } else {
                self.log.truncate_prefix_to(offset)?;
            }
            self.follow_log();
            Ok(())
        })
    }

    /// Appends batches exactly as the leader's [`Store::read`] returned
    /// them (`BatchRef::raw`), verified and written without re-encoding.
    ///
    /// # Errors
    /// `Log(InvalidRawBatch | NonContiguous | EpochRegression)` (nothing
    /// written); I/O.
    pub fn append_as_follower(&self, raw_batches: &[&[u8]]) -> Result<AppendInfo> {
        self.guarded(|| {
            let info = self.log.append_raw(raw_batches)?;
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
        self.guarded(|| {
            let end = self.log.log_end_offset();
            let local = self
                .log
                .end_offset_for_epoch(epoch)
                .map_or(self.log.log_start_offset(), |(_, o)| o);
            let to = local.min(end_offset).min(end);
            if to < end {
                self.truncate_to(to)?;
            }
            Ok(self.log.log_end_offset())
        })
    }

    /// Suffix truncation: the log ends at `offset`, durably. Refused below
    /// the high watermark and below the latest snapshot's end (committed
    /// entries are never removed, and a snapshot holds committed state
    /// only, even when the high watermark recovered after a crash is
    /// lower).
    ///
    /// # Errors
    /// `BelowHighWatermark` (naming the higher of the two bounds); the
    /// log's errors.
    pub fn truncate_to(&self, offset: Offset) -> Result<()> {
        self.guarded(|| {
            let hw = self.log.high_watermark().unwrap_or(Offset(0));
            let snapshot = self.latest_snapshot().map_or(Offset(0), |s| s.end_offset);
            let floor = hw.max(snapshot);
            if offset < floor {
                return Err(Error::BelowHighWatermark {
                    offset,
                    high_watermark: floor,
                });
            }
            self.log.truncate_to(offset)?;
            self.follow_log();
            Ok(())
        })
    }

    /// The offset below which every entry is durable.
    pub fn flushed_offset(&self) -> Offset {
        self.log.flushed_offset()
    }

    /// The first offset in the log.
    pub fn log_start_offset(&self) -> Offset {
        self.log.log_start_offset()
    }

    /// The next offset to be written.
    pub fn log_end_offset(&self) -> Offset {
        self.log.log_end_offset()
    }

    /// The high watermark (commit offset), if one was ever set.
    pub fn high_watermark(&self) -> Option<Offset> {
        self.log.high_watermark()
    }

    /// Blocks until every entry below `offset` is durable (at most one sync
    /// round); returns the flushed offset.
    ///
    /// # Errors
    /// `Poisoned` if a sync failed; `Log(SyncDisabled)` under
    /// `SyncPolicy::Never` unless already durable.
    pub fn wait_durable(&self, offset: Offset) -> Result<Offset> {
        self.guarded(|| Ok(self.log.wait_durable(offset)?))
    }

    /// The completion-callback form of [`Store::wait_durable`]: `completion`
    /// is called once every entry below `offset` is durable (with the
    /// flushed offset), or with the failure if that can no longer happen;
    /// at once if it already is. It runs on the thread that finished the
    /// sync: keep it short (a Raft library sends a message from it).
    pub fn on_durable(&self, offset: Offset, completion: OnDurable) {
        if let Some(failure) = self.poisoned() {
            completion(Err(Error::Poisoned(failure)));
            return;
        }
        self.log.on_durable(
            offset,
            Box::new(move |r| completion(r.map_err(Error::from))),
        );
    }
    /// Where a leader's fetch handling and compaction see its log
    /// ([`crate::compaction::LeaderCompaction::safe_log_start`]).
    pub fn log_extent(&self) -> crate::compaction::LogExtent {
        crate::compaction::LogExtent::of(&self.log)
    }

    /// Raises the high watermark to `offset` if it is lower (a snapshot's
    /// end: a snapshot holds committed state only).
    fn raise_high_watermark(&self, offset: Offset) -> Result<()> {
        if self.log.high_watermark().is_none_or(|h| h < offset) {
            self.log.set_high_watermark(offset)?;
        }
        Ok(())
    }

    /// Sets the high watermark (the commit offset, from the leader's
    /// [`crate::CommitTracker`] or a fetch response). It never moves back;
    /// below the log start it is raised to it.
    ///
    /// # Errors
    /// `HighWatermarkBackwards` below the current one, naming both
    /// (nothing changes); `Log(HighWatermarkBeyondEnd)`; `Poisoned`.
    pub fn set_high_watermark(&self, offset: Offset) -> Result<()> {
        self.guarded(|| {
            self.log.set_high_watermark(offset)?;
            self.advance_control_file(offset)
        })
    }
}
