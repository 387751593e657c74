//! [`Store`]: one durable store per Raft group, the object a consensus
//! implementation talks to. It opens the data directory, the snapshots and
//! the log together and reconciles them, holds the election state, and
//! answers with `KRaft`'s log operations.
//!
//! Built so far (issue 12 in progress): format (with an initial offset),
//! open with reconciliation, leader appends guarded by the durable
//! election state, reads, fetch validation, suffix truncation refused below
//! the high watermark, and snapshot-bounded prefix cleaning.
//!
//! Reconciliation at open, in order:
//! - a log that ends before the latest snapshot restarts, empty, at the
//!   snapshot's end (the snapshot holds everything below it);
//! - with snapshots present, a log start above the latest snapshot's end is
//!   refused: entries were deleted that no snapshot covers (invariant 7);
//! - the log's own recovery already clamped a high watermark above its end.
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
//! | snapshot install chunks | one write each; `finish` syncs and publishes |
//! | `write_app_metadata` | one atomic small-file replace |
//! | `read`, `read_entries`, `validate_offset_and_epoch`, `epoch_at` | never a sync nor a device write: a sync round's direct write runs without the log's lock (tested with a write stopped in the middle), so a read waits at most for short in-memory sections |

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use quorumlog_checkpoint::{format_with, DataDir, Epoch, Meta, Offset, OpenOptions, SharedFs};
use quorumlog_log::{AppendInfo, DurableLog, LogOptions, ReadBatches, RecoveryReport, SyncPolicy};
use quorumlog_snapshot::{Retention, SnapshotId, SnapshotStore, SnapshotWriter, WriterOptions};

use crate::election::Election;
use crate::error::{Error, Result};
use crate::fetch::{validate_offset_and_epoch, FetchPosition};

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
    /// The log ended before this snapshot and was restarted at its end.
    pub restarted_at_snapshot: Option<SnapshotId>,
    /// Snapshot downloads found unfinished (resumable with the snapshot
    /// store's install), with the bytes already received.
    pub installs_in_progress: Vec<(SnapshotId, u64)>,
}

