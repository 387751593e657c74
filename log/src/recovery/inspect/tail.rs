//! The tail of recovery's inspection: the segment holding the recovery point and every batch after it, verified, and what an invalid one means.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's private items, as it sees them"
)]
use super::*;

impl Recovery<'_> {
    /// The recovery point's segment up to the recovery point: its index
    /// file if it describes exactly that, else a verifying scan.
    pub(super) fn load_recovery_segment(
        &mut self,
        k: usize,
        offset: Offset,
        position: u64,
    ) -> Result<Option<Invalid>> {
        let interval = self.dir.options().index_interval_bytes;
        let seg = &self.segments[k];
        let path = self.dir.path().join(index_file_name(seg.base));
        let fs = self.dir.fs();
        // A file shorter than the recovery point (its zero tail cut off) is
        // trusted only after a scan shows that nothing but padding is gone.
        let file_len = seg.file.len()?;
        let whole = file_len >= position;
        let problem = match load_index_file(fs.as_ref(), &path, seg.base, Some(offset), interval)? {
            Ok((h, ix)) if h.end_position == position && whole => {
                let seg = &mut self.segments[k];
                seg.index = ix;
                seg.end_position = position;
                seg.end_offset = offset;
                return Ok(None);
            }
            Ok(_) => IndexProblem::Stale,
            Err(p) => p,
        };
        let out = self.scan_segment(k, position)?;
        // The recovery point may sit after sync padding (a page-aligned end
        // of data at the time it was written).
        let size = self.dir.options().segment_size_bytes;
        let quiet = !matches!(out.stop, Stop::Invalid { .. });
        let at_rp =
            out.end_position == position || padded_end(out.end_position).min(size) == position;
        if quiet && out.end_offset == offset && at_rp {
            self.segments[k].end_position = position;
            if problem != IndexProblem::Missing {
                self.report
                    .indexes_rebuilt
                    .push((self.segments[k].base, problem));
            }
            return Ok(None);
        }
        let (at, kind, epoch) = match out.stop {
            _ if !whole => (
                out.end_position,
                CorruptionKind::ShorterThanRecoveryPoint {
                    len: file_len,
                    recovery_position: position,
                },
                None,
            ),
            Stop::Invalid {
                position,
                kind,
                epoch,
            } => (position, kind, epoch),
            _ => (
                out.end_position,
                CorruptionKind::ShorterThanRecoveryPoint {
                    len: out.end_position,
                    recovery_position: position,
                },
                None,
            ),
        };
        Ok(Some(Invalid {
            seg: k,
            position: at,
            data_end: out.end_position,
            offset: out.end_offset,
            epoch,
            kind,
        }))
    }

    /// Verifies from `from` (in segment `from.segment`) to the end of the
    /// log, deciding torn tail vs corruption.
    pub(super) fn verify_tail(&mut self, mut from: ScanFrom) -> Result<bool> {
        let mut j = self
            .segments
            .iter()
            .position(|s| s.base == from.segment)
            .unwrap_or(0);
        loop {
            let seg = &mut self.segments[j];
            let mut ix = std::mem::take(&mut seg.index);
            let out = scan(seg.file.as_ref(), seg.salt, from, u64::MAX, &mut ix)?;
            seg.index = ix;
            seg.end_position = out.end_position;
            seg.end_offset = out.end_offset;
            self.report.bytes_scanned += out.bytes_scanned;
            for &(e, o) in &out.epoch_starts {
                self.epochs.assign(e, o).map_err(Error::Checkpoint)?;
            }
            if j + 1 == self.segments.len() {
                return self.verify_last(j, &out);
            }
            let next_base = self.segments[j + 1].base;
            if let Some((position, kind, epoch)) =
                sealed_end_problem(&out.stop, out.end_position, out.end_offset, next_base)
            {
                let finding = sealed_finding(&kind);
                let inv = Invalid {
                    seg: j,
                    position,
                    data_end: out.end_position,
                    offset: out.end_offset,
                    epoch,
                    kind,
                };
                return self.decide_invalid(finding, inv);
            }
            self.plan_sealed_index(j)?;
            j += 1;
            from = ScanFrom {
                segment: next_base,
                position: SEGMENT_HEADER_BYTES as u64,
                offset: next_base,
                prev_epoch: out.last_epoch,
            };
        }
    }

    /// The end of the last segment's data: a clean end, a torn tail, or
    /// corruption, as the table says.
    pub(super) fn verify_last(&mut self, j: usize, out: &ScanOutcome) -> Result<bool> {
        let quiet = !matches!(out.stop, Stop::Invalid { .. });
        if self.clean_marker && out.bytes_scanned == 0 {
            // A clean close: the log ends exactly at the recovery point
            // (the marker goes before anything is appended again). Bytes
            // there that are not a batch are the file's earlier life (a
            // recycled segment's stale data), not a torn write: left, and
            // reported as what they are.
            if let Stop::Invalid { position, .. } = &out.stop {
                if *position != out.end_position {
                    return self.verify_unclean_last(j, out, quiet);
                }
                self.report.stale_after_clean_end = Some((self.segments[j].base, *position));
            }
            return Ok(true);
        }
        self.verify_unclean_last(j, out, quiet)
    }

    /// [`Self::verify_last`] without a clean close to trust.
    fn verify_unclean_last(&mut self, j: usize, out: &ScanOutcome, quiet: bool) -> Result<bool> {
        if self.created_first_segment && quiet && out.bytes_scanned == 0 {
            // This open made the file: nothing after its header is the
            // log's, and reading it (a whole segment) would only fill the
            // page cache with read-ahead pages the appends then overwrite.
            return Ok(false);
        }
        let (at, epoch) = match &out.stop {
            Stop::Invalid {
                position, epoch, ..
            } => (*position, *epoch),
            _ => (out.end_position, None),
        };
        let seg = &self.segments[j];
        let tail = inspect_tail(
            seg.file.as_ref(),
            seg.salt,
            TailAt {
                end: out.end_position,
                stop: at,
                offset: out.end_offset,
            },
        )?;
        let invalid = |kind| Invalid {
            seg: j,
            position: at,
            data_end: out.end_position,
            offset: out.end_offset,
            epoch,
            kind,
        };
        if let Some(valid_at) = tail.valid_at {
            let inv = invalid(CorruptionKind::ValidDataFollows { valid_at });
            return self.decide_invalid(Finding::ValidDataFollows, inv);
        }
        let (finding, kind) = match &out.stop {
            // An intact batch in the wrong place is never a tear.
            Stop::Invalid {
                kind: kind @ (CorruptionKind::Misplaced { .. } | CorruptionKind::EpochOrder { .. }),
                ..
            } => return self.decide_invalid(Finding::Misplaced, invalid(*kind)),
            Stop::Invalid { kind, .. } => (Finding::TornTail, *kind),
            _ => (
                Finding::BytesAfterData,
                CorruptionKind::Malformed("non-zero bytes after the end of the data"),
            ),
        };
        let Some(dropped_until) = tail.torn_end else {
            return Ok(false); // nothing after the data to clean up
        };
        debug_assert_eq!(self.decide(finding), Outcome::CutTornTail);
        self.report.torn_tail = Some(TornTail {
            segment: self.segments[j].base,
            position: out.end_position,
            offset: out.end_offset,
            kind,
            dropped_until,
        });
        self.cut = Some(PendingCut {
            seg: j,
            position: out.end_position,
            offset: out.end_offset,
            zero_until: Some(dropped_until),
        });
        Ok(false)
    }

    /// Applies the table to corruption: an error (nothing changed on disk),
    /// or a cut that repair makes, reported.
    pub(super) fn decide_invalid(&mut self, finding: Finding, inv: Invalid) -> Result<bool> {
        let base = self.segments[inv.seg].base;
        if self.decide(finding) == Outcome::Refuse {
            return Err(corruption(
                Location {
                    segment: base,
                    position: inv.position,
                    offset: inv.offset,
                },
                inv.epoch,
                inv.kind,
            ));
        }
        debug_assert_eq!(self.decide(finding), Outcome::CutReportDropped);
        self.report.dropped = Some(DroppedCorruption {
            segment: base,
            position: inv.data_end,
            damage_at: inv.position,
            from_offset: inv.offset,
            epoch: inv.epoch,
            kind: inv.kind,
            segments_removed: self.segments[inv.seg + 1..]
                .iter()
                .map(|s| s.base)
                .collect(),
        });
        self.cut = Some(PendingCut {
            seg: inv.seg,
            position: inv.data_end,
            offset: inv.offset,
            zero_until: None,
        });
        Ok(false)
    }
}
