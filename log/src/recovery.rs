//! Opening a log: what is trusted, what is verified, and what a crash left.
//!
//! Open trusts the checkpoints and verifies only what follows the recovery
//! point: after a clean close (recovery point at the log end, the active
//! segment's index written, the `clean` marker present) it reads one batch
//! header per segment file and the index files, whatever the log's size.
//!
//! Decision table for the first bytes that are not a valid continuation of
//! the log (DESIGN.md invariant 3), implemented by [`Recovery::decide`]:
//!
//! | where the invalid bytes are                     | valid batch after them? | Strict                 | `TruncateAtCorruption`        |
//! |-------------------------------------------------|-------------------------|------------------------|-------------------------------|
//! | before the recovery point                       | (any)                   | `Corruption`           | cut there, report dropped     |
//! | in a sealed segment (a later segment exists)    | (any)                   | `Corruption`           | cut there, report dropped     |
//! | sealed segment ends cleanly but not at the next segment's base | —        | `Corruption` (`Gap`)   | cut there, report dropped     |
//! | last segment, after the recovery point          | no                      | torn tail: cut, report | torn tail: cut, report        |
//! | last segment, after the recovery point          | yes                     | `Corruption` (`ValidDataFollows`) | cut there, report dropped |
//!
//! "Cut" truncates the segment at the last valid batch and zero-fills the
//! rest, removing every later segment. Other outcomes:
//!
//! | found at open                                   | outcome |
//! |-------------------------------------------------|---------|
//! | `truncation.intent`                             | the truncation is redone, then the intent removed |
//! | invalid `truncation.intent`                     | Strict: `Corruption`; lenient: removed, reported |
//! | `next.prepared`, `*.tmp`                        | removed |
//! | segment wholly below the log start offset       | removed (interrupted prefix truncation) |
//! | last segment with an invalid header             | removed (interrupted roll), reported |
//! | recovery point's segment missing                | Strict: `Corruption` (`MissingSegment`); lenient: full scan |
//! | segment shorter than the recovery point         | Strict: `Corruption` (`ShorterThanRecoveryPoint`); lenient: full scan |
//! | missing segment in the middle                   | the segment before it ends at another offset than the next base: `Gap` (table above) |
//! | recovery point or epoch map missing / corrupt   | full scan, reported |
//! | sealed segment's index missing, corrupt, stale  | rebuilt by scanning that segment (verifying it), rewritten, reported |
//! | log start offset above the recovered log end    | the log restarts empty at the log start (records below it are covered by a snapshot) |
//! | high watermark above the recovered log end      | clamped to the log end, reported |
//!
//! Every step is idempotent, so a crash during recovery followed by another
//! recovery ends in the same state (invariant 9).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use quorumlog_checkpoint::{
    Checkpoints, DataDir, Degraded, Epoch, EpochMap, Offset, RecoveryPoint, SharedFs,
};
use quorumlog_io::OpenMode;

use crate::error::{CorruptionKind, Error, Result};
use crate::format::{
    align_up, index_file_name, parse_file_name, segment_file_name, SEGMENT_HEADER_BYTES,
};
use crate::intent::{self, Intent, INTENT_FILE};
use crate::log::truncate::{
    create_segment_file, cut_page_safe, redo_cut, redo_full, remove_if_present, Cut,
};
use crate::log::{Log, PREPARED_FILE};
use crate::options::{LogOptions, RecoveryMode};
use crate::segment::index::{load_index_file, IndexProblem, SparseIndex};
use crate::segment::scan::{inspect_tail, scan, Stop};
use crate::segment::{corruption, Segment};

/// The marker a clean close leaves in the log directory.
pub const CLEAN_FILE: &str = "clean";
const CLEAN_CONTENT: [u8; 8] = *b"QLCL\x01\x00\x00\x00";

/// Where recovery started verifying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanStart {
    /// At the recovery point.
    RecoveryPoint {
        /// Its offset.
        offset: Offset,
        /// Its segment.
        segment: Offset,
        /// Its byte position.
        position: u64,
    },
    /// At the first segment.
    FullScan {
        /// Why the recovery point could not be used.
        reason: String,
    },
}

