//! `quorumlog verify`: every file of a data directory read whole and
//! checked, walking on past damage so that every problem is found: the
//! small files (meta, election state, checkpoints), a node's checkpoint and
//! the group state it folds to, every segment batch by batch with its
//! index, and every snapshot end to end. A progress bar on a terminal, a
//! plain line per file otherwise.

mod files;

pub(crate) use files::snapshot_files;
use files::{print_summary, small_files, snapshots_read};

use crate::out::say;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use quorumlog_checkpoint::verify_small_files;
use quorumlog_io::FileSystem;
use quorumlog_log::inspect::{
    check_index, first_record_unverified, segment_files, walk_segments, IndexCheck, Problem,
    SegmentReport, Walk,
};
use quorumlog_raft::{
    inspect::describe_node_record, inspect::DamageCost, inspect::NodeFold, inspect::NodeRecordInfo,
    inspect::NodeSummary, Offset, SharedFs,
};
use quorumlog_snapshot::describe_snapshot;
use serde_json::json;

/// A problem: the file, where in it, the log offset and the group it
/// belongs to (when known), and what is wrong.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub(crate) file: PathBuf,
    pub(crate) position: Option<u64>,
    pub(crate) offset: Option<u64>,
    pub(crate) group: Option<u64>,
    /// Where the damage took entries of several groups and nothing says
    /// which was first: each of them (`group` is then `None`).
    pub(crate) groups: Vec<u64>,
    pub(crate) what: String,
    /// What the damaged bytes cost, for damage in the log where the
    /// node's groups fold (`None`: a file outside the log, or a log that
    /// does not fold: counted as live).
    pub(crate) cost: Option<DamageCost>,
    /// An index the open rebuilds: harmless.
    pub(crate) rebuilt: bool,
}

impl Finding {
    fn of(p: &Problem, group: Option<u64>) -> Self {
        let skipped = if p.skipped > 0 {
            format!("; {} bytes skipped to the next valid batch", p.skipped)
        } else {
            String::new()
        };
        Finding {
            file: p.file.clone(),
            position: Some(p.position),
            offset: p.offset.map(|o| o.0),
            group,
            groups: Vec::new(),
            what: format!("{}{skipped}", p.kind),
            cost: None,
            rebuilt: false,
        }
    }

    /// Whether the damage costs nothing: reclaimable bytes, or an index
    /// the open rebuilds.
    pub(crate) fn harmless(&self) -> bool {
        self.rebuilt || self.cost.as_ref().is_some_and(DamageCost::reclaimable)
    }

    /// A word for scripts: `live`, `replayed`, `reclaimable`, `index`, or
    /// `file` (damage outside the log).
    fn cost_word(&self) -> &'static str {
        match (&self.cost, self.rebuilt) {
            (_, true) => "index",
            (Some(c), false) => c.word(),
            (None, false) => "file",
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DAMAGED {}", self.file.display())?;
        if let Some(p) = self.position {
            write!(f, " at {p}")?;
        }
        if self.groups.is_empty() {
            match (self.offset, self.group) {
                (Some(o), Some(g)) => write!(f, " (offset {o}, group {g})")?,
                (Some(o), None) => write!(f, " (offset {o})")?,
                (None, Some(g)) => write!(f, " (group {g})")?,
                (None, None) => {}
            }
        } else {
            let gs: Vec<String> = self.groups.iter().map(u64::to_string).collect();
            let o = self
                .offset
                .map_or_else(String::new, |o| format!("offset {o}, "));
            write!(f, " ({o}entries of groups {} lost)", gs.join(", "))?;
        }
        write!(f, ": {}", self.what)?;
        match &self.cost {
            Some(c) => write!(f, "; {c}"),
            None => Ok(()),
        }
    }
}

