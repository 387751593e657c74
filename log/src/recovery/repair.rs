//! Repair: carries out what inspection decided, in an order that a crash at
//! any point leaves a state the next open decides the same way: the clean
//! marker and leftovers, segments below the log start, the cut, rebuilt
//! indexes, the active segment's zero tail.
#![expect(
    clippy::indexing_slicing,
    reason = "indices into the segment list come from the list itself (its length, positions \
              found in it), never from bytes read: recovery's decoding goes through the walker"
)]

use quorumlog_checkpoint::Offset;

use super::{Finding, Outcome, PendingCut, Recovery};
use crate::dir::{Cut, CLEAN_FILE};
use crate::error::{CorruptionKind, Result};
use crate::options::Preallocation;
use crate::recovery::report::DroppedCorruption;
use crate::segment::{preallocate, relative};

impl Recovery<'_> {
    /// Applies every pending decision.
    pub(super) fn repair(&mut self) -> Result<()> {
        let changes = self.cut.is_some()
            || !self.below_start.is_empty()
            || !self.index_writes.is_empty()
            || !self.leftovers.is_empty();
        if changes {
            self.remove_leftovers()?;
        }
        if !self.below_start.is_empty() {
            debug_assert_eq!(self.decide(Finding::BelowLogStart), Outcome::RemoveReport);
            for &base in &self.below_start {
                self.dir.retire_segment(base)?;
                self.report
                    .segments_removed
                    .push((base, "wholly below the log start offset"));
            }
            self.dir.sync()?;
        }
        if let Some(cut) = self.cut.take() {
            self.make_cut(cut)?;
        }
        self.write_indexes()?;
        self.restore_zero_tail()
    }

    /// Removes the clean marker (first, durably) and the leftovers.
    pub(super) fn remove_leftovers(&mut self) -> Result<()> {
        if self.leftovers.is_empty() {
            return Ok(());
        }
        if let Some(i) = self.leftovers.iter().position(|n| n == CLEAN_FILE) {
            let marker = self.leftovers.remove(i);
            self.dir.remove_if_present(&marker)?;
            self.dir.sync()?;
        }
        for name in std::mem::take(&mut self.leftovers) {
            self.dir.remove_if_present(&name)?;
        }
        self.dir.sync()
    }

    /// Lenient mode, a segment with an invalid header at `bases[i]`: it and
    /// every later segment are removed and reported as dropped.
    pub(super) fn drop_segments_from(
        &mut self,
        bases: &[Offset],
        i: usize,
        kind: CorruptionKind,
    ) -> Result<()> {
        debug_assert_eq!(
            self.decide(Finding::InvalidSegmentHeader),
            Outcome::RemoveSegmentsFromHere
        );
        let doomed = &bases[i..];
        self.remove_leftovers()?;
        for b in doomed.iter().rev() {
            self.dir.remove_segment(*b)?;
        }
        self.dir.sync()?;
        let base = bases[i];
        self.report.dropped = Some(DroppedCorruption {
            segment: base,
            position: 0,
            damage_at: 0,
            from_offset: base,
            epoch: None,
            kind,
            segments_removed: doomed.to_vec(),
        });
        if self.segments.is_empty() {
            self.dir.create_segment(base)?;
            self.segments.push(self.dir.open_segment(base)?);
        }
        Ok(())
    }

    /// Writes the index files of sealed segments that inspection rebuilt
    /// (those the cut removed are skipped).
    fn write_indexes(&mut self) -> Result<()> {
        let writes = std::mem::take(&mut self.index_writes);
        let sealed = self.segments.len() - 1;
        let mut wrote = false;
        for (base, problem) in writes {
            let Some(seg) = self.segments[..sealed].iter().find(|s| s.base == base) else {
                continue;
            };
            seg.write_index(self.dir.fs().as_ref(), self.dir.path())?;
            self.report.indexes_rebuilt.push((base, problem));
            wrote = true;
        }
        if wrote {
            self.dir.sync()?;
        }
        Ok(())
    }

    /// Gives the active segment back the zero tail a copy may have cut off,
    /// so appends and aligned reads stay within the file.
    fn restore_zero_tail(&mut self) -> Result<()> {
        let options = self.dir.options();
        let size = options.segment_size_bytes;
        let seg = &self.segments[self.segments.len() - 1];
        let len = seg.file.len()?;
        if len >= size {
            return Ok(());
        }
        debug_assert_eq!(
            self.decide(Finding::ActiveSegmentShort),
            Outcome::RestoreZeroTail
        );
        let prealloc = match options.preallocation {
            Preallocation::Adaptive => Preallocation::ZeroFill,
            fixed => fixed,
        };
        preallocate(seg.file.as_ref(), size, prealloc)?;
        self.report.active_segment_extended = Some((seg.base, len));
        Ok(())
    }

    /// Ends the log in segment `cut.seg` at `cut.position` (= `cut.offset`):
    /// later segments removed, the rest of the segment zero-filled, synced.
    fn make_cut(&mut self, cut: PendingCut) -> Result<()> {
        let base = self.segments[cut.seg].base;
        match cut.zero_until {
            Some(until) => self.dir.zero_in_place(base, cut.position, until)?,
            None => self.dir.cut_page_safe(Cut {
                segment: base,
                position: cut.position,
                replacement: None,
                offset: cut.offset,
            })?,
        }
        self.segments.truncate(cut.seg + 1);
        let seg = &mut self.segments[cut.seg];
        seg.end_position = cut.position;
        seg.end_offset = cut.offset;
        seg.index.truncate(relative(base, cut.offset));
        self.epochs.truncate_from_end(cut.offset);
        Ok(())
    }
}