/// A torn tail that recovery cut off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The segment.
    pub segment: Offset,
    /// Where the last valid batch ends (the new end of data).
    pub position: u64,
    /// The log end offset after the cut.
    pub offset: Offset,
    /// What the first invalid bytes were.
    pub kind: CorruptionKind,
}

/// What `RecoveryMode::TruncateAtCorruption` dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedCorruption {
    /// The segment holding the first corruption.
    pub segment: Offset,
    /// Its byte position (the new end of data).
    pub position: u64,
    /// Every record at or after this offset was dropped.
    pub from_offset: Offset,
    /// The epoch of the corrupt batch, if its header was readable.
    pub epoch: Option<Epoch>,
    /// What was wrong.
    pub kind: CorruptionKind,
    /// Later segments removed.
    pub segments_removed: Vec<Offset>,
}

/// What open found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Whether the previous close was clean (nothing was scanned).
    pub clean: bool,
    /// Where verification started.
    pub scan_start: ScanStart,
    /// Bytes of batches read and verified.
    pub bytes_scanned: u64,
    /// A torn tail cut off, if any.
    pub torn_tail: Option<TornTail>,
    /// Corruption dropped in `TruncateAtCorruption` mode, if any.
    pub dropped: Option<DroppedCorruption>,
    /// Segments whose index was rebuilt, and why.
    pub indexes_rebuilt: Vec<(Offset, IndexProblem)>,
    /// Segment files removed, and why.
    pub segments_removed: Vec<(Offset, &'static str)>,
    /// A truncation redone from its intent.
    pub intent_redone: Option<String>,
    /// Files in the log directory that are not the log's (left alone).
    pub unknown_files: Vec<String>,
    /// The high watermark found above the log end: (found, clamped to).
    pub high_watermark_clamped: Option<(Offset, Offset)>,
    /// Checkpoint files that could not be trusted.
    pub checkpoints_degraded: Vec<Degraded>,
}

impl Default for RecoveryReport {
    fn default() -> Self {
        RecoveryReport {
            clean: false,
            scan_start: ScanStart::FullScan {
                reason: String::new(),
            },
            bytes_scanned: 0,
            torn_tail: None,
            dropped: None,
            indexes_rebuilt: Vec::new(),
            segments_removed: Vec::new(),
            intent_redone: None,
            unknown_files: Vec::new(),
            high_watermark_clamped: None,
            checkpoints_degraded: Vec::new(),
        }
    }
}

/// An invalid place found while verifying.
struct Invalid {
    seg: usize,
    position: u64,
    offset: Offset,
    epoch: Option<Epoch>,
    kind: CorruptionKind,
}

struct Recovery {
    dd: Arc<DataDir>,
    fs: SharedFs,
    dir: PathBuf,
    options: LogOptions,
    cp: Checkpoints,
    report: RecoveryReport,
    segments: Vec<Segment>,
    epochs: EpochMap,
}

impl Log {
    /// Opens the log of data directory `dd`, recovering from a crash if one
    /// happened (see the module's decision table).
    ///
    /// # Errors
    /// `InvalidOptions`; `Corruption` (Strict mode) naming segment, position,
    /// offset and epoch; `Io`; `Checkpoint`.
    pub fn open(dd: Arc<DataDir>, options: LogOptions) -> Result<Log> {
        options.validate()?;
        let fs = dd.fs().clone();
        let dir = dd.log_dir();
        let cp = dd.checkpoints();
        let report = RecoveryReport {
            checkpoints_degraded: dd.report().degraded.clone(),
            ..RecoveryReport::default()
        };
        let r = Recovery {
            dd,
            fs,
            dir,
            options,
            cp,
            report,
            segments: Vec::new(),
            epochs: EpochMap::new(),
        };
        r.run()
    }
}

impl Recovery {
    fn strict(&self) -> bool {
        self.options.recovery_mode == RecoveryMode::Strict
    }

    fn run(mut self) -> Result<Log> {
        let clean_marker = self.clean_directory()?;
        self.redo_intent()?;
        self.cp = self.dd.checkpoints();
        let bases = self.list_segments()?;
        let (log_start, bases) = self.remove_below_start(bases)?;
        self.open_segments(&bases)?;
        let clean = self.verify(clean_marker)?;
        let log_start = log_start.unwrap_or(self.segments[0].base);
        self.finish(clean, log_start)
    }

