//! `quorumlog dump`: the log's batches as stored, read without opening the
//! directory. In a node's directory (a shared log of many groups) each
//! batch's first record is the node's header: group, kind, group offset;
//! the records after it are the group's entries.

use crate::out::say;
use std::fmt::Write as _;
use std::path::Path;

use quorumlog_io::{FileSystem, OpenMode};
use quorumlog_log::inspect::{
    batch_records, inspect_log_dir, BatchInfo, Problem, SegmentReport, Walk,
};
use quorumlog_raft::{inspect::describe_node_record, inspect::NodeRecordInfo, SharedFs};
use serde_json::json;

use crate::units;

/// What `dump` shows.
#[derive(Debug, Clone)]
#[expect(clippy::struct_excessive_bools, reason = "the command line's flags")]
pub(crate) struct Filter {
    pub(crate) group: Option<u64>,
    pub(crate) from: Option<u64>,
    pub(crate) to: Option<u64>,
    pub(crate) records: bool,
    pub(crate) json: bool,
    pub(crate) raw: bool,
    /// Each entry decoded as its Raft library wrote it (implies records).
    pub(crate) data: bool,
}

/// Prints the dump; Ok(false) when damage was found.
pub(crate) fn run(fs: &SharedFs, dir: &Path, f: &Filter) -> Result<bool, String> {
    if let (Some(from), Some(to)) = (f.from, f.to) {
        if from >= to {
            return Err(format!(
                "--from {from} --to {to} is an empty range [{from}, {to}): --from must be below --to"
            ));
        }
    }
    let node = fs
        .exists(&dir.join("groups.ckpt"))
        .map_err(|e| e.to_string())?;
    if let Some(g) = f.group {
        if !node {
            return Err(format!(
                "{}: --group needs a node's directory (no groups.ckpt)",
                dir.display()
            ));
        }
        let s = quorumlog_raft::inspect::inspect_node(fs, dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        if !s.groups.iter().any(|x| x.group == g) {
            let ids: Vec<String> = s.groups.iter().map(|x| x.group.to_string()).collect();
            return Err(if s.dropped.contains(&g) {
                format!("{}: group {g} was dropped", dir.display())
            } else {
                format!(
                    "{}: no group {g} (its groups: {})",
                    dir.display(),
                    if ids.is_empty() {
                        "none".to_string()
                    } else {
                        ids.join(", ")
                    }
                )
            });
        }
    }
    let fs = fs.as_ref();
    let walk = if f.raw { Walk::Raw } else { Walk::Stop };
    let log_dir = dir.join("log");
    let segments =
        inspect_log_dir(fs, &log_dir, walk).map_err(|e| format!("{}: {e}", log_dir.display()))?;
    let mut clean = true;
    for s in &segments {
        clean &= dump_segment(fs, s, node, f)?;
    }
    Ok(clean)
}

/// One segment's dump; Ok(false) when it has damage.
fn dump_segment(
    fs: &dyn FileSystem,
    s: &SegmentReport,
    node: bool,
    f: &Filter,
) -> Result<bool, String> {
    let mut clean = true;
    // Only a segment holding the range prints (without `--group` the
    // range is the shared log's offsets, known from the segment's line;
    // with it, the segment's line comes before its first batch shown).
    if f.group.is_none() {
        let count = s.end_offset.0.saturating_sub(s.base_offset.0).max(1);
        if !in_range(s.base_offset.0, count, f) {
            return Ok(s.problems.is_empty());
        }
    }
    let mut shown = false;
    let heading = |shown: &mut bool| {
        if !*shown {
            segment_line(s, f.json);
            *shown = true;
        }
    };
    if f.group.is_none() {
        heading(&mut shown);
    }
    let records_wanted = f.records || f.data;
    let bytes = if records_wanted || node {
        let Some(b) = segment_bytes(fs, s)? else {
            return Ok(true);
        };
        b
    } else {
        Vec::new()
    };
    // Problems in position order among the batches.
    let mut problems = s.problems.iter().peekable();
    for b in &s.batches {
        while let Some(p) = problems.next_if(|p| p.position < b.position) {
            clean = false;
            heading(&mut shown);
            print_problem(p, f.json);
        }
        // Without --group the range is the shared log's offsets; with it,
        // the group's own indexes.
        if f.group.is_none() && !in_range(b.base_offset.0, u64::from(b.record_count), f) {
            continue;
        }
        let raw = batch_bytes(&bytes, b);
        let records = if records_wanted || node {
            raw.map(batch_records)
        } else {
            None
        };
        let header = match (&records, node) {
            (Some(Ok(r)), true) => r.first().map(|h| describe_node_record(h)),
            _ => None,
        };
        if let Some(g) = f.group {
            let Some(Ok(h)) = &header else { continue };
            let entries = u64::from(b.record_count.saturating_sub(1)).max(1);
            if h.group != g || !in_range(h.offset, entries, f) {
                continue;
            }
        }
        heading(&mut shown);
        print_batch(b, header.as_ref(), f.json);
        if records_wanted {
            match records {
                Some(Ok(r)) => print_records(b, &r, header.as_ref(), f),
                Some(Err(e)) => say!("  records do not decode: {e}"),
                None => {}
            }
        }
    }
    for p in problems {
        clean = false;
        heading(&mut shown);
        print_problem(p, f.json);
    }
    Ok(clean)
}

/// Segment `s`'s bytes; `None` when it is gone since it was walked (a
/// running node reclaimed it).
fn segment_bytes(fs: &dyn FileSystem, s: &SegmentReport) -> Result<Option<Vec<u8>>, String> {
    match fs
        .open(&s.file, OpenMode::Read)
        .and_then(|file| file.read_to_end())
    {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", s.file.display())),
    }
}

/// The last part of `path`, for a line.
pub(crate) fn file_name(path: &std::path::Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// A segment's line.
fn segment_line(s: &SegmentReport, json: bool) {
    let name = file_name(&s.file);
    if json {
        say!(
            "{}",
            json!({
                "type": "segment", "file": name, "base_offset": s.base_offset.0,
                "size": s.size, "data_end": s.data_end, "end_offset": s.end_offset.0,
                "batches": s.batches.len(), "problems": s.problems.len(),
            })
        );
    } else {
        say!(
            "segment {name}: base offset {}, {} bytes, data to {} (offsets to {}), {} batches",
            s.base_offset.0,
            s.size,
            s.data_end,
            s.end_offset.0,
            s.batches.len()
        );
    }
}

/// Whether `[first, first + count)` meets the range `--from`..`--to`.
fn in_range(first: u64, count: u64, f: &Filter) -> bool {
    let next = first + count;
    f.from.is_none_or(|from| next > from) && f.to.is_none_or(|to| first < to)
}

pub(crate) fn batch_bytes<'a>(file: &'a [u8], b: &BatchInfo) -> Option<&'a [u8]> {
    let start = usize::try_from(b.position).ok()?;
    file.get(start..start.checked_add(b.bytes as usize)?)
}

