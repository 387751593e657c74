//! The store's reads: the entries of exactly a range, and epochs.

use quorumlog_checkpoint::{Epoch, Offset};

use quorumlog_log::{walk_records, WalkBatches};

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
            // The one record walker: reads stop at the range.
            let walked = walk_records(&self.log, from, limit, max_bytes, WalkBatches::All)?;
            Ok(walked
                .records
                .into_iter()
                .map(|r| Entry {
                    offset: r.offset,
                    epoch: r.epoch,
                    control: r.control,
                    bytes: r.bytes,
                })
                .collect())
        })
    }

    /// The epoch of the entry at `offset`, if it is in the log.
    pub fn epoch_at(&self, offset: Offset) -> Option<Epoch> {
        self.log.epoch_at(offset)
    }
}
