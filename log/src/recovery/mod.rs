//! Opening a log: what is trusted, what is verified, and what a crash left.
//!
//! Open trusts the checkpoints and verifies only what follows the recovery
//! point: after a clean close (recovery point at the log end, the active
//! segment's index written, the `clean` marker present) it reads one batch
//! header per segment file and the index files, whatever the log's size.
//!
//! Two phases. **Inspection** (`inspect.rs`) reads, verifies and decides;
//! it changes nothing on disk, so a strict open that refuses leaves the
//! directory byte for byte as it found it. The one step before it redoes a
//! valid truncation intent, finishing an operation decided before the crash
//! (it only removes what that truncation removes). **Repair** (`repair.rs`)
//! then applies the decisions in an order that a crash at any point leaves
//! a state the next open decides the same way (invariant 9).
//!
//! Every decision comes from one table, `decide.rs`, shown in
//! `docs/format.md` ("Recovery decision table").
//!
//! Recovery produces a [`Recovered`] value; `Log::open` builds the log from
//! it. Recovery knows nothing of `Log`.
#![expect(
    clippy::indexing_slicing,
    reason = "indices into the segment list come from the list itself (its length, positions \
              found in it), never from bytes read: recovery's decoding goes through the walker"
)]

pub(crate) mod decide;
mod inspect;
mod repair;
mod report;

use quorumlog_checkpoint::{Checkpoints, EpochMap, Offset};

use crate::dir::LogDir;
use crate::error::Result;
use crate::options::RecoveryMode;
use crate::segment::index::IndexProblem;
use crate::segment::Segment;
use decide::{decide, Finding, Outcome};
pub use report::{DroppedCorruption, RecoveryReport, ScanStart, TornTail};

/// What recovery hands to `Log::open`.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// The segments, oldest first, their ends and indexes set (never empty).
    pub(crate) segments: Vec<Segment>,
    /// The epochs of the records in the log.
    pub(crate) epochs: EpochMap,
    /// The log start offset.
    pub(crate) log_start: Offset,
    /// The high watermark, clamped to the log end.
    pub(crate) high_watermark: Option<Offset>,
    /// What open found and did (`clean`: nothing needed checking, so no new
    /// checkpoint is needed).
    pub(crate) report: RecoveryReport,
}

/// A cut decided by inspection, made by repair.
#[derive(Debug, Clone, Copy)]
struct PendingCut {
    seg: usize,
    position: u64,
    offset: Offset,
    /// A torn tail: zero `[position, until)` in place, the file keeping
    /// its length and written blocks. `None`: cut the file there and
    /// preallocate again (every later byte zero), as corruption needs.
    zero_until: Option<u64>,
}

/// The state of one recovery.
struct Recovery<'a> {
    dir: &'a LogDir,
    cp: Checkpoints,
    report: RecoveryReport,
    segments: Vec<Segment>,
    epochs: EpochMap,
    /// Decided by inspection, done by repair:
    clean_marker: bool,
    /// This open created the log's first segment (an empty log).
    created_first_segment: bool,
    leftovers: Vec<String>,
    below_start: Vec<Offset>,
    index_writes: Vec<(Offset, IndexProblem)>,
    cut: Option<PendingCut>,
}

/// What inspection found, shown to the caller before repair changes a
/// byte (the log's start and its end once repair has cut what it decided
/// to cut).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryPlan {
    /// The log's first offset after the open.
    pub log_start: Offset,
    /// The log's end after the open.
    pub log_end: Offset,
    /// Where repair cuts, if it cuts: the segment (by base offset) and the
    /// byte position its data ends at (a torn tail's or corruption's cut).
    pub cut: Option<(Offset, u64)>,
    /// How many segments after the cut's repair removes whole.
    pub segments_removed: usize,
}

/// A caller's check of a [`RecoveryPlan`]: `Err` refuses the open before
/// repair (the refusal is returned as [`crate::Error::OpenRefused`]).
pub type PlanCheck<'a> = &'a mut dyn FnMut(RecoveryPlan) -> Result<()>;

