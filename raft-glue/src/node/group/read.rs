//! A group's reads: exactly a range of its entries, each run read
//! straight from its batch (never another group's bytes), within the
//! isolation asked for; its offsets, watermarks and epochs.

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_log::{walk_records, WalkBatches};
use quorumlog_snapshot::SnapshotId;

use super::Group;
use crate::error::{Error, Result};
use crate::node::index::{GroupState, Run};
use crate::types::{Entry, Isolation};

/// How many runs one read takes from the index at a time.
const READ_RUNS: usize = 1024;

impl Group {
    /// Where the group's log stands, read at once under the node's lock:
    /// its start, readable and queued ends, durable end, watermarks, the
    /// last purged entry and the latest snapshot. A durable end the log
    /// has reached is taken in (its pending appends leave the queue).
    pub fn extent(&self) -> Extent {
        let flushed = self.inner.log.flushed_offset().0;
        let written = self.inner.log.log_end_offset().0;
        let latest = self.latest();
        self.with_flushed(flushed, |g, _| {
            let durable = g.flushed(flushed);
            Extent {
                start: Offset(g.start),
                end: Offset(readable_end(g, written)),
                queued_end: Offset(g.end),
                flushed: Offset(durable),
                high_watermark: g.hw.map(Offset),
                durable_high_watermark: g.durable_hw.map(Offset),
                last_purged: last_purged(g, latest),
                latest_snapshot: latest,
            }
        })
        .unwrap_or_default()
    }

    /// The entries in `[from, to)` within `isolation`, contiguous from
    /// `from`, each with its epoch: the first entry whenever one is in
    /// range, whatever its size, then each following entry while the
    /// total of entry bytes stays within `max_bytes`. The read stops at the
    /// first entry that does not fit: it never skips one to take a later,
    /// smaller one. A committed read that starts at or above the commit
    /// point is empty. Each run of the group's index is read straight from
    /// its batch: no other group's records are read.
    ///
    /// # Errors
    /// `OffsetOutOfRange` when `from` is below the start or past the
    /// readable end; `GroupData` naming the group and offset when the log
    /// finds corruption (never data).
    ///
    /// # Panics
    /// If the entries it would return are not contiguous from `from` or
    /// pass `to` (a bug: a Raft library would take a hole for a log).
    pub fn read_entries(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
        isolation: Isolation,
    ) -> Result<Vec<Entry>> {
        self.inner.check_poisoned()?;
        let mut out: Vec<Entry> = Vec::new();
        let mut left = max_bytes;
        // The index is taken [`READ_RUNS`] runs at a time: read on from
        // where the last part ended until the range or the budget is done.
        loop {
            let next = out.last().map_or(from, |e| Offset(e.offset.0 + 1));
            if !out.is_empty() && next >= to {
                break;
            }
            let (part, full) = self.read_part(next, to, left, isolation, out.is_empty())?;
            let taken: u64 = part.iter().map(|e| e.bytes.len() as u64).sum();
            left = left.saturating_sub(taken);
            let done = full || part.is_empty();
            out.extend(part);
            if done {
                break;
            }
        }
        assert_contiguous(&out, from, to);
        Ok(out)
    }

