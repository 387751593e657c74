//! W6, W7, G1, V1 and R6: many groups on one node (see
//! `quorumlog_benches::multi`).

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's private items, as it sees them"
)]
use super::*;

use quorumlog_benches::multi::{
    garbage, reopen_engine, reopen_node, run_multi, votes_node, votes_per_dir, EngineRegions,
    MultiSystem, MultiWorkload, NodeSystem, PerDirectory, RawMulti, MULTI_WORKLOADS,
};
use quorumlog_raft::NodeOptions;

fn open_multi(
    name: &str,
    dir: &Path,
    w: &MultiWorkload,
) -> Result<Box<dyn MultiSystem>, BenchError> {
    Ok(match name {
        // Every writer waits for its own appends: they lead every round
        // (`CallerLed`), no append wakes the log's flusher.
        "quorumlog" => Box::new(NodeSystem::open(
            dir,
            w.groups,
            &NodeOptions {
                sync: quorumlog_log::SyncPolicy::CallerLed,
                ..NodeOptions::default()
            },
        )?),
        "raft-engine" => Box::new(EngineRegions::open(dir, w.groups)?),
        "quorumlog-per-dir" => Box::new(PerDirectory::open(dir, w.groups)?),
        "raw" => Box::new(RawMulti::open(dir)?),
        other => return Err(format!("unknown system {other}").into()),
    })
}

/// The systems a multi-group workload runs on.
fn multi_systems(w: &MultiWorkload, args: &Args, extra: &mut String) -> Vec<&'static str> {
    let mut systems = vec!["quorumlog", "raft-engine", "quorumlog-per-dir", "raw"];
    if w.groups > 2_000 {
        // Ten thousand directories are some forty thousand open files
        // (past this machine's 20,000): one directory per group does not
        // run there at all.
        systems.retain(|s| *s != "quorumlog-per-dir");
        let _ = writeln!(
            extra,
            "{:<6} one directory per group not run: {} directories need ~4 open files each",
            w.name, w.groups
        );
    }
    if let Some(only) = &args.systems {
        systems.retain(|s| only.iter().any(|o| o == s));
    }
    systems
}

/// One multi-group workload, systems interleaved in rounds.
pub(super) fn run_multi_workload(
    w: &MultiWorkload,
    args: &Args,
    base: &Path,
    rows: &mut Vec<Row>,
    ratios: &mut Vec<(String, f64)>,
    extra: &mut String,
) -> Result<(), BenchError> {
    let systems = multi_systems(w, args, extra);
    let mut table: Vec<(&str, Vec<Measured>, Option<f64>)> =
        systems.iter().map(|s| (*s, Vec::new(), None)).collect();
    let (mut vs_engine, mut vs_dirs, mut per_sync) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..args.rounds {
        let n = table.len();
        for k in 0..n {
            let Some(entry) = table.get_mut((k + round) % n) else {
                continue;
            };
            let name = entry.0;
            let dir = base.join(format!("{}-{name}-{round}", w.name));
            let system = open_multi(name, &dir, w)?;
            let before = system.syncs();
            let m = run_multi(system.as_ref(), w, Duration::from_secs_f64(args.seconds))?;
            if let (Some(a), Some(b)) = (before, system.syncs()) {
                #[expect(clippy::cast_precision_loss, reason = "a ratio for display")]
                per_sync.push(m.entries as f64 / (b - a).max(1) as f64);
            }
            eprintln!(
                "{:<6} {:<18} round {round}: {:>12.0} entries/s",
                w.name,
                name,
                m.entries_per_s()
            );
            entry.2 = Some(m.entries_per_s());
            entry.1.push(m);
            drop(system);
            let _ = std::fs::remove_dir_all(&dir);
        }
        let of = |name: &str| table.iter().find(|e| e.0 == name).and_then(|e| e.2);
        for (a, b, out) in [
            ("quorumlog", "raft-engine", &mut vs_engine),
            ("quorumlog", "quorumlog-per-dir", &mut vs_dirs),
        ] {
            if let (Some(x), Some(y)) = (of(a), of(b)) {
                out.push(x / y);
            }
        }
    }
    median_rows(w, table, rows);
    let _ = writeln!(extra, "{}", cpu_line(w.name, rows));
    if let Some(r) = median(&mut vs_engine) {
        ratios.push((w.name.to_string(), r));
    }
    let _ = writeln!(
        extra,
        "{:<6} {} groups, {} writer(s), {} group(s) per call: quorumlog / raft-engine = {}; \
         quorumlog / one directory per group = {}; quorumlog entries per sync = {}",
        w.name,
        w.groups,
        w.writers,
        w.per_call,
        median(&mut vs_engine).map_or("-".into(), |r| format!("{r:.2}x")),
        median(&mut vs_dirs).map_or("-".into(), |r| format!("{r:.2}x")),
        median(&mut per_sync).map_or("-".into(), |r| format!("{r:.1}")),
    );
    Ok(())
}

/// CPU and context switches per durable entry of each system's median
/// round of `workload` (whole process, every thread).
pub(super) fn cpu_line(workload: &str, rows: &[Row]) -> String {
    let mut line = format!("{workload:<6} CPU per durable entry (median round):");
    for r in rows.iter().filter(|r| r.workload == workload) {
        let _ = write!(
            line,
            " {} {:.2} us, {:.2} switches;",
            r.system,
            r.m.cpu_us_per_entry(),
            r.m.switches_per_entry()
        );
    }
    line
}

