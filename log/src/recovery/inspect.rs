//! Inspection: reads, verifies and decides; writes nothing (except redoing a
//! valid truncation intent, and creating the first segment of a log that
//! has none, which destroy nothing).
#![expect(
    clippy::indexing_slicing,
    reason = "indices into the segment list come from the list itself (its length, positions \
              found in it), never from bytes read: recovery's decoding goes through the walker"
)]

mod tail;

use quorumlog_checkpoint::{Epoch, EpochMap, Offset, RecoveryPoint};
use quorumlog_io::OpenMode;

use super::{Finding, Outcome, PendingCut, Recovery};
use crate::dir::{is_pool_file, Cut, CLEAN_CONTENT, CLEAN_FILE, PREPARED_FILE};
use crate::error::{CorruptionKind, Error, Result};
use crate::format::{index_file_name, parse_file_name, SEGMENT_HEADER_BYTES};
use crate::intent::{self, Intent, INTENT_FILE};
use crate::recovery::report::{DroppedCorruption, ScanStart, TornTail};
use crate::segment::corruption;
use crate::segment::index::{load_index_file, IndexProblem, SparseIndex};
use crate::segment::scan::{inspect_tail, scan, ScanFrom, ScanOutcome, Stop, TailAt};
use crate::segment::walk::padded_end;
use crate::segment::Location;

/// An invalid place found while verifying.
#[derive(Debug, Clone, Copy)]
pub(super) struct Invalid {
    seg: usize,
    /// Where the invalid bytes start.
    position: u64,
    /// Where the valid data before them ends (the cut, if one is made).
    data_end: u64,
    offset: Offset,
    epoch: Option<Epoch>,
    kind: CorruptionKind,
}

