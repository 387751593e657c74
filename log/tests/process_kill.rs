//! Process-kill test (docs/design.md §4, invariants 1 and 3, on a real file
//! system): a child process appends through `DurableLog` with default
//! options (1, 8 or 64 writer threads; acknowledged by `append_durable`
//! waits or by `on_durable` completions), printing each acknowledged offset
//! and a CRC32C of its record on a pipe. The parent kills it with SIGKILL
//! after a random number of acknowledgements, reopens the directory in
//! **strict** mode and reads every record back.
//!
//! A refused open or a failing read counts as a violation exactly like a
//! lost or changed record: a kill does not damage the disk.
//!
//! Record sizes are drawn so that every end position within a page occurs,
//! in particular every sync padding from 0 bytes to more than a batch
//! header: a single waiting writer starts each batch on a fresh page, so a
//! record of `k * 4096 - 44 - gap` bytes leaves exactly `gap` bytes of
//! padding.
//!
//! After each check the parent truncates the log's prefix (keeping its last
//! two segments), as a node does after a snapshot: the freed segment files
//! go to the recycling pool, and the next child rolls into them, so kills
//! also land while appends overwrite the stale batches of a recycled file.
//!
//! `QUORUMLOG_KILLS=N` sets the number of kills (default 24);
//! `QUORUMLOG_KILL_SEED=S` replays a run (each run draws a fresh seed and
//! prints it).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;

use quorumlog_checkpoint::{
    format, ClusterId, DataDir, Epoch, NodeId, Offset, OpenOptions, SharedFs,
};
use quorumlog_io::{RealFs, SimRng};
use quorumlog_log::{DurableLog, Log, LogOptions, SyncPolicy};
use quorumlog_testkit::{fresh_seed, read_records};

const CHILD_ENV: &str = "QUORUMLOG_KILL_CHILD_DIR";
/// Bytes of a batch header plus one record's length prefix.
const BATCH_OVERHEAD: u64 = 44;

/// Default options except a 1 MiB segment (so that runs roll) and batches
/// that fit it.
fn options() -> LogOptions {
    LogOptions {
        segment_size_bytes: 1 << 20,
        max_batch_bytes: 64 << 10,
        ..LogOptions::default()
    }
}

/// A record length: half the time one that ends its batch `gap` bytes
/// before a page boundary (for a batch starting on a page), `gap` in
/// 0..=48; otherwise uniform in 1..=6000.
fn record_len(rng: &mut SimRng) -> usize {
    let len = if rng.below(2) == 0 {
        let pages = 1 + rng.below(2);
        let gap = rng.below(49);
        pages * 4096 - BATCH_OVERHEAD - gap
    } else {
        1 + rng.below(6000)
    };
    usize::try_from(len).unwrap()
}

fn record(rng: &mut SimRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}

#[derive(Clone, Copy, Debug)]
enum Ack {
    Wait,
    Completion,
}

/// One writer thread of the child: appends forever, sending each
/// acknowledged (offset, crc) to the printer.
fn writer(log: &DurableLog, seed: u64, ack: Ack, tx: &mpsc::Sender<(u64, u32)>) {
    let mut rng = SimRng::new(seed);
    let mut appended = 0u64;
    loop {
        let len = record_len(&mut rng);
        let rec = record(&mut rng, len);
        let crc = crc32c::crc32c(&rec);
        match ack {
            Ack::Wait => {
                let info = log.append_durable(Epoch(1), &[&rec]).unwrap();
                tx.send((info.base_offset.0, crc)).unwrap();
            }
            Ack::Completion => {
                let info = log.append_as_leader(Epoch(1), &[&rec]).unwrap();
                let tx = tx.clone();
                let at = info.base_offset.0;
                log.on_durable(
                    info.next_offset,
                    Box::new(move |r| {
                        if r.is_ok() {
                            let _ = tx.send((at, crc));
                        }
                    }),
                );
                appended += 1;
                if appended % 16 == 0 {
                    // Bound what is in flight.
                    log.wait_durable(info.next_offset).unwrap();
                }
            }
        }
    }
}

