//! A group's writes: appends at the library's offsets (checked once:
//! contiguous, epochs never back, offsets never wrap), truncation never
//! below the commit point, purges whose epoch is the log's, the high
//! watermark (never back, never past the end), and durability waits and
//! completions.

mod durable;

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_log::AppendInfo;
use quorumlog_snapshot::SnapshotId;

use super::Group;
use crate::error::{Error, Result};
use crate::node::index::GroupState;
use crate::node::record::{Header, Kind};
use crate::types::OnDurable;

/// The entries of one [`Group::append`]: a slice (or array, or `Vec`)
/// of records, or [`Encode`]: records a caller encodes straight into the
/// batch (one copy of each entry's bytes to the device).
pub trait Records {
    /// How many records.
    fn count(&self) -> usize;
    /// About how many bytes they take (sizes the batch's buffer).
    fn len_hint(&self) -> u64;
    /// Appends record `i`'s bytes to `out`.
    ///
    /// # Errors
    /// The caller's encoding failure.
    fn write(&mut self, i: usize, out: &mut Vec<u8>) -> std::io::Result<()>;
}

impl<R: AsRef<[u8]>> Records for &[R] {
    fn count(&self) -> usize {
        self.len()
    }
    fn len_hint(&self) -> u64 {
        self.iter().map(|r| r.as_ref().len() as u64 + 4).sum()
    }
    fn write(&mut self, i: usize, out: &mut Vec<u8>) -> std::io::Result<()> {
        if let Some(r) = self.get(i) {
            out.extend_from_slice(r.as_ref());
        }
        Ok(())
    }
}

impl<R: AsRef<[u8]>, const N: usize> Records for &[R; N] {
    fn count(&self) -> usize {
        N
    }
    fn len_hint(&self) -> u64 {
        (&self[..]).len_hint()
    }
    fn write(&mut self, i: usize, out: &mut Vec<u8>) -> std::io::Result<()> {
        (&self[..]).write(i, out)
    }
}

impl<R: AsRef<[u8]>> Records for &Vec<R> {
    fn count(&self) -> usize {
        self.len()
    }
    fn len_hint(&self) -> u64 {
        (&self[..]).len_hint()
    }
    fn write(&mut self, i: usize, out: &mut Vec<u8>) -> std::io::Result<()> {
        (&self[..]).write(i, out)
    }
}

/// `count` records that `write` encodes straight into the batch (record
/// `i` appended to the buffer it is given); `len_hint` sizes the buffer.
#[derive(Debug)]
pub struct Encode<F> {
    /// How many records.
    pub count: usize,
    /// About how many bytes they take.
    pub len_hint: u64,
    /// Appends record `i` to the buffer.
    pub write: F,
}

impl<F: FnMut(usize, &mut Vec<u8>) -> std::io::Result<()>> Records for Encode<F> {
    fn count(&self) -> usize {
        self.count
    }
    fn len_hint(&self) -> u64 {
        self.len_hint
    }
    fn write(&mut self, i: usize, out: &mut Vec<u8>) -> std::io::Result<()> {
        (self.write)(i, out)
    }
}

/// How far a [`Group::purge`] deletes the log's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purge {
    /// Every entry below `offset`, the entry at `offset - 1` being in
    /// `epoch` (a Raft library's compaction); past the end the log
    /// restarts, empty, at `offset`.
    To {
        /// The new log start.
        offset: Offset,
        /// The epoch of the entry before it.
        epoch: Epoch,
    },
    /// Every entry below `up_to` that the latest snapshot covers (a
    /// cleaning bounded by the snapshots: entries no snapshot covers
    /// stay; nothing without a snapshot).
    Covered {
        /// The most it deletes below.
        up_to: Offset,
    },
}

impl Purge {
    /// Whether `group` would refuse this purge now, with the error
    /// [`Group::purge`] would return, changing nothing: for a caller that
    /// records the purge elsewhere first (a Raft library's own metadata)
    /// and must not when the group refuses. The checks are the purge's own.
    ///
    /// # Errors
    /// As [`Group::purge`]'s refusals: `MissingSnapshot`,
    /// `PurgeEpochMismatch`; `Poisoned`.
    pub fn check(self, group: &Group) -> Result<()> {
        group.inner.check_poisoned()?;
        let Some((offset, epoch)) = group.purge_target(self)? else {
            return Ok(());
        };
        group.with(|g| check_purge_epoch(g, offset, epoch))?
    }
}