    /// Removes leftovers; returns whether a valid clean marker was found
    /// (removing it durably, so a crash from now on is seen as unclean).
    fn clean_directory(&mut self) -> Result<bool> {
        let mut clean = false;
        let mut removed = false;
        for e in self.fs.list(&self.dir)? {
            let path = self.dir.join(&e.name);
            let temp = std::path::Path::new(&e.name)
                .extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("tmp"));
            if e.name == PREPARED_FILE || (temp && !e.is_dir) {
                self.fs.remove_file(&path)?;
                removed = true;
            } else if e.name == CLEAN_FILE {
                let f = self.fs.open(&path, OpenMode::Read)?;
                clean = f.len()? == CLEAN_CONTENT.len() as u64 && f.read_to_end()? == CLEAN_CONTENT;
                drop(f);
                self.fs.remove_file(&path)?;
                removed = true;
            } else if parse_file_name(&e.name, "log").is_none()
                && parse_file_name(&e.name, "index").is_none()
                && e.name != INTENT_FILE
            {
                self.report.unknown_files.push(e.name);
            }
        }
        if removed {
            self.fs.sync_dir(&self.dir)?;
        }
        Ok(clean)
    }

    fn redo_intent(&mut self) -> Result<()> {
        let Some(found) = intent::read(self.fs.as_ref(), &self.dir)? else {
            return Ok(());
        };
        match found {
            Ok(Intent::Cut {
                segment,
                position,
                bytes,
                offset,
            }) => {
                redo_cut(
                    self.fs.as_ref(),
                    &self.dd,
                    &self.dir,
                    &self.options,
                    Cut {
                        segment,
                        position,
                        replacement: Some(&bytes),
                        offset,
                    },
                )?;
                self.report.intent_redone = Some(format!(
                    "suffix truncation to {offset} (segment {segment} rewritten from byte {position})"
                ));
            }
            Ok(Intent::Full { start }) => {
                redo_full(self.fs.as_ref(), &self.dd, &self.dir, &self.options, start)?;
                self.report.intent_redone = Some(format!("full truncation to {start}"));
            }
            Err(kind) if self.strict() => {
                return Err(corruption(Offset(0), 0, Offset(0), None, kind));
            }
            Err(_) => {
                self.report.intent_redone = Some("invalid intent removed".into());
            }
        }
        intent::remove(self.fs.as_ref(), &self.dir)
    }

    fn list_segments(&self) -> Result<Vec<Offset>> {
        let mut bases: Vec<Offset> = self
            .fs
            .list(&self.dir)?
            .iter()
            .filter_map(|e| parse_file_name(&e.name, "log"))
            .collect();
        bases.sort_unstable();
        Ok(bases)
    }

    /// Removes segments wholly below the log start offset (left by an
    /// interrupted prefix truncation) and creates the first segment of an
    /// empty log. Returns the log start offset, if known.
    fn remove_below_start(
        &mut self,
        mut bases: Vec<Offset>,
    ) -> Result<(Option<Offset>, Vec<Offset>)> {
        let log_start = self.cp.log_start_offset.map(|l| l.0);
        if let Some(start) = log_start {
            let doomed = bases.windows(2).take_while(|w| w[1] <= start).count();
            for base in bases.drain(..doomed) {
                self.fs
                    .remove_file(&self.dir.join(segment_file_name(base)))?;
                remove_if_present(self.fs.as_ref(), &self.dir.join(index_file_name(base)))?;
                self.report
                    .segments_removed
                    .push((base, "wholly below the log start offset"));
            }
            if doomed > 0 {
                self.fs.sync_dir(&self.dir)?;
            }
            // A recovery point in a removed segment moves to the start of
            // the first one left: nothing before it remains.
            if let (Some(rp), Some(&first)) = (self.cp.recovery_point, bases.first()) {
                if rp.segment < first {
                    let moved = RecoveryPoint {
                        offset: first,
                        segment: first,
                        position: SEGMENT_HEADER_BYTES as u64,
                    };
                    self.dd.write_recovery_point(moved)?;
                    self.cp.recovery_point = Some(moved);
                }
            }
        }
        if bases.is_empty() {
            let start = log_start.unwrap_or_default();
            if let Some(rp) = self.cp.recovery_point {
                if rp.offset > start && self.strict() {
                    return Err(missing_segment(&rp));
                }
            }
            create_segment_file(self.fs.as_ref(), &self.dir, &self.options, start)?;
            bases.push(start);
        }
        Ok((log_start, bases))
    }

    /// Opens every segment, checking its header. The last one with a bad
    /// header is an interrupted roll and is removed; an earlier one is
    /// corruption.
    fn open_segments(&mut self, bases: &[Offset]) -> Result<()> {
        for (i, &base) in bases.iter().enumerate() {
            let kind = match Segment::open(
                self.fs.as_ref(),
                &self.dir,
                base,
                self.options.index_interval_bytes,
            ) {
                Ok(s) => {
                    self.segments.push(s);
                    continue;
                }
                Err(Error::Corruption { kind, .. }) => kind,
                Err(e) => return Err(e),
            };
            let last = i + 1 == bases.len();
            if !last && self.strict() {
                return Err(corruption(base, 0, base, None, kind));
            }
            let doomed = &bases[i..];
            for b in doomed.iter().rev() {
                self.fs.remove_file(&self.dir.join(segment_file_name(*b)))?;
                remove_if_present(self.fs.as_ref(), &self.dir.join(index_file_name(*b)))?;
            }
            self.fs.sync_dir(&self.dir)?;
            if last {
                self.report.segments_removed.push((
                    base,
                    "last segment with an invalid header (interrupted roll)",
                ));
            } else {
                self.report.dropped = Some(DroppedCorruption {
                    segment: base,
                    position: 0,
                    from_offset: base,
                    epoch: None,
                    kind,
                    segments_removed: doomed.to_vec(),
                });
            }
            if self.segments.is_empty() {
                create_segment_file(self.fs.as_ref(), &self.dir, &self.options, base)?;
                self.segments.push(Segment::open(
                    self.fs.as_ref(),
                    &self.dir,
                    base,
                    self.options.index_interval_bytes,
                )?);
            }
            break;
        }
        Ok(())
    }

    /// Verifies what must be verified; returns whether the log was closed
    /// cleanly and nothing needed checking.
    fn verify(&mut self, clean_marker: bool) -> Result<bool> {
        let full = |reason: &str| ScanStart::FullScan {
            reason: reason.to_string(),
        };
        let (mut rp, map) = match (self.cp.recovery_point, self.cp.epoch_map.clone()) {
            (Some(rp), Some(map)) => (rp, map),
            (None, _) => return self.verify_full(full("no usable recovery point")),
            (_, None) => return self.verify_full(full("no usable epoch map")),
        };
        // `format` writes (0, 0, 0): the start of the first segment, whose
        // data begins after the segment header.
        if rp.offset == rp.segment && rp.position < SEGMENT_HEADER_BYTES as u64 {
            rp.position = SEGMENT_HEADER_BYTES as u64;
        }
        let Some(k) = self.segments.iter().position(|s| s.base == rp.segment) else {
            if self.strict() {
                return Err(missing_segment(&rp));
            }
            return self.verify_full(full("the recovery point's segment is missing"));
        };
        let len = self.segments[k].file.len()?;
        if len < rp.position || rp.position < SEGMENT_HEADER_BYTES as u64 {
            let kind = CorruptionKind::ShorterThanRecoveryPoint {
                len,
                recovery_position: rp.position,
            };
            if self.strict() {
                return Err(corruption(rp.segment, rp.position, rp.offset, None, kind));
            }
            return self.verify_full(full("a segment is shorter than the recovery point"));
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
                return self.decide(inv);
            }
        }
        if let Some(inv) = self.load_recovery_segment(k, rp.offset, rp.position)? {
            return self.decide(inv);
        }
        let prev = self.epochs.latest().map(|e| e.epoch);
        self.verify_tail(k, rp.position, rp.offset, prev, clean_marker)
    }

    fn verify_full(&mut self, start: ScanStart) -> Result<bool> {
        self.report.scan_start = start;
        self.epochs = EpochMap::new();
        let base = self.segments[0].base;
        self.verify_tail(0, SEGMENT_HEADER_BYTES as u64, base, None, false)
    }

    /// A sealed segment before the recovery point: trusted through its index
    /// file, or verified by a scan that rebuilds the index.
    fn load_sealed(&mut self, i: usize) -> Result<Option<Invalid>> {
        let next_base = self.segments[i + 1].base;
        let seg = &self.segments[i];
        let interval = self.options.index_interval_bytes;
        let path = self.dir.join(index_file_name(seg.base));
        let problem =
            match load_index_file(self.fs.as_ref(), &path, seg.base, Some(next_base), interval)? {
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
        let mut ix = SparseIndex::new(interval);
        let seg = &self.segments[i];
        let out = scan(
            seg.file.as_ref(),
            seg.base,
            SEGMENT_HEADER_BYTES as u64,
            seg.base,
            None,
            u64::MAX,
            &mut ix,
        )?;
        self.report.bytes_scanned += out.bytes_scanned;
        let bad = sealed_end_problem(&out.stop, out.end_offset, next_base);
        let seg = &mut self.segments[i];
        seg.end_position = out.end_position;
        seg.end_offset = out.end_offset;
        seg.index = ix;
        if let Some((kind, epoch)) = bad {
            return Ok(Some(Invalid {
                seg: i,
                position: out.end_position,
                offset: out.end_offset,
                epoch,
                kind,
            }));
        }
        self.write_sealed_index(i, problem)?;
        Ok(None)
    }

    /// The recovery point's segment up to the recovery point: its index
    /// file if it describes exactly that, else a verifying scan.
    fn load_recovery_segment(
        &mut self,
        k: usize,
        offset: Offset,
        position: u64,
    ) -> Result<Option<Invalid>> {
        let interval = self.options.index_interval_bytes;
        let seg = &self.segments[k];
        let path = self.dir.join(index_file_name(seg.base));
        let problem =
            match load_index_file(self.fs.as_ref(), &path, seg.base, Some(offset), interval)? {
                Ok((h, ix)) if h.end_position == position => {
                    let seg = &mut self.segments[k];
                    seg.index = ix;
                    seg.end_position = position;
                    seg.end_offset = offset;
                    return Ok(None);
                }
                Ok(_) => IndexProblem::Stale,
                Err(p) => p,
            };
        let mut ix = SparseIndex::new(interval);
        let out = scan(
            seg.file.as_ref(),
            seg.base,
            SEGMENT_HEADER_BYTES as u64,
            seg.base,
            None,
            position,
            &mut ix,
        )?;
        self.report.bytes_scanned += out.bytes_scanned;
        let seg = &mut self.segments[k];
        seg.end_position = out.end_position;
        seg.end_offset = out.end_offset;
        seg.index = ix;
        // The recovery point may sit after alignment padding (page-aligned
        // end of data at the time it was written).
        let padded = out.stop == Stop::Zeros
            && align_up(out.end_position).min(self.options.segment_size_bytes) == position;
        let reached = out.end_offset == offset && (out.end_position == position || padded);
        if reached {
            self.segments[k].end_position = position;
            let seg = &self.segments[k];
            if problem != IndexProblem::Missing {
                self.report.indexes_rebuilt.push((seg.base, problem));
            }
            return Ok(None);
        }
        let (kind, epoch) = match out.stop {
            Stop::Invalid { kind, epoch } => (kind, epoch),
            _ => (
                CorruptionKind::ShorterThanRecoveryPoint {
                    len: out.end_position,
                    recovery_position: position,
                },
                None,
            ),
        };
        Ok(Some(Invalid {
            seg: k,
            position: out.end_position,
            offset: out.end_offset,
            epoch,
            kind,
        }))
    }

    /// Verifies from segment `k` at `position` (holding `offset`) to the end
    /// of the log, deciding torn tail vs corruption.
    fn verify_tail(
        &mut self,
        k: usize,
        mut position: u64,
        mut offset: Offset,
        mut prev: Option<Epoch>,
        clean_marker: bool,
    ) -> Result<bool> {
        let mut j = k;
        loop {
            let seg = &mut self.segments[j];
            let mut ix = std::mem::take(&mut seg.index);
            let out = scan(
                seg.file.as_ref(),
                seg.base,
                position,
                offset,
                prev,
                u64::MAX,
                &mut ix,
            )?;
            seg.index = ix;
            seg.end_position = out.end_position;
            seg.end_offset = out.end_offset;
            self.report.bytes_scanned += out.bytes_scanned;
            for &(e, o) in &out.epoch_starts {
                self.epochs.assign(e, o).map_err(Error::Checkpoint)?;
            }
            prev = out.last_epoch;
            if j + 1 < self.segments.len() {
                let next_base = self.segments[j + 1].base;
                if let Some((kind, epoch)) =
                    sealed_end_problem(&out.stop, out.end_offset, next_base)
                {
                    return self.decide(Invalid {
                        seg: j,
                        position: out.end_position,
                        offset: out.end_offset,
                        epoch,
                        kind,
                    });
                }
                self.ensure_sealed_index(j)?;
                j += 1;
                position = SEGMENT_HEADER_BYTES as u64;
                offset = next_base;
                continue;
            }
            let quiet = matches!(out.stop, Stop::Zeros | Stop::EndOfFile);
            if clean_marker && quiet && out.bytes_scanned == 0 {
                return Ok(true);
            }
            let intact_but_misplaced = matches!(
                &out.stop,
                Stop::Invalid {
                    kind: CorruptionKind::Misplaced { .. } | CorruptionKind::EpochOrder { .. },
                    ..
                }
            );
            let tail = inspect_tail(self.segments[j].file.as_ref(), out.end_position)?;
            let stop_epoch = match &out.stop {
                Stop::Invalid { epoch, .. } => *epoch,
                _ => None,
            };
            if let Some(valid_at) = tail.valid_at {
                return self.decide(Invalid {
                    seg: j,
                    position: out.end_position,
                    offset: out.end_offset,
                    epoch: stop_epoch,
                    kind: CorruptionKind::ValidDataFollows { valid_at },
                });
            }
            if let Stop::Invalid { kind, epoch } = out.stop {
                if intact_but_misplaced {
                    // An intact batch in the wrong place is never a tear.
                    return self.decide(Invalid {
                        seg: j,
                        position: out.end_position,
                        offset: out.end_offset,
                        epoch,
                        kind,
                    });
                }
                self.report.torn_tail = Some(TornTail {
                    segment: self.segments[j].base,
                    position: out.end_position,
                    offset: out.end_offset,
                    kind,
                });
            }
            if tail.all_zero {
                return Ok(false); // nothing after the data to clean up
            }
            // Zero-fill after the last valid batch (idempotent).
            self.cut(j, out.end_position, out.end_offset)?;
            return Ok(false);
        }
    }

    /// Applies the decision table to corruption: an error in Strict mode, a
    /// cut (reported) otherwise.
    fn decide(&mut self, inv: Invalid) -> Result<bool> {
        let base = self.segments[inv.seg].base;
        if self.strict() {
            return Err(corruption(
                base,
                inv.position,
                inv.offset,
                inv.epoch,
                inv.kind,
            ));
        }
        let removed = self.cut(inv.seg, inv.position, inv.offset)?;
        self.report.dropped = Some(DroppedCorruption {
            segment: base,
            position: inv.position,
            from_offset: inv.offset,
            epoch: inv.epoch,
            kind: inv.kind,
            segments_removed: removed,
        });
        Ok(false)
    }

    /// Ends the log in segment `j` at `position` (= `offset`): later
    /// segments removed, the rest of the segment zero-filled, synced.
    fn cut(&mut self, j: usize, position: u64, offset: Offset) -> Result<Vec<Offset>> {
        let base = self.segments[j].base;
        cut_page_safe(
            self.fs.as_ref(),
            &self.dd,
            &self.dir,
            &self.options,
            Cut {
                segment: base,
                position,
                replacement: None,
                offset,
            },
        )?;
        let removed: Vec<Offset> = self.segments.drain(j + 1..).map(|s| s.base).collect();
        let seg = &mut self.segments[j];
        seg.end_position = position;
        seg.end_offset = offset;
        seg.index
            .truncate(u32::try_from(offset.0 - base.0).unwrap_or(u32::MAX));
        self.epochs.truncate_from_end(offset);
        Ok(removed)
    }

    /// Makes sure a verified sealed segment has a current index file.
    fn ensure_sealed_index(&mut self, j: usize) -> Result<()> {
        let next_base = self.segments[j + 1].base;
        let seg = &self.segments[j];
        let path = self.dir.join(index_file_name(seg.base));
        match load_index_file(self.fs.as_ref(), &path, seg.base, Some(next_base), 1)? {
            Ok((h, _)) if h.end_position == seg.end_position => Ok(()),
            Ok(_) => self.write_sealed_index(j, IndexProblem::Stale),
            Err(p) => self.write_sealed_index(j, p),
        }
    }

    fn write_sealed_index(&mut self, j: usize, problem: IndexProblem) -> Result<()> {
        let seg = &self.segments[j];
        seg.write_index(self.fs.as_ref(), &self.dir)?;
        self.fs.sync_dir(&self.dir)?;
        self.report.indexes_rebuilt.push((seg.base, problem));
        Ok(())
    }

    fn finish(mut self, clean: bool, log_start: Offset) -> Result<Log> {
        let end = self.segments[self.segments.len() - 1].end_offset;
        if log_start > end {
            // Unflushed records were lost after the log start advanced past
            // them: a snapshot covers everything below the log start.
            redo_full(
                self.fs.as_ref(),
                &self.dd,
                &self.dir,
                &self.options,
                log_start,
            )?;
            self.segments = vec![Segment::open(
                self.fs.as_ref(),
                &self.dir,
                log_start,
                self.options.index_interval_bytes,
            )?];
            self.epochs = EpochMap::new();
            self.report.intent_redone = Some(format!(
                "log restarted at the log start offset {log_start} (log ended at {end})"
            ));
        }
        self.epochs.truncate_from_start(log_start);
        let end = self.segments[self.segments.len() - 1].end_offset;
        let mut high_watermark = self.dd.checkpoints().high_watermark.map(|h| h.0);
        if let Some(h) = high_watermark {
            if h > end {
                self.report.high_watermark_clamped = Some((h, end));
                high_watermark = Some(end);
            }
        }
        self.report.clean = clean;
        let mut log = Log {
            fs: self.fs,
            dir: self.dir,
            options: self.options,
            segments: self.segments,
            start_offset: log_start,
            high_watermark,
            epochs: self.epochs,
            flushed: end,
            poisoned: None,
            scratch: Vec::new(),
            prepared: None,
            report: self.report,
            read_hint: Mutex::new(None),
            syncs_in_segment: 0,
            dd: self.dd,
        };
        if !clean {
            // What was verified may sit in the page cache only (a process
            // crash without power loss): make it durable, then record a
            // recovery point so the next open starts from here.
            log.write_clean_checkpoint()?;
        }
        log.align_end();
        Ok(log)
    }
}

