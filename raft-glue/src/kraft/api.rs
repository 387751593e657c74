//! The wing's log: leader and follower appends, truncations, reads, fetch
//! validation, durability, snapshots, installs and cleaning, each through
//! the election check or the voter history where it changes the log.

use std::sync::Arc;

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_log::AppendInfo;
use quorumlog_snapshot::{SnapshotId, SnapshotInfo, WriterOptions};

use super::fetch::{validate_offset_and_epoch, FetchPosition};
use super::{control, KraftReplica};
use crate::error::{Error, Result};
use crate::{Entry, Extent, GroupInstall, GroupSnapshot, GroupWriter, Isolation, Purge};

impl KraftReplica {
    /// Appends `records` at `base` (`None`: the log's end) in `epoch`,
    /// flagged as control records or not, unless this node does not
    /// durably lead `epoch`; the election lock is held throughout.
    fn as_leader<R: AsRef<[u8]>>(
        &self,
        base: Option<Offset>,
        epoch: Epoch,
        records: &[R],
        control: bool,
    ) -> Result<AppendInfo> {
        let election = self.election();
        election.check_leader_append(epoch)?;
        let base = base.unwrap_or_else(|| self.group.extent().queued_end);
        let info = self.group.append_flagged(base, epoch, records, control)?;
        drop(election);
        self.group.write_queued()?;
        if control {
            self.note_control(info.base_offset, records.iter().map(AsRef::as_ref));
        }
        Ok(info)
    }

    /// Appends `records` at the log's end as the leader of `epoch`;
    /// refused unless this node durably leads `epoch` (and has not
    /// resigned). Queued for the next round: durable with
    /// [`KraftReplica::wait_durable`].
    ///
    /// # Errors
    /// `WrongRole`; the group's refusals and failures.
    pub fn append_as_leader<R: AsRef<[u8]>>(
        &self,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        self.as_leader(None, epoch, records, false)
    }

    /// Appends control records (leader change, voter set, snapshot
    /// markers) as the leader of `epoch`, flagged so they can never be
    /// confused with user records; voter records among them enter the
    /// history.
    ///
    /// # Errors
    /// As [`KraftReplica::append_as_leader`].
    pub fn append_control<R: AsRef<[u8]>>(
        &self,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        self.as_leader(None, epoch, records, true)
    }

    /// Appends entries exactly as the leader's
    /// [`KraftReplica::read_entries`] returned them (offsets, epochs,
    /// control flags). Entries below this log's end must be there in the
    /// same epoch (they are skipped); the rest continue it. Each run of one
    /// epoch and kind becomes one batch (or more, within the batch limit).
    ///
    /// # Errors
    /// `Log(RawOverlapDiverges)` where an entry below the end has another
    /// epoch here; `Log(NonContiguous)` for entries that do not follow
    /// each other or leave a gap after the end; `Log(EpochRegression)`;
    /// nothing is written on any of these.
    pub fn append_as_follower(&self, entries: &[Entry]) -> Result<AppendInfo> {
        let end = self.group.extent().queued_end;
        let Some(first) = entries.first() else {
            return Err(Error::Log(quorumlog_log::Error::EmptyBatch));
        };
        check_follower_batch(entries)?;
        if first.offset > end {
            return Err(Error::Log(quorumlog_log::Error::NonContiguous {
                expected: end,
                found: first.offset,
            }));
        }
        for e in entries.iter().take_while(|e| e.offset < end) {
            let log = self.group.epoch_at(e.offset);
            if log != Some(e.epoch) {
                return Err(Error::Log(quorumlog_log::Error::RawOverlapDiverges {
                    offset: e.offset,
                    log,
                    batch: e.epoch,
                }));
            }
        }
        let new: &[Entry] = entries
            .iter()
            .position(|e| e.offset >= end)
            .and_then(|i| entries.get(i..))
            .unwrap_or_default();
        let runs: Vec<(Offset, Epoch, bool, &[u8])> = new
            .iter()
            .map(|e| (e.offset, e.epoch, e.control, e.bytes.as_slice()))
            .collect();
        let next_offset = if runs.is_empty() {
            end
        } else {
            self.group.append_runs(&runs)?
        };
        for e in new.iter().filter(|e| e.control) {
            self.note_control(e.offset, std::iter::once(e.bytes.as_slice()));
        }
        self.group.write_queued()?;
        Ok(AppendInfo {
            base_offset: end,
            next_offset,
        })
    }

    /// A follower told its log diverges (`FetchPosition::Diverging {
    /// end_offset, epoch }`): truncates to where its own log and the
    /// leader's agree, as `KRaft` does: the end of this log's largest epoch
    /// not newer than `epoch`, and never past the leader's `end_offset`
    /// nor this log's end. Returns the new log end.
    ///
    /// # Errors
    /// As [`crate::Group::truncate_to`]: `BelowHighWatermark`; `Poisoned`; I/O.
    pub fn truncate_to_diverging(&self, end_offset: Offset, epoch: Epoch) -> Result<Offset> {
        let x = self.group.extent();
        let local = self
            .group
            .end_offset_for_epoch(epoch)
            .map_or(x.start, |(_, o)| o);
        let to = local.min(end_offset).min(x.queued_end);
        if to < x.queued_end {
            self.group.truncate_to(to)?;
            self.control.lock().history.truncate_to(to);
        }
        Ok(self.group.extent().queued_end)
    }

    /// Where the log stands ([`crate::Group::extent`]).
    pub fn extent(&self) -> Extent {
        self.group.extent()
    }

