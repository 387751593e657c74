//! [`Group`]: one group's handle in a [`Node`](super::Node), the same
//! door as [`Store`](crate::Store) (appends at the library's offsets,
//! reads of exactly a range, truncation never below the commit point, a
//! high watermark that never moves back, the election state, snapshots,
//! metadata, durability waits and completions).

use std::path::PathBuf;
use std::sync::Arc;

use quorumlog_checkpoint::{DataDir, Epoch, Offset, QuorumState, SmallFile, Voter};
use quorumlog_log::{walk_records, AppendInfo, WalkBatches};
use quorumlog_snapshot::{
    Install, Retention, SnapshotId, SnapshotInfo, SnapshotStore, SnapshotWriter, WriterOptions,
};

use super::index::{GroupState, Run};
use super::record::{Header, Kind};
use super::Inner;
use crate::error::{Error, Result};
use crate::store::{Entry, Identity, Isolation, OnDurable};

/// Where group `id`'s snapshots live: `snapshots/<id>/`.
pub(crate) fn snapshot_dir(dd: &DataDir, id: u64) -> PathBuf {
    dd.snapshots_dir().join(format!("{id:020}"))
}

/// One group of a node. Dropping it releases the group for another
/// handle.
#[derive(Debug)]
pub struct Group {
    pub(super) inner: Arc<Inner>,
    id: u64,
    snapshots: SnapshotStore,
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(g) = self.inner.state().groups.get_mut(&self.id) {
            g.owned = false;
        }
    }
}

/// How many runs one read takes from the index at a time.
const READ_RUNS: usize = 1024;

impl Group {
    /// Opens the handle (its owner flag is already set) and reconciles the
    /// group with its snapshots.
    pub(super) fn open(inner: Arc<Inner>, id: u64) -> Result<Group> {
        let dir = snapshot_dir(&inner.dd, id);
        let snapshots = match SnapshotStore::open(inner.dd.fs().clone(), &dir) {
            Ok(s) => s,
            Err(e) => {
                if let Some(g) = inner.state().groups.get_mut(&id) {
                    g.owned = false;
                }
                return Err(e.into());
            }
        };
        let group = Group {
            inner,
            id,
            snapshots,
        };
        if let Some(latest) = group.snapshots.latest().map(|s| s.id) {
            if !group.with(|g| continues(g, latest))? {
                group.reset_at(latest)?;
            }
            let start = group.with(|g| g.start)?;
            if start > latest.end_offset.0 {
                return Err(Error::MissingSnapshot {
                    log_start: Offset(start),
                    latest: Some(latest),
                });
            }
            group.raise_high_watermark(latest.end_offset)?;
        }
        Ok(group)
    }

    /// Runs `f` on the group's state under the node's lock.
    fn with<T>(&self, f: impl FnOnce(&mut GroupState) -> T) -> Result<T> {
        let mut st = self.inner.state();
        match st.groups.get_mut(&self.id) {
            Some(g) => Ok(f(g)),
            None => Err(Error::UnknownGroup { group: self.id }),
        }
    }

    fn header(&self, kind: Kind, offset: u64, epoch: u64) -> Header {
        Header {
            kind,
            group: self.id,
            offset,
            epoch,
        }
    }

    /// The group's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The node's identity.
    pub fn identity(&self) -> Identity {
        Identity::of(&self.inner.dd.meta())
    }

    /// This replica as a voter: its node id and directory id.
    pub fn me(&self) -> Voter {
        let meta = self.inner.dd.meta();
        Voter {
            node_id: meta.node_id,
            directory_id: meta.directory_id,
        }
    }

    /// The failure that poisoned the node, if one did.
    pub fn poisoned(&self) -> Option<quorumlog_io::Failure> {
        self.inner.dd.poisoned()
    }

    /// The durable election state.
    pub fn quorum_state(&self) -> QuorumState {
        self.with(|g| g.vote.clone()).unwrap_or_default()
    }