/// Each system's median round of `w`, as a row.
fn median_rows(
    w: &MultiWorkload,
    table: Vec<(&str, Vec<Measured>, Option<f64>)>,
    rows: &mut Vec<Row>,
) {
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
}

/// Every multi-group workload the arguments name.
pub(super) fn run_multi_all(
    args: &Args,
    base: &Path,
    rows: &mut Vec<Row>,
    ratios: &mut Vec<(String, f64)>,
    extra: &mut String,
) -> Result<(), BenchError> {
    for w in MULTI_WORKLOADS
        .iter()
        .filter(|w| args.workloads.iter().any(|n| n == w.name))
    {
        run_multi_workload(w, args, base, rows, ratios, extra)?;
    }
    if args.workloads.iter().any(|n| n == "G1") {
        let dir = base.join("G1");
        let g = garbage(&dir, Duration::from_secs_f64(args.seconds.max(10.0)))?;
        let _ = std::fs::remove_dir_all(&dir);
        #[expect(clippy::cast_precision_loss, reason = "sizes for display")]
        let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
        let _ = writeln!(
            extra,
            "G1     100 groups, one never purging, 8 MiB segments, {:.0} s: {} entries; disk / live \
             at most {:.2}x ({:.0} MiB / {:.0} MiB), at the end {:.0} MiB / {:.0} MiB; rewritten \
             bytes per appended byte {:.3}; {} segments freed",
            g.seconds,
            g.entries,
            g.max_ratio,
            mib(g.at_max.0),
            mib(g.at_max.1),
            mib(g.end.0),
            mib(g.end.1),
            g.write_amplification,
            g.segments_freed
        );
    }
    if args.workloads.iter().any(|n| n == "V1") {
        for round in 0..args.rounds {
            let (a, b) = (
                base.join(format!("V1-node-{round}")),
                base.join(format!("V1-dirs-{round}")),
            );
            let node = votes_node(&a, 1_000)?;
            let dirs = votes_per_dir(&b, 1_000)?;
            let _ = std::fs::remove_dir_all(&a);
            let _ = std::fs::remove_dir_all(&b);
            let _ = writeln!(
                extra,
                "V1     1,000 groups voting at once (64 threads), round {round}: quorumlog node {:.1} ms \
                 in {} syncs; one directory per group (a small-file replace each) {:.1} ms",
                node.ms,
                node.syncs.unwrap_or(0),
                dirs.ms
            );
        }
    }
    if args.workloads.iter().any(|n| n == "R6") {
        run_r6(args, base, extra)?;
    }
    Ok(())
}

/// Fills `dir` in a child process (`compare --fill node|engine DIR GROUPS
/// BYTES`), which prints `filled` once its data is durable; then kills it
/// (SIGKILL: a crash).
fn fill_and_kill(kind: &str, dir: &Path, groups: usize, bytes: u64) -> Result<(), BenchError> {
    use std::io::BufRead as _;
    let exe = std::env::current_exe()?;
    let mut child = std::process::Command::new(exe)
        .args(["--fill", kind])
        .arg(dir)
        .args([groups.to_string(), bytes.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let out = child.stdout.take().ok_or("no child stdout")?;
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line)?;
    child.kill()?;
    child.wait()?;
    if line.trim() != "filled" {
        return Err(format!("the {kind} fill failed: {line:?}").into());
    }
    Ok(())
}

/// Drops the page cache if this process may (root); says whether it did.
fn drop_caches() -> bool {
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// R6: reopen after a crash with 1,000 groups and 1, 2 and 4 GiB (times
/// `--gib`) of live log, quorumlog's node against raft-engine on the same
/// data, each with a cold page cache where it can be dropped.
fn run_r6(args: &Args, base: &Path, extra: &mut String) -> Result<(), BenchError> {
    for gib in [1.0f64, 2.0, 4.0] {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "GiB to bytes"
        )]
        let bytes = (gib * args.gib * f64::from(1u32 << 30)) as u64;
        let (a, b) = (
            base.join(format!("R6-node-{gib}")),
            base.join(format!("R6-engine-{gib}")),
        );
        fill_and_kill("node", &a, 1_000, bytes)?;
        let cold = drop_caches();
        let (node_ms, replayed) = reopen_node(&a)?;
        let _ = std::fs::remove_dir_all(&a);
        fill_and_kill("engine", &b, 1_000, bytes)?;
        drop_caches();
        let engine_ms = reopen_engine(&b)?;
        let _ = std::fs::remove_dir_all(&b);
        let _ = writeln!(
            extra,
            "R6     reopen after a crash, 1,000 groups, {:.1} GiB live ({} page cache): quorumlog \
             {node_ms:.0} ms ({replayed} batches replayed after its checkpoint); raft-engine \
             {engine_ms:.0} ms; raft-engine / quorumlog = {:.1}x",
            gib * args.gib,
            if cold { "cold" } else { "warm" },
            engine_ms / node_ms
        );
        eprintln!("R6 {gib} GiB: node {node_ms:.0} ms, engine {engine_ms:.0} ms");
    }
    Ok(())
}

/// The child side of [`fill_and_kill`].
pub(super) fn fill_child(
    kind: &str,
    dir: &Path,
    groups: usize,
    bytes: u64,
) -> Result<(), BenchError> {
    match kind {
        "node" => quorumlog_benches::multi::fill_node(dir, groups, bytes)?,
        "engine" => quorumlog_benches::multi::fill_engine(dir, groups, bytes)?,
        other => return Err(format!("unknown fill {other}").into()),
    }
    println!("filled");
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}
