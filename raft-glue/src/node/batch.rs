//! [`WriteBatch`]: a Raft node's write batch, appends to many groups
//! placed together and made durable by one sync round (`TiKV`'s store
//! writer does this with raft-engine's `LogBatch`).

use std::sync::Arc;

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_log::{AppendInfo, EncodedBatch};

use super::index::IdMap;
use super::record::{Header, Kind};
use super::{Group, Inner, Node};
use crate::error::{Error, Result};

/// Appends to many groups of one node, encoded as they are added (no lock
/// held) and committed together: all are checked first, so a refused one
/// leaves the batch unapplied; then all are placed in one critical section
/// and the commit returns once one round made them durable.
#[derive(Debug)]
pub struct WriteBatch<'a> {
    inner: &'a Arc<Inner>,
    items: Vec<(&'a Group, Header, EncodedBatch, u32)>,
}

impl Node {
    /// An empty write batch of this node.
    pub fn write_batch(&self) -> WriteBatch<'_> {
        WriteBatch {
            inner: &self.inner,
            items: Vec::new(),
        }
    }
}

impl<'a> WriteBatch<'a> {
    /// Adds `records` for `group` in `epoch` at `base_offset` (its end, or
    /// the end its earlier items in this batch leave).
    ///
    /// # Errors
    /// `UnknownGroup` for a group of another node; `Log(EmptyBatch |
    /// BatchTooLarge)`.
    pub fn append<R: AsRef<[u8]>>(
        &mut self,
        group: &'a Group,
        base_offset: Offset,
        epoch: Epoch,
        records: &[R],
    ) -> Result<()> {
        if !Arc::ptr_eq(self.inner, &group.inner) {
            return Err(Error::UnknownGroup { group: group.id() });
        }
        if records.is_empty() {
            return Err(Error::Log(quorumlog_log::Error::EmptyBatch));
        }
        let h = Header {
            kind: Kind::Entries,
            group: group.id(),
            offset: base_offset.0,
            epoch: epoch.0,
            control: false,
        };
        let batch = self.inner.encode(&h, records)?;
        let count = u32::try_from(records.len()).map_err(|_| {
            Error::Log(quorumlog_log::Error::BatchTooLarge {
                bytes: batch.len() as u64,
                max: self.inner.log.options().max_batch_bytes,
            })
        })?;
        self.items.push((group, h, batch, count));
        Ok(())
    }

    /// Adds a purge of `group` to `offset` (the entry before it in
    /// `epoch`), as [`Group::purge`] (`Purge::To`) but durable with the batch, in the
    /// same round: a Raft node's log compaction riding its write batch.
    ///
    /// # Errors
    /// `UnknownGroup` for a group of another node; `MissingSnapshot` past
    /// the group's latest snapshot.
    pub fn purge(&mut self, group: &'a Group, offset: Offset, epoch: Epoch) -> Result<()> {
        if !Arc::ptr_eq(self.inner, &group.inner) {
            return Err(Error::UnknownGroup { group: group.id() });
        }
        super::group::check_purge_bound(offset, group.latest())?;
        let h = Header {
            kind: Kind::Purge,
            group: group.id(),
            offset: offset.0,
            epoch: epoch.0,
            control: false,
        };
        let batch = self.inner.encode::<&[u8]>(&h, &[])?;
        self.items.push((group, h, batch, 0));
        Ok(())
    }

    /// Appends added so far.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Each append's end, checked once (offsets never wrap, each group's
    /// items continue each other), in the items' order; purges checked
    /// against the log's epochs.
    fn checked_ends(&self, st: &super::NodeState) -> Result<Vec<u64>> {
        // Each append's end, checked once (offsets never wrap).
        let mut nexts = Vec::with_capacity(self.items.len());
        // Items after a group's first continue the one before them.
        let mut ends: IdMap<(u64, u64)> = IdMap::default();
        for (group, h, _, count) in &self.items {
            let id = group.id();
            if h.kind == Kind::Purge {
                // A purge may follow its group's appends in the batch;
                // its epoch is checked against the log as it is.
                if let Some(g) = st.groups.get(&id) {
                    super::group::check_purge_epoch(g, Offset(h.offset), Epoch(h.epoch))?;
                }
                continue;
            }
            let next = if let Some(&(end, epoch)) = ends.get(&id) {
                if h.offset != end {
                    return Err(Error::Log(quorumlog_log::Error::NonContiguous {
                        expected: Offset(end),
                        found: Offset(h.offset),
                    }));
                }
                if h.epoch < epoch {
                    return Err(Error::Log(quorumlog_log::Error::EpochRegression {
                        current: Epoch(epoch),
                        proposed: Epoch(h.epoch),
                    }));
                }
                h.offset.checked_add(u64::from(*count)).ok_or(Error::Log(
                    quorumlog_log::Error::OffsetOverflow {
                        base: Offset(h.offset),
                        records: u64::from(*count),
                    },
                ))?
            } else {
                let g = st
                    .groups
                    .get(&id)
                    .ok_or(Error::UnknownGroup { group: id })?;
                // The snapshots matter to an empty log only.
                let latest = if g.start == g.end {
                    group.latest()
                } else {
                    None
                };
                Group::check_entries(g, h, *count, latest)?.0
            };
            ends.insert(id, (next, h.epoch));
            nexts.push(next);
        }
        Ok(nexts)
    }

    /// Checks every append, places them all, and returns once they are
    /// durable (the calling thread leads the round if none is in flight).
    /// Returns where each append landed, in order (purges are not
    /// listed).
    ///
    /// # Errors
    /// As `Group::append_replicated` for the first refused append (then
    /// nothing is appended); `Poisoned`; I/O.
    ///
    /// # Panics
    /// If an append's end differs from the one checked before placing it
    /// (a bug).
    pub fn commit(self) -> Result<Vec<AppendInfo>> {
        self.inner.check_poisoned()?;
        let mut out = Vec::with_capacity(self.items.len());
        let end = {
            let mut st = self.inner.state();
            let nexts = self.checked_ends(&st)?;
            let mut end = 0;
            let mut nexts = nexts.into_iter();
            for (group, h, batch, count) in self.items {
                end = self.inner.place(&mut st, &h, batch, None, count, true)?;
                if h.kind == Kind::Purge {
                    continue;
                }
                let next = nexts.next().unwrap_or(h.offset);
                assert_eq!(
                    next,
                    h.offset + u64::from(count),
                    "an append's end checked above"
                );
                assert_eq!(
                    st.groups.get(&group.id()).map(|g| g.end),
                    Some(next),
                    "a placed append ends its group where it was checked to"
                );
                out.push(AppendInfo {
                    base_offset: Offset(h.offset),
                    next_offset: Offset(next),
                });
            }
            assert!(nexts.next().is_none(), "every append checked was placed");
            end
        };
        self.inner.make_durable(end)?;
        Ok(out)
    }
}
