//! A group's writes: appends at the library's offsets (checked once:
//! contiguous, epochs never back, offsets never wrap), truncation never
//! below the commit point, purges whose epoch is the log's, the high
//! watermark (never back, never past the end), and durability waits and
//! completions.

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_log::AppendInfo;
use quorumlog_snapshot::SnapshotId;

use super::Group;
use crate::error::{Error, Result};
use crate::node::index::GroupState;
use crate::node::record::{Header, Kind};
use crate::store::OnDurable;

impl Group {
    /// Appends `records` in `epoch` at `base_offset` (the group's end),
    /// readable on return, durable after the next round
    /// ([`Group::on_durable`]). An empty log without snapshots first
    /// restarts at `base_offset` if it is beyond its end.
    ///
    /// # Errors
    /// `Log(NonContiguous)` unless `base_offset` is the end (or an empty
    /// log's restart point); `Log(EpochRegression)`; `Poisoned`; I/O.
    pub fn append_replicated<R: AsRef<[u8]>>(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        let info = self.append_replicated_queued(base_offset, epoch, records)?;
        let r = self.inner.log.write_queued_now().map_err(Error::from);
        self.inner.note(r)?;
        Ok(info)
    }

    /// [`Group::append_replicated`] without the write: queued for the next
    /// sync round, which writes and syncs every group's queue in one step.
    /// Not readable until then; [`Group::queued_end`] counts it.
    ///
    /// # Errors
    /// As [`Group::append_replicated`].
    pub fn append_replicated_queued<R: AsRef<[u8]>>(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        self.inner.check_poisoned()?;
        if records.is_empty() {
            return Err(Error::Log(quorumlog_log::Error::EmptyBatch));
        }
        let h = self.header(Kind::Entries, base_offset.0, epoch.0);
        let batch = self.inner.encode(&h, records)?;
        Ok(self.place_entries(&h, batch, records.len(), false)?.0)
    }

    /// Appends `records` in `epoch` at `base_offset` and returns once they
    /// are durable: the calling thread leads the sync round if none is in
    /// flight, sharing it with every group's queued appends (nothing else
    /// is woken).
    ///
    /// # Errors
    /// As [`Group::append_replicated`].
    pub fn append_durable<R: AsRef<[u8]>>(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        self.inner.check_poisoned()?;
        if records.is_empty() {
            return Err(Error::Log(quorumlog_log::Error::EmptyBatch));
        }
        let h = self.header(Kind::Entries, base_offset.0, epoch.0);
        let batch = self.inner.encode(&h, records)?;
        let (info, shared_end) = self.place_entries(&h, batch, records.len(), true)?;
        // Durable below the batch's shared end: this group's earlier
        // appends precede it in the shared log.
        self.inner.make_durable(shared_end)?;
        Ok(info)
    }

    /// [`Group::append_replicated_queued`] of `count` records that `write`
    /// encodes straight into the batch (record `i` appended to the buffer
    /// it is given). `len_hint` sizes the buffer.
    ///
    /// # Errors
    /// As [`Group::append_replicated_queued`]; `Log(RecordEncoding)`.
    pub fn append_replicated_queued_with(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        count: usize,
        len_hint: u64,
        mut write: impl FnMut(usize, &mut Vec<u8>) -> std::io::Result<()>,
    ) -> Result<AppendInfo> {
        self.inner.check_poisoned()?;
        if count == 0 {
            return Err(Error::Log(quorumlog_log::Error::EmptyBatch));
        }
        let h = self.header(Kind::Entries, base_offset.0, epoch.0);
        let head = h.encode();
        let batch = self.inner.log.encode_with(
            crate::node::NODE_EPOCH,
            count + 1,
            len_hint + crate::node::NODE_BATCH_OVERHEAD as u64,
            |i, buf| {
                if let Some(j) = i.checked_sub(1) {
                    write(j, buf)
                } else {
                    buf.extend_from_slice(&head);
                    Ok(())
                }
            },
        )?;
        Ok(self.place_entries(&h, batch, count, false)?.0)
    }

    fn place_entries(
        &self,
        h: &Header,
        batch: quorumlog_log::EncodedBatch,
        count: usize,
        waits: bool,
    ) -> Result<(AppendInfo, u64)> {
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
            self.latest_snapshot()
        } else {
            None
        };
        let next = Self::check_entries(g, h, count, latest)?;
        let shared_end = self.inner.place(&mut st, h, batch, None, count, waits)?;
        let info = AppendInfo {
            base_offset: Offset(h.offset),
            next_offset: next,
        };
        Ok((info, shared_end))
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

    /// Where the next append goes, appends queued for the next round
    /// included.
    pub fn queued_end(&self) -> Offset {
        Offset(self.with(|g| g.end).unwrap_or(0))
    }

    /// Deletes every entry below `offset`, the entry at `offset - 1` being
    /// in `epoch`; past the end the log restarts, empty, at `offset`.
    /// Durable on return. Other groups' entries are untouched (their
    /// bytes are never rewritten by it).
    ///
    /// # Errors
    /// `MissingSnapshot` past the latest snapshot's end when the group has
    /// snapshots (nothing changes); `Poisoned`; I/O.
    pub fn purge_to(&self, offset: Offset, epoch: Epoch) -> Result<()> {
        if offset.0 <= self.with(|g| g.start)? {
            return Ok(());
        }
        check_purge_bound(offset, self.latest_snapshot())?;
        let h = self.header(Kind::Purge, offset.0, epoch.0);
        let id = self.id;
        self.inner.control(h, None, |st| {
            let g = st
                .groups
                .get(&id)
                .ok_or(Error::UnknownGroup { group: id })?;
            check_purge_epoch(g, offset, epoch)
        })?;
        Ok(())
    }