/// Counts and the progress display.
struct Tally {
    bar: Option<indicatif::ProgressBar>,
    json: bool,
    /// Print nothing, keep the findings (tests).
    quiet: bool,
    kept: Vec<Finding>,
    bytes: u64,
    files: usize,
    batches: usize,
    problems: usize,
    /// Problems that cost something (live data, a file outside the log).
    harmful: usize,
    /// The files problems were found in.
    damaged: Vec<PathBuf>,
}

impl Tally {
    fn new(bar: Option<indicatif::ProgressBar>, json: bool, quiet: bool) -> Self {
        Tally {
            bar,
            json,
            quiet,
            kept: Vec::new(),
            bytes: 0,
            files: 0,
            batches: 0,
            problems: 0,
            harmful: 0,
            damaged: Vec::new(),
        }
    }

    /// What was found, for the exit status.
    fn verdict(&self) -> Verdict {
        match (self.problems, self.harmful) {
            (0, _) => Verdict::Clean,
            (_, 0) => Verdict::Harmless,
            _ => Verdict::Damaged,
        }
    }

    fn say(&self, line: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some(b) => b.suspend(|| say!("{line}")),
            None => say!("{line}"),
        }
    }

    /// Whether a problem in `file` was found already (kept or counted).
    fn kept_damage_in(&self, file: &Path) -> bool {
        self.damaged.iter().any(|f| f == file)
    }

    fn found(&mut self, f: &Finding) {
        self.damaged.push(f.file.clone());
        self.problems += 1;
        if !f.harmless() {
            self.harmful += 1;
        }
        if self.quiet {
            self.kept.push(f.clone());
        }
        if self.json {
            self.say(
                &json!({
                    "type": "problem", "file": f.file.display().to_string(),
                    "position": f.position, "offset": f.offset, "group": f.group, "groups": f.groups, "what": f.what,
                    "cost": f.cost_word(), "harmless": f.harmless(),
                    "live_groups": match &f.cost { Some(DamageCost::Live { groups }) => groups.clone(), _ => Vec::new() },
                })
                .to_string(),
            );
        } else {
            self.say(&f.to_string());
        }
    }

    /// One file done: `kind`, and its batches or snapshot id.
    fn done(&mut self, file: &Path, kind: &str, detail: &str, json: &serde_json::Value) {
        self.files += 1;
        if let Some(b) = &self.bar {
            b.inc(1);
        } else if self.json {
            let v = crate::units::merged(
                json!({"type": "file", "file": file.display().to_string(), "kind": kind}),
                json.clone(),
            );
            self.say(&v.to_string());
        } else {
            self.say(&format!("verified {}: {detail}", file.display()));
        }
    }
}

/// What `verify` found, for its exit status.
pub(crate) enum Verdict {
    /// No problem.
    Clean,
    /// Problems, every one harmless (reclaimable bytes, an index the open
    /// rebuilds).
    Harmless,
    /// Damage that costs something.
    Damaged,
}

/// Checks `dir` (see the module doc), printing as it goes. Beside a
/// running node (`running`) the files move while they are read (a segment
/// grows, rolls or is reclaimed between the listing and the read), so the
/// check is made quietly up to three times and only what every pass finds
/// counts: damage on disk stays where it is, a moving figure does not.
pub(crate) fn run(fs: &SharedFs, dir: &Path, json: bool, running: bool) -> Result<Verdict, String> {
    if running {
        return run_moving(fs, dir, json);
    }
    Ok(check(fs, dir, json, false)?.verdict())
}

