//! The node's upkeep, on its background thread or on demand: checkpoints
//! of every group's state (written once the log is durable to their
//! position, decoded as a pair with their encoding before the write), and
//! space: segments freed once no live run and no checkpoint needs them,
//! the live runs of the oldest segment rewritten at the head when the log
//! passes its garbage bound (the new copy written before the index points
//! at it).

use std::sync::atomic::Ordering;
use std::sync::PoisonError;

use quorumlog_checkpoint::Offset;

use super::ckpt::{self, write_checkpoint_file};
use super::index::{GroupState, Run};
use super::record::{Header, Kind};
use super::{Inner, NodeState, SpaceUse};
use crate::error::{Error, Result};

impl Inner {
    pub(super) fn space(&self) -> SpaceUse {
        let sizes = self.log.segment_sizes();
        let live = self
            .state()
            .groups
            .values()
            .map(GroupState::live_bytes)
            .sum();
        SpaceUse {
            log_bytes: sizes.iter().map(|(_, s)| *s).sum(),
            live_bytes: live,
            segments: sizes.len(),
        }
    }

    /// Writes a checkpoint of the state as of the log's queued end, once
    /// the log is durable there.
    pub(super) fn checkpoint(&self) -> Result<()> {
        self.check_poisoned()?;
        let (position, bytes, since) = {
            let st = self.state();
            let position = self.log.queued_end().0;
            let bytes = ckpt::encode(position, st.groups.iter(), &st.dropped);
            // Encode and decode as a pair, before the write: what is
            // written reads back as this state.
            assert!(
                ckpt::decode(&bytes).is_ok_and(|c| c.position == position
                    && c.groups.len() == st.groups.len()
                    && c.dropped == st.dropped),
                "a node checkpoint reads back as written"
            );
            (position, bytes, st.since_ckpt)
        };
        self.make_durable(position)?;
        let r = write_checkpoint_file(self.dd.fs(), self.dd.path(), &bytes);
        self.note(r)?;
        let mut st = self.state();
        if position > st.ckpt_position {
            st.ckpt_position = position;
        }
        st.since_ckpt = st.since_ckpt.saturating_sub(since);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The background thread: checkpoints when due, reclamation.
    pub(super) fn tick(&self) {
        // Watches the shared log's rounds (a hung device shows in the
        // `sync_overdue` gauge even when the flusher leads the round).
        self.log.check_overdue();
        if self.dd.poisoned().is_some() {
            return;
        }
        // A failure poisons the node: callers see it.
        let _ = self.maintain(false);
    }

    /// A checkpoint if due (or `force`d), then reclamation.
    pub(super) fn maintain(&self, force: bool) -> Result<()> {
        let _one = self
            .maintenance
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let due = self.state().since_ckpt >= self.options.checkpoint_every_bytes;
        if force || due {
            self.checkpoint()?;
        }
        self.reclaim()
    }

    /// Frees segments no group needs; rewrites the oldest segment's live
    /// entries forward while the log passes the garbage bound.
    fn reclaim(&self) -> Result<()> {
        for _ in 0..4 {
            let segment = self.options.log.segment_size_bytes;
            let space = self.space();
            let over = space.log_bytes
                > space.live_bytes * self.options.garbage_percent / 100 + 2 * segment;
            if over && space.segments > 2 {
                let bases = self.log.segment_bases();
                if let Some(cut) = bases.get(1) {
                    self.rewrite_below(cut.0)?;
                    self.checkpoint()?;
                }
            }
            let freed = self.free_prefix()?;
            if !over || freed == 0 {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Truncates the log's prefix to what the groups and the last
    /// checkpoint still need. Returns the segments freed.
    fn free_prefix(&self) -> Result<usize> {
        let cut = {
            let st = self.state();
            let live = st.groups.values().filter_map(GroupState::min_shared);
            super::index::reclaim_floor(live, st.ckpt_position)
        };
        let before = self.log.segment_bases().len();
        if Offset(cut) > self.log.log_start_offset() {
            // Segments below the cut go; the one holding it stays.
            let segment_of_cut = self
                .log
                .segment_bases()
                .into_iter()
                .filter(|b| b.0 <= cut)
                .max();
            if let Some(base) = segment_of_cut {
                if base > self.log.log_start_offset() {
                    let r = self.log.truncate_prefix_to(base).map_err(Error::from);
                    self.note(r)?;
                }
            }
        }
        let freed = before.saturating_sub(self.log.segment_bases().len());
        self.counters
            .freed
            .fetch_add(freed as u64, Ordering::Relaxed);
        Ok(freed)
    }

    /// Rewrites at the log's head every live entry whose batch is below
    /// shared offset `cut`.
    fn rewrite_below(&self, cut: u64) -> Result<()> {
        let victims: Vec<(u64, Vec<Run>)> = {
            let st = self.state();
            st.groups
                .iter()
                .filter_map(|(&id, g)| {
                    let runs: Vec<Run> = g
                        .runs
                        .iter()
                        .filter(|r| r.shared <= cut && r.end() > g.start)
                        .map(|r| {
                            let mut r = *r;
                            if r.offset < g.start {
                                r.shared = r.shared_at(g.start);
                                r.count = u32::try_from(r.end() - g.start).unwrap_or(0);
                                r.offset = g.start;
                            }
                            r
                        })
                        .collect();
                    (!runs.is_empty()).then_some((id, runs))
                })
                .collect()
        };
        let limit = self.options.log.max_batch_bytes / 2;
        for (id, runs) in victims {
            // Consecutive runs of one epoch become one batch, up to half the
            // batch limit of record bytes (not of their batches' sizes,
            // which compression makes smaller than the records they hold).
            let mut i = 0;
            while i < runs.len() {
                let mut j = i;
                let mut entries: Vec<Vec<u8>> = Vec::new();
                let mut size = 0u64;
                let first = runs.get(i).copied();
                let Some(first) = first else { break };
                while let Some(r) = runs.get(j) {
                    if (r.epoch, r.control()) != (first.epoch, first.control())
                        || (j > i && runs.get(j - 1).map(Run::end) != Some(r.offset))
                    {
                        break;
                    }
                    // Purged meanwhile: the next pass sees it.
                    let Some(records) = self.run_records(r)? else {
                        break;
                    };
                    let raw: u64 = records.iter().map(|r| r.len() as u64 + 4).sum();
                    if j > i && size + raw > limit {
                        break;
                    }
                    size += raw;
                    entries.extend(records);
                    j += 1;
                }
                if j == i {
                    i += 1;
                    continue;
                }
                let moved = runs.get(i..j).unwrap_or_default();
                let offset = first.offset;
                let count = u32::try_from(entries.len()).unwrap_or(0);
                let expected: u64 = moved.iter().map(|r| u64::from(r.count)).sum();
                if u64::from(count) == expected && count > 0 {
                    self.rewrite(id, (offset, first.epoch, first.control()), &entries, moved)?;
                }
                i = j;
            }
        }
        Ok(())
    }

    /// The records of run `r`; `None` if it was purged meanwhile.
    fn run_records(&self, r: &Run) -> Result<Option<Vec<Vec<u8>>>> {
        let walked = quorumlog_log::walk_records(
            &self.log,
            Offset(r.shared),
            Offset(r.shared_end()),
            u64::MAX,
            quorumlog_log::WalkBatches::All,
        );
        match walked {
            Ok(w) => Ok(Some(w.records.into_iter().map(|r| r.bytes).collect())),
            Err(quorumlog_log::Error::OffsetOutOfRange { .. }) => Ok(None),
            Err(e) => self.note(Err(e.into())),
        }
    }

    /// Appends one rewrite batch of group `id` and, once it is written,
    /// moves the group's index to it if `moved` is still where it lives.
    fn rewrite(
        &self,
        id: u64,
        (offset, epoch, control): (u64, u64, bool),
        entries: &[Vec<u8>],
        moved: &[Run],
    ) -> Result<()> {
        let h = Header {
            kind: Kind::Rewrite,
            group: id,
            offset,
            epoch,
            control,
        };
        let batch = self.encode(&h, entries)?;
        let bytes = batch.len() as u64;
        let count = u32::try_from(entries.len()).unwrap_or(0);
        let still_there = |st: &NodeState| {
            st.groups.get(&id).is_some_and(|g| {
                moved.iter().all(|m| {
                    g.run_index(m.offset)
                        .and_then(|k| g.runs.get(k))
                        .is_some_and(|r| r.shared_at(m.offset) == m.shared && r.end() >= m.end())
                })
            })
        };
        let info = {
            let mut st = self.state();
            if !still_there(&st) {
                return Ok(());
            }
            let info = self.note(self.log.enqueue(batch).map_err(Error::from))?;
            st.since_ckpt += bytes;
            info
        };
        // Written before the index points at it: a reader never meets a
        // batch that is only queued.
        self.note(self.log.write_queued_now().map_err(Error::from))?;
        let mut st = self.state();
        if still_there(&st) {
            if let Some(g) = st.groups.get_mut(&id) {
                g.relocate(Run {
                    offset,
                    shared: info.base_offset.0 + 1,
                    epoch,
                    count,
                    bytes: Run::bytes_field(bytes, control),
                });
            }
        }
        self.counters.rewritten.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }
}