    /// One part of a read: at most [`READ_RUNS`] runs, and whether the
    /// budget stopped it. A rewrite may move runs and free their old
    /// segment between taking the runs and reading them: then it reads
    /// again with the new ones. `first`: the part returns its first entry
    /// whatever its size.
    fn read_part(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
        isolation: Isolation,
        first: bool,
    ) -> Result<(Vec<Entry>, bool)> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.try_read(from, to, max_bytes, isolation, first) {
                Err(Error::Log(quorumlog_log::Error::OffsetOutOfRange { .. })) if attempts < 8 => {}
                r => return r,
            }
        }
    }

    /// One attempt at a part: the entries of the planned runs, in order,
    /// until the first that does not fit (`true` then).
    fn try_read(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
        isolation: Isolation,
        first: bool,
    ) -> Result<(Vec<Entry>, bool)> {
        let written = self.inner.log.log_end_offset().0;
        let snapshot = self.snapshots.latest().map(|s| s.id);
        let runs = self
            .with(|g| read_plan(g, written, from, to, max_bytes, isolation))?
            .map_err(|(start, end)| Error::OffsetOutOfRange {
                offset: from,
                start: Offset(start),
                end: Offset(end),
                snapshot,
            })?;
        let mut entries: Vec<Entry> = Vec::new();
        let mut left = max_bytes;
        for r in runs {
            // The walk takes a run's first record whatever its size: the
            // loop below decides whether it fits.
            let walked = walk_records(
                &self.inner.log,
                Offset(r.shared),
                Offset(r.shared_end()),
                left.max(1),
                WalkBatches::All,
            )
            .map_err(|e| self.data_error(e, r.offset))?;
            for rec in walked.records {
                let len = rec.bytes.len() as u64;
                let free = first && entries.is_empty();
                if !free && len > left {
                    return Ok((entries, true));
                }
                left = left.saturating_sub(len);
                entries.push(Entry {
                    offset: Offset(r.offset + (rec.offset.0 - r.shared)),
                    epoch: Epoch(r.epoch),
                    control: r.control(),
                    bytes: rec.bytes,
                });
            }
            if walked.next.0 < r.shared_end() {
                // The walk stopped inside the run, before a record that
                // does not fit: the read ends there.
                return Ok((entries, true));
            }
        }
        Ok((entries, false))
    }

    /// A log error of a read at group offset `offset`, as the group's.
    fn data_error(&self, e: quorumlog_log::Error, offset: u64) -> Error {
        match e {
            quorumlog_log::Error::OffsetOutOfRange { .. } => Error::Log(e),
            e if e.is_io() => self
                .inner
                .note::<()>(Err(Error::Log(e)))
                .err()
                .unwrap_or(Error::NoSnapshot),
            source => Error::GroupData {
                group: self.id,
                offset: Offset(offset),
                source,
            },
        }
    }

    /// For Raft's log matching (the `KRaft` wing's fetch validation): the
    /// largest epoch `<= epoch` in the log and the offset where it ends.
    pub(crate) fn end_offset_for_epoch(&self, epoch: Epoch) -> Option<(Epoch, Offset)> {
        self.with(|g| g.end_for_epoch(epoch.0))
            .ok()
            .flatten()
            .map(|(e, o)| (Epoch(e), Offset(o)))
    }

    /// The epoch of the log's last entry; of an empty log, the entry's
    /// before it (purged, or the last of the snapshot it starts at).
    pub(crate) fn last_epoch(&self) -> Option<Epoch> {
        let latest = self.latest();
        self.with(|g| {
            g.last_epoch().or_else(|| {
                latest
                    .filter(|l| g.start == g.end && l.end_offset.0 == g.start)
                    .map(|l| l.epoch.0)
            })
        })
        .ok()
        .flatten()
        .map(Epoch)
    }

    /// Every control entry of the log at or past `from` (read from the
    /// control runs alone: user entries are not read).
    ///
    /// # Errors
    /// As [`Group::read_entries`].
    pub(crate) fn control_entries(&self, from: Offset) -> Result<Vec<Entry>> {
        let runs: Vec<(u64, u64)> = self.with(|g| {
            g.runs
                .iter()
                .filter(|r| r.control() && r.end() > from.0.max(g.start))
                .map(|r| (r.offset.max(from.0).max(g.start), r.end()))
                .collect()
        })?;
        let mut out = Vec::new();
        for (a, b) in runs {
            let part = self.read_entries(Offset(a), Offset(b), u64::MAX, Isolation::Uncommitted)?;
            out.extend(part.into_iter().filter(|e| e.control));
        }
        Ok(out)
    }

    /// Each batch of the log: its first offset and size, oldest first
    /// (what retention by bytes measures).
    pub(crate) fn batch_sizes(&self) -> Vec<(Offset, u64)> {
        self.with(|g| {
            g.runs
                .iter()
                .filter(|r| r.end() > g.start)
                .map(|r| (Offset(r.offset.max(g.start)), r.size()))
                .collect()
        })
        .unwrap_or_default()
    }

    /// The epoch of the entry at `offset`, if the group's log holds it.
    pub fn epoch_at(&self, offset: Offset) -> Option<Epoch> {
        self.with(|g| g.epoch_at(offset.0))
            .ok()
            .flatten()
            .map(Epoch)
    }
}