impl Group {
    /// Appends `records` in `epoch` at `base_offset` (the group's end),
    /// queued for the shared log's next sync round, which writes and syncs
    /// every group's queue in one step: counted by
    /// [`Extent::queued_end`](super::Extent) at once, readable once the
    /// round has written it, durable with it ([`Group::wait_durable`],
    /// [`Group::on_durable`]). An empty log without snapshots first
    /// restarts at `base_offset` if it is beyond its end.
    ///
    /// # Errors
    /// `Log(EmptyBatch)`; `Log(NonContiguous)` unless `base_offset` is the
    /// end (or an empty log's restart point); `Log(EpochRegression)`;
    /// `Log(OffsetOverflow)` where the offsets would wrap;
    /// `Log(BatchTooLarge)`; `Log(RecordEncoding)` for the caller's
    /// encoding failure; `Poisoned`. Nothing is queued on an error.
    pub fn append(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        records: impl Records,
    ) -> Result<AppendInfo> {
        self.append_flagged(base_offset, epoch, records, false)
    }

    /// Writes every queued append of the node now (buffered, no sync), so
    /// it is readable: the `KRaft` wing's appends, which a leader serves to
    /// fetching followers before its own sync.
    ///
    /// # Errors
    /// I/O (which poisons); `Poisoned`.
    pub(crate) fn write_queued(&self) -> Result<()> {
        self.inner
            .note(self.inner.log.write_queued_now().map_err(Error::from))
    }

    /// Appends `entries` (offset, epoch, control flag, bytes; contiguous,
    /// from the group's end) as batches: one per run of one epoch and
    /// kind, within the batch limit (an entry larger than it alone, and
    /// refused). Returns the group's end after them. The `KRaft` wing's
    /// follower appends and the import of the previous layout copy
    /// entries through it.
    ///
    /// # Errors
    /// As [`Group::append`]; the batches before a refused one stay queued.
    pub(crate) fn append_runs(&self, entries: &[(Offset, Epoch, bool, &[u8])]) -> Result<Offset> {
        let max = self.max_batch_bytes();
        let mut end = self.extent().queued_end;
        let mut rest = entries;
        while let Some(&(offset, epoch, control, _)) = rest.first() {
            // Each record's bytes and its framing (a length and a CRC).
            let mut bytes = 0u64;
            let n = rest
                .iter()
                .take_while(|e| {
                    bytes += e.3.len() as u64 + 16;
                    (e.1, e.2) == (epoch, control) && bytes <= max
                })
                .count()
                .max(1);
            let (run, tail) = rest.split_at(n.min(rest.len()));
            let records: Vec<&[u8]> = run.iter().map(|e| e.3).collect();
            end = self
                .append_flagged(offset, epoch, &records, control)?
                .next_offset;
            rest = tail;
        }
        Ok(end)
    }

    /// [`Group::append`] of user records (`control` false) or of control
    /// records (the `KRaft` wing's), which reads return flagged.
    pub(crate) fn append_flagged(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        mut records: impl Records,
        control: bool,
    ) -> Result<AppendInfo> {
        self.inner.check_poisoned()?;
        let count = records.count();
        if count == 0 {
            return Err(Error::Log(quorumlog_log::Error::EmptyBatch));
        }
        let h = Header {
            control,
            ..self.header(Kind::Entries, base_offset.0, epoch.0)
        };
        let head = h.encode();
        let batch = self.inner.log.encode_with(
            crate::node::NODE_EPOCH,
            count + 1,
            records.len_hint() + crate::node::NODE_BATCH_OVERHEAD as u64,
            |i, buf| {
                if let Some(j) = i.checked_sub(1) {
                    records.write(j, buf)
                } else {
                    buf.extend_from_slice(&head);
                    Ok(())
                }
            },
        )?;
        self.place_entries(&h, batch, count)
    }

    fn place_entries(
        &self,
        h: &Header,
        batch: quorumlog_log::EncodedBatch,
        count: usize,
    ) -> Result<AppendInfo> {
        let count = u32::try_from(count).map_err(|_| {
            Error::Log(quorumlog_log::Error::BatchTooLarge {
                bytes: batch.len() as u64,
                max: self.inner.log.options().max_batch_bytes,
            })
        })?;
        let mut st = self.inner.state();
        let g = st
            .groups
            .get(&self.id)
            .ok_or(Error::UnknownGroup { group: self.id })?;
        // The snapshots matter to an empty log only (its restart point and
        // the epoch before it).
        let latest = if g.start == g.end {
            self.snapshots.latest().map(|s| s.id)
        } else {
            None
        };
        let next = Self::check_entries(g, h, count, latest)?;
        self.inner.place(&mut st, h, batch, None, count, false)?;
        Ok(AppendInfo {
            base_offset: Offset(h.offset),
            next_offset: next,
        })
    }

