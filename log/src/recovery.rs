//! Opening a log: what is trusted, what is verified, and what a crash left.
//!
//! Open trusts the checkpoints and verifies only what follows the recovery
//! point: after a clean close (recovery point at the log end, the active
//! segment's index written, the `clean` marker present) it reads one batch
//! header per segment file and the index files, whatever the log's size.
//!
//! Open is two phases. **Inspection** reads and verifies and decides; it
//! changes nothing on disk, so a strict open that refuses leaves the
//! directory byte for byte as it found it (the one exception: a valid
//! truncation intent is redone first, finishing an operation that was
//! decided before the crash). **Repair** then applies what was decided:
//! the clean marker and leftover files removed, segments below the log
//! start removed, a torn tail (or, in `TruncateAtCorruption`, the
//! corruption and all after it) cut, rebuilt indexes written, the active
//! segment's zero tail restored.
//!
//! Decision table for the first bytes that are not a valid continuation of
//! the log (docs/design.md §4, invariant 3), applied by `Recovery::decide`:
//!
//! | where the invalid bytes are                        | valid batch after? | Strict      | lenient              |
//! |----------------------------------------------------|--------------------|-------------|----------------------|
//! | before the recovery point                          | (any)              | Corruption  | cut, report dropped  |
//! | in a sealed segment (a later segment exists)       | (any)              | Corruption  | cut, report dropped  |
//! | sealed segment ends cleanly short of the next base | —                  | Corruption  | cut, report dropped  |
//! | an intact batch in the wrong place (offset, epoch) | (any)              | Corruption  | cut, report dropped  |
//! | last segment, after the recovery point             | no                 | torn: cut   | torn: cut            |
//! | last segment, after the recovery point             | yes                | Corruption  | cut, report dropped  |
//! | non-zero bytes after the end of the data           | no                 | torn: cut   | torn: cut            |
//!
//! "Cut" zero-fills the segment from the end of the last valid batch and
//! removes every later segment; a torn tail's report names the bytes it
//! zeroed (`TornTail::position..dropped_until`). Other findings:
//!
//! | found at open                                   | outcome |
//! |-------------------------------------------------|---------|
//! | `truncation.intent`                             | the truncation is redone, then the intent removed |
//! | invalid `truncation.intent`                     | Strict: `Corruption`; lenient: removed, reported |
//! | `next.prepared`, `*.tmp`                        | removed |
//! | segment wholly below the log start offset       | removed (interrupted prefix truncation) |
//! | segment with an invalid header                  | Strict: `Corruption` (a roll syncs the header before the rename, so only damage does this); lenient: it and later segments removed, reported |
//! | recovery point's segment missing                | Strict: `Corruption` (`MissingSegment`); lenient: full scan |
//! | segment shorter than the recovery point         | Strict: `Corruption` (`ShorterThanRecoveryPoint`) unless only sync padding is missing; lenient: full scan |
//! | active segment shorter than the segment size    | its zero tail restored, reported (`active_segment_extended`) |
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
    Checkpoints, DataDir, Degraded, Epoch, EpochMap, LogClaim, Offset, RecoveryPoint, SharedFs,
};
use quorumlog_io::OpenMode;

use crate::error::{CorruptionKind, Error, Result};
use crate::format::{index_file_name, parse_file_name, segment_file_name, SEGMENT_HEADER_BYTES};
use crate::intent::{self, Intent, INTENT_FILE};
use crate::log::truncate::{
    create_segment_file, cut_page_safe, redo_cut, redo_full, remove_if_present, Cut,
};
use crate::log::{Log, PREPARED_FILE};
use crate::options::{LogOptions, Preallocation, RecoveryMode};
use crate::segment::index::{load_index_file, IndexProblem, SparseIndex};
use crate::segment::scan::{inspect_tail, scan, ScanFrom, ScanOutcome, Stop};
use crate::segment::walk::padded_end;
use crate::segment::{corruption, preallocate, relative, Segment};

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
    /// The position after the last non-zero byte that was zeroed: the cut
    /// dropped the bytes `[position, dropped_until)`.
    pub dropped_until: u64,
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
    /// The active segment was shorter than the segment size (its zero tail
    /// cut off, as some copy tools do): (segment, length found). Its zero
    /// tail was restored.
    pub active_segment_extended: Option<(Offset, u64)>,
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
            active_segment_extended: None,
        }
    }
}

