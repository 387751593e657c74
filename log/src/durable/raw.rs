//! Follower appends of a leader's raw batches: verified, written without re-encoding (the first re-encoded from the log end when it overlaps it).

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's private items, as it sees them"
)]
use super::*;

impl DurableLog {
    /// Appends batches exactly as a leader's [`DurableLog::read`] returned
    /// them ([`crate::BatchRef::raw`]): each is verified (CRC, structure),
    /// must continue the log (the first at the log end, each at the
    /// previous one's end) with epochs that never decrease, and is written
    /// without re-encoding. All are checked before any is queued.
    ///
    /// The first batch may start below the log end and reach past it (a
    /// follower installed from a snapshot whose end falls inside a batch of
    /// the leader's log, which the leader's read returns whole): its
    /// records from the log end on are appended as one batch of the same
    /// epoch and kind, re-encoded at the log end; those below are the
    /// snapshot's (Raft's log matching: the same offset and epoch hold the
    /// same record).
    ///
    /// # Errors
    /// `InvalidRawBatch` (a batch that does not verify); `RawOverlapDiverges`
    /// (a first batch overlapping the end in another epoch than the log's
    /// there); `NonContiguous`;
    /// `EpochRegression`; `BatchTooLarge`; I/O as for appends.
    pub fn append_raw(&self, batches: &[&[u8]]) -> Result<AppendInfo> {
        let mut checked = Vec::with_capacity(batches.len());
        let end = self.queued_end();
        for (i, bytes) in batches.iter().enumerate() {
            let header = crate::batch::verify_batch(bytes, crate::format::Salt::NONE)
                .map_err(|kind| Error::InvalidRawBatch { index: i, kind })?;
            if i == 0 && header.base_offset < end && header.next_offset() > end {
                self.check_overlap(header, end)?;
                checked.push(self.reencode_from(bytes, header, end)?);
                continue;
            }
            let max = self
                .options
                .max_batch_bytes
                .min(crate::batch::MAX_BATCH_BYTES);
            if bytes.len() as u64 > max {
                return Err(Error::BatchTooLarge {
                    bytes: bytes.len() as u64,
                    max,
                });
            }
            let page = usize::try_from(crate::format::PAGE_BYTES).unwrap_or(4096);
            let mut owned = Vec::with_capacity(bytes.len() + page);
            owned.extend_from_slice(bytes);
            checked.push((header, owned));
        }
        let info = self.shared.enqueue_placed(checked)?;
        self.write_queued()?;
        self.shared.note_written(info.next_offset, true);
        Ok(info)
    }

    /// Refuses a batch `header` overlapping the log below `end` unless the
    /// log holds every overlapped offset it still has in the batch's epoch
    /// (a batch has one epoch and the log's epochs never decrease, so the
    /// first and last overlapped offsets decide). Offsets below the log
    /// start are a snapshot's, which the log cannot check.
    fn check_overlap(&self, header: crate::format::BatchHeader, end: Offset) -> Result<()> {
        let first = header.base_offset.max(self.log_start_offset());
        if first >= end {
            return Ok(());
        }
        for offset in [first, Offset(end.0 - 1)] {
            let log = self.epoch_at(offset);
            if log != Some(header.epoch) {
                return Err(Error::RawOverlapDiverges {
                    offset,
                    log,
                    batch: header.epoch,
                });
            }
        }
        Ok(())
    }

    /// The records of verified raw batch `bytes` from offset `from` on
    /// (inside it), as one batch placed at `from`.
    fn reencode_from(
        &self,
        bytes: &[u8],
        header: crate::format::BatchHeader,
        from: Offset,
    ) -> Result<(crate::format::BatchHeader, Vec<u8>)> {
        let batch = crate::batch::BatchRef::new(header, bytes);
        let records = batch
            .to_vecs()
            .map_err(|kind| Error::InvalidRawBatch { index: 0, kind })?;
        let skip = usize::try_from(from.0 - header.base_offset.0).unwrap_or(usize::MAX);
        let kept = records.get(skip..).unwrap_or_default();
        assert!(!kept.is_empty(), "the batch reaches past `from`");
        let mut encoder = crate::batch::BatchEncoder::from_options(&self.options);
        if header.is_control() {
            encoder = encoder.control();
        }
        let mut out = Vec::new();
        let h = encoder.encode(&mut out, from, header.epoch, kept)?;
        Ok((h, out))
    }
}
