//! Reads: whole verified batches from one segment, bounded by a byte budget and, for a range, by the batch holding its last offset.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's private items, as it sees them"
)]
use super::*;

impl Log {
    /// Reads whole batches starting with the one holding `from`, up to
    /// `max_bytes` (at least one batch), from one segment. Every batch is
    /// verified before it is returned. The first batch may begin before
    /// `from` (and before the log start offset): callers skip those records.
    /// Reading at the log end returns no batch.
    ///
    /// # Errors
    /// `OffsetOutOfRange` outside `[log start, log end]`; `Corruption`
    /// naming segment, position and offset (the data is never returned);
    /// `Io`; `Poisoned`.
    pub fn read(&self, from: Offset, max_bytes: u64) -> Result<ReadBatches> {
        self.read_range(from, Offset(u64::MAX), max_bytes)
    }

    /// A hint that `[from, to)` will be read soon (a restarted Raft
    /// re-applying its committed entries): the OS starts reading those
    /// segment bytes into its cache in the background, at the device's
    /// full queue depth, while the caller decodes what came first. Offsets
    /// outside the log are clamped; nothing is verified or returned, and
    /// a failure is ignored.
    pub fn prefetch(&self, from: Offset, to: Offset) {
        let (from, to) = (from.max(self.start_offset), to.min(self.log_end_offset()));
        if from >= to {
            return;
        }
        for seg in &self.segments {
            if seg.end_offset <= from || seg.base >= to || seg.end_offset <= seg.base {
                continue;
            }
            let start = if from > seg.base {
                seg.locate(from).map_or(0, |(p, _)| p)
            } else {
                0
            };
            let stop = if to < seg.end_offset {
                seg.locate(Offset(to.0 - 1))
                    .map_or(seg.end_position, |(p, h)| p + u64::from(h.batch_len))
            } else {
                seg.end_position
            };
            if stop > start {
                let _ = seg.file.will_need(start, stop - start);
            }
        }
    }

    /// As [`Log::read`], stopping after the batch holding `to - 1`: a read
    /// of a range never reads, verifies or decodes the segment beyond it.
    ///
    /// # Errors
    /// As [`Log::read`]; `Corruption` where a batch's header gives a
    /// length that leaves its segment.
    pub fn read_range(&self, from: Offset, to: Offset, max_bytes: u64) -> Result<ReadBatches> {
        self.check_poisoned()?;
        let end = self.log_end_offset();
        if from < self.start_offset || from > end {
            return Err(Error::OffsetOutOfRange {
                offset: from,
                start: self.start_offset,
                end,
            });
        }
        if from == end {
            return Ok(ReadBatches::default());
        }
        let seg = self
            .segments
            .get(self.segment_index(from))
            .unwrap_or_else(|| self.active());
        let hint = *self
            .read_hint
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (pos, first) = match hint {
            Some((next, base, pos))
                if next == from && base == seg.base && pos < seg.end_position =>
            {
                seg.header_at(pos, from)?
            }
            _ => seg.locate(from)?,
        };
        let want = max_bytes.max(u64::from(first.batch_len));
        let mut stop = seg.end_position;
        if to > first.next_offset() && to < seg.end_offset {
            // The batch holding `to - 1` ends the read (`to - 1` is in
            // this segment, past the first batch).
            let (p, h) = seg.locate(Offset(to.0 - 1))?;
            stop = p + u64::from(h.batch_len);
        } else if to <= first.next_offset() {
            stop = pos + u64::from(first.batch_len);
        }
        if stop <= pos || stop > seg.end_position {
            // A header whose length leaves the segment: damage on disk
            // (a sealed segment's batches are verified when read, not at
            // open).
            return Err(crate::segment::corruption(
                crate::segment::Location {
                    segment: seg.base,
                    position: pos,
                    offset: from,
                },
                None,
                quorumlog_checkpoint::CorruptionKind::Malformed(
                    "a batch whose length leaves its segment",
                ),
            ));
        }
        let len = want.min(stop - pos);
        // Lossless: bounded by max_bytes or one batch, which fit in memory.
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
        seg.file.read_exact_at(&mut buf, pos)?;
        let (mut batches, next, here) = verified_batches(seg, pos, &buf, first.base_offset)?;
        // Verified under the segment's salt; returned unsalted, so a batch
        // read here can be shipped as is and verified anywhere
        // (`BatchRef::raw`).
        for (start, h) in &mut batches {
            let end = *start + h.batch_len as usize;
            if let Some(bytes) = buf.get_mut(*start..end) {
                Salt::NONE.restamp(seg.salt, h, bytes);
            }
        }
        let buf_end = pos + buf.len() as u64;
        let at = usize::try_from(here.min(buf_end) - pos).unwrap_or(usize::MAX);
        buf.truncate(at);
        *self
            .read_hint
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((next, seg.base, pos + at as u64));
        Ok(ReadBatches { buf, batches })
    }
}

/// Walks the bytes `buf` read from `seg` at `pos` (the first batch, holding
/// `first`, starts there): returns every whole verified batch in it (its
/// place in `buf` and header), the offset after them, and the position
/// after them. The first batch must be valid; a later invalid one ends the
/// walk (the read that starts there reports it).
fn verified_batches(seg: &Segment, pos: u64, buf: &[u8], first: Offset) -> Result<Walked> {
    let mut batches = Vec::new();
    let mut next = first;
    let mut here = pos;
    let buf_end = pos + buf.len() as u64;
    let mut src = BufSource { buf, start: pos };
    while here < buf_end {
        let fail = |position, epoch, kind| {
            crate::segment::corruption(
                Location {
                    segment: seg.base,
                    position,
                    offset: next,
                },
                epoch,
                kind,
            )
        };
        let (at, h) = match walk::slot(&mut src, here, DataEnd(seg.end_position))? {
            Slot::Header { position, header } => (position, header),
            // The end of the segment's data, or of this buffer.
            Slot::End | Slot::NeedMore if !batches.is_empty() || next >= seg.end_offset => break,
            // Zeros where the segment's data says a batch is.
            Slot::End | Slot::NeedMore => {
                return Err(fail(here, None, truncated(0, BATCH_HEADER_BYTES)))
            }
            Slot::Invalid { position, kind } if batches.is_empty() => {
                return Err(fail(position, None, kind))
            }
            // Reported by the read that starts there.
            Slot::Invalid { .. } => break,
        };
        if at + u64::from(h.batch_len) > buf_end {
            if batches.is_empty() {
                // The first batch always fits (the buffer was sized for it):
                // a length past the segment's end is corruption.
                let room = usize::try_from(buf_end - at).unwrap_or(usize::MAX);
                return Err(fail(
                    at,
                    Some(h.epoch),
                    truncated(room, h.batch_len as usize),
                ));
            }
            break; // cut by max_bytes: stop before it
        }
        let end = DataEnd(seg.end_position);
        if let Err(kind) = walk::batch(&mut src, at, &h, next, end, seg.salt)? {
            return Err(fail(at, Some(h.epoch), kind));
        }
        // Lossless: within the buffer.
        batches.push((usize::try_from(at - pos).unwrap_or(usize::MAX), h));
        next = h.next_offset();
        here = at + u64::from(h.batch_len);
    }
    Ok((batches, next, here))
}
