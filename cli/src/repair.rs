//! `quorumlog repair --truncate-at-corruption`: cuts a node's log at its
//! first corruption, for a replica that will fetch the rest from its
//! leader. It plans from the read-only walk (what would go: groups,
//! offsets, epochs, bytes) and changes nothing without `--yes`. With it,
//! it copies every file the cut changes or removes into a side directory,
//! then opens the directory with the log's `TruncateAtCorruption` recovery
//! (under the directory's lock: a running node is refused) and closes it.
//!
//! Where the node checkpoint reaches past the cut, its groups are cut at
//! the same point (their votes kept), so the node opens again.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use quorumlog_checkpoint::read_meta;
use quorumlog_io::{FileSystem, OpenMode};
use quorumlog_log::inspect::{batch_records, inspect_log_dir, Problem, SegmentReport, Walk};
use quorumlog_raft::{describe_node_record, Identity, Node, NodeOptions, SharedFs};

use crate::dump::batch_bytes;

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

/// The cut: where, what goes.
struct Plan {
    problem: Problem,
    /// The damaged segment.
    segment: PathBuf,
    /// Log offsets from here on go.
    cut_offset: u64,
    /// Later segments, removed whole.
    later: Vec<PathBuf>,
    bytes: u64,
    batches: usize,
    /// Batches after the damage that do not decode as a node's.
    undescribed: usize,
    groups: BTreeMap<u64, GroupLoss>,
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
    let segs = inspect_log_dir(fs.as_ref(), &dir.join("log"), Walk::Raw).map_err(|e| at(&e))?;
    let Some(plan) = plan(fs.as_ref(), &segs)? else {
        println!(
            "{}: no corruption in the log: nothing to repair (a torn tail, if any, is cut by a normal open)",
            dir.display()
        );
        return Ok(true);
    };
    show(&plan);
    if !yes {
        println!("nothing changed: run again with --yes to cut (a copy of every file changed is kept first)");
        return Ok(false);
    }
    let side = side.map_or_else(|| default_side(dir), Path::to_path_buf);
    // The copies hold every file as it was; the clean marker goes so that
    // the next open verifies what was copied back.
    let undo = format!(
        "cp -a {side}/log/. {dir}/log/ && cp -a {side}/checkpoints/. {dir}/checkpoints/ && \
         cp -a {side}/groups.ckpt {dir}/groups.ckpt && rm -f {dir}/log/clean",
        side = side.display(),
        dir = dir.display()
    );
    keep_copies(fs.as_ref(), dir, &plan, &side, &undo)?;
    cut(fs, dir)?;
    println!("kept copies in {}", side.display());
    println!("to undo, with the node stopped and before it runs again: {undo}");
    Ok(true)
}