/// An invalid place found while verifying.
struct Invalid {
    seg: usize,
    /// Where the invalid bytes start.
    position: u64,
    /// Where the valid data before them ends (the cut, if one is made).
    data_end: u64,
    offset: Offset,
    epoch: Option<Epoch>,
    kind: CorruptionKind,
}

/// A cut decided by inspection, made by repair.
#[derive(Debug, Clone, Copy)]
struct PendingCut {
    seg: usize,
    position: u64,
    offset: Offset,
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
    /// Decided by inspection, done by repair:
    clean_marker: bool,
    leftovers: Vec<String>,
    below_start: Vec<Offset>,
    index_writes: Vec<(Offset, IndexProblem)>,
    cut: Option<PendingCut>,
    claim: LogClaim,
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
        // Before anything is read or repaired: one log per data directory.
        let claim = dd.claim_log()?;
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
            clean_marker: false,
            leftovers: Vec::new(),
            below_start: Vec::new(),
            index_writes: Vec::new(),
            cut: None,
            claim,
        };
        r.run()
    }
}

impl Recovery {
    fn strict(&self) -> bool {
        self.options.recovery_mode == RecoveryMode::Strict
    }

    fn run(mut self) -> Result<Log> {
        self.inspect_directory()?;
        self.redo_intent()?;
        self.cp = self.dd.checkpoints();
        let bases = self.list_segments()?;
        let (log_start, bases) = self.plan_below_start(bases)?;
        self.open_segments(&bases)?;
        let clean = self.verify()?;
        self.repair()?;
        let log_start = log_start.unwrap_or(self.segments[0].base);
        let clean = clean && self.below_start.is_empty();
        self.finish(clean, log_start)
    }