impl Recovery<'_> {
    /// Notes leftovers and whether a valid clean marker is there (removed
    /// by repair, so a crash from then on is seen as unclean).
    pub(super) fn inspect_directory(&mut self) -> Result<()> {
        let fs = self.dir.fs();
        for e in fs.list(self.dir.path())? {
            let temp = std::path::Path::new(&e.name)
                .extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("tmp"));
            if e.name == PREPARED_FILE || (temp && !e.is_dir) {
                debug_assert_eq!(self.decide(Finding::Leftover), Outcome::Remove);
                self.leftovers.push(e.name);
            } else if e.name == CLEAN_FILE {
                let f = fs.open(&self.dir.path().join(&e.name), OpenMode::Read)?;
                self.clean_marker =
                    f.len()? == CLEAN_CONTENT.len() as u64 && f.read_to_end()? == CLEAN_CONTENT;
                self.leftovers.push(e.name);
            } else if parse_file_name(&e.name, "log").is_none()
                && parse_file_name(&e.name, "index").is_none()
                && e.name != INTENT_FILE
                && !is_pool_file(&e.name)
            {
                debug_assert_eq!(self.decide(Finding::UnknownFile), Outcome::LeaveReport);
                self.report.unknown_files.push(e.name);
            }
        }
        Ok(())
    }

    /// Redoes a valid truncation intent (the clean marker goes first); an
    /// invalid one is decided by the table.
    pub(super) fn redo_intent(&mut self) -> Result<()> {
        let (fs, path) = (self.dir.fs(), self.dir.path());
        let Some(found) = intent::read(fs.as_ref(), path)? else {
            return Ok(());
        };
        let finding = if found.is_ok() {
            Finding::Intent
        } else {
            Finding::InvalidIntent
        };
        if let (Err(kind), Outcome::Refuse) = (&found, self.decide(finding)) {
            return Err(corruption(
                Location {
                    segment: Offset(0),
                    position: 0,
                    offset: Offset(0),
                },
                None,
                *kind,
            ));
        }
        // Redoing changes the log: the clean marker must go first.
        self.remove_leftovers()?;
        self.report.intent_redone = Some(match found {
            Ok(Intent::Cut {
                segment,
                position,
                bytes,
                offset,
            }) => {
                self.dir.redo_cut(Cut {
                    segment,
                    position,
                    replacement: Some(&bytes),
                    offset,
                })?;
                format!(
                    "suffix truncation to {offset} (segment {segment} rewritten from byte {position})"
                )
            }
            Ok(Intent::Full {
                start,
                purged_epoch,
            }) => {
                self.dir.redo_full(start, purged_epoch)?;
                format!("full truncation to {start}")
            }
            Ok(Intent::Zero {
                segment,
                position,
                bytes,
                until,
            }) => {
                self.dir.redo_zero(segment, position, &bytes, until)?;
                format!("torn tail of segment {segment} zeroed from byte {position} to {until}")
            }
            Err(_) => "invalid intent removed".into(),
        });
        intent::remove(fs.as_ref(), path)
    }

    /// Notes segments wholly below the log start offset (left by an
    /// interrupted prefix truncation; repair removes them) and creates the
    /// first segment of an empty log. Returns the log start offset, if
    /// known, and the segments to open.
    pub(super) fn plan_below_start(
        &mut self,
        mut bases: Vec<Offset>,
    ) -> Result<(Option<Offset>, Vec<Offset>)> {
        let log_start = self.cp.log_start_offset.map(|l| l.offset);
        if let Some(start) = log_start {
            let doomed = bases.windows(2).take_while(|w| w[1] <= start).count();
            self.below_start = bases.drain(..doomed).collect();
            // A recovery point in a removed segment moves to the start of
            // the first one left: nothing before it remains.
            if let (Some(rp), Some(&first)) = (self.cp.recovery_point, bases.first()) {
                if rp.segment < first {
                    self.cp.recovery_point = Some(RecoveryPoint {
                        offset: first,
                        segment: first,
                        position: SEGMENT_HEADER_BYTES as u64,
                    });
                }
            }
        }
        if bases.is_empty() {
            let start = log_start.unwrap_or_default();
            if let Some(rp) = self.cp.recovery_point {
                if rp.offset > start
                    && self.decide(Finding::RecoveryPointSegmentMissing) == Outcome::Refuse
                {
                    return Err(missing_segment(&rp));
                }
            }
            // Creating the first segment destroys nothing.
            self.leftovers.retain(|n| n != PREPARED_FILE);
            self.dir.create_segment(start)?;
            self.dir.prefill_pool()?;
            self.created_first_segment = true;
            bases.push(start);
        }
        Ok((log_start, bases))
    }

    /// Opens every segment, checking its header. A segment with an invalid
    /// header is damage (a roll syncs the header before the rename that
    /// names the file): decided by the table.
    pub(super) fn open_segments(&mut self, bases: &[Offset]) -> Result<()> {
        for (i, &base) in bases.iter().enumerate() {
            let kind = match self.dir.open_segment(base) {
                Ok(s) => {
                    self.segments.push(s);
                    continue;
                }
                Err(Error::Corruption { kind, .. }) => kind,
                Err(e) => return Err(e),
            };
            match self.decide(Finding::InvalidSegmentHeader) {
                Outcome::Refuse => return Err(corruption(Location::header(base), None, kind)),
                _ => return self.drop_segments_from(bases, i, kind),
            }
        }
        Ok(())
    }

    /// Verifies what must be verified; returns whether the log was closed
    /// cleanly and nothing needed checking.
    pub(super) fn verify(&mut self) -> Result<bool> {
        let (mut rp, map) = match (self.cp.recovery_point, self.cp.epoch_map.clone()) {
            (Some(rp), Some(map)) => (rp, map),
            (None, _) => return self.verify_full("no usable recovery point"),
            (_, None) => return self.verify_full("no usable epoch map"),
        };
        // `format` writes (0, 0, 0): the start of the first segment, whose
        // data begins after the segment header.
        if rp.offset == rp.segment && rp.position < SEGMENT_HEADER_BYTES as u64 {
            rp.position = SEGMENT_HEADER_BYTES as u64;
        }
        let Some(k) = self.segments.iter().position(|s| s.base == rp.segment) else {
            return match self.decide(Finding::RecoveryPointSegmentMissing) {
                Outcome::Refuse => Err(missing_segment(&rp)),
                _ => self.verify_full("the recovery point's segment is missing"),
            };
        };
        let len = self.segments[k].file.len()?;
        // A file cut at the end of its data may lack the sync padding the
        // recovery point counts; anything more missing is damage.
        if padded_end(len) < rp.position || rp.position < SEGMENT_HEADER_BYTES as u64 {
            return self.shorter_than_recovery_point(rp, len);
        }
        self.report.scan_start = ScanStart::RecoveryPoint {
            offset: rp.offset,
            segment: rp.segment,
            position: rp.position,
        };
        self.epochs = map;
        self.epochs.truncate_from_end(rp.offset);
        for i in 0..k {
            if let Some(inv) = self.load_sealed(i)? {
                return self.decide_invalid(sealed_finding(&inv.kind), inv);
            }
        }
        if let Some(inv) = self.load_recovery_segment(k, rp.offset, rp.position)? {
            if let CorruptionKind::ShorterThanRecoveryPoint { len, .. } = inv.kind {
                return self.shorter_than_recovery_point(rp, len);
            }
            return self.decide_invalid(Finding::BeforeRecoveryPoint, inv);
        }
        let prev = self.epochs.latest().map(|e| e.epoch);
        self.verify_tail(ScanFrom {
            segment: self.segments[k].base,
            position: rp.position,
            offset: rp.offset,
            prev_epoch: prev,
        })
    }

    fn shorter_than_recovery_point(&mut self, rp: RecoveryPoint, len: u64) -> Result<bool> {
        match self.decide(Finding::ShorterThanRecoveryPoint) {
            Outcome::Refuse => Err(corruption(
                Location {
                    segment: rp.segment,
                    position: rp.position,
                    offset: rp.offset,
                },
                None,
                CorruptionKind::ShorterThanRecoveryPoint {
                    len,
                    recovery_position: rp.position,
                },
            )),
            _ => self.verify_full("a segment is shorter than the recovery point"),
        }
    }

    fn verify_full(&mut self, reason: &str) -> Result<bool> {
        self.report.scan_start = ScanStart::FullScan {
            reason: reason.to_string(),
        };
        self.epochs = EpochMap::new();
        self.index_writes.clear();
        let interval = self.dir.options().index_interval_bytes;
        for seg in &mut self.segments {
            seg.index = SparseIndex::new(interval);
        }
        let base = self.segments[0].base;
        self.verify_tail(ScanFrom {
            segment: base,
            position: SEGMENT_HEADER_BYTES as u64,
            offset: base,
            prev_epoch: None,
        })
    }

    /// A sealed segment before the recovery point: trusted through its index
    /// file, or verified by a scan whose index repair writes.
    fn load_sealed(&mut self, i: usize) -> Result<Option<Invalid>> {
        let next_base = self.segments[i + 1].base;
        let seg = &self.segments[i];
        let interval = self.dir.options().index_interval_bytes;
        let path = self.dir.path().join(index_file_name(seg.base));
        let fs = self.dir.fs();
        let problem =
            match load_index_file(fs.as_ref(), &path, seg.base, Some(next_base), interval)? {
                Ok((h, ix)) if h.end_position <= seg.file.len()? => {
                    let seg = &mut self.segments[i];
                    seg.index = ix;
                    seg.end_position = h.end_position;
                    seg.end_offset = next_base;
                    return Ok(None);
                }
                Ok(_) => IndexProblem::Stale,
                Err(p) => p,
            };
        let out = self.scan_segment(i, u64::MAX)?;
        if let Some((position, kind, epoch)) =
            sealed_end_problem(&out.stop, out.end_position, out.end_offset, next_base)
        {
            return Ok(Some(Invalid {
                seg: i,
                position,
                data_end: out.end_position,
                offset: out.end_offset,
                epoch,
                kind,
            }));
        }
        debug_assert_eq!(self.decide(Finding::IndexUnusable), Outcome::Rebuild);
        self.index_writes.push((self.segments[i].base, problem));
        Ok(None)
    }

    /// Scans segment `i` from its first batch up to `limit`, setting its
    /// end and index from what the scan verified.
    fn scan_segment(&mut self, i: usize, limit: u64) -> Result<ScanOutcome> {
        let seg = &self.segments[i];
        let mut ix = SparseIndex::new(self.dir.options().index_interval_bytes);
        let from = ScanFrom {
            segment: seg.base,
            position: SEGMENT_HEADER_BYTES as u64,
            offset: seg.base,
            prev_epoch: None,
        };
        let out = scan(seg.file.as_ref(), seg.salt, from, limit, &mut ix)?;
        self.report.bytes_scanned += out.bytes_scanned;
        let seg = &mut self.segments[i];
        seg.end_position = out.end_position;
        seg.end_offset = out.end_offset;
        seg.index = ix;
        Ok(out)
    }

    /// Notes whether a verified sealed segment needs its index file written.
    fn plan_sealed_index(&mut self, j: usize) -> Result<()> {
        let next_base = self.segments[j + 1].base;
        let seg = &self.segments[j];
        let path = self.dir.path().join(index_file_name(seg.base));
        match load_index_file(self.dir.fs().as_ref(), &path, seg.base, Some(next_base), 1)? {
            Ok((h, _)) if h.end_position == seg.end_position => {}
            Ok(_) => self.index_writes.push((seg.base, IndexProblem::Stale)),
            Err(p) => self.index_writes.push((seg.base, p)),
        }
        Ok(())
    }
}