/// The first damage and everything at or after it.
fn plan(fs: &dyn FileSystem, segs: &[SegmentReport]) -> Result<Option<Plan>, String> {
    let Some((i, s, p)) = segs
        .iter()
        .enumerate()
        .find_map(|(i, s)| s.problems.first().map(|p| (i, s, p)))
    else {
        return Ok(None);
    };
    let cut_offset = s
        .batches
        .iter()
        .filter(|b| b.position < p.position)
        .map(|b| b.base_offset.0 + u64::from(b.record_count))
        .max()
        .unwrap_or(s.base_offset.0);
    let mut plan = Plan {
        problem: p.clone(),
        segment: s.file.clone(),
        cut_offset,
        later: segs.iter().skip(i + 1).map(|s| s.file.clone()).collect(),
        bytes: s.data_end.saturating_sub(p.position),
        batches: 0,
        undescribed: 0,
        groups: BTreeMap::new(),
    };
    for (j, seg) in segs.iter().enumerate().skip(i) {
        if j > i {
            plan.bytes += seg.data_end;
        }
        let file = fs
            .open(&seg.file, OpenMode::Read)
            .and_then(|f| f.read_to_end())
            .map_err(|e| format!("{}: {e}", seg.file.display()))?;
        for b in seg
            .batches
            .iter()
            .filter(|b| j > i || b.position >= p.position)
        {
            plan.batches += 1;
            let head = batch_bytes(&file, b)
                .and_then(|raw| batch_records(raw).ok())
                .and_then(|r| r.into_iter().next())
                .and_then(|h| describe_node_record(&h).ok());
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
    Ok(Some(plan))
}

fn show(plan: &Plan) {
    let p = &plan.problem;
    println!("first corruption: {}", crate::dump::place(p));
    println!(
        "the cut: the log ends at offset {}; {} is cut at byte {}{}",
        plan.cut_offset,
        plan.segment.display(),
        p.position,
        if plan.later.is_empty() {
            String::new()
        } else {
            format!("; {} later segments are removed", plan.later.len())
        }
    );
    println!(
        "it drops {} bytes of log data: {} batches that verify after the damage (and the damaged bytes themselves){}",
        plan.bytes,
        plan.batches,
        if plan.undescribed > 0 {
            format!(", {} of them not a node's", plan.undescribed)
        } else {
            String::new()
        }
    );
    for (g, l) in &plan.groups {
        let mut line = format!("  group {g}: {} bytes", l.bytes);
        if let Some((lo, hi)) = l.entries {
            let epochs: Vec<String> = l.epochs.iter().map(u64::to_string).collect();
            let _ = write!(line, "; entries {lo}..{hi} in epochs {}", epochs.join(", "));
        }
        for (k, n) in &l.others {
            let _ = write!(line, "; {n} {k} records");
        }
        println!("{line}");
    }
    println!(
        "a cut removes this replica's copies: if the node acknowledged them, their group needs \
         a majority of other replicas that hold them (it fetches them back from its leader)"
    );
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

/// Copies, durably, every file the cut may change or remove: the damaged
/// segment and every later one with their indexes, the node checkpoint and
/// the data directory's checkpoints.
fn keep_copies(
    fs: &dyn FileSystem,
    dir: &Path,
    plan: &Plan,
    side: &Path,
    undo: &str,
) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    if fs.exists(side).map_err(|e| io(side, e))? {
        return Err(format!(
            "{} exists: name another --side-dir",
            side.display()
        ));
    }
    let mut files: Vec<PathBuf> = Vec::new();
    for seg in std::iter::once(&plan.segment).chain(&plan.later) {
        files.push(seg.clone());
        files.push(seg.with_extension("index"));
    }
    files.push(dir.join("groups.ckpt"));
    let ckpts = dir.join("checkpoints");
    for e in fs.list(&ckpts).map_err(|e| io(&ckpts, e))? {
        files.push(ckpts.join(e.name));
    }
    for f in files {
        if !fs.exists(&f).map_err(|e| io(&f, e))? {
            continue;
        }
        let rel = f.strip_prefix(dir).map_err(|e| e.to_string())?;
        let to = side.join(rel);
        let parent = quorumlog_io::parent_dir(&to);
        fs.create_dir_all(parent).map_err(|e| io(parent, e))?;
        let bytes = fs
            .open(&f, OpenMode::Read)
            .and_then(|h| h.read_to_end())
            .map_err(|e| io(&f, e))?;
        fs.open(&to, OpenMode::CreateNew)
            .and_then(|h| h.write_all_and_sync_at(&bytes, 0))
            .map_err(|e| io(&to, e))?;
        fs.sync_dir(parent).map_err(|e| io(parent, e))?;
    }
    let note = side.join("UNDO");
    let text = format!(
        "quorumlog repair --truncate-at-corruption of {} cut its log at offset {}.\n\
         These are the files as they were. To undo, with the node stopped and before it runs again:\n{undo}\n",
        dir.display(),
        plan.cut_offset
    );
    fs.open(&note, OpenMode::CreateNew)
        .and_then(|h| h.write_all_and_sync_at(text.as_bytes(), 0))
        .map_err(|e| io(&note, e))?;
    fs.sync_dir(side).map_err(|e| io(side, e))?;
    let above = quorumlog_io::parent_dir(side);
    fs.sync_dir(above).map_err(|e| io(above, e))?;
    Ok(())
}

/// The cut itself, under the directory's lock (`Node::repair_truncate_at_corruption`).
fn cut(fs: &SharedFs, dir: &Path) -> Result<(), String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", dir.display());
    let meta = read_meta(fs.as_ref(), dir)
        .map_err(|e| at(&e))?
        .ok_or_else(|| at(&"no meta file"))?;
    let options = NodeOptions {
        background: false,
        ..NodeOptions::default()
    };
    let expect = Identity::node(meta.cluster_id, meta.node_id);
    let r = Node::repair_truncate_at_corruption(fs, dir, &expect, &options).map_err(|e| at(&e))?;
    match &r.log.dropped {
        Some(dc) => println!(
            "cut: the log now ends at offset {} ({} later segments removed)",
            dc.from_offset.0,
            dc.segments_removed.len()
        ),
        None => println!(
            "cut: recovery found nothing to drop; the log ends at {}",
            r.log_end.0
        ),
    }
    for (g, before, after) in &r.groups_cut {
        println!(
            "  group {g}: its log ended at {}, now at {}",
            before.0, after.0
        );
    }
    println!("the node opens again");
    Ok(())
}
