//! [`Store`]: one durable store per Raft group, the one door a Raft
//! library's storage adapter talks to (openraft, raft-rs, or the `KRaft`
//! wing, [`crate::KraftReplica`], which owns one). It opens the data
//! directory, the snapshots and the log together, reconciles them, and
//! enforces the rules of docs/design.md §8 whoever calls it: identity
//! checked at open, a high watermark that never moves back, committed
//! entries never truncated, durable means durable, snapshots of committed
//! state only.
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
//! What open and close write, for a store no `KRaft` wing owns: open
//! writes only what recovery repairs and the restart at a snapshot above;
//! close writes the log's clean-close checkpoints. No election state and
//! no voter history (tested: `raft-glue/tests/store_open.rs`).
//!
//! One poisoned state: the first I/O failure of any part (a log write or
//! sync, a checkpoint or election-state replace, a snapshot) poisons the
//! data directory, and from then on every store call is refused with
//! [`Error::Poisoned`] naming it. Refusals (bad input, a rule) poison
//! nothing.
//!
//! `Store` is `Send + Sync` (asserted below): a Raft thread, an I/O thread
//! and readers share it by `Arc`. What blocks, and for how long (measured
//! on this project's test disk, a sync ≈ 75–100 µs):
//!
//! | call | blocks for |
//! |---|---|
//! | `persist_quorum_state`, `write_app_metadata` | one atomic small-file replace: two file syncs and a directory sync |
//! | `append_replicated` | one buffered write (no sync) |
//! | `append_replicated_queued` | nothing: queued for the next sync round |
//! | `truncate_to`, `truncate_to_latest_snapshot` | a sync (and an intent replace when a page or batch is cut) |
//! | `clean_log_prefix`, `purge_to` | a few small-file replaces and a directory sync |
//! | `create_snapshot` + writer + `freeze` | the snapshot's writes and syncs |
//! | snapshot install chunks ([`Store::install_snapshot`]) | one write and sync each; `finish` verifies, syncs, publishes, then truncates the log as `truncate_to_latest_snapshot` |
//! | `read_entries`, `epoch_at` | never a sync nor a device write: a sync round's direct write runs without the log's lock (tested with a write stopped in the middle), so a read waits at most for short in-memory sections |

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{
    format_with, DataDir, Epoch, Meta, Offset, OpenOptions, QuorumState, SharedFs, Voter,
};
use quorumlog_io::Failure;
use quorumlog_log::{AppendInfo, DurableLog, SyncPolicy};
use quorumlog_snapshot::SnapshotStore;

mod listener;
mod read;
mod snapshots;
mod types;

pub(crate) use listener::LogListener;
use snapshots::continues_snapshot;
pub(crate) use snapshots::{envelope, split_envelope, ENVELOPE_MAGIC};
pub use snapshots::{StoreInstall, StoreWriter};
pub use types::{Entry, Identity, Isolation, OnDurable, OpenReport, StoreOptions};

use crate::error::{Error, Result};

