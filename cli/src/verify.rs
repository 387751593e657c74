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
use quorumlog_io::FileSystem;
use quorumlog_log::inspect::{
    check_index, segment_files, walk_segments, IndexCheck, SegmentReport, Walk,
};
use quorumlog_raft::{inspect_node, SharedFs};
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
    let segments = segment_files(fs.as_ref(), &dir.join("log"))
        .map_err(|e| format!("{}: {e}", dir.join("log").display()))?;
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
    // The fold reads the segments too: beside the walk, one of the two
    // reads each from the disk and the other from the cache, on two cores.
    let folded = std::thread::scope(|s| {
        let fold = s.spawn(|| node_fold(fs, dir));
        let walked = segments_and_indexes(fs.as_ref(), &dir.join("log"), &mut t);
        (fold.join(), walked)
    });
    folded.1?;
    match folded.0 {
        Ok(Some(f)) => t.found(&f),
        Ok(None) => {}
        Err(_) => return Err("the fold of the node's group state panicked".to_string()),
    }
    snapshots_read(fs.as_ref(), &snapshots, &mut t);
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

/// Every published snapshot, read whole and checked.
fn snapshots_read(fs: &dyn FileSystem, snapshots: &[(Option<u64>, PathBuf)], t: &mut Tally) {
    for (group, path) in snapshots {
        match describe_snapshot(fs, path) {
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
}

/// The small files.
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
}

/// A node's group state folded from its checkpoint and log, as an open
/// folds it: what does not fold.
fn node_fold(fs: &SharedFs, dir: &Path) -> Option<Finding> {
    let node = dir.join("groups.ckpt");
    if !fs.exists(&node).unwrap_or(false) {
        return None;
    }
    let e = inspect_node(fs, dir).err()?;
    let group = match &e {
        quorumlog_raft::Error::NodeCorrupt { group, .. } => *group,
        _ => None,
    };
    Some(Finding {
        file: node,
        position: None,
        group,
        what: format!("the node's group state does not fold: {e}"),
    })
}

/// Every segment read whole, each sealed one checked to reach the next
/// base, each index checked against its segment.
fn segments_and_indexes(fs: &dyn FileSystem, log_dir: &Path, t: &mut Tally) -> Result<(), String> {
    let mut failed = None;
    walk_segments::<_, quorumlog_log::Error>(fs, log_dir, Walk::Raw, |s, bytes, sealed| {
        t.bytes += bytes.len() as u64;
        if let Err(e) = index(fs, &s, sealed, t) {
            failed = Some(e);
            return Ok(false);
        }
        t.segment(&s);
        Ok(true)
    })
    .map_err(|e| format!("{}: {e}", log_dir.display()))?;
    failed.map_or(Ok(()), Err)
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