    /// Refuses `count` entries `h` unless they continue group state `g`
    /// (at its end, or an empty log's restart point without snapshots; in
    /// an epoch no older than the entry before; their offsets within
    /// `u64`: offsets never wrap). Returns the group's end after them.
    pub(in crate::node) fn check_entries(
        g: &GroupState,
        h: &Header,
        count: u32,
        latest: Option<SnapshotId>,
    ) -> Result<Offset> {
        // A restart past an empty log's end is for a library whose log
        // begins above 0; with a snapshot it would leave a gap no snapshot
        // covers.
        let restart = g.start == g.end && h.offset > g.end && latest.is_none();
        if h.offset != g.end && !restart {
            return Err(Error::Log(quorumlog_log::Error::NonContiguous {
                expected: Offset(g.end),
                found: Offset(h.offset),
            }));
        }
        // The entry before an empty log's first is its snapshot's last.
        let before = g.last_epoch().max(
            latest
                .filter(|l| g.start == g.end && l.end_offset.0 == g.start)
                .map(|l| l.epoch.0),
        );
        if let Some(last) = before.filter(|&e| e > h.epoch && !restart) {
            return Err(Error::Log(quorumlog_log::Error::EpochRegression {
                current: Epoch(last),
                proposed: Epoch(h.epoch),
            }));
        }
        h.offset
            .checked_add(u64::from(count))
            .map(Offset)
            .ok_or(Error::Log(quorumlog_log::Error::OffsetOverflow {
                base: Offset(h.offset),
                records: u64::from(count),
            }))
    }

    /// Deletes the log's prefix as `purge` says, durably; returns the
    /// log start after it. Other groups' entries are untouched (their
    /// bytes are never rewritten by it). A purge at or below the start
    /// changes nothing.
    ///
    /// # Errors
    /// `MissingSnapshot` past the latest snapshot's end when the group has
    /// snapshots; `PurgeEpochMismatch` where the log holds the entry
    /// before `offset` in another epoch (nothing changes either way);
    /// `Poisoned`; I/O.
    pub fn purge(&self, purge: Purge) -> Result<Offset> {
        let id = self.id;
        let Some((offset, epoch)) = self.purge_target(purge)? else {
            return self.with(|g| Offset(g.start));
        };
        let h = self.header(Kind::Purge, offset.0, epoch.0);
        self.inner.control(h, None, |st| {
            let g = st
                .groups
                .get(&id)
                .ok_or(Error::UnknownGroup { group: id })?;
            check_purge_epoch(g, offset, epoch)
        })?;
        self.with(|g| Offset(g.start))
    }

    /// Where `purge` would cut and the epoch it records, after the bound
    /// of the latest snapshot; `None` when it would change nothing.
    fn purge_target(&self, purge: Purge) -> Result<Option<(Offset, Epoch)>> {
        let latest = self.latest();
        let (offset, epoch) = match purge {
            Purge::To { offset, epoch } => (offset, Some(epoch)),
            Purge::Covered { up_to } => {
                let to = latest.map_or(Offset(0), |l| up_to.min(l.end_offset));
                (to, None)
            }
        };
        let start = self.with(|g| g.start)?;
        if offset.0 <= start {
            return Ok(None);
        }
        // A cleaning takes the epoch from the log; a caller's must be it.
        let epoch = match epoch {
            Some(e) => e,
            None => match self.epoch_at(Offset(offset.0 - 1)) {
                Some(e) => e,
                None => return Ok(None),
            },
        };
        check_purge_bound(offset, latest)?;
        Ok(Some((offset, epoch)))
    }

