//! `quorumlog verify`: every file of a data directory read whole and
//! checked, walking on past damage so that every problem is found: the
//! small files (meta, election state, checkpoints), a node's checkpoint and
//! the group state it folds to, every segment batch by batch with its
//! index, and every snapshot end to end. A progress bar on a terminal, a
//! plain line per file otherwise.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use quorumlog_checkpoint::verify_small_files;
use quorumlog_io::{FileSystem, OpenMode};
use quorumlog_log::inspect::{
    check_index, check_sealed_end, inspect_segment, IndexCheck, SegmentReport, Walk,
};
use quorumlog_raft::{inspect_node, Offset, SharedFs};
use quorumlog_snapshot::describe_snapshot;

use crate::dump::print_problem;

/// A problem outside the segments' batches: the file, where in it, the
/// group it belongs to (when known), and what is wrong.
struct Finding {
    file: PathBuf,
    position: Option<u64>,
    group: Option<u64>,
    what: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DAMAGED {}", self.file.display())?;
        if let Some(p) = self.position {
            write!(f, " at {p}")?;
        }
        if let Some(g) = self.group {
            write!(f, " (group {g})")?;
        }
        write!(f, ": {}", self.what)
    }
}

/// Counts and the progress display.
struct Tally {
    bar: Option<indicatif::ProgressBar>,
    bytes: u64,
    files: usize,
    batches: usize,
    problems: usize,
}

impl Tally {
    fn say(&self, line: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| println!("{line}")),
            None => println!("{line}"),
        }
    }

    fn found(&mut self, f: &Finding) {
        self.problems += 1;
        self.say(&f.to_string());
    }

    /// One file done; `line` for a plain (non-terminal) run.
    fn done(&mut self, line: &str) {
        self.files += 1;
        match &self.bar {
            Some(b) => b.inc(1),
            None => println!("{line}"),
        }
    }

    fn segment(&mut self, r: &SegmentReport) {
        self.batches += r.batches.len();
        self.problems += r.problems.len();
        for p in &r.problems {
            match &self.bar {
                Some(b) => b.suspend(|| print_problem(p, false)),
                None => print_problem(p, false),
            }
        }
        self.done(&format!(
            "verified {}: {} batches, {} problems",
            r.file.display(),
            r.batches.len(),
            r.problems.len()
        ));
    }
}