/// The error for a recovery point whose segment is gone.
fn missing_segment(rp: &RecoveryPoint) -> Error {
    corruption(
        rp.segment,
        rp.position,
        rp.offset,
        None,
        CorruptionKind::MissingSegment,
    )
}

/// Whether a sealed segment's scan ended anywhere but cleanly at the next
/// segment's base.
fn sealed_end_problem(
    stop: &Stop,
    end: Offset,
    next_base: Offset,
) -> Option<(CorruptionKind, Option<Epoch>)> {
    match stop {
        Stop::Invalid { kind, epoch } => Some((kind.clone(), *epoch)),
        Stop::Zeros | Stop::EndOfFile | Stop::Limit if end == next_base => None,
        Stop::Zeros | Stop::EndOfFile | Stop::Limit => {
            Some((CorruptionKind::Gap { end, next_base }, None))
        }
    }
}

/// Writes the clean-close marker (after the clean checkpoint is durable).
pub(crate) fn write_clean_marker(fs: &SharedFs, dir: &std::path::Path) -> Result<()> {
    let path = dir.join(CLEAN_FILE);
    let f = fs.open(&path, OpenMode::CreateOrTruncate)?;
    f.write_all_at(&CLEAN_CONTENT, 0)?;
    f.sync_data()?;
    drop(f);
    fs.sync_dir(dir)?;
    Ok(())
}