/// Where a group's log stands ([`Group::extent`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Extent {
    /// The first offset in the log.
    pub start: Offset,
    /// The end of what is readable (written; appends queued for the next
    /// round are not).
    pub end: Offset,
    /// Where the next append goes: appends queued for the next round
    /// included.
    pub queued_end: Offset,
    /// Below it every entry is durable.
    pub flushed: Offset,
    /// The high watermark (commit offset), if one was ever set.
    pub high_watermark: Option<Offset>,
    /// The high watermark as a crash now would recover it.
    pub durable_high_watermark: Option<Offset>,
    /// The last entry deleted below the start (offset and epoch): `None`
    /// when nothing was; the snapshot ending at the start answers when no
    /// purge is recorded there.
    pub last_purged: Option<(Offset, Epoch)>,
    /// The latest snapshot.
    pub latest_snapshot: Option<SnapshotId>,
}

/// The last purged entry of `g` (see [`Extent::last_purged`]).
fn last_purged(g: &GroupState, latest: Option<SnapshotId>) -> Option<(Offset, Epoch)> {
    let below = Offset(g.start.checked_sub(1)?);
    g.last_purged
        .filter(|(o, _)| o.0 == g.start)
        .map(|(_, e)| (below, e))
        .or_else(|| {
            latest
                .filter(|s| s.end_offset.0 == g.start)
                .map(|s| (below, s.epoch))
        })
}

/// The runs a read of `[from, to)` walks, clipped to the range, the
/// readable end and `isolation`, about `max_bytes` of them; or the log's
/// extent if `from` is outside it.
fn read_plan(
    g: &GroupState,
    written: u64,
    from: Offset,
    to: Offset,
    max_bytes: u64,
    isolation: Isolation,
) -> std::result::Result<Vec<Run>, (u64, u64)> {
    let end = readable_end(g, written);
    if from.0 < g.start || from.0 > end {
        return Err((g.start, end));
    }
    let mut limit = to.0.min(end);
    if isolation == Isolation::Committed {
        limit = limit.min(g.hw.unwrap_or(g.start));
    }
    let mut out = Vec::new();
    if from.0 >= limit {
        // Nothing in range: `to` at or below `from`, or a committed read
        // at or above the commit point.
        return Ok(out);
    }
    let mut budget = 0u64;
    let Some(first) = g.run_index(from.0) else {
        return Ok(out);
    };
    for r in g.runs.iter().skip(first) {
        if r.offset >= limit || out.len() >= READ_RUNS {
            break;
        }
        let (a, b) = (r.offset.max(from.0), r.end().min(limit));
        let mut clipped = *r;
        clipped.shared = r.shared_at(a);
        clipped.offset = a;
        assert!(a < b, "a planned run holds entries");
        // A clipped run holds no more than the run: its count fits.
        clipped.count = u32::try_from(b - a).unwrap_or(r.count);
        out.push(clipped);
        budget += r.size();
        if budget >= max_bytes {
            break;
        }
    }
    Ok(out)
}

/// The rule every read keeps, checked before entries leave the engine:
/// contiguous from `from`, all below `to`.
fn assert_contiguous(entries: &[Entry], from: Offset, to: Offset) {
    for (i, e) in entries.iter().enumerate() {
        assert!(
            e.offset.0 == from.0 + i as u64 && e.offset < to,
            "a read of [{from}, {to}) would return entry {} at position {i}",
            e.offset
        );
    }
}

/// The group's end of what the log has written.
fn readable_end(g: &GroupState, written: u64) -> u64 {
    let mut end = g.end;
    for r in g.runs.iter().rev() {
        if r.shared_end() <= written || r.end() <= g.start {
            break;
        }
        end = r.offset.max(g.start);
    }
    end
}