    /// The entries in `[from, to)` ([`crate::Group::read_entries`]),
    /// control entries flagged: what a follower's fetch is answered with.
    ///
    /// # Errors
    /// As [`crate::Group::read_entries`].
    pub fn read_entries(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
        isolation: Isolation,
    ) -> Result<Vec<Entry>> {
        self.group.read_entries(from, to, max_bytes, isolation)
    }

    /// Validates a follower's fetch position against this log and its
    /// snapshots ([`validate_offset_and_epoch`]).
    ///
    /// # Errors
    /// `OffsetOutOfRange` below the log start with no snapshot.
    pub fn validate_offset_and_epoch(&self, offset: Offset, epoch: Epoch) -> Result<FetchPosition> {
        let x = self.group.extent();
        let ids = (
            self.group
                .snapshots()
                .into_iter()
                .map(|s| s.id)
                .find(|id| id.end_offset == x.start),
            x.latest_snapshot,
        );
        validate_offset_and_epoch(&*self.group, ids, offset, epoch)
    }

    /// Raises the high watermark ([`crate::Group::set_high_watermark`]).
    ///
    /// # Errors
    /// As [`crate::Group::set_high_watermark`].
    pub fn set_high_watermark(&self, offset: Offset) -> Result<()> {
        self.group.set_high_watermark(offset)
    }

    /// Waits until every entry below `offset` is durable
    /// ([`crate::Group::wait_durable`]).
    ///
    /// # Errors
    /// As [`crate::Group::wait_durable`].
    pub fn wait_durable(&self, offset: Offset) -> Result<Offset> {
        self.group.wait_durable(offset)
    }

    /// Starts a local snapshot ([`crate::Group::create_snapshot`]),
    /// storing with it the voter set and reassignment in force at its end
    /// (an install elsewhere restarts its history from them).
    ///
    /// # Errors
    /// As [`crate::Group::create_snapshot`].
    pub fn create_snapshot(
        &self,
        end_offset: Offset,
        epoch: Epoch,
        metadata: &[u8],
        options: WriterOptions,
    ) -> Result<GroupWriter<'_>> {
        let state = self.control.lock().state_at_end(end_offset);
        let stored = control::wrap_snapshot_metadata(&state, metadata);
        self.group
            .create_snapshot(end_offset, epoch, &stored, options)
    }

    /// A reader of snapshot `id` ([`crate::Group::snapshot`]); its stored
    /// metadata splits with [`super::snapshot_user_metadata`].
    ///
    /// # Errors
    /// `Snapshot(NotFound)`.
    pub fn snapshot(&self, id: SnapshotId) -> Result<GroupSnapshot<'_>> {
        self.group.snapshot(id)
    }

    /// Starts or resumes the install of the leader's snapshot `id`
    /// ([`crate::Group::install_snapshot`]); its finish restarts the voter
    /// history in the state the snapshot carries.
    ///
    /// # Errors
    /// As [`crate::Group::install_snapshot`].
    pub fn install_snapshot(&self, id: SnapshotId, total_size: u64) -> Result<KraftInstall<'_>> {
        Ok(KraftInstall {
            replica: self,
            install: self.group.install_snapshot(id, total_size)?,
        })
    }

    /// Deletes the log below `up_to` that the latest snapshot covers
    /// (`Purge::Covered`); the voter state at the new start is recorded
    /// first, so a reopen knows it without the deleted entries. Returns
    /// the log start.
    ///
    /// # Errors
    /// As [`crate::Group::purge`].
    pub fn clean_log_prefix(&self, up_to: Offset) -> Result<Offset> {
        let x = self.group.extent();
        let to = x
            .latest_snapshot
            .map_or(x.start, |l| up_to.min(l.end_offset));
        if to <= x.start {
            return Ok(x.start);
        }
        let base = self.control.lock().state_at_end(to);
        control::save_base(&self.group, to, &base)?;
        let start = self.group.purge(Purge::Covered { up_to: to })?;
        self.control.lock().history.cut_prefix(start);
        Ok(start)
    }
}

/// Refuses a follower batch whose entries do not follow each other or
/// whose epochs go back.
fn check_follower_batch(entries: &[Entry]) -> Result<()> {
    for w in entries.windows(2) {
        let (Some(a), Some(b)) = (w.first(), w.get(1)) else {
            continue;
        };
        if b.offset.0 != a.offset.0 + 1 {
            return Err(Error::Log(quorumlog_log::Error::NonContiguous {
                expected: Offset(a.offset.0 + 1),
                found: b.offset,
            }));
        }
        if b.epoch < a.epoch {
            return Err(Error::Log(quorumlog_log::Error::EpochRegression {
                current: a.epoch,
                proposed: b.epoch,
            }));
        }
    }
    Ok(())
}

/// An install of a leader's snapshot through the wing
/// ([`KraftReplica::install_snapshot`]).
#[derive(Debug)]
pub struct KraftInstall<'a> {
    replica: &'a KraftReplica,
    install: GroupInstall,
}

impl KraftInstall<'_> {
    /// The install itself: its id, position, chunks and verification.
    pub fn install(&mut self) -> &mut GroupInstall {
        &mut self.install
    }

    /// Publishes the snapshot ([`GroupInstall::finish`]) and restarts the
    /// voter history where the log now starts, in the state the snapshot
    /// carries.
    ///
    /// # Errors
    /// As [`GroupInstall::finish`].
    pub fn finish(self) -> Result<SnapshotInfo> {
        let info = self.install.finish()?;
        let group = Arc::clone(&self.replica.group);
        let rebuilt = control::rebuild(&group)?;
        *self.replica.control.lock() = rebuilt;
        Ok(info)
    }
}