/// Recovers the log in `dir` (see the module doc); `check` sees the plan
/// after inspection and before repair.
///
/// # Errors
/// `Corruption` (Strict mode) naming segment, position, offset and epoch;
/// `Io`; `Checkpoint`; what `check` returns.
pub(crate) fn recover(dir: &LogDir, check: PlanCheck<'_>) -> Result<Recovered> {
    let dd = dir.dd();
    let report = RecoveryReport {
        checkpoints_degraded: dd.report().degraded.clone(),
        ..RecoveryReport::default()
    };
    let mut r = Recovery {
        dir,
        cp: dd.checkpoints(),
        report,
        segments: Vec::new(),
        epochs: EpochMap::new(),
        clean_marker: false,
        created_first_segment: false,
        leftovers: Vec::new(),
        below_start: Vec::new(),
        index_writes: Vec::new(),
        cut: None,
    };
    r.inspect_directory()?;
    r.redo_intent()?;
    r.cp = dd.checkpoints();
    let bases = dir.segment_bases()?;
    let (log_start, bases) = r.plan_below_start(bases)?;
    r.open_segments(&bases)?;
    let clean = r.verify()?;
    check(r.plan(log_start))?;
    r.repair()?;
    let log_start = log_start.unwrap_or(r.segments[0].base);
    r.report.clean = clean && r.below_start.is_empty();
    r.finish(log_start)
}

impl Recovery<'_> {
    fn mode(&self) -> RecoveryMode {
        self.dir.options().recovery_mode
    }

    /// The table's outcome for `finding` in this open's mode.
    fn decide(&self, finding: Finding) -> Outcome {
        decide(finding, self.mode())
    }

    /// What the open will leave, before repair: the start, and the end
    /// after the pending cut (an empty log restarts at its start).
    fn plan(&self, log_start: Option<Offset>) -> RecoveryPlan {
        let first = self.segments[0].base;
        let last = self.segments[self.segments.len() - 1].end_offset;
        let start = log_start.unwrap_or(first);
        let end = self.cut.map_or(last, |c| c.offset);
        RecoveryPlan {
            log_start: start,
            log_end: end.max(start),
            cut: self.cut.map(|c| (self.segments[c.seg].base, c.position)),
            segments_removed: self
                .cut
                .filter(|c| c.zero_until.is_none())
                .map_or(0, |c| self.segments.len() - 1 - c.seg),
        }
    }

    /// The log start and the high watermark against the recovered end.
    fn finish(mut self, log_start: Offset) -> Result<Recovered> {
        let end = self.segments[self.segments.len() - 1].end_offset;
        if log_start > end {
            debug_assert_eq!(
                self.decide(Finding::LogStartAboveEnd),
                Outcome::RestartAtLogStart
            );
            // Unflushed records were lost after the log start advanced past
            // them: a snapshot covers everything below the log start.
            let purged = self
                .dir
                .dd()
                .checkpoints()
                .log_start_offset
                .and_then(|l| l.purged_epoch);
            self.dir.redo_full(log_start, purged)?;
            self.segments = vec![self.dir.open_segment(log_start)?];
            self.epochs = EpochMap::new();
            self.report.intent_redone = Some(format!(
                "log restarted at the log start offset {log_start} (log ended at {end})"
            ));
            self.report.clean = false;
        }
        self.epochs.truncate_from_start(log_start);
        let end = self.segments[self.segments.len() - 1].end_offset;
        let mut high_watermark = self.dir.dd().checkpoints().high_watermark.map(|h| h.0);
        if let Some(h) = high_watermark {
            if h > end {
                debug_assert_eq!(self.decide(Finding::HighWatermarkAboveEnd), Outcome::Clamp);
                self.report.high_watermark_clamped = Some((h, end));
                high_watermark = Some(end);
            }
        }
        Ok(Recovered {
            segments: self.segments,
            epochs: self.epochs,
            log_start,
            high_watermark,
            report: self.report,
        })
    }
}
