//! The recovery decision table, as data: every finding recovery can make,
//! and what each recovery mode does about it. The code consults it in one
//! function, [`decide`]; `docs/format.md` shows the same rows (a test fails
//! if they drift).

use crate::options::RecoveryMode;

/// Something recovery found that is not a clean continuation of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finding {
    /// Invalid bytes before the recovery point.
    BeforeRecoveryPoint,
    /// Invalid bytes in a sealed segment (a later segment exists), before
    /// its data reaches the next segment's base (bytes after that are not
    /// data: zeros, or stale batches of a recycled file).
    InSealedSegment,
    /// A sealed segment ends cleanly, but not at the next segment's base.
    SealedEndsShort,
    /// An intact batch in the wrong place (offset or epoch order) after the
    /// recovery point.
    Misplaced,
    /// Invalid bytes after the recovery point with nothing valid after them.
    TornTail,
    /// Invalid bytes after the recovery point with a valid batch after them.
    ValidDataFollows,
    /// Non-zero bytes after the end of the data, where no batch starts.
    BytesAfterData,
    /// A segment file whose header is invalid.
    InvalidSegmentHeader,
    /// A truncation intent that does not verify.
    InvalidIntent,
    /// The recovery point names a segment that is not there.
    RecoveryPointSegmentMissing,
    /// A segment shorter than the recovery point (more than sync padding
    /// missing).
    ShorterThanRecoveryPoint,
    /// A valid truncation intent.
    Intent,
    /// `next.prepared` or a `*.tmp` file.
    Leftover,
    /// A segment wholly below the log start offset.
    BelowLogStart,
    /// The active segment is shorter than the segment size.
    ActiveSegmentShort,
    /// The recovery point or the epoch map is missing or corrupt.
    CheckpointMissing,
    /// A sealed segment's index file is missing, corrupt or stale.
    IndexUnusable,
    /// The log start offset is above the recovered log end.
    LogStartAboveEnd,
    /// The high watermark is above the recovered log end.
    HighWatermarkAboveEnd,
    /// A file in the log directory that is not the log's.
    UnknownFile,
}

/// What recovery does about a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Refuse to open with a `Corruption` error, changing nothing.
    Refuse,
    /// Cut the log where the valid data ends; report what was dropped.
    CutReportDropped,
    /// Cut the log as a torn tail; report the bytes zeroed.
    CutTornTail,
    /// Remove the segment and every later one; report them as dropped.
    RemoveSegmentsFromHere,
    /// Remove the file; report it.
    RemoveReport,
    /// Remove the file.
    Remove,
    /// Verify the whole log from its first segment.
    FullScan,
    /// Redo the truncation, then remove the intent.
    Redo,
    /// Restore the zero tail; report it.
    RestoreZeroTail,
    /// Rebuild by a verifying scan, rewrite, report.
    Rebuild,
    /// Restart the log empty at the log start offset.
    RestartAtLogStart,
    /// Clamp to the log end; report it.
    Clamp,
    /// Leave it alone; report it.
    LeaveReport,
}