/// Ok(false) when any problem was found.
pub(crate) fn run(fs: &SharedFs, dir: &Path) -> Result<bool, String> {
    let segments = segment_files(fs.as_ref(), &dir.join("log"))?;
    let snapshots = snapshot_files(fs.as_ref(), &dir.join("snapshots"))?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new((segments.len() + snapshots.len()) as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} files {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let mut t = Tally {
        bar,
        bytes: 0,
        files: 0,
        batches: 0,
        problems: 0,
    };
    let t0 = Instant::now();
    small_files(fs, dir, &mut t);
    segments_and_indexes(fs.as_ref(), &segments, &mut t)?;
    for (group, path) in &snapshots {
        match describe_snapshot(fs.as_ref(), path) {
            Ok(d) => {
                t.bytes += d.total_len;
                t.done(&format!(
                    "verified {}: snapshot {}, {} chunks, {} bytes of state",
                    path.display(),
                    d.id,
                    d.chunks.len(),
                    d.data_len
                ));
            }
            Err(e) => {
                let position = match &e {
                    quorumlog_snapshot::Error::Corruption {
                        at: quorumlog_snapshot::Location::File { position, .. },
                        ..
                    } => Some(*position),
                    _ => None,
                };
                let f = Finding {
                    file: path.clone(),
                    position,
                    group: *group,
                    what: e.to_string(),
                };
                t.found(&f);
                t.done("");
            }
        }
    }
    if let Some(b) = t.bar.take() {
        b.finish_and_clear();
    }
    let secs = t0.elapsed().as_secs_f64().max(1e-6);
    #[expect(clippy::cast_precision_loss, reason = "a rate for people")]
    let rate = t.bytes as f64 / secs / 1e6;
    println!(
        "{} segments, {} snapshots, {} batches, {} bytes read in {secs:.2} s ({rate:.0} MB/s): {} problems",
        segments.len(),
        snapshots.len(),
        t.batches,
        t.bytes,
        t.problems
    );
    Ok(t.problems == 0)
}

/// The small files, and in a node's directory its checkpoint and the
/// group state the intact log folds to.
fn small_files(fs: &SharedFs, dir: &Path, t: &mut Tally) {
    for c in verify_small_files(fs.as_ref(), dir) {
        if let Err(e) = c.result {
            t.found(&Finding {
                file: c.path,
                position: None,
                group: None,
                what: e.to_string(),
            });
        }
    }
    let node = dir.join("groups.ckpt");
    if fs.exists(&node).unwrap_or(false) {
        if let Err(e) = inspect_node(fs, dir) {
            let group = match &e {
                quorumlog_raft::Error::NodeCorrupt { group, .. } => *group,
                _ => None,
            };
            t.found(&Finding {
                file: node,
                position: None,
                group,
                what: format!("the node's group state does not fold: {e}"),
            });
        }
    }
}

/// Every segment read whole, each sealed one checked to reach the next
/// base, each index checked against its segment.
fn segments_and_indexes(
    fs: &dyn FileSystem,
    files: &[(u64, PathBuf)],
    t: &mut Tally,
) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    // A segment is checked once the next one's base is known (its data
    // must reach it).
    let mut prev: Option<SegmentReport> = None;
    for (base, path) in files {
        let bytes = fs
            .open(path, OpenMode::Read)
            .and_then(|f| f.read_to_end())
            .map_err(|e| io(path, e))?;
        t.bytes += bytes.len() as u64;
        if let Some(mut sealed) = prev.take() {
            check_sealed_end(&mut sealed, Offset(*base));
            index(fs, &sealed, true, t)?;
            t.segment(&sealed);
        }
        prev = Some(inspect_segment(path, Offset(*base), &bytes, Walk::Raw));
    }
    if let Some(last) = prev {
        index(fs, &last, false, t)?;
        t.segment(&last);
    }
    Ok(())
}

fn index(
    fs: &dyn FileSystem,
    s: &SegmentReport,
    sealed: bool,
    t: &mut Tally,
) -> Result<(), String> {
    match check_index(fs, s, sealed).map_err(|e| format!("{}: {e}", s.file.display()))? {
        IndexCheck::Damaged(p) => {
            t.problems += 1;
            t.say(&format!(
                "DAMAGED {} (open rebuilds the index)",
                crate::dump::place(&p)
            ));
        }
        IndexCheck::Missing | IndexCheck::Valid(_) => {}
    }
    Ok(())
}

/// The segment files of `log_dir`, by base offset.
fn segment_files(fs: &dyn FileSystem, log_dir: &Path) -> Result<Vec<(u64, PathBuf)>, String> {
    let mut files: Vec<(u64, PathBuf)> = fs
        .list(log_dir)
        .map_err(|e| format!("{}: {e}", log_dir.display()))?
        .into_iter()
        .filter(|e| !e.is_dir)
        .filter_map(|e| {
            let stem = e.name.strip_suffix(".log")?;
            let base = stem.parse::<u64>().ok().filter(|_| stem.len() == 20)?;
            Some((base, log_dir.join(&e.name)))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The published snapshot files: a store's in `snapshots/`, a node's in
/// `snapshots/<group>/` (with the group).
pub(crate) fn snapshot_files(
    fs: &dyn FileSystem,
    dir: &Path,
) -> Result<Vec<(Option<u64>, PathBuf)>, String> {
    let list = |d: &Path| fs.list(d).map_err(|e| format!("{}: {e}", d.display()));
    if !fs.exists(dir).unwrap_or(false) {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for e in list(dir)? {
        if e.is_dir {
            let Ok(group) = e.name.parse::<u64>() else {
                continue;
            };
            let sub = dir.join(&e.name);
            for f in list(&sub)? {
                if !f.is_dir && f.name.ends_with(".snapshot") {
                    out.push((Some(group), sub.join(&f.name)));
                }
            }
        } else if e.name.ends_with(".snapshot") {
            out.push((None, dir.join(&e.name)));
        }
    }
    out.sort();
    Ok(out)
}
