//! `checkpoints/epoch-map`: where each leader epoch starts in the log.
//!
//! Body: `count u32`, then `count × (epoch u64, start_offset u64)`, epochs
//! strictly increasing, start offsets non-decreasing.
//!
//! Invariants: entries are ordered by epoch and by start offset; an entry
//! covers `[start, next entry's start)`, the last one up to the log end.

use crate::error::{CorruptionKind, Error, Result};
use crate::format::{magic, Reader, Writer, MAX_BODY_BYTES};
use crate::small_file::SmallFile;
use crate::types::{Epoch, Offset};

const ENTRY_BYTES: usize = 16;
/// The most entries one epoch-map file can hold.
pub(crate) const MAX_ENTRIES: usize = (MAX_BODY_BYTES - 4) / ENTRY_BYTES;

/// One epoch and the offset of its first record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    /// The epoch.
    pub epoch: Epoch,
    /// The offset of the epoch's first record.
    pub start_offset: Offset,
}

/// Epoch → start offset, ordered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EpochMap {
    entries: Vec<EpochEntry>,
}

impl EpochMap {
    /// An empty map.
    pub fn new() -> Self {
        EpochMap::default()
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The newest entry.
    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// Records that `epoch` starts at `start_offset`. Re-assigning the latest
    /// epoch is a no-op (returns `false`).
    ///
    /// # Errors
    /// `EpochOrder` if `epoch` is older than the latest epoch, or starts
    /// before it.
    ///
    /// # Panics
    /// If the map already holds its maximum of entries (over 65,000).
    pub fn assign(&mut self, epoch: Epoch, start_offset: Offset) -> Result<bool> {
        if let Some(last) = self.latest() {
            if epoch == last.epoch {
                return Ok(false);
            }
            if epoch < last.epoch || start_offset < last.start_offset {
                return Err(Error::EpochOrder {
                    epoch,
                    offset: start_offset,
                    last_epoch: last.epoch,
                    last_offset: last.start_offset,
                });
            }
        }
        assert!(self.entries.len() < MAX_ENTRIES, "epoch map full");
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        Ok(true)
    }

    /// Forgets every epoch that starts at or after `end_offset` (suffix
    /// truncation of the log).
    pub fn truncate_from_end(&mut self, end_offset: Offset) {
        self.entries.retain(|e| e.start_offset < end_offset);
    }

    /// Forgets what lies below `start_offset` (prefix truncation): the epoch
    /// covering `start_offset` now starts there.
    pub fn truncate_from_start(&mut self, start_offset: Offset) {
        let covering = self
            .entries
            .iter()
            .rposition(|e| e.start_offset <= start_offset);
        if let Some(i) = covering {
            self.entries.drain(..i);
            if let Some(first) = self.entries.first_mut() {
                first.start_offset = start_offset;
            }
        }
    }

    /// The epoch of the record at `offset`, if the map covers it.
    pub fn epoch_at(&self, offset: Offset) -> Option<Epoch> {
        // Entries are sorted by start offset: binary search.
        let after = self.entries.partition_point(|e| e.start_offset <= offset);
        after
            .checked_sub(1)
            .and_then(|i| self.entries.get(i))
            .map(|e| e.epoch)
    }

    /// For Raft's log matching: the largest epoch `<= epoch` and the offset
    /// where it ends (the next epoch's start, or `log_end`). `None` if every
    /// known epoch is newer than `epoch`.
    pub fn end_offset_for_epoch(&self, epoch: Epoch, log_end: Offset) -> Option<(Epoch, Offset)> {
        let i = self.entries.iter().rposition(|e| e.epoch <= epoch)?;
        let end = self
            .entries
            .get(i + 1)
            .map_or(log_end, |next| next.start_offset);
        Some((self.entries.get(i)?.epoch, end))
    }
}

impl SmallFile for EpochMap {
    const MAGIC: [u8; 4] = magic::EPOCH_MAP;
    const NAME: &'static str = "checkpoints/epoch-map";

