//! What open found and did: the recovery report and its parts.

use quorumlog_checkpoint::{Degraded, Epoch, Offset};

use crate::error::CorruptionKind;
use crate::segment::index::IndexProblem;

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
    /// Where the damaged bytes start (`position`, or later after sync
    /// padding).
    pub damage_at: u64,
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
    /// After a clean close, bytes at the log's end that are not a batch:
    /// a recycled segment's data from its earlier use, not a torn write
    /// (segment, position). Left as they are: appends overwrite them.
    pub stale_after_clean_end: Option<(Offset, u64)>,
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
    /// The disk was full after an unclean stop: the checkpoint that lets
    /// the next open skip this scan was not written (it scans the same
    /// tail again; nothing is lost).
    pub checkpoint_deferred: bool,
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
            stale_after_clean_end: None,
            dropped: None,
            indexes_rebuilt: Vec::new(),
            segments_removed: Vec::new(),
            intent_redone: None,
            unknown_files: Vec::new(),
            high_watermark_clamped: None,
            checkpoints_degraded: Vec::new(),
            active_segment_extended: None,
            checkpoint_deferred: false,
        }
    }
}

impl std::fmt::Display for RecoveryReport {
    /// One line an operator can read: how the last close went, what was
    /// verified, and every change recovery made.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.clean {
            f.write_str("last close clean")?;
        } else {
            f.write_str("last close not clean")?;
        }
        match &self.scan_start {
            ScanStart::RecoveryPoint { offset, .. } => write!(
                f,
                "; verified {} B from the recovery point at offset {offset}",
                self.bytes_scanned
            )?,
            ScanStart::FullScan { reason } => write!(
                f,
                "; verified {} B from the first segment ({reason})",
                self.bytes_scanned
            )?,
        }
        if let Some(t) = &self.torn_tail {
            write!(
                f,
                "; torn tail cut: log ends at offset {} (segment {}, bytes {}..{} zeroed: {})",
                t.offset, t.segment, t.position, t.dropped_until, t.kind
            )?;
        }
        if let Some((segment, position)) = self.stale_after_clean_end {
            write!(
                f,
                "; stale bytes of a recycled segment after the clean end (segment {segment} at byte {position}), left"
            )?;
        }
        self.fmt_repairs(f)
    }
}

impl RecoveryReport {
    /// The second half of the one line: what recovery dropped or changed.
    fn fmt_repairs(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(d) = &self.dropped {
            write!(
                f,
                "; CORRUPTION DROPPED: every record from offset {} (segment {} at byte {}: {}), {} later segments removed",
                d.from_offset,
                d.segment,
                d.damage_at,
                d.kind,
                d.segments_removed.len()
            )?;
        }
        if !self.indexes_rebuilt.is_empty() {
            write!(
                f,
                "; {} segment indexes rebuilt",
                self.indexes_rebuilt.len()
            )?;
        }
        if !self.segments_removed.is_empty() {
            let list: Vec<String> = self
                .segments_removed
                .iter()
                .map(|(s, why)| format!("{s} ({why})"))
                .collect();
            write!(f, "; segments removed: {}", list.join(", "))?;
        }
        if let Some(i) = &self.intent_redone {
            write!(f, "; redone: {i}")?;
        }
        if !self.unknown_files.is_empty() {
            write!(f, "; unknown files left: {}", self.unknown_files.join(", "))?;
        }
        if let Some((found, to)) = self.high_watermark_clamped {
            write!(f, "; high watermark {found} clamped to the log end {to}")?;
        }
        if !self.checkpoints_degraded.is_empty() {
            write!(
                f,
                "; {} checkpoint files not trusted",
                self.checkpoints_degraded.len()
            )?;
        }
        if let Some((segment, len)) = self.active_segment_extended {
            write!(
                f,
                "; active segment {segment} was {len} B, its zero tail restored"
            )?;
        }
        if self.checkpoint_deferred {
            f.write_str("; disk full: the recovery checkpoint was deferred")?;
        }
        Ok(())
    }
}
