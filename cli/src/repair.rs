//! `quorumlog repair --truncate-at-corruption`: cuts a node's log at its
//! first corruption, for a replica that will fetch the rest from its
//! leader.
//!
//! The plan is the cut: the repair itself
//! (`Node::repair_truncate_at_corruption`) runs first on a copy-on-write
//! overlay of the directory, which writes nothing to it, and what it did
//! there is what is printed: where the log is cut, which segments go, each
//! group's new end (in its own Raft indexes), what the bytes cut held, and
//! every file it changed. Nothing changes without `--yes`. With it, every
//! file the overlay saw changed is copied aside first (with an undo script
//! that also removes the files the repair creates), then the repair runs on
//! the directory under its lock, refusing before the log changes if its
//! recovery plans another cut than the one printed.

use crate::out::say;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use quorumlog_checkpoint::read_meta;
use quorumlog_checkpoint::CorruptionKind;
use quorumlog_io::{Changes, FileSystem, OpenMode, Overlay};
use quorumlog_log::inspect::{inspect_log_dir, Claims, SegmentReport, Walk};
use quorumlog_log::{DroppedCorruption, RecoveryPlan};
use quorumlog_raft::{inspect::NodeRepairReport, Identity, Node, NodeOptions, SharedFs};

/// What one group loses.
#[derive(Debug, Default)]
struct GroupLoss {
    /// Group offsets of the entries dropped: lowest, and after the highest.
    entries: Option<(u64, u64)>,
    epochs: std::collections::BTreeSet<u64>,
    /// Other records dropped (votes, watermarks, truncations…), by kind.
    others: BTreeMap<String, usize>,
    bytes: u64,
}

/// The cut, as the repair made it on the overlay.
struct Plan {
    /// The log recovery's plan (compared with the real run's).
    recovery: RecoveryPlan,
    /// What the log's recovery drops.
    dropped: DroppedCorruption,
    /// Whether the dropped data is what a clean close or the recovery
    /// point vouched for, which recovery takes for a torn tail.
    short_of_claims: bool,
    /// The repair's report.
    report: NodeRepairReport,
    /// The damaged segment's file.
    segment: PathBuf,
    /// Later segments, removed whole.
    later: Vec<PathBuf>,
    bytes: u64,
    batches: usize,
    /// Batches cut that do not decode as a node's.
    undescribed: usize,
    groups: BTreeMap<u64, GroupLoss>,
    /// Every file and directory the repair changes.
    changes: Changes,
}

/// Ok(true) when there was nothing to repair or the repair was made.
pub(crate) fn run(
    fs: &SharedFs,
    dir: &Path,
    yes: bool,
    side: Option<&Path>,
) -> Result<bool, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", dir.display());
    if !fs.exists(&dir.join("groups.ckpt")).map_err(|e| at(&e))? {
        return Err(at(
            &"not a node's directory (no groups.ckpt): repair cuts a node's shared log",
        ));
    }
    let meta = read_meta(fs.as_ref(), dir)
        .map_err(|e| at(&e))?
        .ok_or_else(|| at(&"no meta file"))?;
    let expect = Identity::node(meta.cluster_id, meta.node_id);
    let options = NodeOptions {
        background: false,
        ..NodeOptions::default()
    };
    if harmless_only(fs, dir)? {
        return Ok(true);
    }
    let Some(plan) = plan(fs, dir, &expect, &options)? else {
        say!(
            "{}: no corruption in the log: nothing to repair (a torn tail, if any, is cut by a normal open)",
            dir.display()
        );
        return Ok(true);
    };
    show(&plan, dir);
    if !yes {
        say!("nothing changed: run again with --yes to cut (a copy of every file it changes is kept first)");
        return Ok(false);
    }
    let side = side.map_or_else(|| default_side(dir), Path::to_path_buf);
    let undo = keep_copies(fs.as_ref(), dir, &plan, &side)?;
    let mut seen = None;
    let done = Node::repair_truncate_at_corruption(fs, dir, &expect, &options, &mut |p| {
        seen = Some(p);
        if p == plan.recovery {
            Ok(())
        } else {
            Err(quorumlog_log::Error::OpenRefused)
        }
    });
    match (done, seen) {
        (Ok(r), _) => report(&r),
        (Err(_), Some(p)) if p != plan.recovery => {
            return Err(at(&format!(
                "the directory changed since the plan: its recovery now plans {} \
                 instead of {}; the log was not cut (copies kept in {}; run repair again)",
                describe(&p),
                describe(&plan.recovery),
                side.display()
            )))
        }
        (Err(e), _) => return Err(at(&e)),
    }
    say!("kept copies of every file it changed in {}", side.display());
    say!(
        "to undo, with the node stopped and before it runs again: sh {}",
        undo.display()
    );
    Ok(true)
}