type Header = Result<NodeRecordInfo, &'static str>;

fn print_batch(b: &BatchInfo, header: Option<&Header>, json: bool) {
    let next = b.base_offset.0 + u64::from(b.record_count);
    if json {
        let h = header.and_then(|h| h.as_ref().ok());
        let v = json!({
            "type": "batch", "position": b.position, "offset": b.base_offset.0,
            "next_offset": next, "epoch": b.epoch.0, "bytes": b.bytes,
            "checksum": format!("{:#010x}", b.checksum), "compression": b.compression,
            "control": b.control,
            "group": h.map(|h| h.group), "kind": h.map(|h| h.kind.clone()),
            "group_offset": h.map(|h| h.offset), "group_epoch": h.map(|h| h.epoch),
            "group_term": h.and_then(|h| units::decoded(h.epoch).0),
            "group_leader_node": h.and_then(|h| units::decoded(h.epoch).1),
            "header_error": header.and_then(|h| h.as_ref().err()),
        });
        say!("{v}");
        return;
    }
    let mut line = format!(
        "batch at {}: offsets {}..{next}, epoch {}, {} bytes, crc {:#010x}, {}",
        b.position, b.base_offset.0, b.epoch.0, b.bytes, b.checksum, b.compression
    );
    if b.control {
        line.push_str(", control");
    }
    match header {
        Some(Ok(h)) => {
            let _ = write!(line, "; group {} {} at {}", h.group, h.kind, h.offset);
            if h.kind == "Entries" || h.kind == "Rewrite" {
                let _ = write!(line, " {}", units::epoch(h.epoch));
            }
        }
        Some(Err(e)) => {
            let _ = write!(line, "; node header does not decode: {e}");
        }
        None => {}
    }
    say!("{line}");
}

fn print_records(b: &BatchInfo, records: &[Vec<u8>], header: Option<&Header>, f: &Filter) {
    // A node batch: the header record, then the group's entries from its
    // group offset. A one-group log: every record is an entry at its log
    // offset.
    let (skip, first, epoch) = match header {
        Some(Ok(h)) => (1, h.offset, h.epoch),
        _ => (0, b.base_offset.0, b.epoch.0),
    };
    let entries = header.is_none_or(|h| {
        h.as_ref()
            .is_ok_and(|h| h.kind == "Entries" || h.kind == "Rewrite")
    });
    let json = f.json;
    for (i, r) in records.iter().skip(skip).enumerate() {
        let offset = first + i as u64;
        if f.data && entries {
            let d = crate::data::read(r, offset, epoch);
            let text = crate::data::shown(d.data, 256);
            if json {
                say!(
                    "{}",
                    json!({"type": "entry", "offset": offset, "kind": d.kind,
                           "len": d.data.len(), "data": text})
                );
            } else {
                say!(
                    "  entry {offset}: {}: {} bytes: {text}",
                    d.kind,
                    d.data.len()
                );
            }
            continue;
        }
        let text = preview(r);
        if json {
            say!(
                "{}",
                json!({"type": "record", "offset": offset, "len": r.len(), "preview": text})
            );
        } else {
            say!("  record {offset}: {} bytes: {text}", r.len());
        }
    }
}

/// Up to 64 bytes: as text when printable, else hex.
fn preview(bytes: &[u8]) -> String {
    let head = bytes.get(..64).unwrap_or(bytes);
    let printable = head.iter().all(|b| b.is_ascii_graphic() || *b == b' ');
    let mut s = if printable {
        String::from_utf8_lossy(head).into_owned()
    } else {
        head.iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    };
    if bytes.len() > head.len() {
        s.push('…');
    }
    s
}

pub(crate) fn print_problem(p: &Problem, json: bool) {
    let offset = p.offset.map(|o| o.0);
    if json {
        say!(
            "{}",
            json!({
                "type": "problem", "file": p.file.display().to_string(), "position": p.position,
                "offset": offset, "kind": p.kind.to_string(), "skipped": p.skipped,
            })
        );
    } else {
        let skipped = if p.skipped > 0 {
            format!("; {} bytes skipped to the next valid batch", p.skipped)
        } else {
            String::new()
        };
        say!("DAMAGED {}{skipped}", place(p));
    }
}

/// A problem's place and kind: `FILE at POSITION (offset O): KIND`.
pub(crate) fn place(p: &Problem) -> String {
    let at = p
        .offset
        .map_or_else(String::new, |o| format!(" (offset {})", o.0));
    format!("{} at {}{at}: {}", p.file.display(), p.position, p.kind)
}
