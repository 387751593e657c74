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
    format_with, ClusterId, DataDir, DirectoryId, Epoch, Meta, NodeId, Offset, OpenOptions,
    QuorumState, SharedFs,
};
use quorumlog_io::Failure;
use quorumlog_log::{AppendInfo, DurableLog, LogOptions, ReadBatches, RecoveryReport, SyncPolicy};
use quorumlog_snapshot::{
    Install, Retention, SnapshotId, SnapshotInfo, SnapshotStore, SnapshotWriter, WriterOptions,
};

mod control;

pub use control::{snapshot_user_metadata, VOTER_HISTORY_EVERY};

use crate::election::Election;
use crate::error::{Error, Result};
use crate::fetch::{validate_offset_and_epoch, FetchPosition};

/// A durability completion ([`Store::on_durable`]): called once with the
/// flushed offset, or with the failure that means it can no longer be.
pub type OnDurable = Box<dyn FnOnce(Result<Offset>) + Send>;

/// Which entries a read may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Only committed entries (below the high watermark).
    Committed,
    /// Everything in the log.
    Uncommitted,
}

/// One entry read from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its offset.
    pub offset: Offset,
    /// The epoch it was written in.
    pub epoch: Epoch,
    /// A control record (leader change, voter set, snapshot marker), not a
    /// user record: readers of user data filter these out.
    pub control: bool,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// The identity a caller expects of the directory it opens
/// ([`Store::open`]): a mismatch is refused before anything on disk
/// changes, with both values in the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The cluster the directory must belong to.
    pub cluster_id: ClusterId,
    /// The node that must own it.
    pub node_id: NodeId,
    /// The directory id minted at format, where the caller knows it (a
    /// replaced disk has another).
    pub directory_id: Option<DirectoryId>,
}

impl Identity {
    /// Cluster and node, any directory id.
    pub fn node(cluster_id: ClusterId, node_id: NodeId) -> Identity {
        Identity {
            cluster_id,
            node_id,
            directory_id: None,
        }
    }

    /// Exactly the directory `meta` describes.
    pub fn of(meta: &Meta) -> Identity {
        Identity {
            cluster_id: meta.cluster_id,
            node_id: meta.node_id,
            directory_id: Some(meta.directory_id),
        }
    }

    fn open_options(self) -> OpenOptions {
        OpenOptions {
            expected_cluster_id: Some(self.cluster_id),
            expected_node_id: Some(self.node_id),
            expected_directory_id: self.directory_id,
        }
    }
}

/// How a store is opened.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// The log's options.
    pub log: LogOptions,
    /// When the log syncs.
    pub sync: SyncPolicy,
}