/// Whether the log's damage is all harmless (then said, and nothing is
/// cut: a cut there would take the live batches after it).
fn harmless_only(fs: &SharedFs, dir: &Path) -> Result<bool, String> {
    let found = crate::verify::findings(fs, dir)?;
    let in_log: Vec<&crate::verify::Finding> = found
        .iter()
        .filter(|f| f.file.starts_with(dir.join("log")))
        .collect();
    if in_log.is_empty() || !in_log.iter().all(|f| f.harmless()) {
        return Ok(false);
    }
    say!(
        "{}: the log's damage is only in bytes nothing needs: nothing to cut",
        dir.display()
    );
    for f in &in_log {
        say!("  {f}");
    }
    say!(
        "no open reads them and no read serves them: the node's reclamation deletes \
         reclaimable segments at its next checkpoint, and an open rebuilds a damaged index"
    );
    Ok(true)
}

/// A recovery plan for people.
fn describe(p: &RecoveryPlan) -> String {
    match p.cut {
        Some((segment, position)) => format!(
            "a cut of segment {segment} at byte {position} (log end {}, {} later segments removed)",
            p.log_end, p.segments_removed
        ),
        None => format!("no cut (log end {})", p.log_end),
    }
}

/// The repair made on an overlay of the directory: `None` when its log
/// recovery drops nothing.
fn plan(
    fs: &SharedFs,
    dir: &Path,
    expect: &Identity,
    options: &NodeOptions,
) -> Result<Option<Plan>, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", dir.display());
    let overlay = Overlay::new(Arc::clone(fs));
    let ofs: SharedFs = Arc::new(overlay.clone());
    let mut recovery = None;
    let report = Node::repair_truncate_at_corruption(&ofs, dir, expect, options, &mut |p| {
        recovery = Some(p);
        Ok(())
    })
    .map_err(|e| at(&e))?;
    let Some(recovery) = recovery else {
        return Ok(None);
    };
    // What the cut bytes held, read from the directory itself.
    let segs = inspect_log_dir(fs.as_ref(), &dir.join("log"), Walk::Raw).map_err(|e| at(&e))?;
    let Some((dropped, short_of_claims)) = what_goes(fs, dir, &report, &recovery, &segs)? else {
        return Ok(None);
    };
    let changes = overlay.changes().map_err(|e| at(&e))?;
    let removed = dropped.segments_removed.clone();
    let gone = |s: &SegmentReport| removed.contains(&s.base_offset);
    let segment = segs
        .iter()
        .find(|s| s.base_offset == dropped.segment)
        .map_or_else(|| dir.join("log"), |s| s.file.clone());
    let mut plan = Plan {
        recovery,
        segment,
        later: segs
            .iter()
            .filter(|s| gone(s))
            .map(|s| s.file.clone())
            .collect(),
        bytes: 0,
        batches: 0,
        undescribed: 0,
        groups: BTreeMap::new(),
        changes,
        dropped,
        short_of_claims,
        report,
    };
    losses(fs, &segs, &mut plan)?;
    Ok(Some(plan))
}