    /// Notes leftovers and whether a valid clean marker is there (removed
    /// by repair, so a crash from then on is seen as unclean).
    fn inspect_directory(&mut self) -> Result<()> {
        for e in self.fs.list(&self.dir)? {
            let temp = std::path::Path::new(&e.name)
                .extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("tmp"));
            if e.name == PREPARED_FILE || (temp && !e.is_dir) {
                self.leftovers.push(e.name);
            } else if e.name == CLEAN_FILE {
                let f = self.fs.open(&self.dir.join(&e.name), OpenMode::Read)?;
                self.clean_marker =
                    f.len()? == CLEAN_CONTENT.len() as u64 && f.read_to_end()? == CLEAN_CONTENT;
                self.leftovers.push(e.name);
            } else if parse_file_name(&e.name, "log").is_none()
                && parse_file_name(&e.name, "index").is_none()
                && e.name != INTENT_FILE
            {
                self.report.unknown_files.push(e.name);
            }
        }
        Ok(())
    }

    /// Removes the clean marker (first, durably) and the leftovers.
    fn remove_leftovers(&mut self) -> Result<()> {
        if self.leftovers.is_empty() {
            return Ok(());
        }
        if let Some(i) = self.leftovers.iter().position(|n| n == CLEAN_FILE) {
            let marker = self.leftovers.remove(i);
            remove_if_present(self.fs.as_ref(), &self.dir.join(marker))?;
            self.fs.sync_dir(&self.dir)?;
        }
        for name in std::mem::take(&mut self.leftovers) {
            remove_if_present(self.fs.as_ref(), &self.dir.join(name))?;
        }
        self.fs.sync_dir(&self.dir)?;
        Ok(())
    }

    fn redo_intent(&mut self) -> Result<()> {
        let Some(found) = intent::read(self.fs.as_ref(), &self.dir)? else {
            return Ok(());
        };
        if let (Err(kind), true) = (&found, self.strict()) {
            return Err(corruption(Offset(0), 0, Offset(0), None, kind.clone()));
        }
        // Redoing changes the log: the clean marker must go first.
        self.remove_leftovers()?;
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

    /// Notes segments wholly below the log start offset (left by an
    /// interrupted prefix truncation; repair removes them) and creates the
    /// first segment of an empty log. Returns the log start offset, if
    /// known, and the segments to open.
    fn plan_below_start(
        &mut self,
        mut bases: Vec<Offset>,
    ) -> Result<(Option<Offset>, Vec<Offset>)> {
        let log_start = self.cp.log_start_offset.map(|l| l.0);
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
                if rp.offset > start && self.strict() {
                    return Err(missing_segment(&rp));
                }
            }
            // Creating the first segment destroys nothing.
            self.leftovers.retain(|n| n != PREPARED_FILE);
            create_segment_file(self.fs.as_ref(), &self.dir, &self.options, start)?;
            bases.push(start);
        }
        Ok((log_start, bases))
    }

    /// Opens every segment, checking its header. A segment with an invalid
    /// header is damage (a roll syncs the header before the rename that
    /// names the file): Strict refuses, changing nothing; lenient removes it
    /// and every later segment, and reports them.
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
            if self.strict() {
                return Err(corruption(base, 0, base, None, kind));
            }
            let doomed = &bases[i..];
            self.remove_leftovers()?;
            for b in doomed.iter().rev() {
                self.fs.remove_file(&self.dir.join(segment_file_name(*b)))?;
                remove_if_present(self.fs.as_ref(), &self.dir.join(index_file_name(*b)))?;
            }
            self.fs.sync_dir(&self.dir)?;
            self.report.dropped = Some(DroppedCorruption {
                segment: base,
                position: 0,
                from_offset: base,
                epoch: None,
                kind,
                segments_removed: doomed.to_vec(),
            });
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
    /// cleanly and nothing needed checking. Changes nothing on disk.
    fn verify(&mut self) -> Result<bool> {
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
        // A file cut at the end of its data may lack the sync padding the
        // recovery point counts; anything more missing is damage.
        if padded_end(len) < rp.position || rp.position < SEGMENT_HEADER_BYTES as u64 {
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
            if matches!(inv.kind, CorruptionKind::ShorterThanRecoveryPoint { .. }) && !self.strict()
            {
                return self.verify_full(full("a segment is shorter than the recovery point"));
            }
            return self.decide(inv);
        }
        let prev = self.epochs.latest().map(|e| e.epoch);
        self.verify_tail(ScanFrom {
            segment: self.segments[k].base,
            position: rp.position,
            offset: rp.offset,
            prev_epoch: prev,
        })
    }

    fn verify_full(&mut self, start: ScanStart) -> Result<bool> {
        self.report.scan_start = start;
        self.epochs = EpochMap::new();
        self.index_writes.clear();
        let interval = self.options.index_interval_bytes;
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
        let from = ScanFrom {
            segment: seg.base,
            position: SEGMENT_HEADER_BYTES as u64,
            offset: seg.base,
            prev_epoch: None,
        };
        let out = scan(seg.file.as_ref(), from, u64::MAX, &mut ix)?;
        self.report.bytes_scanned += out.bytes_scanned;
        let bad = sealed_end_problem(&out.stop, out.end_position, out.end_offset, next_base);
        let seg = &mut self.segments[i];
        seg.end_position = out.end_position;
        seg.end_offset = out.end_offset;
        seg.index = ix;
        if let Some((position, kind, epoch)) = bad {
            return Ok(Some(Invalid {
                seg: i,
                position,
                data_end: out.end_position,
                offset: out.end_offset,
                epoch,
                kind,
            }));
        }
        self.index_writes.push((seg.base, problem));
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
        // A file shorter than the recovery point (its zero tail cut off) is
        // trusted only after a scan shows that nothing but padding is gone.
        let whole = seg.file.len()? >= position;
        let problem =
            match load_index_file(self.fs.as_ref(), &path, seg.base, Some(offset), interval)? {
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
        let mut ix = SparseIndex::new(interval);
        let from = ScanFrom {
            segment: seg.base,
            position: SEGMENT_HEADER_BYTES as u64,
            offset: seg.base,
            prev_epoch: None,
        };
        let out = scan(seg.file.as_ref(), from, position, &mut ix)?;
        self.report.bytes_scanned += out.bytes_scanned;
        let seg = &mut self.segments[k];
        seg.end_position = out.end_position;
        seg.end_offset = out.end_offset;
        seg.index = ix;
        // The recovery point may sit after sync padding (a page-aligned end
        // of data at the time it was written).
        let size = self.options.segment_size_bytes;
        let quiet = !matches!(out.stop, Stop::Invalid { .. });
        let at_rp =
            out.end_position == position || padded_end(out.end_position).min(size) == position;
        if quiet && out.end_offset == offset && at_rp {
            self.segments[k].end_position = position;
            let seg = &self.segments[k];
            if problem != IndexProblem::Missing {
                self.report.indexes_rebuilt.push((seg.base, problem));
            }
            return Ok(None);
        }
        let (at, kind, epoch) = match out.stop {
            _ if !whole => (
                out.end_position,
                CorruptionKind::ShorterThanRecoveryPoint {
                    len: self.segments[k].file.len()?,
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
    fn verify_tail(&mut self, mut from: ScanFrom) -> Result<bool> {
        let mut j = self
            .segments
            .iter()
            .position(|s| s.base == from.segment)
            .unwrap_or(0);
        loop {
            let seg = &mut self.segments[j];
            let mut ix = std::mem::take(&mut seg.index);
            let out = scan(seg.file.as_ref(), from, u64::MAX, &mut ix)?;
            seg.index = ix;
            seg.end_position = out.end_position;
            seg.end_offset = out.end_offset;
            self.report.bytes_scanned += out.bytes_scanned;
            for &(e, o) in &out.epoch_starts {
                self.epochs.assign(e, o).map_err(Error::Checkpoint)?;
            }
            if j + 1 < self.segments.len() {
                let next_base = self.segments[j + 1].base;
                if let Some((position, kind, epoch)) =
                    sealed_end_problem(&out.stop, out.end_position, out.end_offset, next_base)
                {
                    return self.decide(Invalid {
                        seg: j,
                        position,
                        data_end: out.end_position,
                        offset: out.end_offset,
                        epoch,
                        kind,
                    });
                }
                self.plan_sealed_index(j)?;
                j += 1;
                from = ScanFrom {
                    segment: next_base,
                    position: SEGMENT_HEADER_BYTES as u64,
                    offset: next_base,
                    prev_epoch: out.last_epoch,
                };
                continue;
            }
            return self.verify_last(j, &out);
        }
    }

    /// The end of the last segment's data: a clean end, a torn tail (cut,
    /// reported) or corruption (decided by the table).
    fn verify_last(&mut self, j: usize, out: &ScanOutcome) -> Result<bool> {
        let quiet = !matches!(out.stop, Stop::Invalid { .. });
        if self.clean_marker && quiet && out.bytes_scanned == 0 {
            return Ok(true);
        }
        let tail = inspect_tail(self.segments[j].file.as_ref(), out.end_position)?;
        let (at, stop_epoch) = match &out.stop {
            Stop::Invalid {
                position, epoch, ..
            } => (*position, *epoch),
            _ => (out.end_position, None),
        };
        let invalid = |kind| Invalid {
            seg: j,
            position: at,
            data_end: out.end_position,
            offset: out.end_offset,
            epoch: stop_epoch,
            kind,
        };
        if let Some(valid_at) = tail.valid_at {
            return self.decide(invalid(CorruptionKind::ValidDataFollows { valid_at }));
        }
        let kind = match &out.stop {
            // An intact batch in the wrong place is never a tear.
            Stop::Invalid {
                kind: kind @ (CorruptionKind::Misplaced { .. } | CorruptionKind::EpochOrder { .. }),
                ..
            } => return self.decide(invalid(kind.clone())),
            Stop::Invalid { kind, .. } => kind.clone(),
            _ => CorruptionKind::Malformed("non-zero bytes after the end of the data"),
        };
        let Some(dropped_until) = tail.nonzero_end else {
            return Ok(false); // nothing after the data to clean up
        };
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
        });
        Ok(false)
    }

    /// Applies the decision table to corruption: an error in Strict mode
    /// (nothing changed on disk), a cut (reported) otherwise.
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
        self.report.dropped = Some(DroppedCorruption {
            segment: base,
            position: inv.data_end,
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
        });
        Ok(false)
    }

    /// Carries out what inspection decided, in an order that a crash at any
    /// point leaves a state the next open decides the same way: the clean
    /// marker and leftovers, segments below the log start, the cut, rebuilt
    /// indexes, the active segment's zero tail.
    fn repair(&mut self) -> Result<()> {
        let changes = self.cut.is_some()
            || !self.below_start.is_empty()
            || !self.index_writes.is_empty()
            || !self.leftovers.is_empty();
        if changes {
            self.remove_leftovers()?;
        }
        if !self.below_start.is_empty() {
            for &base in &self.below_start {
                remove_if_present(self.fs.as_ref(), &self.dir.join(segment_file_name(base)))?;
                remove_if_present(self.fs.as_ref(), &self.dir.join(index_file_name(base)))?;
                self.report
                    .segments_removed
                    .push((base, "wholly below the log start offset"));
            }
            self.fs.sync_dir(&self.dir)?;
        }
        if let Some(cut) = self.cut.take() {
            self.make_cut(cut)?;
        }
        let writes = std::mem::take(&mut self.index_writes);
        let sealed = self.segments.len() - 1;
        let mut wrote = false;
        for (base, problem) in writes {
            let Some(seg) = self.segments[..sealed].iter().find(|s| s.base == base) else {
                continue; // removed by the cut
            };
            seg.write_index(self.fs.as_ref(), &self.dir)?;
            self.report.indexes_rebuilt.push((base, problem));
            wrote = true;
        }
        if wrote {
            self.fs.sync_dir(&self.dir)?;
        }
        self.restore_zero_tail()
    }

    /// Gives the active segment back the zero tail a copy may have cut off,
    /// so appends and aligned reads stay within the file.
    fn restore_zero_tail(&mut self) -> Result<()> {
        let size = self.options.segment_size_bytes;
        let seg = &self.segments[self.segments.len() - 1];
        let len = seg.file.len()?;
        if len >= size {
            return Ok(());
        }
        let prealloc = match self.options.preallocation {
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
        cut_page_safe(
            self.fs.as_ref(),
            &self.dd,
            &self.dir,
            &self.options,
            Cut {
                segment: base,
                position: cut.position,
                replacement: None,
                offset: cut.offset,
            },
        )?;
        self.segments.truncate(cut.seg + 1);
        let seg = &mut self.segments[cut.seg];
        seg.end_position = cut.position;
        seg.end_offset = cut.offset;
        seg.index.truncate(relative(base, cut.offset));
        self.epochs.truncate_from_end(cut.offset);
        Ok(())
    }

    /// Notes whether a verified sealed segment needs its index file written.
    fn plan_sealed_index(&mut self, j: usize) -> Result<()> {
        let next_base = self.segments[j + 1].base;
        let seg = &self.segments[j];
        let path = self.dir.join(index_file_name(seg.base));
        match load_index_file(self.fs.as_ref(), &path, seg.base, Some(next_base), 1)? {
            Ok((h, _)) if h.end_position == seg.end_position => {}
            Ok(_) => self.index_writes.push((seg.base, IndexProblem::Stale)),
            Err(p) => self.index_writes.push((seg.base, p)),
        }
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
            _claim: self.claim,
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
/// segment's base: where, what, and the epoch of the batch there.
fn sealed_end_problem(
    stop: &Stop,
    data_end: u64,
    end: Offset,
    next_base: Offset,
) -> Option<(u64, CorruptionKind, Option<Epoch>)> {
    match stop {
        Stop::Invalid {
            position,
            kind,
            epoch,
        } => Some((*position, kind.clone(), *epoch)),
        Stop::Zeros | Stop::EndOfFile | Stop::Limit if end == next_base => None,
        Stop::Zeros | Stop::EndOfFile | Stop::Limit => {
            Some((data_end, CorruptionKind::Gap { end, next_base }, None))
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