    /// Suffix truncation: the group's log ends at `offset`, durably (a
    /// crash never brings the removed entries back, and a read never
    /// returns them). Refused below the high watermark and the latest
    /// snapshot's end. At or past the end (queued appends included) it is
    /// accepted and changes nothing: there is nothing to remove.
    ///
    /// # Errors
    /// `BelowHighWatermark`; `Poisoned`; I/O.
    pub fn truncate_to(&self, offset: Offset) -> Result<()> {
        let snapshot = self.latest().map_or(0, |s| s.end_offset.0);
        let id = self.id;
        let h = self.header(Kind::Truncate, offset.0, 0);
        let end = self.with(|g| g.end)?;
        if offset.0 >= end {
            let floor = self.with(|g| g.hw.unwrap_or(0))?.max(snapshot);
            if offset.0 < floor {
                return Err(Error::BelowHighWatermark {
                    offset,
                    high_watermark: Offset(floor),
                });
            }
            return Ok(());
        }
        self.inner.control(h, None, |st| {
            let g = st
                .groups
                .get(&id)
                .ok_or(Error::UnknownGroup { group: id })?;
            let floor = g.hw.unwrap_or(0).max(snapshot);
            if offset.0 < floor {
                return Err(Error::BelowHighWatermark {
                    offset,
                    high_watermark: Offset(floor),
                });
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Sets the high watermark. It never moves back; below the log start
    /// it is raised to it. With the node's default
    /// ([`WatermarkDurability::NextRound`](crate::WatermarkDurability)) it
    /// is queued as one small record for the shared log's next round,
    /// durable with it (a [`Group::wait_durable`] at the end forces that
    /// round); [`Extent::durable_high_watermark`](super::Extent) reports
    /// it once it is. It is never ahead of the disk.
    ///
    /// # Errors
    /// `HighWatermarkBackwards` naming both; `Log(HighWatermarkBeyondEnd)`
    /// past the group's end; `Poisoned`.
    pub fn set_high_watermark(&self, offset: Offset) -> Result<()> {
        self.inner.check_poisoned()?;
        // Read before the node's lock: the log's lock is never taken under
        // it. One lock for the check, the move and the record's queueing:
        // raft-rs sets it on most Readies of every region.
        let flushed = self.inner.log.flushed_offset().0;
        let mut st = self.inner.state();
        let (g, queued) = self.flushed_in(&mut st, flushed)?;
        if let Some(h) = g.hw.filter(|&h| offset.0 < h) {
            return Err(Error::HighWatermarkBackwards {
                offset,
                high_watermark: Offset(h),
            });
        }
        if offset.0 > g.end {
            return Err(Error::Log(quorumlog_log::Error::HighWatermarkBeyondEnd {
                offset,
                end: Offset(g.end),
            }));
        }
        let to = offset.0.max(g.start);
        g.hw = Some(to);
        let keep = g.durable_hw;
        if self.inner.options.watermark != crate::WatermarkDurability::NextRound {
            return Ok(());
        }
        // Queued (in the log's order: a replay clamps it to the entries
        // before it) for the shared log's next round, unless one as high
        // is durable or queued already; the durable watermark reported
        // rises when that round is durable.
        if keep.max(queued.map(|(v, _)| v)).is_some_and(|d| d >= to) {
            return Ok(());
        }
        let h = self.header(Kind::HighWatermark, to, 0);
        let batch = self.inner.encode::<&[u8]>(&h, &[])?;
        // Without waking the flusher: the record rides the next round
        // anyone starts (a wait at the group's end leads one; a completion
        // waiting for it starts one).
        let shared_end = self.inner.place(&mut st, &h, batch, None, 0, true)?;
        st.queued_hw.insert(self.id, (to, shared_end));
        if let Some(g) = st.groups.get_mut(&self.id) {
            // The entry below is replaced: a queued watermark whose round
            // is durable became the durable one above, and stays it.
            g.durable_hw = keep;
            // A wait or completion at the group's end waits for it too.
            g.pending.push_back((g.end, shared_end));
        }
        Ok(())
    }

    pub(super) fn raise_high_watermark(&self, offset: Offset) -> Result<()> {
        self.with(|g| {
            let to = offset.0.min(g.end).max(g.start);
            if g.hw.is_none_or(|h| h < to) {
                g.hw = Some(to);
            }
        })
    }
}

/// Refuses a purge to `offset` past `latest`, the latest snapshot: with
/// snapshots present, entries no snapshot covers are never deleted
/// (invariant 7), as such a log could not be opened again. The one check
/// of that rule, for a group, a write batch and a store.
pub(crate) fn check_purge_bound(offset: Offset, latest: Option<SnapshotId>) -> Result<()> {
    if latest.is_some_and(|l| offset > l.end_offset) {
        return Err(Error::MissingSnapshot {
            log_start: offset,
            latest,
        });
    }
    Ok(())
}

/// Refuses a purge to `offset` in `epoch` when the entry before `offset`
/// is in `g`'s log in another epoch: the purge point's epoch is the log's
/// (the caller's names another entry, and would be recorded as the last
/// purged id).
pub(crate) fn check_purge_epoch(g: &GroupState, offset: Offset, epoch: Epoch) -> Result<()> {
    let before = offset
        .0
        .checked_sub(1)
        .filter(|&b| b >= g.start && b < g.end);
    match before.and_then(|b| g.epoch_at(b)) {
        Some(log) if log != epoch.0 => Err(Error::PurgeEpochMismatch {
            offset,
            log: Epoch(log),
            given: epoch,
        }),
        _ => Ok(()),
    }
}