/// [`run`] beside a running node.
fn run_moving(fs: &SharedFs, dir: &Path, json: bool) -> Result<Verdict, String> {
    let key = |f: &Finding| (f.file.clone(), f.position, f.what.clone());
    let mut stable: Option<Vec<Finding>> = None;
    let mut last_err = None;
    for _ in 0..3 {
        match check(fs, dir, false, true) {
            Ok(t) => {
                let now = t.kept;
                stable = Some(match stable {
                    None => now,
                    Some(before) => before
                        .into_iter()
                        .filter(|f| now.iter().any(|g| key(g) == key(f)))
                        .collect(),
                });
                if stable.as_ref().is_some_and(Vec::is_empty) {
                    break;
                }
            }
            Err(e) => last_err = Some(e),
        }
    }
    let Some(found) = stable else {
        return Err(last_err.unwrap_or_default());
    };
    let mut t = Tally::new(None, json, false);
    for f in &found {
        t.found(f);
    }
    let summary = if json {
        json!({"type": "summary", "problems": t.problems, "running": true}).to_string()
    } else {
        format!(
            "{} problems found on every one of the passes beside the running node",
            t.problems
        )
    };
    say!("{summary}");
    Ok(t.verdict())
}

/// What `verify` finds in `dir`, printed nothing (for `repair`'s plan
/// and tests).
pub(crate) fn findings(fs: &SharedFs, dir: &Path) -> Result<Vec<Finding>, String> {
    Ok(check(fs, dir, false, true)?.kept)
}