/// The child: appends durably forever with the writers and acknowledgement
/// mode the parent chose. Does nothing unless started by the parent.
#[test]
fn child_role() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let var = |name: &str| -> u64 { std::env::var(name).unwrap().parse().unwrap() };
    let seed = var("QUORUMLOG_KILL_CHILD_SEED");
    let writers = var("QUORUMLOG_KILL_WRITERS");
    let ack = if var("QUORUMLOG_KILL_ACK") == 0 {
        Ack::Wait
    } else {
        Ack::Completion
    };
    // Both policies that sync on their own: `Interval` once let a durable
    // append wait forever for an idle flusher (issue 20).
    let policy = if var("QUORUMLOG_KILL_POLICY") == 0 {
        SyncPolicy::GroupCommit
    } else {
        SyncPolicy::Interval { interval_us: 200 }
    };
    let fs: SharedFs = Arc::new(RealFs::new());
    let dd = Arc::new(DataDir::open(fs, Path::new(&dir), &OpenOptions::default()).unwrap());
    let log = Arc::new(DurableLog::open(dd, options(), policy).unwrap());
    let (tx, rx) = mpsc::channel::<(u64, u32)>();
    for w in 0..writers {
        let log = Arc::clone(&log);
        let tx = tx.clone();
        std::thread::spawn(move || writer(&log, seed ^ (w << 32), ack, &tx));
    }
    drop(tx);
    let mut out = std::io::stdout().lock();
    for (offset, crc) in rx {
        writeln!(out, "ACK {offset} {crc}").unwrap();
        out.flush().unwrap();
    }
}

/// What a reopen after a kill found wrong (a violation). Then truncates the
/// prefix (keeping the last two segments) and forgets what it dropped.
fn check_reopened(dir: &Path, acked: &mut BTreeMap<u64, u32>, close: bool) -> Result<u64, String> {
    let fs: SharedFs = Arc::new(RealFs::new());
    let dd = Arc::new(
        DataDir::open(fs, dir, &OpenOptions::default()).map_err(|e| format!("data dir: {e}"))?,
    );
    let log = Log::open(dd, options()).map_err(|e| format!("strict open refused: {e}"))?;
    let end = log.log_end_offset().0;
    if let Some((&last, _)) = acked.last_key_value() {
        if end <= last {
            return Err(format!(
                "acknowledged records lost: end {end}, acked {last}"
            ));
        }
    }
    let start = log.log_start_offset().0;
    let records = read_records(&log, Offset(start)).map_err(|e| e.to_string())?;
    let mut checked = 0;
    for (i, (o, _, rec)) in records.iter().enumerate() {
        if *o != start + i as u64 {
            return Err(format!("gap at {}", start + i as u64));
        }
        if let Some(&crc) = acked.get(o) {
            if crc32c::crc32c(rec) != crc {
                return Err(format!("offset {o} differs"));
            }
            checked += 1;
        }
    }
    if records.len() as u64 != end - start {
        return Err(format!(
            "{} records read, log from {start} to {end}",
            records.len()
        ));
    }
    if checked != acked.len() as u64 {
        return Err(format!(
            "{} of {} acknowledged records found",
            checked,
            acked.len()
        ));
    }
    let mut log = log;
    let bases = log.segment_bases();
    if bases.len() >= 3 {
        let keep = bases[bases.len() - 2];
        log.truncate_prefix_to(keep)
            .map_err(|e| format!("prefix truncation: {e}"))?;
        acked.retain(|&o, _| o >= keep.0);
    }
    if close {
        log.close().map_err(|e| format!("close: {e}"))?;
    }
    Ok(checked)
}