    fn encode_body(&self) -> Vec<u8> {
        let mut w = Writer::new();
        // Lossless: bounded by MAX_ENTRIES in `assign`.
        w.u32(quorumlog_io::codec::u32_len(self.entries.len()));
        for e in &self.entries {
            w.u64(e.epoch.0).u64(e.start_offset.0);
        }
        w.finish()
    }

    fn decode_body(body: &[u8]) -> Result<Self, CorruptionKind> {
        let mut r = Reader::new(body);
        let count = usize::try_from(r.u32()?).unwrap_or(usize::MAX);
        if count.checked_mul(ENTRY_BYTES) != Some(r.remaining()) {
            return Err(CorruptionKind::Malformed(
                "entry count does not match the body",
            ));
        }
        let mut entries: Vec<EpochEntry> = Vec::with_capacity(count);
        for _ in 0..count {
            let e = EpochEntry {
                epoch: Epoch(r.u64()?),
                start_offset: Offset(r.u64()?),
            };
            if let Some(prev) = entries.last() {
                if e.epoch <= prev.epoch || e.start_offset < prev.start_offset {
                    return Err(CorruptionKind::Malformed("epoch map out of order"));
                }
            }
            entries.push(e);
        }
        r.finish()?;
        Ok(EpochMap { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(u64, u64)]) -> EpochMap {
        let mut m = EpochMap::new();
        for &(e, o) in pairs {
            m.assign(Epoch(e), Offset(o)).unwrap();
        }
        m
    }

    #[test]
    fn round_trip() {
        for m in [EpochMap::new(), map(&[(1, 0), (3, 10), (4, 10), (9, 50)])] {
            assert_eq!(EpochMap::decode(&m.encode()).unwrap(), m);
        }
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let bytes = map(&[(1, 0), (3, 10)]).encode();
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(EpochMap::decode(&bad).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn out_of_order_body_is_malformed() {
        let mut w = Writer::new();
        w.u32(2).u64(5).u64(0).u64(4).u64(10);
        assert!(EpochMap::decode_body(&w.finish()).is_err());
    }

    #[test]
    fn assign_keeps_order() {
        let mut m = map(&[(2, 5)]);
        assert!(!m.assign(Epoch(2), Offset(9)).unwrap());
        assert!(m.assign(Epoch(1), Offset(9)).is_err());
        assert!(m.assign(Epoch(3), Offset(4)).is_err());
        assert!(m.assign(Epoch(3), Offset(5)).unwrap());
    }

    #[test]
    fn truncations() {
        let mut m = map(&[(1, 0), (3, 10), (5, 20)]);
        m.truncate_from_end(Offset(20));
        assert_eq!(m, map(&[(1, 0), (3, 10)]));
        m.truncate_from_end(Offset(11));
        assert_eq!(m, map(&[(1, 0), (3, 10)]));
        m.truncate_from_start(Offset(12));
        assert_eq!(m, map(&[(3, 12)]));
        m.truncate_from_start(Offset(2));
        assert_eq!(m, map(&[(3, 12)]), "below the first entry: unchanged");
        m.truncate_from_end(Offset(12));
        assert_eq!(m, EpochMap::new());
    }

    #[test]
    fn end_offset_for_epoch_finds_largest_not_newer() {
        let m = map(&[(1, 0), (3, 10), (5, 20)]);
        let end = Offset(30);
        assert_eq!(m.end_offset_for_epoch(Epoch(0), end), None);
        assert_eq!(
            m.end_offset_for_epoch(Epoch(1), end),
            Some((Epoch(1), Offset(10)))
        );
        assert_eq!(
            m.end_offset_for_epoch(Epoch(2), end),
            Some((Epoch(1), Offset(10)))
        );
        assert_eq!(
            m.end_offset_for_epoch(Epoch(4), end),
            Some((Epoch(3), Offset(20)))
        );
        assert_eq!(m.end_offset_for_epoch(Epoch(7), end), Some((Epoch(5), end)));
        assert_eq!(m.epoch_at(Offset(15)), Some(Epoch(3)));
    }
}
