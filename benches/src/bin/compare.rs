//! Side-by-side comparison of quorumlog, raft-engine 0.4, okaywal 0.3 and the
//! raw disk on the same workloads, in one process and one run. Every entry
//! counts only once durable.
//!
//! ```text
//! cargo run --release -p quorumlog-benches --bin compare -- --seconds N [--csv]
//!     [--gib G] [--workloads W1,W2,...] [--variants] [--systems a,b] [--dir DIR]
//! ```
//! Many groups on one node: `W6` (1,000 groups, 64 writers, random
//! groups), `W6-10K` (10,000), `W7` (one writer, one entry to each of 100
//! groups per call), `G1` (space with one group in a hundred never
//! purging), `V1` (1,000 groups voting at once), `R6` (reopen after a
//! crash with 1,000 groups and 1, 2, 4 GiB × `--gib` of live log, against
//! raft-engine on the same data).
//!
//! `--variants` adds quorumlog with the pwrite backend and with packed
//! (unaligned) writes, to measure the `io_uring` backend and the cost of page
//! alignment.
//!
//! The write workloads run in `--rounds N` rounds (default 3): in each
//! round every system runs once, in an order that rotates from round to
//! round, so a noisy minute on this shared machine hits every system rather
//! than deciding a row. Each system's row is its median round (the CSV lines
//! keep their format: `workload,system,entries_per_s,mb_per_s`), and the
//! ratio lines give the median over rounds of quorumlog / best peer measured
//! in the same round.

#[path = "compare/end_to_end.rs"]
mod end_to_end;
#[path = "compare/multi.rs"]
mod multi;
#[path = "compare/report.rs"]
mod report;

use end_to_end::{run_e1, run_e2};

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use quorumlog_benches::systems::{
    BenchError, Okaywal, Quorumlog, QuorumlogSetup, RaftEngine, Raw, RawMode, System,
};
use quorumlog_benches::workloads::{
    peak_rss_kib, read_and_reopen, run_write, snapshot_write_read, Measured, Workload,
    WRITE_WORKLOADS,
};
use quorumlog_io::{FileSystem, IoBackend, RealFs, Usage};
use quorumlog_log::{Preallocation, TailWrites, WriteAlignment};

struct Args {
    seconds: f64,
    csv: bool,
    gib: f64,
    workloads: Vec<String>,
    variants: bool,
    dir: Option<PathBuf>,
    systems: Option<Vec<String>>,
    rounds: usize,
}