    /// Suffix truncation: the group's log ends at `offset`, durably (a
    /// crash never brings the removed entries back, and a read never
    /// returns them). Refused below the high watermark and the latest
    /// snapshot's end.
    ///
    /// # Errors
    /// `BelowHighWatermark`; `Poisoned`; I/O.
    pub fn truncate_to(&self, offset: Offset) -> Result<()> {
        let snapshot = self.latest_snapshot().map_or(0, |s| s.end_offset.0);
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
    /// it is raised to it.
    ///
    /// # Errors
    /// `HighWatermarkBackwards` naming both; `Log(HighWatermarkBeyondEnd)`
    /// past the group's end.
    pub fn set_high_watermark(&self, offset: Offset) -> Result<()> {
        self.inner.check_poisoned()?;
        self.with(|g| {
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
            g.hw = Some(offset.0.max(g.start));
            Ok(())
        })?
    }

    pub(super) fn raise_high_watermark(&self, offset: Offset) -> Result<()> {
        self.with(|g| {
            let to = offset.0.min(g.end).max(g.start);
            if g.hw.is_none_or(|h| h < to) {
                g.hw = Some(to);
            }
        })
    }

    /// Makes the high watermark durable as far as the group's log is (one
    /// record, sharing a round; nothing when the durable one is as high).
    /// Returns the durable value.
    ///
    /// # Errors
    /// `Poisoned`; I/O.
    pub fn persist_high_watermark(&self) -> Result<Option<Offset>> {
        let flushed = self.flushed_offset().0;
        let (to, durable) = self.with(|g| (g.hw.map(|h| h.min(flushed)), g.durable_hw))?;
        let Some(to) = to else {
            return Ok(None);
        };
        if durable.is_some_and(|d| d >= to) {
            return Ok(durable.map(Offset));
        }
        let h = self.header(Kind::HighWatermark, to, 0);
        self.inner.control(h, None, |_| Ok(()))?;
        Ok(self.durable_high_watermark())
    }

    /// Queues the high watermark (as far as the group's log reaches, in
    /// the log's order: a replay clamps it to the entries before it) for
    /// the shared log's next round, without waiting: durable with that
    /// round, which a Ready loop's appends share. The durable watermark
    /// reported stays the one last made durable by
    /// [`Group::persist_high_watermark`] or a reopen (never ahead of the
    /// disk).
    ///
    /// # Errors
    /// `Poisoned`; the log's refusal.
    pub fn queue_high_watermark(&self) -> Result<()> {
        self.inner.check_poisoned()?;
        let (to, durable) = self.with(|g| (g.hw, g.durable_hw))?;
        let Some(to) = to.filter(|&t| durable.is_none_or(|d| d < t)) else {
            return Ok(());
        };
        let h = self.header(Kind::HighWatermark, to, 0);
        let batch = self.inner.encode::<&[u8]>(&h, &[])?;
        let mut st = self.inner.state();
        let keep = st.groups.get(&self.id).and_then(|g| g.durable_hw);
        let shared_end = self.inner.place(&mut st, &h, batch, None, 0, false)?;
        if let Some(g) = st.groups.get_mut(&self.id) {
            g.durable_hw = keep;
            // A completion at the group's end waits for it too.
            g.pending.push_back((g.end, shared_end));
        }
        Ok(())
    }

    /// Blocks until every entry below `offset` (clamped to the group's
    /// end) is durable; returns that offset.
    ///
    /// # Errors
    /// `Poisoned` if a sync failed.
    pub fn wait_durable(&self, offset: Offset) -> Result<Offset> {
        self.inner.check_poisoned()?;
        // The appends the log made durable leave the pending queue here
        // (read before the node's lock: the log's lock is never taken
        // under it), so the queue stays as long as one round.
        let flushed = self.inner.log.flushed_offset().0;
        let (point, o) = self.with(|g| {
            g.flushed(flushed);
            let o = offset.0.min(g.end);
            (g.durable_point(o), o)
        })?;
        if let Some(p) = point {
            self.inner.make_durable(p)?;
        }
        Ok(Offset(o))
    }

    /// The completion form of [`Group::wait_durable`]: `completion` is
    /// called once every entry below `offset` is durable (at or past the
    /// group's end: and every record it queued, a high watermark from
    /// [`Group::queue_high_watermark`] included), on the thread
    /// that finished the sync (keep it short), or at once if they are.
    /// Completions of one group fire in its submission order.
    pub fn on_durable(&self, offset: Offset, completion: OnDurable) {
        if let Some(failure) = self.poisoned() {
            completion(Err(Error::Poisoned(failure)));
            return;
        }
        let flushed = self.inner.log.flushed_offset().0;
        let r = self.with(|g| {
            g.flushed(flushed);
            let o = offset.0.min(g.end);
            // At the end: after everything the group queued, a queued
            // high watermark included.
            let point = if offset.0 >= g.end {
                g.pending.back().map(|&(_, s)| s)
            } else {
                g.durable_point(o)
            };
            (point, o)
        });
        match r {
            Err(e) => completion(Err(e)),
            // Through the log even when durable already: it runs after
            // every completion registered before it.
            Ok((p, o)) => self.inner.log.on_durable(
                Offset(p.unwrap_or(0)),
                Box::new(move |r| completion(r.map(|_| Offset(o)).map_err(Error::from))),
            ),
        }
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