/// One durable store per Raft group.
#[derive(Debug)]
pub struct Store {
    dd: Arc<DataDir>,
    log: DurableLog,
    snapshots: SnapshotStore,
    election: Mutex<Election>,
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
            log.truncate_fully_and_start_at(start)?;
        }
        log.close()?;
        Ok(())
    }

    /// Opens the store of `dir` and reconciles its parts (see the module
    /// documentation).
    ///
    /// # Errors
    /// `Checkpoint` (not formatted, locked, damaged election state…);
    /// `Log` (recovery refused, I/O); `Snapshot`; `MissingSnapshot` when
    /// entries below the log start have no snapshot (invariant 7).
    pub fn open(fs: &SharedFs, dir: &Path, options: &StoreOptions) -> Result<(Store, OpenReport)> {
        let dd = Arc::new(DataDir::open(fs.clone(), dir, &OpenOptions::default())?);
        let snapshots = SnapshotStore::open(fs.clone(), &dd.snapshots_dir())?;
        let log = DurableLog::open(Arc::clone(&dd), options.log.clone(), options.sync)?;
        let mut report = OpenReport {
            log: log.recovery_report(),
            restarted_at_snapshot: None,
            installs_in_progress: snapshots.installs()?,
        };
        if let Some(latest) = snapshots.latest() {
            if log.log_end_offset() < latest.id.end_offset {
                log.truncate_fully_and_start_at(latest.id.end_offset)?;
                report.restarted_at_snapshot = Some(latest.id);
            }
            if log.log_start_offset() > latest.id.end_offset {
                return Err(Error::MissingSnapshot {
                    log_start: log.log_start_offset(),
                    latest: Some(latest.id),
                });
            }
        }
        let last_epoch = log.last_epoch();
        let election = Election::open(Arc::clone(&dd), last_epoch)?;
        Ok((
            Store {
                dd,
                log,
                snapshots,
                election: Mutex::new(election),
            },
            report,
        ))
    }

    /// Closes cleanly: the log's clean-close checkpoints (the next open
    /// verifies nothing).
    ///
    /// # Errors
    /// As the log's close.
    pub fn close(self) -> Result<()> {
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
        Ok(self.dd.write_app_metadata(bytes)?)
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
        self.election().check_leader_append(epoch)?;
        Ok(self.log.append_as_leader(epoch, records)?)
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
        self.election().check_leader_append(epoch)?;
        Ok(self.log.append_durable(epoch, records)?)
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
        self.election().check_leader_append(epoch)?;
        Ok(self.log.append_control(epoch, records)?)
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
        self.election().check_leader_append(epoch)?;
        Ok(self.log.append_at(base_offset, epoch, records)?)
    }

    /// Appends batches exactly as the leader's [`Store::read`] returned
    /// them (`BatchRef::raw`), verified and written without re-encoding.
    ///
    /// # Errors
    /// `Log(InvalidRawBatch | NonContiguous | EpochRegression)` (nothing
    /// written); I/O.
    pub fn append_as_follower(&self, raw_batches: &[&[u8]]) -> Result<AppendInfo> {
        Ok(self.log.append_raw(raw_batches)?)
    }

    /// Reads whole verified batches from the one holding `from`.
    ///
    /// # Errors
    /// `Log(OffsetOutOfRange)` outside the log; corruption; I/O.
    pub fn read(&self, from: Offset, max_bytes: u64) -> Result<ReadBatches> {
        Ok(self.log.read(from, max_bytes)?)
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
            let batches = self.log.read(at, max_bytes.max(1))?;
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
        Ok(self.snapshots.retain(retention)?)
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
    ) -> Result<SnapshotWriter> {
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
        Ok(self.snapshots.create(id, metadata, options)?)
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
        let Some(latest) = self.snapshots.latest().map(|s| s.id) else {
            return Err(Error::SnapshotRefused {
                id: SnapshotId {
                    end_offset: Offset(0),
                    epoch: Epoch(0),
                },
                why: "no snapshot",
            });
        };
        let last = latest.end_offset.0.checked_sub(1).map(Offset);
        let continues = last.is_some_and(|o| self.log.epoch_at(o) == Some(latest.epoch));
        if !continues {
            self.log.truncate_fully_and_start_at(latest.end_offset)?;
        }
        Ok(latest)
    }

    /// Deletes the log prefix below `up_to`, never past the end of the
    /// latest durable snapshot (invariant 7); returns the log start after.
    ///
    /// # Errors
    /// The log's (an I/O error poisons it).
    ///
    /// The log start keeps its epoch ([`Store::last_purged`]): the cut is
    /// never placed at an epoch boundary unless a snapshot ends there (it
    /// then moves one entry down, so the entry below the start shares the
    /// start's epoch).
    pub fn clean_log_prefix(&self, up_to: Offset) -> Result<Offset> {
        let Some(latest) = self.snapshots.latest() else {
            return Ok(self.log.log_start_offset());
        };
        let mut bound = up_to
            .min(latest.id.end_offset)
            .min(self.log.log_end_offset());
        let at_snapshot = self
            .snapshots
            .list()
            .iter()
            .any(|s| s.id.end_offset == bound);
        if bound > Offset(0) && !at_snapshot {
            let below = self.log.epoch_at(Offset(bound.0 - 1));
            let at = self.log.epoch_at(bound);
            if at.is_some() && below != at {
                bound = Offset(bound.0 - 1);
            }
        }
        if bound > self.log.log_start_offset() {
            self.log.truncate_prefix_to(bound)?;
        }
        Ok(self.log.log_start_offset())
    }

    /// The id of the last entry deleted below the log start (offset and
    /// epoch), for Raft libraries that persist a "last purged" log id:
    /// `None` when nothing was deleted. The epoch comes from the snapshot
    /// that ends at the log start, or from the log (cleaning keeps the entry
    /// below the start in the start's epoch).
    pub fn last_purged(&self) -> Option<(Offset, Epoch)> {
        let start = self.log.log_start_offset();
        let below = Offset(start.0.checked_sub(1)?);
        let at_start = self
            .snapshots
            .list()
            .into_iter()
            .find(|s| s.id.end_offset == start)
            .map(|s| s.id.epoch);
        let epoch = at_start.or_else(|| self.log.first_epoch())?;
        Some((below, epoch))
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
    }

    /// Suffix truncation: the log ends at `offset`, durably. Refused below
    /// the high watermark (committed entries are never removed).
    ///
    /// # Errors
    /// `BelowHighWatermark`; the log's errors.
    pub fn truncate_to(&self, offset: Offset) -> Result<()> {
        if let Some(hw) = self.log.high_watermark() {
            if offset < hw {
                return Err(Error::BelowHighWatermark {
                    offset,
                    high_watermark: hw,
                });
            }
        }
        Ok(self.log.truncate_to(offset)?)
    }

    /// Sets the high watermark (the commit offset, from the leader's
    /// [`crate::CommitTracker`] or a fetch response).
    ///
    /// # Errors
    /// The log's (an offset beyond its end, a watermark moving back).
    pub fn set_high_watermark(&self, offset: Offset) -> Result<()> {
        Ok(self.log.set_high_watermark(offset)?)
    }
}