    /// Replaces the election state with `next`, checked by the same rules
    /// as a store's (the epoch never regresses, one vote and one leader per
    /// epoch); durable on return. It is one record of the shared log: the
    /// votes of many groups share the round that syncs them.
    ///
    /// # Errors
    /// `Checkpoint(StateRegression…)` for a refused transition (nothing
    /// changes); `Poisoned`; I/O.
    pub fn persist_quorum_state(&self, next: &QuorumState) -> Result<()> {
        let body = next.encode_body();
        let h = self.header(Kind::Vote, 0, next.epoch.0);
        let id = self.id;
        self.inner.control(h, Some(&body), |st| {
            let g = st
                .groups
                .get(&id)
                .ok_or(Error::UnknownGroup { group: id })?;
            Ok(g.vote.check_transition(next)?)
        })?;
        tracing::info!(
            target: "quorumlog::election",
            group = id,
            epoch = next.epoch.0,
            leader = ?next.leader,
            voted = ?next.voted,
            "election state persisted"
        );
        Ok(())
    }

    /// The node's shared log's counts and latency histograms (every
    /// group's appends share its rounds).
    pub fn log_stats(&self) -> quorumlog_log::LogStats {
        self.inner.log.stats()
    }

    /// The Raft library's own metadata, if ever written.
    pub fn app_metadata(&self) -> Option<Vec<u8>> {
        self.with(|g| g.app_meta.clone()).ok().flatten()
    }

    /// Replaces the Raft library's metadata, durable on return.
    ///
    /// # Errors
    /// `Log(BatchTooLarge)` above [`Group::max_batch_bytes`]; `Poisoned`; I/O.
    pub fn write_app_metadata(&self, bytes: &[u8]) -> Result<()> {
        let h = self.header(Kind::AppMetadata, 0, 0);
        self.inner.control(h, Some(bytes), |_| Ok(()))?;
        Ok(())
    }