/// The finding for invalid bytes in a sealed segment.
fn sealed_finding(kind: &CorruptionKind) -> Finding {
    if matches!(kind, CorruptionKind::Gap { .. }) {
        Finding::SealedEndsShort
    } else {
        Finding::InSealedSegment
    }
}

/// The error for a recovery point whose segment is gone.
fn missing_segment(rp: &RecoveryPoint) -> Error {
    corruption(
        Location {
            segment: rp.segment,
            position: rp.position,
            offset: rp.offset,
        },
        None,
        CorruptionKind::MissingSegment,
    )
}

/// Whether a sealed segment's scan ended anywhere but cleanly at the next
/// segment's base: where, what, and the epoch of the batch there.
fn sealed_end_problem(
    stop: &Stop,
    data_end: u64,
    end: Offset,
    next_base: Offset,
) -> Option<(u64, CorruptionKind, Option<Epoch>)> {
    match stop {
        // The data is complete: what follows it is not data (zeros, or the
        // stale batches of a recycled file's earlier life).
        _ if end == next_base => None,
        Stop::Invalid {
            position,
            kind,
            epoch,
        } => Some((*position, *kind, *epoch)),
        Stop::Zeros | Stop::EndOfFile | Stop::Limit => {
            Some((data_end, CorruptionKind::Gap { end, next_base }, None))
        }
    }
}