/// One row: a finding, its label in `docs/format.md`, and the outcome in
/// `Strict` and in `TruncateAtCorruption` mode.
pub(crate) type Row = (Finding, &'static str, Outcome, Outcome);

/// The decision table.
pub(crate) const DECISIONS: &[Row] = &[
    (
        Finding::BeforeRecoveryPoint,
        "invalid bytes before the recovery point",
        Outcome::Refuse,
        Outcome::CutReportDropped,
    ),
    (
        Finding::InSealedSegment,
        "invalid bytes in a sealed segment (a later segment exists), before its data reaches the next segment's base",
        Outcome::Refuse,
        Outcome::CutReportDropped,
    ),
    (
        Finding::SealedEndsShort,
        "a sealed segment ends cleanly, not at the next segment's base (`Gap`)",
        Outcome::Refuse,
        Outcome::CutReportDropped,
    ),
    (
        Finding::Misplaced,
        "an intact batch in the wrong place after the recovery point (`Misplaced`, `EpochOrder`)",
        Outcome::Refuse,
        Outcome::CutReportDropped,
    ),
    (
        Finding::TornTail,
        "invalid bytes after the recovery point, no valid batch after them",
        Outcome::CutTornTail,
        Outcome::CutTornTail,
    ),
    (
        Finding::ValidDataFollows,
        "invalid bytes after the recovery point, a valid batch after them (`ValidDataFollows`)",
        Outcome::Refuse,
        Outcome::CutReportDropped,
    ),
    (
        Finding::BytesAfterData,
        "non-zero bytes after the end of the data, where no batch starts",
        Outcome::CutTornTail,
        Outcome::CutTornTail,
    ),
    (
        Finding::InvalidSegmentHeader,
        "a segment with an invalid header",
        Outcome::Refuse,
        Outcome::RemoveSegmentsFromHere,
    ),
    (
        Finding::InvalidIntent,
        "an invalid `truncation.intent`",
        Outcome::Refuse,
        Outcome::RemoveReport,
    ),
    (
        Finding::RecoveryPointSegmentMissing,
        "the recovery point's segment is missing (`MissingSegment`)",
        Outcome::Refuse,
        Outcome::FullScan,
    ),
    (
        Finding::ShorterThanRecoveryPoint,
        "a segment shorter than the recovery point, more than sync padding missing",
        Outcome::Refuse,
        Outcome::FullScan,
    ),
    (
        Finding::Intent,
        "a valid `truncation.intent`",
        Outcome::Redo,
        Outcome::Redo,
    ),
    (
        Finding::Leftover,
        "`next.prepared`, `*.tmp`",
        Outcome::Remove,
        Outcome::Remove,
    ),
    (
        Finding::BelowLogStart,
        "a segment wholly below the log start offset",
        Outcome::RemoveReport,
        Outcome::RemoveReport,
    ),
    (
        Finding::ActiveSegmentShort,
        "the active segment is shorter than the segment size",
        Outcome::RestoreZeroTail,
        Outcome::RestoreZeroTail,
    ),
    (
        Finding::CheckpointMissing,
        "the recovery point or the epoch map is missing or corrupt",
        Outcome::FullScan,
        Outcome::FullScan,
    ),
    (
        Finding::IndexUnusable,
        "a sealed segment's index file is missing, corrupt or stale",
        Outcome::Rebuild,
        Outcome::Rebuild,
    ),
    (
        Finding::LogStartAboveEnd,
        "the log start offset is above the recovered log end",
        Outcome::RestartAtLogStart,
        Outcome::RestartAtLogStart,
    ),
    (
        Finding::HighWatermarkAboveEnd,
        "the high watermark is above the recovered log end",
        Outcome::Clamp,
        Outcome::Clamp,
    ),
    (
        Finding::UnknownFile,
        "a file in `log/` that is not the log's",
        Outcome::LeaveReport,
        Outcome::LeaveReport,
    ),
];

/// What recovery does about `finding` in `mode`: the one place the table is
/// consulted.
pub(crate) fn decide(finding: Finding, mode: RecoveryMode) -> Outcome {
    let row = DECISIONS.iter().find(|r| r.0 == finding);
    // Every finding has a row (tested).
    let Some(&(_, _, strict, lenient)) = row else {
        return Outcome::Refuse;
    };
    match mode {
        RecoveryMode::Strict => strict,
        RecoveryMode::TruncateAtCorruption => lenient,
    }
}

#[cfg(test)]
impl Outcome {
    /// The outcome's wording in `docs/format.md`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Outcome::Refuse => "refuse (`Corruption`), nothing changed",
            Outcome::CutReportDropped => "cut there, report what was dropped",
            Outcome::CutTornTail => "cut as a torn tail, report the bytes zeroed",
            Outcome::RemoveSegmentsFromHere => "remove it and every later segment, report them",
            Outcome::RemoveReport => "remove, report",
            Outcome::Remove => "remove",
            Outcome::FullScan => "verify everything from the first segment",
            Outcome::Redo => "redo the truncation, remove the intent",
            Outcome::RestoreZeroTail => "restore the zero tail, report",
            Outcome::Rebuild => "rebuild by a verifying scan, rewrite, report",
            Outcome::RestartAtLogStart => "restart the log empty at the log start",
            Outcome::Clamp => "clamp to the log end, report",
            Outcome::LeaveReport => "leave alone, report",
        }
    }
}

/// The table as the Markdown rows `docs/format.md` must contain.
#[cfg(test)]
pub(crate) fn markdown_rows() -> Vec<String> {
    DECISIONS
        .iter()
        .map(|(_, label, strict, lenient)| {
            format!("| {label} | {} | {} |", strict.label(), lenient.label())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Finding; 20] = [
        Finding::BeforeRecoveryPoint,
        Finding::InSealedSegment,
        Finding::SealedEndsShort,
        Finding::Misplaced,
        Finding::TornTail,
        Finding::ValidDataFollows,
        Finding::BytesAfterData,
        Finding::InvalidSegmentHeader,
        Finding::InvalidIntent,
        Finding::RecoveryPointSegmentMissing,
        Finding::ShorterThanRecoveryPoint,
        Finding::Intent,
        Finding::Leftover,
        Finding::BelowLogStart,
        Finding::ActiveSegmentShort,
        Finding::CheckpointMissing,
        Finding::IndexUnusable,
        Finding::LogStartAboveEnd,
        Finding::HighWatermarkAboveEnd,
        Finding::UnknownFile,
    ];

    #[test]
    fn every_finding_has_exactly_one_row_and_the_rules_hold() {
        for f in ALL {
            let rows: Vec<_> = DECISIONS.iter().filter(|r| r.0 == f).collect();
            assert_eq!(rows.len(), 1, "{f:?}");
            let (_, _, strict, lenient) = *rows[0];
            assert_eq!(decide(f, RecoveryMode::Strict), strict);
            assert_eq!(decide(f, RecoveryMode::TruncateAtCorruption), lenient);
            // The lenient mode never refuses; strict never drops data that
            // could be acknowledged (only a torn tail is cut).
            assert_ne!(lenient, Outcome::Refuse, "{f:?}");
            assert!(
                !matches!(
                    strict,
                    Outcome::CutReportDropped | Outcome::RemoveSegmentsFromHere
                ),
                "{f:?}"
            );
            // Where strict refuses, lenient acts.
            if strict == Outcome::Refuse {
                assert_ne!(lenient, strict, "{f:?}");
            }
        }
        assert_eq!(DECISIONS.len(), ALL.len());
    }

    #[test]
    fn docs_show_the_same_table() {
        // The workspace holds docs/format.md; a published package holds
        // neither the workspace's manifest nor its docs.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        if !root.join("Cargo.toml").exists() {
            return;
        }
        let doc = std::fs::read_to_string(root.join("docs/format.md"))
            .unwrap_or_else(|e| panic!("the workspace's docs/format.md: {e}"));
        let doc_rows: Vec<&str> = doc
            .lines()
            .skip_while(|l| {
                !l.starts_with("| finding | `Strict` (default) | `TruncateAtCorruption` |")
            })
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .collect();
        assert_eq!(
            doc_rows,
            markdown_rows(),
            "docs/format.md's decision table differs from recovery/decide.rs"
        );
    }
}