/// What opening a store found and did.
#[derive(Debug, Clone)]
pub struct OpenReport {
    /// The log's recovery report.
    pub log: RecoveryReport,
    /// The log ended before this snapshot (or diverged from it) and was
    /// restarted at its end.
    pub restarted_at_snapshot: Option<SnapshotId>,
    /// Snapshot downloads found unfinished and newer than the latest
    /// snapshot, with their total sizes: resume with
    /// [`Store::install_snapshot`], or [`Store::discard_install`].
    pub installs_in_progress: Vec<(SnapshotId, u64)>,
    /// What opening the snapshots found and did: unfinished downloads not
    /// newer than the latest snapshot discarded (they can never finish),
    /// partial local snapshots removed, damaged ones not listed.
    pub snapshots: quorumlog_snapshot::StoreReport,
    /// The part of the log scanned for voter records (`[from, to)`):
    /// what the voter-history file did not cover; `None` when nothing was.
    pub voter_scan: Option<(Offset, Offset)>,
}

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

    /// Reads whole verified batches from the one holding `from`.
    ///
    /// # Errors
    /// `Log(OffsetOutOfRange)` outside the log; corruption; I/O.
    pub fn read(&self, from: Offset, max_bytes: u64) -> Result<ReadBatches> {
        self.guarded(|| Ok(self.log.read(from, max_bytes)?))
    }

    /// The entries in `[from, to)`, up to `max_bytes` of record bytes (at
    /// least one entry when any is in range), within `isolation`: exactly
    /// those offsets, each with its epoch.
    ///
    /// # Errors
    /// `OffsetOutOfRange` (naming the log start and the latest snapshot)
    /// below the log start or past the log end; the log's read errors
    /// (corruption is never returned as data).
    pub fn read_entries(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
        isolation: Isolation,
    ) -> Result<Vec<Entry>> {
        self.guarded(|| {
            let (start, end) = (self.log.log_start_offset(), self.log.log_end_offset());
            if from < start || from > end {
                return Err(Error::OffsetOutOfRange {
                    offset: from,
                    start,
                    end,
                    snapshot: self.snapshots.latest().map(|s| s.id),
                });
            }
            let mut limit = to.min(end);
            if isolation == Isolation::Committed {
                limit = limit.min(self.log.high_watermark().unwrap_or(start));
            }
            let mut out = Vec::new();
            let mut bytes = 0u64;
            let mut at = from;
            while at < limit && (out.is_empty() || bytes < max_bytes) {
                // Bounded by the range: nothing past `limit` is read.
                let batches = self.log.read_range(at, limit, max_bytes.max(1))?;
                let Some(next) = batches.next_offset() else {
                    break;
                };
                for b in batches.iter() {
                    let records = b.to_vecs().map_err(|kind| Error::UndecodableBatch {
                        offset: b.base_offset(),
                        epoch: b.epoch(),
                        kind,
                    })?;
                    for (i, r) in records.into_iter().enumerate() {
                        let offset = Offset(b.base_offset().0 + i as u64);
                        if offset < at || offset >= limit {
                            continue;
                        }
                        if !out.is_empty() && bytes + r.len() as u64 > max_bytes {
                            return Ok(out);
                        }
                        bytes += r.len() as u64;
                        out.push(Entry {
                            offset,
                            epoch: b.epoch(),
                            control: b.is_control(),
                            bytes: r,
                        });
                    }
                }
                at = next;
            }
            Ok(out)
        })
    }

    /// For Raft's log matching: the largest epoch `<= epoch` in the log and
    /// the offset where it ends; `None` if every epoch in the log is newer.
    pub fn end_offset_for_epoch(&self, epoch: Epoch) -> Option<(Epoch, Offset)> {
        self.log.end_offset_for_epoch(epoch)
    }

    /// The latest durable snapshot's id.
    pub fn latest_snapshot(&self) -> Option<SnapshotId> {
        self.snapshots.latest().map(|s| s.id)
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
            let metadata = control::snapshot_user_metadata(&r.header().metadata)
                .1
                .to_vec();
            Ok((metadata, r.read_to_end()?))
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

    /// The epoch of the entry at `offset`, if it is in the log.
    pub fn epoch_at(&self, offset: Offset) -> Option<Epoch> {
        self.log.epoch_at(offset)
    }

    /// Validates a follower's fetch position against this log and its
    /// snapshots ([`validate_offset_and_epoch`]).
    ///
    /// # Errors
    /// `OffsetOutOfRange` below the log start with no snapshot.
    pub fn validate_offset_and_epoch(&self, offset: Offset, epoch: Epoch) -> Result<FetchPosition> {
        self.guarded(|| {
            let start = self.log.log_start_offset();
            let ids = (
                self.snapshots
                    .list()
                    .into_iter()
                    .map(|s| s.id)
                    .find(|id| id.end_offset == start),
                self.snapshots.latest().map(|s| s.id),
            );
            validate_offset_and_epoch(&self.log, ids, offset, epoch)
        })
    }

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
                writer: self.snapshots.create(
                    id,
                    &control::wrap_snapshot_metadata(
                        &self.control_state_at_end(end_offset),
                        metadata,
                    ),
                    options,
                )?,
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
    /// `SnapshotRefused` without any snapshot; the log's errors.
    pub fn truncate_to_latest_snapshot(&self) -> Result<SnapshotId> {
        self.guarded(|| {
            let Some(latest) = self.snapshots.latest().map(|s| s.id) else {
                return Err(Error::SnapshotRefused {
                    id: SnapshotId {
                        end_offset: Offset(0),
                        epoch: Epoch(0),
                    },
                    why: "no snapshot",
                });
            };
            if !continues_snapshot(&self.log, latest) {
                self.log
                    .truncate_fully_and_start_at(latest.end_offset, Some(latest.epoch))?;
                self.restart_control_at(latest);
            }
            Ok(latest)
        })
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
                self.follow_log();
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
    /// [`OpenReport::installs_in_progress`]), the install of snapshot `id`
    /// of `total_size` bytes received from the leader; its
    /// [`StoreInstall::finish`] publishes it and makes the log continue it.
    ///
    /// # Errors
    /// `Snapshot(NotNewer)` unless newer than the latest snapshot; I/O.
    pub fn install_snapshot(&self, id: SnapshotId, total_size: u64) -> Result<StoreInstall<'_>> {
        self.guarded(|| {
            Ok(StoreInstall {
                store: self,
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

/// Whether `log` continues snapshot `id` (so it is kept): it holds the
/// snapshot's last entry with the snapshot's epoch; or it starts at or
/// above the snapshot's end and is empty or begins in an epoch not older
/// than the snapshot's (epochs never decrease along a log, so an older one
/// there diverged; a start above the end is a gap that open refuses). The
/// snapshot of an empty prefix is continued by any log.
fn continues_snapshot(log: &DurableLog, id: SnapshotId) -> bool {
    let start = log.log_start_offset();
    match id.end_offset.0.checked_sub(1).map(Offset) {
        None => true,
        Some(last) if last < start => log.epoch_at(start).is_none_or(|e| e >= id.epoch),
        Some(last) => log.epoch_at(last) == Some(id.epoch),
    }
}

/// A snapshot download through the store ([`Store::install_snapshot`]):
/// each chunk is durable when written, a restart resumes from the last one,
/// and [`StoreInstall::finish`] publishes the snapshot then truncates the
/// log to it (a crash between the two is completed at open).
#[derive(Debug)]
pub struct StoreInstall<'a> {
    store: &'a Store,
    install: Install,
}

impl StoreInstall<'_> {
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

    /// Verifies and publishes the snapshot, then makes the log continue it
    /// ([`Store::truncate_to_latest_snapshot`]).
    ///
    /// # Errors
    /// `Snapshot(Incomplete)`; `Snapshot(Corruption)` (the partial file is
    /// removed: start over); I/O.
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
