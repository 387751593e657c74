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
mod tests {
    //! The plan is the cut, and the undo restores every byte, over node
    //! directories written on the simulated disk under crash plans with
    //! record sizes from 1 byte to 2 pages (and over logs the engine
    //! reclaimed and rewrote), then damaged (a bit flip, a zeroed page at
    //! any alignment, a truncation) anywhere in the log.
    //! Invariants: the real repair's recovery plans exactly the printed cut
    //! (its check refuses otherwise) and ends the log at the printed
    //! offset; every file the real repair changes, creates or removes is
    //! one the plan listed, so restoring the listed files' copies and
    //! removing the new ones gives back the directory byte for byte.
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        clippy::too_many_lines,
        reason = "test code: a panic is a failed assertion"
    )]

    use std::collections::BTreeMap;

    /// Each group's entries: (index, bytes).
    type Served = BTreeMap<u64, Vec<(u64, Vec<u8>)>>;

    use quorumlog_io::{CrashPlan, SimFs, Tear};
    use quorumlog_log::inspect::inspect_log_dir;
    use quorumlog_raft::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset};

    use super::*;

    const DIR: &str = "/node";

    /// Appends `records` to `group` at `at` and waits for them to be
    /// durable.
    fn append_durable(
        group: &quorumlog_raft::Group,
        at: Offset,
        epoch: Epoch,
        records: &[Vec<u8>],
    ) {
        let info = group.append(at, epoch, records).unwrap();
        group.wait_durable(info.next_offset).unwrap();
    }

    fn options() -> NodeOptions {
        NodeOptions {
            background: false,
            ..NodeOptions::with_segment_bytes(64 << 10)
        }
    }

    /// Every file under `dir` with its bytes.
    fn tree(fs: &dyn FileSystem, dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs.list(&d).unwrap() {
                let p = d.join(&e.name);
                if e.is_dir {
                    stack.push(p);
                } else {
                    let bytes = fs.open(&p, OpenMode::Read).unwrap().read_to_end().unwrap();
                    out.insert(p, bytes);
                }
            }
        }
        out
    }

    /// A node of groups 1 and 2, entries of sizes from `seed`, crashed.
    fn node(seed: u64) -> SimFs {
        let disk = SimFs::new(seed);
        let fs: SharedFs = Arc::new(disk.clone());
        let meta = Meta::new(ClusterId(5), NodeId(3), DirectoryId(7));
        Node::format(&fs, Path::new(DIR), meta, &options()).unwrap();
        let expect = Identity::node(ClusterId(5), NodeId(3));
        let (n, _) = Node::open(&fs, Path::new(DIR), &expect, &options()).unwrap();
        for g in [1, 2] {
            n.create_group(g, Offset(0)).unwrap();
        }
        let mut rng = quorumlog_io::SimRng::new(seed);
        let mut next = [0u64; 2];
        for i in 0..24u64 {
            let size = usize::try_from(1 + rng.below(8192)).unwrap();
            let g = usize::try_from(i % 2).unwrap();
            let group = n.group(g as u64 + 1).unwrap();
            append_durable(
                &group,
                Offset(next[g]),
                Epoch(1),
                &[vec![b'a' + (i % 26) as u8; size]],
            );
            next[g] += 1;
        }
        if seed % 3 == 0 {
            n.close().unwrap();
            return disk.crash_with(CrashPlan::KeepAll);
        }
        drop(n);
        let plans = [
            CrashPlan::LoseUnsynced,
            CrashPlan::Torn(Tear::Garbage),
            CrashPlan::Random,
        ];
        disk.crash_with(plans[usize::try_from(seed % 3).unwrap()])
    }

    /// Damages the log of `disk`: a bit flip, a zeroed page or a
    /// truncation somewhere in a segment's data. Returns the file and the
    /// bytes `[from, to)` made wrong.
    fn damage(disk: &SimFs, seed: u64) -> (PathBuf, u64, u64) {
        let segs = inspect_log_dir(disk, &Path::new(DIR).join("log"), Walk::Raw).unwrap();
        let seg = &segs[usize::try_from(seed % segs.len() as u64).unwrap()];
        let span = seg.data_end.saturating_sub(32).max(1);
        let at = 32 + (seed.wrapping_mul(0x9E37_79B9) % span);
        let to = match seed % 3 {
            0 => {
                disk.flip_bit(&seg.file, at * 8).unwrap();
                at + 1
            }
            1 => {
                disk.corrupt_durable(&seg.file, at, &[0; 4096]).unwrap();
                at + 4096
            }
            _ => {
                let f = disk.open(&seg.file, OpenMode::ReadWrite).unwrap();
                f.set_len(at).unwrap();
                f.sync_all().unwrap();
                u64::MAX
            }
        };
        (seg.file.clone(), at, to)
    }

    /// Calls `each` with every batch of the log, its segment's file and
    /// its node header (read without the checksum), if it has one.
    fn each_batch(
        fs: &dyn FileSystem,
        mut each: impl FnMut(
            &Path,
            &quorumlog_log::inspect::BatchInfo,
            Option<quorumlog_raft::inspect::NodeRecordInfo>,
        ),
    ) {
        for s in inspect_log_dir(fs, &Path::new(DIR).join("log"), Walk::Raw).unwrap() {
            let bytes = fs
                .open(&s.file, OpenMode::Read)
                .unwrap()
                .read_to_end()
                .unwrap();
            for b in &s.batches {
                each(&s.file, b, crate::verify::node_header(&bytes, b.position));
            }
        }
    }

    /// Each batch of the log: its file, position, end, offset and the
    /// group its node header names.
    fn batches(fs: &dyn FileSystem) -> Vec<(PathBuf, u64, u64, u64, Option<u64>)> {
        let mut out = Vec::new();
        each_batch(fs, |file, b, h| {
            let end = b.position + u64::from(b.bytes);
            out.push((
                file.to_path_buf(),
                b.position,
                end,
                b.base_offset.0,
                h.map(|h| h.group),
            ));
        });
        out
    }

    /// The cut `repair` plans on `fs`, if any: `None` also where the
    /// engine refuses to cut in reclaimable bytes.
    fn planned_cut(fs: &SharedFs, seed: u64) -> Option<Plan> {
        let expect = Identity::node(ClusterId(5), NodeId(3));
        match plan(fs, Path::new(DIR), &expect, &options()) {
            Ok(p) => p,
            Err(e) if e.contains("in reclaimable bytes") => None,
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }

    /// Invariants: `verify` and `repair` never disagree (harmful damage in
    /// the log named exactly when a cut is planned), and the first problem `verify`
    /// names in a segment is the first damaged batch's: its file, its
    /// offset, its group, at most its first damaged byte and no earlier
    /// than the batch before it ends.
    #[test]
    fn verify_names_the_damaged_batch_and_its_group_exactly_when_repair_cuts() {
        let dir = Path::new(DIR);
        let (mut named, mut several_named, mut unnamed) = (0, 0, 0);
        for seed in 1..=600u64 {
            let disk = node(seed);
            let intact = batches(&disk);
            let (file, from, _) = damage(&disk, seed);
            let fs: SharedFs = Arc::new(disk.clone());
            let found = crate::verify::findings(&fs, dir).unwrap();
            let in_log: Vec<_> = found
                .iter()
                .filter(|f| f.file.extension().is_some_and(|e| e == "log"))
                .collect();
            let planned = planned_cut(&fs, seed);
            assert_eq!(
                planned.is_some(),
                in_log.iter().any(|f| !f.harmless()),
                "seed {seed}: verify found {found:?}, repair planned {:?}",
                planned.as_ref().map(|p| &p.dropped)
            );
            let Some(p) = in_log.first() else { continue };
            let (i, first) = intact
                .iter()
                .enumerate()
                // The first batch the damage reaches, or (a flip in sync
                // padding) the one after it, whose offset that place holds.
                .find(|(_, b)| b.0 == file && b.2 > from)
                .unwrap_or_else(|| panic!("seed {seed}: {p:?} but no batch was damaged"));
            let prev_end = if i > 0 && intact[i - 1].0 == file {
                intact[i - 1].2
            } else {
                32
            };
            assert_eq!(
                (&p.file, p.offset),
                (&file, Some(first.3)),
                "seed {seed}: {found:?}"
            );
            // The group: named by what survived (the batch's own header,
            // the checkpoint's runs), else the groups whose entries the
            // damage took, the first damaged batch's among them.
            match (p.group, &p.groups[..]) {
                (Some(g), _) => assert_eq!(Some(g), first.4, "seed {seed}: {found:?}"),
                (None, several) if !several.is_empty() => {
                    // Each named group had entries the damage reached.
                    let reached = |g: u64| intact[i..].iter().any(|b| b.4 == Some(g));
                    assert!(
                        several.iter().all(|g| reached(*g)),
                        "seed {seed}: {found:?}"
                    );
                    // And the first damaged batch's group among them.
                    assert!(
                        first.4.is_some_and(|g| several.contains(&g)),
                        "seed {seed}: {found:?}, first damaged {first:?}"
                    );
                    several_named += 1;
                }
                (None, _) => unnamed += 1,
            }
            let at = p.position.unwrap();
            assert!(
                (prev_end..=first.1.max(from)).contains(&at),
                "seed {seed}: at {at}, not in {prev_end}..={}",
                first.1.max(from)
            );
            named += 1;
        }
        eprintln!("named {named}: {several_named} with the groups it reached, {unnamed} without");
        assert!(named >= 150, "only {named} of 600 damages named");
        assert_eq!(unnamed, 0, "damage named without its group");
    }

    #[test]
    fn the_plan_is_the_cut_and_its_changes_are_every_change() {
        let expect = Identity::node(ClusterId(5), NodeId(3));
        let dir = Path::new(DIR);
        let mut cuts = 0;
        // Append-only logs, then logs the engine reclaimed and rewrote.
        let disks = (1..=600u64)
            .map(|seed| (seed, node(seed)))
            .chain((1..=120u64).map(|seed| (10_000 + seed, rewritten(seed))));
        for (seed, disk) in disks {
            let _ = damage(&disk, seed);
            let fs: SharedFs = Arc::new(disk.clone());
            let before = tree(fs.as_ref(), dir);
            let planned = planned_cut(&fs, seed);
            assert_eq!(
                tree(fs.as_ref(), dir),
                before,
                "seed {seed}: the plan wrote"
            );
            let Some(planned) = planned else { continue };
            cuts += 1;
            let mut seen = None;
            let done =
                Node::repair_truncate_at_corruption(&fs, dir, &expect, &options(), &mut |p| {
                    seen = Some(p);
                    if p == planned.recovery {
                        Ok(())
                    } else {
                        Err(quorumlog_log::Error::OpenRefused)
                    }
                });
            let done = done.unwrap_or_else(|e| {
                panic!(
                    "seed {seed}: planned {:?}, saw {seen:?}: {e}",
                    planned.recovery
                )
            });
            assert_eq!(
                done.log_end, planned.dropped.from_offset,
                "seed {seed}: the log ends where the plan said"
            );
            // The undo: the listed files back as they were, the new ones
            // removed.
            let after = tree(fs.as_ref(), dir);
            let listed: BTreeMap<&PathBuf, bool> =
                planned.changes.files.iter().map(|(p, b)| (p, *b)).collect();
            for p in before.keys().chain(after.keys()) {
                if before.get(p) != after.get(p) {
                    assert!(
                        listed.contains_key(p),
                        "seed {seed}: {} changed unlisted",
                        p.display()
                    );
                }
            }
            let mut undone = after.clone();
            for (p, below) in &listed {
                if *below {
                    undone.insert((*p).clone(), before[*p].clone());
                } else {
                    undone.remove(*p);
                }
            }
            assert_eq!(
                undone, before,
                "seed {seed}: the undo does not restore every byte"
            );
        }
        eprintln!("cuts {cuts}");
        assert!(cuts >= 150, "only {cuts} of 600 damages needed a cut");
    }

    /// A node of groups 1, 2 and 3 on small segments whose log the
    /// engine reclaimed and rewrote: groups 1 and 2 purged as they go,
    /// group 3 kept whole, so old segments hold superseded copies and
    /// batches below their groups' starts beside live ones. Closed, or
    /// crashed by `seed`'s plan.
    fn rewritten(seed: u64) -> SimFs {
        let disk = SimFs::new(seed);
        let fs: SharedFs = Arc::new(disk.clone());
        let options = NodeOptions {
            background: false,
            garbage_percent: 120,
            ..NodeOptions::with_segment_bytes(16 << 10)
        };
        let meta = Meta::new(ClusterId(5), NodeId(3), DirectoryId(7));
        Node::format(&fs, Path::new(DIR), meta, &options).unwrap();
        let expect = Identity::node(ClusterId(5), NodeId(3));
        let (n, _) = Node::open(&fs, Path::new(DIR), &expect, &options).unwrap();
        for g in [1, 2, 3] {
            n.create_group(g, Offset(0)).unwrap();
        }
        let mut rng = quorumlog_io::SimRng::new(seed);
        let mut next = [0u64; 3];
        let steps = 90 + rng.below(90);
        for i in 0..steps {
            let g = usize::try_from(rng.below(3)).unwrap();
            let size = usize::try_from(1 + rng.below(1500)).unwrap();
            let group = n.group(g as u64 + 1).unwrap();
            let fill = b'a' + u8::try_from(i % 26).unwrap();
            append_durable(&group, Offset(next[g]), Epoch(1), &[vec![fill; size]]);
            next[g] += 1;
            if g < 2 && rng.below(4) == 0 && next[g] > 2 {
                let to = next[g] - rng.below(3);
                group
                    .purge(quorumlog_raft::Purge::To {
                        offset: Offset(to),
                        epoch: Epoch(1),
                    })
                    .unwrap();
            }
            if rng.below(12) == 0 {
                n.maintain().unwrap();
            }
        }
        n.maintain().unwrap();
        if seed % 2 == 0 {
            n.close().unwrap();
            return disk.crash_with(CrashPlan::KeepAll);
        }
        drop(n);
        disk.crash_with(CrashPlan::LoseUnsynced)
    }

    /// Every group's entries as a node opened on `disk` after a crash
    /// serves them (on an overlay: nothing is written to `disk`) (its clean marker removed: the open reads all it
    /// would read after a crash), or why it cannot.
    fn served(disk: &SimFs) -> Result<Served, String> {
        let below: SharedFs = Arc::new(disk.clone());
        let fs: SharedFs = Arc::new(Overlay::new(below));
        let _ = fs.remove_file(&Path::new(DIR).join("log").join("clean"));
        let expect = Identity::node(ClusterId(5), NodeId(3));
        let options = NodeOptions {
            background: false,
            ..NodeOptions::with_segment_bytes(16 << 10)
        };
        let (n, _) =
            Node::open(&fs, Path::new(DIR), &expect, &options).map_err(|e| e.to_string())?;
        let mut out = BTreeMap::new();
        for g in n.groups() {
            let group = n.group(g).map_err(|e| e.to_string())?;
            let x = group.extent();
            let entries = group
                .read_entries(
                    x.start,
                    x.end,
                    u64::MAX,
                    quorumlog_raft::Isolation::Uncommitted,
                )
                .map_err(|e| e.to_string())?;
            out.insert(
                g,
                entries.into_iter().map(|e| (e.offset.0, e.bytes)).collect(),
            );
        }
        Ok(out)
    }

    /// Each entry's serving copy: the batch at the highest shared offset
    /// holding it (a rewrite's copy is later than the one it replaces),
    /// as (group, index) -> the shared offset of its batch.
    fn serving(fs: &dyn FileSystem) -> BTreeMap<(u64, u64), u64> {
        let mut out = BTreeMap::new();
        each_batch(fs, |_, b, h| {
            let Some(h) = h.filter(|h| h.kind == "Entries" || h.kind == "Rewrite") else {
                return;
            };
            for k in 0..u64::from(b.record_count.saturating_sub(1)) {
                let at = out.entry((h.group, h.offset + k)).or_insert(0);
                *at = (*at).max(b.base_offset.0);
            }
        });
        out
    }

    /// Invariants, over logs the engine reclaimed and rewrote, each with
    /// one bit flipped in one batch anywhere:
    /// - `verify` calls the damage harmless exactly when a node opened
    ///   after a crash opens and serves every entry as before
    ///   (reclaimable bytes: superseded copies, batches below their
    ///   groups' starts, segments the next checkpoint deletes); live
    ///   otherwise;
    /// - `repair` changes nothing for harmless damage (not a byte);
    /// - for live damage, the real repair makes the printed cut, and keeps
    ///   of each group exactly the entries before the first one whose
    ///   serving copy the cut removes: it never removes an entry that an
    ///   intact copy before the cut serves, and every entry left is the
    ///   one served before, byte for byte.
    ///
    /// On the code before (the repair scanned from the log's start and cut
    /// at the first damage, and `verify` did not classify), the first
    /// reclaimable damage fails it.
    #[test]
    fn damage_is_classified_by_what_it_costs_and_repair_never_cuts_for_reclaimable_bytes() {
        let expect = Identity::node(ClusterId(5), NodeId(3));
        let dir = Path::new(DIR);
        let (mut harmless, mut live) = (0, 0);
        let seeds = 240u64;
        let only: Option<u64> = std::env::var("QUORUMLOG_SEED")
            .ok()
            .and_then(|s| s.parse().ok());
        for seed in 1..=seeds {
            if only.is_some_and(|o| o != seed) {
                continue;
            }
            let disk = rewritten(seed);
            let before = served(&disk).unwrap();
            let serve = serving(&disk);
            let all = batches(&disk);
            let mut rng = quorumlog_io::SimRng::new(seed ^ 0x5eed);
            let b = &all[usize::try_from(rng.below(all.len() as u64)).unwrap()];
            let at = b.1 + rng.below(b.2 - b.1);
            disk.flip_bit(&b.0, at * 8 + rng.below(8)).unwrap();
            let fs: SharedFs = Arc::new(disk.clone());
            let found = crate::verify::findings(&fs, dir).unwrap();
            let in_log: Vec<_> = found
                .iter()
                .filter(|f| f.file.starts_with(dir.join("log")))
                .collect();
            if in_log.is_empty() {
                let segs = inspect_log_dir(fs.as_ref(), &dir.join("log"), Walk::Raw).unwrap();
                for s in &segs {
                    eprintln!(
                        "{} base {} end {} data_end {} problems {:?}",
                        s.file.display(),
                        s.base_offset.0,
                        s.end_offset.0,
                        s.data_end,
                        s.problems
                    );
                }
                eprintln!(
                    "{:?}",
                    fs.list(&dir.join("log"))
                        .unwrap()
                        .iter()
                        .map(|e| e.name.clone())
                        .collect::<Vec<_>>()
                );
                eprintln!(
                    "{:?}",
                    quorumlog_raft::inspect::inspect_node(&fs, dir).map(|s| (
                        s.checkpoint_position,
                        s.replay_from,
                        s.log_end
                    ))
                );
            }
            assert!(
                !in_log.is_empty(),
                "seed {seed}: a flipped bit unseen: {b:?} at {at}: {found:?}"
            );
            let classified = in_log.iter().all(|f| f.harmless());
            let after = served(&disk);
            let truth = after.as_ref() == Ok(&before);
            assert_eq!(
                classified,
                truth,
                "seed {seed}: flip in batch at offset {} (group {:?}): verify says {:?}; a node {}",
                b.3,
                b.4,
                in_log.iter().map(ToString::to_string).collect::<Vec<_>>(),
                match &after {
                    Ok(a) if a == &before => "serves every entry".to_string(),
                    Ok(_) => "serves other entries".to_string(),
                    Err(e) => format!("fails: {e}"),
                }
            );
            let tree_before = tree(fs.as_ref(), dir);
            if classified {
                harmless += 1;
                // The engine's own repair (an embedder's) cuts no group
                // either, or refuses, changing nothing.
                let overlay: SharedFs = Arc::new(Overlay::new(Arc::clone(&fs)));
                let r = Node::repair_truncate_at_corruption(
                    &overlay,
                    dir,
                    &expect,
                    &options(),
                    &mut |_| Ok(()),
                );
                match r {
                    Ok(r) => assert!(
                        r.groups_cut.is_empty(),
                        "seed {seed}: cut {:?}",
                        r.groups_cut
                    ),
                    Err(quorumlog_raft::Error::CutInReclaimable { .. }) => {}
                    Err(e) => panic!("seed {seed}: {e}"),
                }
                let side = Path::new("/side");
                assert!(run(&fs, dir, true, Some(side)).unwrap());
                assert_eq!(
                    tree(fs.as_ref(), dir),
                    tree_before,
                    "seed {seed}: repair wrote"
                );
                continue;
            }
            live += 1;
            let planned = plan(&fs, dir, &expect, &options())
                .unwrap()
                .unwrap_or_else(|| panic!("seed {seed}: live damage, no cut planned"));
            assert_eq!(
                tree(fs.as_ref(), dir),
                tree_before,
                "seed {seed}: the plan wrote"
            );
            let done =
                Node::repair_truncate_at_corruption(&fs, dir, &expect, &options(), &mut |p| {
                    if p == planned.recovery {
                        Ok(())
                    } else {
                        Err(quorumlog_log::Error::OpenRefused)
                    }
                })
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let cut = done.log_end.0;
            assert_eq!(cut, planned.dropped.from_offset.0, "seed {seed}");
            let kept = served(&disk).unwrap_or_else(|e| panic!("seed {seed}: after repair: {e}"));
            for (g, entries) in &before {
                let expected: Vec<&(u64, Vec<u8>)> = entries
                    .iter()
                    .take_while(|(i, _)| serve.get(&(*g, *i)).is_some_and(|s| *s < cut))
                    .collect();
                let now: Vec<&(u64, Vec<u8>)> =
                    kept.get(g).map(|v| v.iter().collect()).unwrap_or_default();
                assert_eq!(
                    now.len(),
                    expected.len(),
                    "seed {seed}: group {g} keeps {} entries, {} are served before the cut at {cut}",
                    now.len(),
                    expected.len()
                );
                assert_eq!(now, expected, "seed {seed}: group {g}'s entries changed");
            }
        }
        eprintln!("{harmless} harmless, {live} live of {seeds}");
        assert!(harmless >= seeds / 10, "only {harmless} harmless damages");
        assert!(live >= seeds / 10, "only {live} live damages");
    }
}
