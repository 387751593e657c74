//! `quorumlog verify`: every segment of the log read whole and every batch
//! checked (walking on past damage, so every problem is found), with a
//! progress bar on a terminal and a plain line per segment otherwise.

use std::io::IsTerminal as _;
use std::path::Path;
use std::time::Instant;

use quorumlog_io::{FileSystem, OpenMode};
use quorumlog_log::inspect::{check_sealed_end, inspect_segment, SegmentReport, Walk};
use quorumlog_raft::Offset;

use crate::dump::print_problem;

/// Ok(false) when any problem was found.
pub(crate) fn run(fs: &dyn FileSystem, dir: &Path) -> Result<bool, String> {
    let log_dir = dir.join("log");
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let mut files: Vec<(u64, std::path::PathBuf)> = fs
        .list(&log_dir)
        .map_err(|e| io(&log_dir, e))?
        .into_iter()
        .filter(|e| !e.is_dir)
        .filter_map(|e| {
            let stem = e.name.strip_suffix(".log")?;
            let base = stem.parse::<u64>().ok().filter(|_| stem.len() == 20)?;
            Some((base, log_dir.join(&e.name)))
        })
        .collect();
    files.sort();
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(files.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} segments {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let t0 = Instant::now();
    let (mut bytes_read, mut batches, mut problems) = (0u64, 0usize, 0usize);
    let mut emit = |r: &SegmentReport| {
        batches += r.batches.len();
        problems += r.problems.len();
        for p in &r.problems {
            match &bar {
                Some(b) => b.suspend(|| print_problem(p, false)),
                None => print_problem(p, false),
            }
        }
        match &bar {
            Some(b) => b.inc(1),
            None => println!(
                "verified {}: {} batches, {} problems",
                r.file.display(),
                r.batches.len(),
                r.problems.len()
            ),
        }
    };
    // A segment is reported once the next one's base is known (its data
    // must reach it).
    let mut prev: Option<SegmentReport> = None;
    for (base, path) in &files {
        let bytes = fs
            .open(path, OpenMode::Read)
            .and_then(|f| f.read_to_end())
            .map_err(|e| io(path, e))?;
        bytes_read += bytes.len() as u64;
        if let Some(mut sealed) = prev.take() {
            check_sealed_end(&mut sealed, Offset(*base));
            emit(&sealed);
        }
        prev = Some(inspect_segment(path, Offset(*base), &bytes, Walk::Raw));
    }
    if let Some(last) = prev {
        emit(&last);
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let secs = t0.elapsed().as_secs_f64().max(1e-6);
    #[expect(clippy::cast_precision_loss, reason = "a rate for people")]
    let rate = bytes_read as f64 / secs / 1e6;
    println!(
        "{} segments, {batches} batches, {bytes_read} bytes read in {secs:.2} s ({rate:.0} MB/s): {problems} problems",
        files.len()
    );
    Ok(problems == 0)
}
