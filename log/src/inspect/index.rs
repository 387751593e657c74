//! A segment's index file checked against the segment's walk.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

/// What a segment's index file holds, checked against the segment's walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexCheck {
    /// No index file (open rebuilds one from the segment).
    Missing,
    /// Every entry points at the start of the batch holding its offset;
    /// this many entries.
    Valid(usize),
    /// The file is damaged, describes another state of the segment, or an
    /// entry points where no such batch starts (open would rebuild it, but
    /// it is damage all the same).
    Damaged(Problem),
}

/// Checks the index file beside `segment` (`<base>.index`). With `sealed`,
/// it must describe the segment exactly as walked (a sealed segment's
/// index is written when it is sealed); the active segment's index, if
/// any, is only checked entry by entry up to what was walked.
///
/// # Errors
/// `Io` reading the file (other than its absence).
pub fn check_index(
    fs: &dyn FileSystem,
    segment: &SegmentReport,
    sealed: bool,
) -> Result<IndexCheck> {
    let path = segment.file.with_extension("index");
    let bytes = match fs.open(&path, OpenMode::Read) {
        Ok(f) => f.read_to_end()?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(IndexCheck::Missing),
        Err(e) => return Err(e.into()),
    };
    let damaged = |position: u64, offset: Option<Offset>, kind: CorruptionKind| {
        Ok(IndexCheck::Damaged(problem(&path, position, offset, kind)))
    };
    let (header, entries) = match decode_index(&bytes) {
        Ok(v) => v,
        Err(kind) => return damaged(0, None, kind),
    };
    if header.base_offset != segment.base_offset
        || (sealed && header.end_offset != segment.end_offset)
    {
        return damaged(
            0,
            Some(header.end_offset),
            CorruptionKind::Malformed("the index describes another state of its segment"),
        );
    }
    for (i, &(rel, position)) in entries.iter().enumerate() {
        let offset = Offset(segment.base_offset.0 + u64::from(rel));
        if offset >= segment.end_offset {
            if sealed {
                return damaged(
                    0,
                    Some(offset),
                    CorruptionKind::Malformed("an index entry past the segment's data"),
                );
            }
            break;
        }
        let holds = segment.batches.iter().any(|b| {
            b.position == u64::from(position)
                && b.base_offset <= offset
                && offset.0 < b.base_offset.0 + u64::from(b.record_count)
        });
        // An entry into damage already reported is not a second problem.
        let damaged_there = segment
            .problems
            .iter()
            .any(|p| p.position == u64::from(position));
        if !holds && !damaged_there {
            return damaged(
                (40 + 8 * i) as u64,
                Some(offset),
                CorruptionKind::Malformed(
                    "an index entry points where no batch holding its offset starts",
                ),
            );
        }
    }
    Ok(IndexCheck::Valid(entries.len()))
}
