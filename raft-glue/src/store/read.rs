//! The store's reads: the entries of exactly a range, and epochs.

use quorumlog_checkpoint::{Epoch, Offset};

use super::{Entry, Isolation, Store};
use crate::error::{Error, Result};

impl Store {
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
        self.guarded(|| {
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
                // Bounded by the range: nothing past `limit` is read.
                let batches = self.log.read_range(at, limit, max_bytes.max(1))?;
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
        })
    }

    /// The epoch of the entry at `offset`, if it is in the log.
    pub fn epoch_at(&self, offset: Offset) -> Option<Epoch> {
        self.log.epoch_at(offset)
    }
}