/// Checks every file (see the module doc); with `quiet`, prints nothing
/// and keeps the findings.
fn check(fs: &SharedFs, dir: &Path, json: bool, quiet: bool) -> Result<Tally, String> {
    let segments = segment_files(fs.as_ref(), &dir.join("log"))
        .map_err(|e| format!("{}: {e}", dir.join("log").display()))?;
    let snapshots = snapshot_files(fs.as_ref(), &dir.join("snapshots"))?;
    let bar = (!json && !quiet && std::io::stderr().is_terminal()).then(|| {
        let b = indicatif::ProgressBar::new((segments.len() + snapshots.len()) as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} files {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let mut t = Tally::new(bar, json, quiet);
    let t0 = Instant::now();
    small_files(fs, dir, &mut t);
    // One read of each segment: the walk, and the node's fold of the same
    // bytes.
    let mut fold = match fold_start(fs, dir) {
        Ok(f) => f,
        Err(f) => {
            t.found(&f);
            None
        }
    };
    let (problems, after, last_seg) =
        segments_and_indexes(fs.as_ref(), &dir.join("log"), &mut t, &mut fold)?;
    let summary = match fold {
        Some(Ok(f)) => Some(f.finish()),
        Some(Err(f)) => {
            t.found(&f);
            None
        }
        None => None,
    };
    let bases: Vec<u64> = segments.iter().map(|(b, _)| b.0).collect();
    for f in log_findings(problems, summary.as_ref(), &after, &bases) {
        t.found(&f);
    }
    if let (Some(summary), Some(last_seg)) = (&summary, last_seg) {
        short_of_checkpoint(summary, &last_seg, &mut t);
    }
    snapshots_read(fs.as_ref(), &snapshots, &mut t);
    if let Some(b) = t.bar.take() {
        b.finish_and_clear();
    }
    print_summary(&t, t0, segments.len(), snapshots.len());
    Ok(t)
}

/// Each problem in the log as a finding: with its group (the damaged
/// batch's own header if it still reads, else the group the checkpoint
/// and the records before the damage place at its offset) and what it
/// costs; `bases`: every segment's base offset.
fn log_findings(
    problems: Vec<LogProblem>,
    summary: Option<&NodeSummary>,
    after: &After,
    bases: &[u64],
) -> Vec<Finding> {
    let mut out = Vec::new();
    // Each problem in the log with its group: the damaged batch's own
    // header if it still reads, else the group the checkpoint and the
    // records before the damage place at its offset.
    let mut first = true;
    for lp in problems {
        let p = &lp.problem;
        // What verified data says first: the checkpoint's runs at the
        // offset; then the damaged batch's own header, read without its
        // checksum, where it names a known group (a flipped bit may be in
        // it); then (the first damage only, where the fold's groups end)
        // the groups whose entries resume past their end: the damage took
        // entries of each.
        let by_runs = p.offset.and_then(|at| summary?.group_at(at));
        let lost = match summary {
            Some(summary) if first && lp.note.is_empty() => lost_entries(summary, after),
            _ => Vec::new(),
        };
        let known = |g: &u64| summary.is_none_or(|s| s.groups.iter().any(|x| x.group == *g));
        let own = lp.group.filter(known);
        first &= !lp.note.is_empty();
        let mut f = Finding::of(p, by_runs.or(own));
        match (f.group, &lost[..]) {
            (Some(_), _) => {}
            (None, [one]) => f.group = Some(*one),
            (None, _) => f.groups = lost,
        }
        f.what.push_str(lp.note);
        f.rebuilt = !lp.note.is_empty();
        if !f.rebuilt {
            let to = lp.to.or_else(|| {
                let base = lp.segment?;
                bases.iter().copied().find(|b| *b > base)
            });
            f.cost = match (summary, p.offset) {
                (Some(s), Some(from)) => Some(s.cost(from, Offset(to.unwrap_or(u64::MAX)))),
                _ => None,
            };
        }
        out.push(f);
    }
    out
}

/// The log's data ending below the node checkpoint's position: the
/// checkpoint was written once the log was durable to it, so what is
/// missing is damage (an open cuts the groups back to the data's end).
fn short_of_checkpoint(summary: &NodeSummary, last: &LastSegment, t: &mut Tally) {
    let (end, claimed) = (last.end_offset, summary.checkpoint_position.0);
    if end >= claimed || t.kept_damage_in(&last.file) {
        return;
    }
    t.found(&Finding {
        file: last.file.clone(),
        position: Some(last.data_end),
        offset: Some(end),
        group: None,
        groups: Vec::new(),
        what: format!(
            "the data ends at offset {end}, short of the node checkpoint's position {claimed}, \
             which was written once the log was durable to it"
        ),
        cost: Some(summary.cost(Offset(end), Offset(claimed))),
        rebuilt: false,
    });
}

/// The last segment as the walk left it.
struct LastSegment {
    file: PathBuf,
    data_end: u64,
    end_offset: u64,
}

/// The node header of the batch at `position` of a segment's bytes, read
/// without the batch's checksum (for naming only).
pub(crate) fn node_header(bytes: &[u8], position: u64) -> Option<NodeRecordInfo> {
    first_record_unverified(bytes, position).and_then(|h| describe_node_record(&h).ok())
}

/// The groups whose entries resume after the first damage past where the
/// fold (stopped at that damage) ends them: the damage took their entries.
fn lost_entries(summary: &NodeSummary, after: &After) -> Vec<u64> {
    summary
        .groups
        .iter()
        .filter(|g| after.get(&g.group).is_some_and(|&next| next > g.end.0))
        .map(|g| g.group)
        .collect()
}

/// A node's fold, started from its checkpoint (`None` without one); what
/// does not fold is a finding.
type Fold = Option<Result<NodeFold, Finding>>;

fn fold_start(fs: &SharedFs, dir: &Path) -> Result<Fold, Box<Finding>> {
    let node = dir.join("groups.ckpt");
    if !fs.exists(&node).unwrap_or(false) {
        return Ok(None);
    }
    NodeFold::start(fs, dir)
        .map(|f| Some(Ok(f)))
        .map_err(|e| Box::new(fold_finding(&node, &e)))
}

/// The group state as an open folds it does not fold.
fn fold_finding(node: &Path, e: &quorumlog_raft::Error) -> Finding {
    let group = match e {
        quorumlog_raft::Error::NodeCorrupt { group, .. } => *group,
        _ => None,
    };
    Finding {
        file: node.to_path_buf(),
        position: None,
        offset: None,
        group,
        groups: Vec::new(),
        what: format!("the node's group state does not fold: {e}"),
        cost: None,
        rebuilt: false,
    }
}

/// A problem in the log: with the group its damaged batch's own header
/// names, if it still reads, and a note for people.
struct LogProblem {
    problem: Problem,
    group: Option<u64>,
    note: &'static str,
    /// Its segment's base offset.
    segment: Option<u64>,
    /// The offset of the batch the walk resumed at (the damage's end), if
    /// it resumed in the same segment.
    to: Option<u64>,
}

/// After the first damage in a node's log: each group's first entries
/// batch that verifies (group, its first index), to tell whose entries the
/// damage took when nothing of the damaged batch names its group.
type After = std::collections::BTreeMap<u64, u64>;

/// Every segment read whole, each judged as recovery judges it, each index
/// checked against its segment: the problems found.
fn segments_and_indexes(
    fs: &dyn FileSystem,
    log_dir: &Path,
    t: &mut Tally,
    fold: &mut Fold,
) -> Result<(Vec<LogProblem>, After, Option<LastSegment>), String> {
    let mut failed = None;
    let mut last = None;
    let mut problems: Vec<LogProblem> = Vec::new();
    let mut after = After::new();
    walk_segments::<_, quorumlog_log::Error>(fs, log_dir, Walk::Raw, |s, bytes, sealed| {
        t.bytes += bytes.len() as u64;
        if let Some(Ok(f)) = fold {
            if let Err(e) = f.feed(&s, bytes) {
                *fold = Some(Err(fold_finding(
                    &log_dir.with_file_name("groups.ckpt"),
                    &e,
                )));
            }
        }
        t.batches += s.batches.len();
        if let Some(first) = problems.iter().find(|lp: &&LogProblem| lp.note.is_empty()) {
            let same = first.problem.file == s.file;
            let since = if same { first.problem.position } else { 0 };
            for b in s.batches.iter().filter(|b| b.position > since) {
                let Some(h) = node_header(bytes, b.position) else {
                    continue;
                };
                if h.kind == "Entries" {
                    after.entry(h.group).or_insert(h.offset);
                }
            }
        }
        problems.extend(s.problems.iter().map(|p| log_problem(&s, bytes, p)));
        match check_index(fs, &s, sealed) {
            Ok(IndexCheck::Damaged(p)) => problems.push(LogProblem {
                problem: p,
                group: None,
                note: " (open rebuilds the index)",
                segment: Some(s.base_offset.0),
                to: None,
            }),
            Ok(IndexCheck::Missing | IndexCheck::Valid(_)) => {}
            Err(e) => {
                failed = Some(format!("{}: {e}", s.file.display()));
                return Ok(false);
            }
        }
        last = Some(LastSegment {
            file: s.file.clone(),
            data_end: s.data_end,
            end_offset: s.end_offset.0,
        });
        t.done(
            &s.file,
            "segment",
            &format!("{} batches, {} problems", s.batches.len(), s.problems.len()),
            &json!({"base_offset": s.base_offset.0, "end_offset": s.end_offset.0,
                    "batches": s.batches.len(), "problems": s.problems.len()}),
        );
        Ok(true)
    })
    .map_err(|e| format!("{}: {e}", log_dir.display()))?;
    failed.map_or(Ok((problems, after, last)), Err)
}

/// A problem of segment `s` (its bytes: `bytes`), with the group its
/// damaged batch's own header names, if it still reads (or, where the
/// walk goes on at the very offset the damaged place held, as for damage
/// in sync padding that took nothing, the batch's there), and where the
/// damage ends.
fn log_problem(s: &SegmentReport, bytes: &[u8], p: &Problem) -> LogProblem {
    let group_at = |position: u64| node_header(bytes, position).map(|h| h.group);
    let resumed = s
        .batches
        .iter()
        .find(|b| b.position == p.position + p.skipped && Some(b.base_offset) == p.offset);
    let own = group_at(p.position).or_else(|| group_at(resumed?.position));
    let to = s
        .batches
        .iter()
        .find(|b| b.position >= p.position + p.skipped && p.skipped > 0)
        .map(|b| b.base_offset.0);
    LogProblem {
        problem: p.clone(),
        group: own,
        note: "",
        segment: Some(s.base_offset.0),
        to,
    }
}