    /// The largest batch of entries one append may hold, in bytes.
    pub fn max_batch_bytes(&self) -> u64 {
        self.inner.log.options().max_batch_bytes - super::NODE_BATCH_OVERHEAD as u64
    }

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
            super::NODE_EPOCH,
            count + 1,
            len_hint + super::NODE_BATCH_OVERHEAD as u64,
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
    pub(super) fn check_entries(
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
        // With snapshots present, entries no snapshot covers are never
        // deleted (invariant 7): such a group could not be opened again.
        let latest = self.latest_snapshot();
        if latest.is_some_and(|l| offset > l.end_offset) {
            return Err(Error::MissingSnapshot {
                log_start: offset,
                latest,
            });
        }
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

    /// The offset below which every entry is durable.
    pub fn flushed_offset(&self) -> Offset {
        let flushed = self.inner.log.flushed_offset().0;
        Offset(self.with(|g| g.flushed(flushed)).unwrap_or(0))
    }

    /// The first offset in the group's log.
    pub fn log_start_offset(&self) -> Offset {
        Offset(self.with(|g| g.start).unwrap_or(0))
    }

    /// The end of what is readable (written; appends queued for the next
    /// round are not).
    pub fn log_end_offset(&self) -> Offset {
        let written = self.inner.log.log_end_offset().0;
        Offset(self.with(|g| readable_end(g, written)).unwrap_or(0))
    }

    /// The high watermark (commit offset), if one was ever set.
    pub fn high_watermark(&self) -> Option<Offset> {
        self.with(|g| g.hw).ok().flatten().map(Offset)
    }

    /// The high watermark as the log holds it durably.
    pub fn durable_high_watermark(&self) -> Option<Offset> {
        self.with(|g| g.durable_hw).ok().flatten().map(Offset)
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

    fn raise_high_watermark(&self, offset: Offset) -> Result<()> {
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
        let (point, o) = self.with(|g| {
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
        let r = self.with(|g| {
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
                    control: false,
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

    /// A hint that entries `[from, to)` will be read soon: the OS reads
    /// their batches into its cache in the background.
    pub fn prefetch(&self, from: Offset, to: Offset) {
        let ranges = self
            .with(|g| {
                g.runs
                    .iter()
                    .filter(|r| r.end() > from.0 && r.offset < to.0)
                    .map(|r| (r.shared - 1, r.shared_end()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        for (a, b) in ranges {
            self.inner.log.prefetch(Offset(a), Offset(b));
        }
    }

    /// The epoch of the entry at `offset`, if the group's log holds it.
    pub fn epoch_at(&self, offset: Offset) -> Option<Epoch> {
        self.with(|g| g.epoch_at(offset.0))
            .ok()
            .flatten()
            .map(Epoch)
    }

    /// The id of the last entry deleted below the log start (offset and
    /// epoch), as a store's: `None` when nothing was deleted; the snapshot
    /// ending at the log start answers when no purge is recorded there.
    pub fn last_purged(&self) -> Option<(Offset, Epoch)> {
        let (start, purged) = self.with(|g| (g.start, g.last_purged)).ok()?;
        let below = Offset(start.checked_sub(1)?);
        purged
            .filter(|(o, _)| o.0 == start)
            .map(|(_, e)| (below, e))
            .or_else(|| {
                self.latest_snapshot()
                    .filter(|s| s.end_offset.0 == start)
                    .map(|s| (below, s.epoch))
            })
    }

    fn reset_at(&self, id: SnapshotId) -> Result<()> {
        let h = self.header(Kind::Reset, id.end_offset.0, id.epoch.0);
        self.inner.control(h, None, |_| Ok(()))?;
        Ok(())
    }

    // --- Snapshots: one snapshot directory per group, as a store's. ---

    /// Starts a local snapshot of the state below `end_offset`, whose last
    /// entry has `epoch`: refused above the high watermark and unless the
    /// group's log holds that entry with that epoch.
    ///
    /// # Errors
    /// `SnapshotRefused`; `Snapshot` (it exists already; I/O).
    pub fn create_snapshot(
        &self,
        end_offset: Offset,
        epoch: Epoch,
        metadata: &[u8],
        options: WriterOptions,
    ) -> Result<GroupWriter<'_>> {
        self.inner.check_poisoned()?;
        let id = SnapshotId { end_offset, epoch };
        let (hw, start, at_last) = self.with(|g| {
            let last = end_offset.0.checked_sub(1);
            (
                g.hw.unwrap_or(g.start),
                g.start,
                last.and_then(|o| g.epoch_at(o)),
            )
        })?;
        if end_offset.0 > hw {
            return Err(Error::SnapshotRefused {
                id,
                why: "beyond the high watermark",
            });
        }
        let matches = match end_offset.0.checked_sub(1) {
            None => epoch == Epoch(0) || self.snapshots.get(id).is_some(),
            Some(o) if o >= start => at_last == Some(epoch.0),
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
        let writer = self.snapshots.create(id, metadata, options);
        Ok(GroupWriter {
            group: self,
            writer: self.inner.note(writer.map_err(Error::from))?,
        })
    }

    /// The latest snapshot.
    pub fn latest_snapshot(&self) -> Option<SnapshotId> {
        self.snapshots.latest().map(|s| s.id)
    }

    /// The size of snapshot `id`'s file, in bytes.
    ///
    /// # Errors
    /// `Snapshot(NotFound)`.
    pub fn snapshot_size(&self, id: SnapshotId) -> Result<u64> {
        self.snapshots
            .get(id)
            .map(|s| s.size_bytes)
            .ok_or(Error::Snapshot(quorumlog_snapshot::Error::NotFound(id)))
    }

    /// Whether snapshot `id` is durable here.
    pub fn has_snapshot(&self, id: SnapshotId) -> bool {
        self.snapshots.get(id).is_some()
    }

    /// Reads up to `max_bytes` of snapshot `id` from byte `position`.
    ///
    /// # Errors
    /// `Snapshot(NotFound | OutOfRange…)`; I/O.
    pub fn read_snapshot_chunk(
        &self,
        id: SnapshotId,
        position: u64,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        Ok(self.snapshots.read_chunk(id, position, max_bytes)?)
    }

    /// Snapshot `id`'s metadata and data, verified.
    ///
    /// # Errors
    /// `Snapshot(NotFound)`, corruption, I/O.
    pub fn read_snapshot(&self, id: SnapshotId) -> Result<(Vec<u8>, Vec<u8>)> {
        let mut reader = self.snapshots.reader(id)?;
        let meta = reader.header().metadata.clone();
        Ok((meta, reader.read_to_end()?))
    }

    /// Starts, or resumes after a restart, the install of snapshot `id` of
    /// `total_size` bytes from the leader; its [`GroupInstall::finish`]
    /// publishes it and makes the group's log continue it.
    ///
    /// # Errors
    /// `SnapshotRefused` for one ending below the log start, or one the
    /// log does not continue below the high watermark;
    /// `Snapshot(NotNewer)`; I/O.
    pub fn install_snapshot(
        &self,
        id: SnapshotId,
        total_size: u64,
    ) -> Result<GroupInstall<&Group>> {
        self.inner.check_poisoned()?;
        self.check_install(id)?;
        Ok(GroupInstall {
            group: self,
            install: self.snapshots.begin_install(id, total_size)?,
        })
    }

    /// [`Group::install_snapshot`] holding the group by `Arc`: for an
    /// install driven from a stream that must own what it uses.
    ///
    /// # Errors
    /// As [`Group::install_snapshot`].
    pub fn install_snapshot_owned(
        self: &Arc<Self>,
        id: SnapshotId,
        total_size: u64,
    ) -> Result<GroupInstall<Arc<Group>>> {
        self.inner.check_poisoned()?;
        self.check_install(id)?;
        Ok(GroupInstall {
            group: Arc::clone(self),
            install: self.snapshots.begin_install(id, total_size)?,
        })
    }

    /// Snapshot `id`'s metadata (as given to [`Group::create_snapshot`]).
    ///
    /// # Errors
    /// `Snapshot(NotFound | Corruption…)`; I/O.
    pub fn snapshot_metadata(&self, id: SnapshotId) -> Result<Vec<u8>> {
        Ok(self.snapshots.reader(id)?.header().metadata.clone())
    }

    /// Snapshot `id`'s file as it is on disk: what another replica's
    /// install takes, in chunks or whole.
    ///
    /// # Errors
    /// `Snapshot(NotFound)`; I/O.
    pub fn snapshot_file(&self, id: SnapshotId) -> Result<Vec<u8>> {
        let size = self.snapshot_size(id)?;
        let len = usize::try_from(size).unwrap_or(usize::MAX);
        Ok(self.snapshots.read_chunk(id, 0, len)?)
    }

    /// Refuses an install that would break the log: one ending below the
    /// log start (a gap no snapshot covers), or one the log does not
    /// continue while committed entries lie past its end (they would be
    /// removed: a Raft library's mistake, never a leader's snapshot).
    fn check_install(&self, id: SnapshotId) -> Result<()> {
        let (start, conflicts) = self.with(|g| {
            let committed = g.hw.unwrap_or(g.start);
            (g.start, !continues(g, id) && committed > id.end_offset.0)
        })?;
        if id.end_offset.0 < start {
            return Err(Error::SnapshotRefused {
                id,
                why: "it ends below the log start",
            });
        }
        if conflicts {
            return Err(Error::SnapshotRefused {
                id,
                why: "committed entries past its end conflict with it",
            });
        }
        Ok(())
    }

    /// Unfinished installs (resumable), with the bytes each holds.
    ///
    /// # Errors
    /// I/O.
    pub fn installs(&self) -> Result<Vec<(SnapshotId, u64)>> {
        Ok(self.snapshots.installs()?)
    }

    /// Discards the unfinished install of `id`.
    ///
    /// # Errors
    /// I/O.
    pub fn discard_install(&self, id: SnapshotId) -> Result<()> {
        Ok(self.snapshots.discard_install(id)?)
    }

    /// After an install: the group's log is made to continue the latest
    /// snapshot (kept if it holds its last entry with its epoch, otherwise
    /// restarted, empty, at its end).
    ///
    /// # Errors
    /// `NoSnapshot`; `Poisoned`; I/O.
    pub fn truncate_to_latest_snapshot(&self) -> Result<SnapshotId> {
        let latest = self.latest_snapshot().ok_or(Error::NoSnapshot)?;
        if !self.with(|g| continues(g, latest))? {
            self.reset_at(latest)?;
        }
        self.raise_high_watermark(latest.end_offset)?;
        Ok(latest)
    }

    /// Deletes snapshots `retention` does not keep; returns them.
    ///
    /// # Errors
    /// I/O.
    pub fn retain_snapshots(&self, retention: Retention) -> Result<Vec<SnapshotId>> {
        Ok(self.snapshots.retain(retention)?)
    }

    /// Purges the group's log below `up_to`, bounded by the latest
    /// snapshot's end (entries no snapshot covers stay). Returns the log
    /// start.
    ///
    /// # Errors
    /// `Poisoned`; I/O.
    pub fn clean_log_prefix(&self, up_to: Offset) -> Result<Offset> {
        let Some(latest) = self.latest_snapshot() else {
            return Ok(self.log_start_offset());
        };
        let to = up_to.min(latest.end_offset);
        let epoch = match to.0.checked_sub(1) {
            Some(o) => self.epoch_at(Offset(o)),
            None => None,
        };
        if let Some(epoch) = epoch {
            self.purge_to(to, epoch)?;
        }
        Ok(self.log_start_offset())
    }
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
        budget += u64::from(r.bytes);
        if budget >= max_bytes {
            break;
        }
    }
    Ok(out)
}

/// Whether group state `g` continues snapshot `id` (as a store's log).
fn continues(g: &GroupState, id: SnapshotId) -> bool {
    match id.end_offset.0.checked_sub(1) {
        None => true,
        Some(last) if last < g.start => g.epoch_at(g.start).is_none_or(|e| e >= id.epoch.0),
        Some(last) => g.epoch_at(last) == Some(id.epoch.0),
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

/// A local snapshot being written ([`Group::create_snapshot`]).
#[derive(Debug)]
pub struct GroupWriter<'a> {
    group: &'a Group,
    writer: SnapshotWriter,
}

impl GroupWriter<'_> {
    /// Appends state bytes.
    ///
    /// # Errors
    /// I/O.
    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        let r = self.writer.write(data).map_err(Error::from);
        self.group.inner.note(r)
    }

    /// Syncs and publishes the snapshot.
    ///
    /// # Errors
    /// I/O.
    pub fn freeze(self) -> Result<SnapshotInfo> {
        let r = self.writer.freeze().map_err(Error::from);
        self.group.inner.note(r)
    }
}

/// A snapshot download ([`Group::install_snapshot`], or
/// [`Group::install_snapshot_owned`]): each chunk durable when written,
/// resumable after a restart.
#[derive(Debug)]
pub struct GroupInstall<G: std::ops::Deref<Target = Group>> {
    group: G,
    install: Install,
}

impl<G: std::ops::Deref<Target = Group>> GroupInstall<G> {
    /// The snapshot being installed.
    pub fn id(&self) -> SnapshotId {
        self.install.id()
    }

    /// The bytes received so far (where the next chunk goes).
    pub fn position(&self) -> u64 {
        self.install.position()
    }

    /// The snapshot's size.
    pub fn total_size(&self) -> u64 {
        self.install.total_size()
    }

    /// Writes the chunk at `position`, durably.
    ///
    /// # Errors
    /// `Snapshot(OutOfOrder…)`; I/O.
    pub fn write_chunk(&mut self, position: u64, bytes: &[u8]) -> Result<()> {
        let r = self
            .install
            .write_chunk(position, bytes)
            .map_err(Error::from);
        self.group.inner.note(r)
    }

    /// Verifies the whole file without publishing it (see
    /// `StoreInstall::verify`).
    ///
    /// # Errors
    /// `Snapshot` (incomplete, verification, I/O).
    pub fn verify(&self) -> Result<()> {
        Ok(self.install.verify()?)
    }

    /// Verifies, publishes, then makes the group's log continue the
    /// snapshot ([`Group::truncate_to_latest_snapshot`]; a crash between
    /// the two is completed when the group is next opened).
    ///
    /// # Errors
    /// `SnapshotRefused` as at its start (the log changed meanwhile);
    /// `Snapshot` (verification, I/O); the log's.
    pub fn finish(self) -> Result<SnapshotInfo> {
        self.group.check_install(self.install.id())?;
        let info = self.install.finish().map_err(Error::from);
        let info = self.group.inner.note(info)?;
        self.group.truncate_to_latest_snapshot()?;
        Ok(info)
    }
}

/// Refuses a purge to `offset` in `epoch` when the entry before `offset`
/// is in `g`'s log in another epoch: the purge point's epoch is the log's
/// (the caller's names another entry, and would be recorded as the last
/// purged id).
pub(super) fn check_purge_epoch(g: &GroupState, offset: Offset, epoch: Epoch) -> Result<()> {
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