/// What the repair drops: the corruption its log recovery drops, or data
/// a clean close or the recovery point vouched for that recovery takes for
/// a torn tail (`true`); `None` when nothing vouched for goes.
fn what_goes(
    fs: &SharedFs,
    dir: &Path,
    report: &NodeRepairReport,
    recovery: &RecoveryPlan,
    segs: &[SegmentReport],
) -> Result<Option<(DroppedCorruption, bool)>, String> {
    if let Some(d) = report.log.dropped.clone() {
        return Ok(Some((d, false)));
    }
    let Some(last) = segs.last() else {
        return Ok(None);
    };
    let claims = Claims::read(fs.as_ref(), &dir.join("log"), Some(last.base_offset))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    // The node checkpoint vouches for the log to its position too: it was
    // written once the log was durable to there.
    let node = quorumlog_raft::inspect::inspect_node(fs, dir)
        .ok()
        .map(|s| (s.checkpoint_position, "the node checkpoint"));
    let claimed = claims
        .required_end(last.base_offset)
        .into_iter()
        .chain(node)
        .max();
    let Some((claimed, by)) = claimed else {
        return Ok(None);
    };
    if claimed <= recovery.log_end {
        return Ok(None);
    }
    let d = DroppedCorruption {
        segment: last.base_offset,
        position: last.data_end,
        damage_at: last.data_end,
        from_offset: recovery.log_end,
        epoch: None,
        kind: CorruptionKind::DataEndsEarly {
            end: recovery.log_end,
            claimed,
            by,
        },
        segments_removed: Vec::new(),
    };
    Ok(Some((d, true)))
}

/// What the bytes the cut drops held, group by group.
fn losses(fs: &SharedFs, segs: &[SegmentReport], plan: &mut Plan) -> Result<(), String> {
    let removed = plan.dropped.segments_removed.clone();
    let gone = |s: &SegmentReport| removed.contains(&s.base_offset);
    for seg in segs {
        let whole = gone(seg);
        if !whole && seg.base_offset != plan.dropped.segment {
            continue;
        }
        let from = if whole { 0 } else { plan.dropped.position };
        plan.bytes += seg.data_end.saturating_sub(from);
        let file = fs
            .open(&seg.file, OpenMode::Read)
            .and_then(|f| f.read_to_end())
            .map_err(|e| format!("{}: {e}", seg.file.display()))?;
        for b in seg.batches.iter().filter(|b| b.position >= from) {
            plan.batches += 1;
            // A batch the walk verified: its header record alone is read.
            let head = crate::verify::node_header(&file, b.position);
            let Some(h) = head else {
                plan.undescribed += 1;
                continue;
            };
            let loss = plan.groups.entry(h.group).or_default();
            loss.bytes += u64::from(b.bytes);
            if h.kind == "Entries" || h.kind == "Rewrite" {
                let end = h.offset + u64::from(b.record_count.saturating_sub(1));
                let (lo, hi) = loss.entries.get_or_insert((h.offset, end));
                *lo = (*lo).min(h.offset);
                *hi = (*hi).max(end);
                loss.epochs.insert(h.epoch);
            } else {
                *loss.others.entry(h.kind).or_default() += 1;
            }
        }
    }
    Ok(())
}

fn show(plan: &Plan, dir: &Path) {
    let d = &plan.dropped;
    say!(
        "first corruption: {} at {} (offset {}{}): {}",
        plan.segment.display(),
        d.damage_at,
        d.from_offset,
        d.epoch.map_or_else(String::new, |e| format!(", epoch {e}")),
        d.kind
    );
    if plan.short_of_claims {
        say!(
            "(a normal open would take the data's early end for a torn tail: the repair cuts \
             the node's groups at the same point)"
        );
    }
    say!(
        "the cut: the log ends at offset {}; {} is cut at byte {}{}",
        d.from_offset,
        plan.segment.display(),
        d.position,
        if plan.later.is_empty() {
            String::new()
        } else {
            format!("; {} later segments are removed", plan.later.len())
        }
    );
    say!(
        "it drops {} bytes of log data: {} batches that verify after the cut (and the damaged bytes themselves){}",
        plan.bytes,
        plan.batches,
        if plan.undescribed > 0 {
            format!(", {} of them not a node's", plan.undescribed)
        } else {
            String::new()
        }
    );
    show_groups(plan);
    let new = plan
        .changes
        .files
        .iter()
        .filter(|(_, below)| !below)
        .count();
    say!(
        "it changes {} files ({new} of them new):",
        plan.changes.files.len()
    );
    for (f, below) in &plan.changes.files {
        let rel = f.strip_prefix(dir).unwrap_or(f);
        say!("  {}{}", rel.display(), if *below { "" } else { " (new)" });
    }
    say!(
        "a cut removes this replica's copies: if the node acknowledged them, their group needs \
         a majority of other replicas that hold them (it fetches them back from its leader)"
    );
}