/// Runs a child appending to `dir` until it reported `target`
/// acknowledgements (recorded in `acked`), then kills it with SIGKILL.
/// Returns the acknowledgements seen.
fn run_child(
    exe: &Path,
    dir: &Path,
    seed: u64,
    writers: u64,
    (ack, policy): (u64, u64),
    target: u64,
    acked: &mut BTreeMap<u64, u32>,
) -> u64 {
    let mut child = Command::new(exe)
        .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, dir)
        .env("QUORUMLOG_KILL_CHILD_SEED", seed.to_string())
        .env("QUORUMLOG_KILL_WRITERS", writers.to_string())
        .env("QUORUMLOG_KILL_ACK", ack.to_string())
        .env("QUORUMLOG_KILL_POLICY", policy.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // Lines through a channel, so a child that stops acknowledging (a sync
    // round that never runs: a liveness bug, not a slow disk) fails the
    // test instead of hanging it. The bound is generous; nothing is timed.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut acks = 0;
    loop {
        let line = match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(line) => line,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                panic!("the child acknowledged nothing for 60 s after {acks} acknowledgements (policy {policy}): a stalled sync round");
            }
        };
        let mut parts = line.split_whitespace();
        if parts.next() != Some("ACK") {
            continue;
        }
        let offset: u64 = parts.next().unwrap().parse().unwrap();
        let crc: u32 = parts.next().unwrap().parse().unwrap();
        assert!(
            acked.insert(offset, crc).is_none(),
            "offset {offset} acknowledged twice"
        );
        acks += 1;
        if acks >= target {
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    acks
}

/// Round `round`'s writers (1, 8 or 64), acknowledgement mode (waits or
/// completions) and policy (`GroupCommit` or `Interval`): every
/// combination in each 12 rounds.
fn round_mode(round: u64) -> (u64, u64, u64) {
    let writers = [1u64, 8, 64][usize::try_from(round % 3).unwrap_or(0)];
    (writers, (round / 3) % 2, (round / 6) % 2)
}

#[test]
fn killed_writers_lose_no_acknowledged_record() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let env = |k: &str| std::env::var(k).ok().and_then(|s| s.parse::<u64>().ok());
    let kills = env("QUORUMLOG_KILLS").unwrap_or(24);
    let seed = env("QUORUMLOG_KILL_SEED").unwrap_or_else(fresh_seed);
    eprintln!(
        "process kill: seed {seed} (replay: QUORUMLOG_KILL_SEED={seed} QUORUMLOG_KILLS={kills} \
         cargo test -p quorumlog-log --test process_kill)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = SimRng::new(seed);
    let mut generation = 0;
    let mut dir = tmp.path().join("data0");
    let fs: SharedFs = Arc::new(RealFs::new());
    format(&fs, &dir, ClusterId(1), NodeId(1)).unwrap();
    // Every acknowledged record of this directory: offset -> crc (later
    // rounds append at the end and never rewrite an acknowledged offset).
    let mut acked: BTreeMap<u64, u32> = BTreeMap::new();
    let (mut total_acks, mut checked_total) = (0u64, 0u64);
    // Kills after a child rolled into a recycled segment file.
    let mut recycled_rounds = 0u64;
    let mut violations = Vec::new();
    for round in 0..kills {
        let (writers, ack, policy) = round_mode(round);
        let target = 1 + rng.below(300);
        let child_seed = rng.next_u64();
        let pooled_before = pool_files(&dir);
        let acks_this_round = run_child(
            &exe,
            &dir,
            child_seed,
            writers,
            (ack, policy),
            target,
            &mut acked,
        );
        total_acks += acks_this_round;
        if pool_files(&dir) < pooled_before {
            recycled_rounds += 1;
        }
        match check_reopened(&dir, &mut acked, rng.below(2) == 0) {
            Ok(n) => checked_total += n,
            Err(e) => {
                violations.push(format!(
                    "round {round} ({writers} writers, ack mode {ack}, policy {policy}): {e}"
                ));
                // Carry on with a fresh directory to count every failure.
                generation += 1;
                dir = tmp.path().join(format!("data{generation}"));
                format(&fs, &dir, ClusterId(1), NodeId(1)).unwrap();
                acked.clear();
            }
        }
    }
    eprintln!(
        "process kills: {kills}, acknowledged records: {total_acks}, checked after reopens: \
         {checked_total}, kills after a roll into a recycled file: {recycled_rounds}, \
         violations: {}",
        violations.len()
    );
    assert!(
        violations.is_empty(),
        "seed {seed}: {} of {kills} kills left a directory that failed:\n{}",
        violations.len(),
        violations.join("\n")
    );
    assert!(total_acks >= kills);
    assert!(
        kills < 12 || recycled_rounds > 0,
        "seed {seed}: no child rolled into a recycled segment file"
    );
}

/// Files in the log directory's recycling pool.
fn pool_files(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("log")).map_or(0, |entries| {
        entries
            .filter_map(std::result::Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("recycled-"))
            .count()
    })
}
