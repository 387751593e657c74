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

    /// The entries in `[from, to)`, up to `max_bytes` of entry bytes (at
    /// least one entry when any is in range), within `isolation`: exactly
    /// those offsets, each with its epoch. Each run of the group's index
    /// is read straight from its batch: no other group's records are read.
    ///
    /// # Errors
    /// `OffsetOutOfRange` outside the group's log; `GroupData` naming the
    /// group and offset when the log finds corruption (never data).
    pub fn read_entries(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
        isolation: Isolation,
    ) -> Result<Vec<Entry>> {
        self.inner.check_poisoned()?;
        let mut out: Vec<Entry> = Vec::new();
        let mut bytes = 0u64;
        // The index is taken [`READ_RUNS`] runs at a time: read on from
        // where the last part ended until the range or the budget is done.
        loop {
            let next = out.last().map_or(from, |e| Offset(e.offset.0 + 1));
            if !out.is_empty() && (next >= to || bytes >= max_bytes) {
                return Ok(out);
            }
            let part = self.read_part(
                next,
                to,
                max_bytes - bytes.min(max_bytes),
                isolation,
                out.is_empty(),
            )?;
            if part.is_empty() {
                return Ok(out);
            }
            bytes += part.iter().map(|e| e.bytes.len() as u64).sum::<u64>();
            out.extend(part);
        }
    }

    /// One part of a read: at most [`READ_RUNS`] runs. A rewrite may move
    /// runs and free their old segment between taking the runs and reading
    /// them: then it reads again with the new ones. `first`: the part must
    /// return at least one entry when any is in range.
    fn read_part(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
        isolation: Isolation,
        first: bool,
    ) -> Result<Vec<Entry>> {
        if !first && max_bytes == 0 {
            return Ok(Vec::new());
        }
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.try_read(from, to, max_bytes.max(1), isolation) {
                Err(Error::Log(quorumlog_log::Error::OffsetOutOfRange { .. })) if attempts < 8 => {}
                Ok(part) if !first => {
                    // Past the first part, an entry beyond the budget is not
                    // returned (the first part returns one at least).
                    let mut left = max_bytes;
                    return Ok(part
                        .into_iter()
                        .take_while(|e| {
                            let n = e.bytes.len() as u64;
                            let keep = n <= left;
                            left = left.saturating_sub(n);
                            keep
                        })
                        .collect());
                }
                r => return r,
            }
        }
    }

    fn try_read(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
        isolation: Isolation,
    ) -> Result<Vec<Entry>> {
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
        let mut entries = Vec::new();
        let mut bytes = 0u64;
        for r in runs {
            if !entries.is_empty() && bytes >= max_bytes {
                break;
            }
            let left = max_bytes.saturating_sub(bytes).max(1);
            let walked = walk_records(
                &self.inner.log,
                Offset(r.shared),
                Offset(r.shared_end()),
                if entries.is_empty() {
                    left
                } else {
                    left.max(1)
                },
                WalkBatches::All,
            )
            .map_err(|e| self.data_error(e, r.offset))?;
            for rec in walked.records {
                let len = rec.bytes.len() as u64;
                if !entries.is_empty() && bytes + len > max_bytes {
                    return Ok(entries);
                }
                bytes += len;
                entries.push(Entry {
                    offset: Offset(r.offset + (rec.offset.0 - r.shared)),
                    epoch: Epoch(r.epoch),
                    control: r.control(),
                    bytes: rec.bytes,
                });
            }
        }
        Ok(entries)
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
        clipped.count = u32::try_from(b - a).unwrap_or(0);
        out.push(clipped);
        budget += r.size();
        if budget >= max_bytes {
            break;
        }
    }
    Ok(out)
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