/// Each group's new end and what its cut bytes held.
fn show_groups(plan: &Plan) {
    let cut: BTreeMap<u64, (u64, u64)> = plan
        .report
        .groups_cut
        .iter()
        .map(|(g, before, after)| (*g, (before.0, after.0)))
        .collect();
    let ids: std::collections::BTreeSet<u64> =
        plan.groups.keys().chain(cut.keys()).copied().collect();
    for g in ids {
        let mut line = format!("  group {g}:");
        if let Some((before, after)) = cut.get(&g) {
            let _ = write!(line, " its log ends at index {after} (was {before});");
        }
        if let Some(l) = plan.groups.get(&g) {
            let _ = write!(line, " {} bytes cut", l.bytes);
            if let Some((lo, hi)) = l.entries {
                let epochs: Vec<String> = l.epochs.iter().map(u64::to_string).collect();
                let _ = write!(
                    line,
                    "; entries [{lo}, {}) in epochs {}",
                    hi + 1,
                    epochs.join(", ")
                );
            }
            for (k, n) in &l.others {
                let _ = write!(line, "; {n} {k} records");
            }
        }
        say!("{line}");
    }
}

/// What the repair did, as it reports it.
fn report(r: &NodeRepairReport) {
    match &r.log.dropped {
        Some(dc) => say!(
            "cut: the log now ends at offset {} ({} later segments removed)",
            dc.from_offset.0,
            dc.segments_removed.len()
        ),
        None => say!(
            "cut: recovery found nothing to drop; the log ends at {}",
            r.log_end.0
        ),
    }
    for (g, before, after) in &r.groups_cut {
        say!(
            "  group {g}: its log ended at {}, now at {}",
            before.0,
            after.0
        );
    }
    say!("the node opens again");
}

fn default_side(dir: &Path) -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let name = dir
        .file_name()
        .map_or_else(|| "data".into(), |n| n.to_string_lossy().into_owned());
    dir.with_file_name(format!("{name}.repair-{secs}"))
}

/// Copies, durably, every file the repair changes (as the overlay saw
/// it) into `side`, and writes there an undo script that puts them back,
/// removes the files and directories the repair creates, and so restores
/// the directory byte for byte. Returns the script's path.
fn keep_copies(
    fs: &dyn FileSystem,
    dir: &Path,
    plan: &Plan,
    side: &Path,
) -> Result<PathBuf, String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    if fs.exists(side).map_err(|e| io(side, e))? {
        return Err(format!(
            "{} exists: name another --side-dir",
            side.display()
        ));
    }
    let quote = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
    let mut script = String::from("#!/bin/sh\nset -e\n");
    for (f, below) in &plan.changes.files {
        let rel = f.strip_prefix(dir).map_err(|e| e.to_string())?;
        if !below {
            let _ = writeln!(script, "rm -f {}", quote(f));
            continue;
        }
        let to = side.join("files").join(rel);
        let parent = quorumlog_io::parent_dir(&to);
        fs.create_dir_all(parent).map_err(|e| io(parent, e))?;
        let bytes = fs
            .open(f, OpenMode::Read)
            .and_then(|h| h.read_to_end())
            .map_err(|e| io(f, e))?;
        fs.open(&to, OpenMode::CreateNew)
            .and_then(|h| h.write_all_and_sync_at(&bytes, 0))
            .map_err(|e| io(&to, e))?;
        fs.sync_dir(parent).map_err(|e| io(parent, e))?;
        let _ = writeln!(script, "cp {} {}", quote(&to), quote(f));
    }
    for d in plan.changes.dirs.iter().rev() {
        let _ = writeln!(script, "rmdir {}", quote(d));
    }
    let undo = side.join("UNDO.sh");
    let text = format!(
        "# quorumlog repair --truncate-at-corruption of {} cut its log at offset {}.\n\
         # These are the files it changed, as they were. To undo, with the node stopped\n\
         # and before it runs again: sh {}\n{script}",
        dir.display(),
        plan.dropped.from_offset,
        undo.display()
    );
    fs.open(&undo, OpenMode::CreateNew)
        .and_then(|h| h.write_all_and_sync_at(text.as_bytes(), 0))
        .map_err(|e| io(&undo, e))?;
    fs.sync_dir(side).map_err(|e| io(side, e))?;
    let above = quorumlog_io::parent_dir(side);
    fs.sync_dir(above).map_err(|e| io(above, e))?;
    Ok(undo)
}

#[cfg(test)]
mod tests;