/// One durable store per Raft group.
#[derive(Debug)]
pub struct Store {
    pub(crate) dd: Arc<DataDir>,
    pub(crate) log: DurableLog,
    pub(crate) snapshots: SnapshotStore,
    /// Told of every change of the log's extent (the `KRaft` wing's voter
    /// history follows the log through it); none for a plain store.
    listener: Option<Arc<dyn LogListener>>,
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
        if crate::node::is_node_dir(fs, dir) {
            return Err(Error::WrongLayout {
                path: dir.to_path_buf(),
                found: "a node's directory (many groups)",
                expected: "a one-group store's directory",
            });
        }
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
        let store = Store {
            dd,
            log,
            snapshots,
            listener: None,
        };
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
    pub(crate) fn guarded<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
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
        Ok(self.log.close()?)
    }

    /// Sets the listener told of every change of the log's extent (the
    /// `KRaft` wing's, at its open).
    pub(crate) fn set_listener(&mut self, listener: Arc<dyn LogListener>) {
        self.listener = Some(listener);
    }

    /// Tells the listener the log's extent changed.
    fn after_extent(&self) {
        if let Some(l) = &self.listener {
            l.after_extent(self);
        }
    }

    /// The log's counts and latency histograms since open
    /// (`quorumlog_log::LogStats`).
    pub fn log_stats(&self) -> quorumlog_log::LogStats {
        self.log.stats()
    }

    /// The log, for whitebox tests and the crash harness only (feature
    /// `testing`): the rules of the store are not in force behind it.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn log(&self) -> &DurableLog {
        &self.log
    }

    /// The snapshots, for whitebox tests only (feature `testing`).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn snapshots(&self) -> &SnapshotStore {
        &self.snapshots
    }

    /// The data directory, for whitebox tests only (feature `testing`).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn data_dir(&self) -> &Arc<DataDir> {
        &self.dd
    }

    /// This replica as a voter: its node id and directory id.
    pub fn me(&self) -> Voter {
        let meta = self.dd.meta();
        Voter {
            node_id: meta.node_id,
            directory_id: meta.directory_id,
        }
    }

    /// This directory's identity, exactly (what a reopen of it expects).
    pub fn identity(&self) -> Identity {
        Identity::of(&self.dd.meta())
    }

    /// The durable election state (epoch, vote, leader).
    pub fn quorum_state(&self) -> QuorumState {
        self.dd.quorum_state()
    }

    /// Replaces the election state with `next`, computed by a Raft library
    /// that owns the election (openraft's `save_vote`, raft-rs's hard
    /// state): checked by the file's rules (the epoch never regresses, one
    /// vote and one leader per epoch), durable when it returns; the
    /// `KRaft` wing's election reads the same state.
    ///
    /// # Errors
    /// `Checkpoint(StateRegression…)` for a refused transition (nothing
    /// changes); `Poisoned`; I/O (which poisons).
    pub fn persist_quorum_state(&self, next: &QuorumState) -> Result<()> {
        self.guarded(|| Ok(self.dd.persist_quorum_state(next)?))
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

    /// [`Store::append_replicated_queued`] of `count` records that `write`
    /// encodes straight into the batch (record `i` appended to the buffer
    /// it is given): a Raft library's entry encoding is then the only copy
    /// of its value before the batch. `len_hint` is the expected batch
    /// size (each record's bytes plus 4, plus 40 for the header).
    ///
    /// # Errors
    /// As [`Store::append_replicated_queued`]; `Log(RecordEncoding)` if
    /// `write` fails (nothing queued).
    pub fn append_replicated_queued_with(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        count: usize,
        len_hint: u64,
        write: impl FnMut(usize, &mut Vec<u8>) -> std::io::Result<()>,
    ) -> Result<AppendInfo> {
        self.replicated_at_end(base_offset, self.log.queued_end(), || {
            self.log
                .append_at_queued_with(base_offset, epoch, count, len_hint, write)
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
    /// is not bounded by the high watermark: the library guarantees its
    /// state covers what it purges; but once the store has snapshots, it
    /// never passes the latest one's end (the store could not be opened
    /// again), as a group's purge.
    ///
    /// # Errors
    /// `MissingSnapshot` past the latest snapshot's end (nothing changes);
    /// I/O.
    pub fn purge_to(&self, offset: Offset, epoch: Epoch) -> Result<()> {
        self.guarded(|| {
            if offset <= self.log.log_start_offset() {
                return Ok(());
            }
            crate::node::check_purge_bound(offset, self.latest_snapshot())?;
            // Appends queued for the next round count: the restart is only
            // for a purge past everything appended.
            if offset > self.log.queued_end() {
                self.log.truncate_fully_and_start_at(offset, Some(epoch))?;
            } else {
                self.log.truncate_prefix_to(offset)?;
            }
            self.after_extent();
            Ok(())
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
            self.after_extent();
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

    /// Makes the high watermark durable as far as the log is: raises the
    /// checkpointed value to `min(high watermark, flushed offset)` if that
    /// is higher (one small-file replace; nothing when it is not). Without
    /// it the watermark is checkpointed only at segment rolls and a clean
    /// close, so after a crash a restarted Raft re-applies only what it
    /// learns is committed again. Returns the durable value.
    ///
    /// # Errors
    /// `Poisoned`; the replace's I/O failure (which poisons).
    pub fn persist_high_watermark(&self) -> Result<Option<Offset>> {
        self.guarded(|| {
            let Some(hw) = self.log.high_watermark() else {
                return Ok(None);
            };
            let to = hw.min(self.log.flushed_offset());
            Ok(Some(self.dd.raise_high_watermark(to)?))
        })
    }

    /// A hint that entries `[from, to)` will be read soon (a restarted Raft
    /// re-applying its committed entries after its latest snapshot): the OS
    /// reads them into its cache in the background. Nothing is returned;
    /// a failure is ignored.
    pub fn prefetch(&self, from: Offset, to: Offset) {
        self.log.prefetch(from, to);
    }

    /// The high watermark as checkpointed (what a crash now would recover,
    /// before the log's own clamp).
    pub fn durable_high_watermark(&self) -> Option<Offset> {
        self.dd.checkpoints().high_watermark.map(|h| h.0)
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

    /// Raises the high watermark to `offset` if it is lower (a snapshot's
    /// end: a snapshot holds committed state only).
    pub(crate) fn raise_high_watermark(&self, offset: Offset) -> Result<()> {
        if self.log.high_watermark().is_none_or(|h| h < offset) {
            self.log.set_high_watermark(offset)?;
        }
        Ok(())
    }

    /// Sets the high watermark (the commit offset, from the leader's
    /// `KRaft`'s `CommitTracker` or a fetch response). It never moves back;
    /// below the log start it is raised to it.
    ///
    /// # Errors
    /// `HighWatermarkBackwards` below the current one, naming both
    /// (nothing changes); `Log(HighWatermarkBeyondEnd)`; `Poisoned`.
    pub fn set_high_watermark(&self, offset: Offset) -> Result<()> {
        self.guarded(|| {
            self.log.set_high_watermark(offset)?;
            match &self.listener {
                Some(l) => l.after_high_watermark(self, offset),
                None => Ok(()),
            }
        })
    }
}