fn parse_args() -> Result<Args, BenchError> {
    let mut a = Args {
        seconds: 3.0,
        csv: false,
        gib: 1.0,
        workloads: vec!["W1", "W2", "W3", "W4", "W5", "R1", "O1", "S1"]
            .into_iter()
            .map(String::from)
            .collect(),
        variants: false,
        dir: None,
        systems: None,
        rounds: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seconds" => a.seconds = it.next().ok_or("--seconds needs a value")?.parse()?,
            "--csv" => a.csv = true,
            "--gib" => a.gib = it.next().ok_or("--gib needs a value")?.parse()?,
            "--workloads" => {
                a.workloads = it
                    .next()
                    .ok_or("--workloads needs a list")?
                    .split(',')
                    .map(|s| s.trim().to_uppercase())
                    .collect();
            }
            "--variants" => a.variants = true,
            "--rounds" => a.rounds = it.next().ok_or("--rounds needs a value")?.parse()?,
            "--systems" => {
                a.systems = Some(
                    it.next()
                        .ok_or("--systems needs a list")?
                        .split(',')
                        .map(|s| s.trim().to_string())
                        .collect(),
                );
            }
            "--dir" => a.dir = Some(PathBuf::from(it.next().ok_or("--dir needs a path")?)),
            "-h" | "--help" => {
                println!(
                    "usage: compare [--seconds N] [--rounds N] [--csv] [--gib G] \
                     [--workloads W1,..,R1,O1] [--variants] [--systems a,b] [--dir DIR]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if a.seconds <= 0.0 || a.gib <= 0.0 || a.rounds == 0 {
        return Err("--seconds, --gib and --rounds must be positive".into());
    }
    Ok(a)
}

struct Row {
    workload: String,
    system: String,
    m: Measured,
}

fn open_system(name: &str, dir: &Path) -> Result<Box<dyn System>, BenchError> {
    Ok(match name {
        "quorumlog" => Box::new(Quorumlog::open(dir, QuorumlogSetup::default())?),
        "quorumlog-pwrite" => Box::new(Quorumlog::open(
            dir,
            QuorumlogSetup {
                backend: IoBackend::Pwrite,
                ..QuorumlogSetup::default()
            },
        )?),
        "quorumlog-packed" => Box::new(Quorumlog::open(
            dir,
            QuorumlogSetup {
                alignment: WriteAlignment::Packed,
                ..QuorumlogSetup::default()
            },
        )?),
        "quorumlog-fallocate" => Box::new(Quorumlog::open(
            dir,
            QuorumlogSetup {
                preallocation: Preallocation::Fallocate,
                ..QuorumlogSetup::default()
            },
        )?),
        "quorumlog-zerofill" => Box::new(Quorumlog::open(
            dir,
            QuorumlogSetup {
                preallocation: Preallocation::ZeroFill,
                ..QuorumlogSetup::default()
            },
        )?),
        "quorumlog-growing" => Box::new(Quorumlog::open(
            dir,
            QuorumlogSetup {
                compact: false,
                ..QuorumlogSetup::default()
            },
        )?),
        "quorumlog-buffered" => Box::new(Quorumlog::open(
            dir,
            QuorumlogSetup {
                tail_writes: TailWrites::Buffered,
                ..QuorumlogSetup::default()
            },
        )?),
        "quorumlog-pipelined" => Box::new(Quorumlog::open(
            dir,
            QuorumlogSetup {
                tail_writes: TailWrites::DirectPipelined,
                ..QuorumlogSetup::default()
            },
        )?),
        "raft-engine" => Box::new(RaftEngine::open(dir)?),
        "okaywal" => Box::new(Okaywal::open(dir)?),
        "raw" => Box::new(Raw::open(dir, 256 << 20, RawMode::Buffered)?),
        "raw-direct" => Box::new(Raw::open(dir, 256 << 20, RawMode::Direct)?),
        other => return Err(format!("unknown system {other}").into()),
    })
}

fn run_workload(
    w: &Workload,
    args: &Args,
    base: &Path,
    rows: &mut Vec<Row>,
    ratios: &mut Vec<(String, f64)>,
) -> Result<(), BenchError> {
    let mut systems = vec!["quorumlog", "raft-engine", "okaywal"];
    if w.writers == 1 {
        systems.extend(["raw", "raw-direct"]);
    }
    if args.variants {
        systems.extend([
            "quorumlog-pwrite",
            "quorumlog-packed",
            "quorumlog-fallocate",
            "quorumlog-zerofill",
            "quorumlog-growing",
            "quorumlog-buffered",
            "quorumlog-pipelined",
        ]);
    }
    if let Some(only) = &args.systems {
        systems.retain(|s| only.iter().any(|o| o == s));
    }
    // Per system: its measurements, and this round's rate.
    let mut table: Vec<(&str, Vec<Measured>, Option<f64>)> =
        systems.iter().map(|s| (*s, Vec::new(), None)).collect();
    let mut round_ratios = Vec::new();
    for round in 0..args.rounds {
        let n = table.len();
        for k in 0..n {
            let Some(entry) = table.get_mut((k + round) % n) else {
                continue;
            };
            let name = entry.0;
            let dir = base.join(format!("{}-{name}-{round}", w.name));
            let system = open_system(name, &dir)?;
            let m = run_write(system.as_ref(), w, Duration::from_secs_f64(args.seconds))?;
            eprintln!(
                "{:<4} {:<18} round {round}: {:>12.0} entries/s {:>9.1} MB/s",
                w.name,
                name,
                m.entries_per_s(),
                m.mb_per_s()
            );
            entry.2 = Some(m.entries_per_s());
            entry.1.push(m);
            drop(system);
            let _ = std::fs::remove_dir_all(&dir);
        }
        let of = |name: &str| table.iter().find(|e| e.0 == name).and_then(|e| e.2);
        let peer = of("raft-engine")
            .into_iter()
            .chain(of("okaywal"))
            .reduce(f64::max);
        if let (Some(q), Some(p)) = (of("quorumlog"), peer) {
            round_ratios.push(q / p);
        }
    }
    for (name, mut measured, _) in table {
        measured.sort_by(|a, b| a.entries_per_s().total_cmp(&b.entries_per_s()));
        if let Some(m) = measured.get(measured.len() / 2).copied() {
            rows.push(Row {
                workload: w.name.to_string(),
                system: name.to_string(),
                m,
            });
        }
    }
    if let Some(r) = median(&mut round_ratios) {
        ratios.push((w.name.to_string(), r));
    }
    Ok(())
}

/// The median of `xs` (sorted in place), if any.
fn median(xs: &mut [f64]) -> Option<f64> {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied()
}

/// Reads every segment file of the log in `dir` with plain 1 MiB reads: the
/// raw read rate of the same bytes.
fn raw_read(dir: &Path, bytes: u64) -> Result<Measured, BenchError> {
    let fs = RealFs::with_backend(IoBackend::Pwrite)?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("log"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    let t = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    let mut checksum = 0u64;
    for p in files {
        let f = fs.open(&p, quorumlog_io::OpenMode::Read)?;
        let mut pos = 0u64;
        while done < bytes {
            let n = f.read_at(&mut buf, pos)?;
            if n == 0 {
                break;
            }
            checksum = checksum.wrapping_add(u64::from(buf.get(n / 2).copied().unwrap_or(0)));
            pos += n as u64;
            done += n as u64;
        }
    }
    std::hint::black_box(checksum);
    Ok(Measured {
        entries: done / 256,
        bytes: done,
        seconds: t.elapsed().as_secs_f64(),
        usage: Usage::default(),
    })
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("compare failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), BenchError> {
    let raw: Vec<String> = std::env::args().collect();
    if let [_, flag, kind, dir, groups, bytes] = raw.as_slice() {
        if flag == "--fill" {
            return multi::fill_child(kind, Path::new(dir), groups.parse()?, bytes.parse()?);
        }
    }
    let args = parse_args()?;
    let tmp = match &args.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let base = tmp.path();
    let backend = format!(
        "{} (lone writes and syncs: pwrite, fdatasync; sync-round writes: {:?} by default; \
         prefix compacted behind the writers)",
        RealFs::new().backend_description(),
        TailWrites::default()
    );
    eprintln!(
        "quorumlog I/O backend: {backend}; {} s per system and workload",
        args.seconds
    );
    let mut rows: Vec<Row> = Vec::new();
    let mut ratios: Vec<(String, f64)> = Vec::new();
    for w in WRITE_WORKLOADS
        .iter()
        .filter(|w| args.workloads.iter().any(|n| n == w.name))
    {
        run_workload(w, &args, base, &mut rows, &mut ratios)?;
    }
    let mut extra = String::new();
    for w in WRITE_WORKLOADS
        .iter()
        .filter(|w| args.workloads.iter().any(|n| n == w.name))
    {
        let _ = writeln!(extra, "{}", multi::cpu_line(w.name, &rows));
    }
    if args.workloads.iter().any(|n| n == "R1" || n == "O1") {
        run_read_and_reopen(&args, base, &mut rows, &mut extra)?;
    }
    if args.workloads.iter().any(|n| n == "S1") {
        run_snapshots(&args, base, &mut rows, &mut extra)?;
    }
    if args.workloads.iter().any(|n| n == "E1") {
        run_e1(&args, base, &mut rows, &mut extra)?;
    }
    if args.workloads.iter().any(|n| n == "E2") {
        run_e2(&args, base, &mut rows, &mut extra)?;
    }
    multi::run_multi_all(&args, base, &mut rows, &mut ratios, &mut extra)?;
    report::report(&rows, &ratios, &args, &extra, &backend);
    Ok(())
}

/// Whether `--systems` (if given) names `name`.
fn selected(args: &Args, name: &str) -> bool {
    args.systems
        .as_ref()
        .is_none_or(|l| l.iter().any(|n| n == name))
}

/// R1 and O1: a sequential read of a log of `args.gib` GiB against the raw
/// disk, and reopening it after a clean close and after a crash.
#[expect(clippy::cast_precision_loss, reason = "sizes for display")]
fn run_read_and_reopen(
    args: &Args,
    base: &Path,
    rows: &mut Vec<Row>,
    extra: &mut String,
) -> Result<(), BenchError> {
    let dir = base.join("R1O1");
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "GiB to bytes"
    )]
    let bytes = (args.gib * f64::from(1u32 << 30)) as u64;
    let rr = read_and_reopen(&dir, bytes)?;
    let raw = raw_read(&dir, rr.log_bytes)?;
    if args.workloads.iter().any(|n| n == "R1") {
        rows.push(Row {
            workload: "R1".into(),
            system: "quorumlog".into(),
            m: rr.read,
        });
        rows.push(Row {
            workload: "R1".into(),
            system: "raw".into(),
            m: raw,
        });
    }
    if args.workloads.iter().any(|n| n == "O1") {
        for (name, ms) in [
            ("O1-clean", rr.open_clean_ms),
            ("O1-crash", rr.open_crash_ms),
        ] {
            rows.push(Row {
                workload: name.into(),
                system: "quorumlog".into(),
                m: Measured {
                    entries: rr.records,
                    bytes: rr.log_bytes,
                    seconds: ms / 1e3,
                    usage: Usage::default(),
                },
            });
        }
        let _ = writeln!(
            extra,
            "O1 quorumlog, {:.2} GiB log: open after clean close {:.2} ms ({} bytes verified); after crash {:.2} ms ({} bytes verified)",
            rr.log_bytes as f64 / f64::from(1u32 << 30),
            rr.open_clean_ms,
            rr.open_clean_scanned,
            rr.open_crash_ms,
            rr.open_crash_scanned
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[expect(clippy::cast_precision_loss, reason = "rates for display")]
fn run_snapshots(
    args: &Args,
    base: &Path,
    rows: &mut Vec<Row>,
    extra: &mut String,
) -> Result<(), BenchError> {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "GiB to bytes"
    )]
    let bytes = (args.gib * f64::from(1u32 << 30)) as u64;
    for (name, level) in [("S1", None), ("S1-zstd", Some(1))] {
        let dir = base.join(name);
        let run = snapshot_write_read(&dir, bytes, level)?;
        eprintln!(
            "{name}: write {:.0} MB/s, read {:.0} MB/s, file {} bytes",
            run.write.mb_per_s(),
            run.read.mb_per_s(),
            run.file_bytes
        );
        rows.push(Row {
            workload: format!("{name}-write"),
            system: "quorumlog".into(),
            m: run.write,
        });
        rows.push(Row {
            workload: format!("{name}-read"),
            system: "quorumlog".into(),
            m: run.read,
        });
        let _ = writeln!(
                extra,
                "{name} snapshot of {:.2} GiB state: file {:.2} GiB; write (frozen) {:.2} GB/s, verified read {:.2} GB/s",
                bytes as f64 / f64::from(1u32 << 30),
                run.file_bytes as f64 / f64::from(1u32 << 30),
                run.write.mb_per_s() / 1e3,
                run.read.mb_per_s() / 1e3
            );
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let Some(kib) = peak_rss_kib() {
        let _ = writeln!(
                extra,
                "peak RSS of this process: {} MiB (run `--workloads S1` alone to attribute it to snapshots)",
                kib / 1024
            );
    }
    Ok(())
}
