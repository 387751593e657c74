//! Exhaustive crash tests of single log operations on the simulated disk:
//! the power is cut at every I/O call of a cut-batch truncation, a full
//! truncation, a prefix truncation, and a rolling append + flush, with each
//! tear variant; recovery must find the state before or after the operation
//! (or, for a suffix truncation, part-way between), never anything else, and
//! an acknowledged operation's result always (docs/design.md invariants 1, 3, 8).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;

use common::{open_log, payload, read_all, shared, sim, small_options, DIR};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_log::Log;
use quorumlog_testkit::CRASH_PLANS;

fn plans() -> Vec<CrashPlan> {
    let mut plans = CRASH_PLANS.to_vec();
    plans.extend([CrashPlan::Random, CrashPlan::Random, CrashPlan::Random]);
    plans
}

/// 30 flushed records (3 per batch, several segments), log left open.
fn base(seed: u64) -> (SimFs, Log) {
    let (disk, fs) = sim(seed);
    // Odd seeds: a device that tears whole pages (invariant 4).
    disk.set_page_tearing(seed % 2 == 1);
    let mut log = open_log(&fs, Path::new(DIR), &small_options()).unwrap();
    for b in 0..10u64 {
        let recs: Vec<Vec<u8>> = (0..3).map(|j| payload(b * 3 + j, 0, 150)).collect();
        log.append_as_leader(Epoch(1), &recs).unwrap();
    }
    log.flush().unwrap();
    (disk, log)
}

struct Outcome {
    start: u64,
    end: u64,
}

/// Runs `op` with the power cut at every call; `check(outcome, acked)`
/// judges each recovered state. Returns the number of states explored.
fn explore(name: &str, op: fn(&mut Log) -> bool, check: fn(&Outcome, bool) -> bool) -> usize {
    let total = {
        let (disk, mut log) = base(0);
        let before = disk.calls();
        assert!(op(&mut log));
        disk.calls() - before
    };
    let mut states = 0;
    for point in 0..=total {
        for (p, plan) in plans().into_iter().enumerate() {
            let seed = point * 10 + p as u64;
            let (disk, mut log) = base(seed);
            disk.crash_after(point);
            let acked = op(&mut log);
            drop(log);
            let disk = disk.crash_with(plan);
            let what = format!("{name}: crash after {point}/{total} calls, {plan:?}, seed {seed}");
            let log = open_log(&shared(&disk), Path::new(DIR), &small_options())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let start = log.log_start_offset().0;
            let records = read_all(&log, Offset(start));
            // Every record present is the one written at its offset.
            for (o, _, r) in &records {
                assert_eq!(r, &payload(*o, 0, 150), "{what}: offset {o}");
            }
            let out = Outcome {
                start,
                end: log.log_end_offset().0,
            };
            assert!(
                check(&out, acked),
                "{what}: start {} end {} acked {acked}",
                out.start,
                out.end
            );
            states += 1;
        }
    }
    eprintln!("{name}: {} crash points, {states} crash states", total + 1);
    assert!(total >= 3, "{name}: the operation made {total} calls");
    states
}

#[test]
fn cut_batch_truncation() {
    explore(
        "truncate_to(16) inside a batch",
        |log| log.truncate_to(Offset(16)).is_ok(),
        |o, acked| {
            o.start == 0
                && if acked {
                    o.end == 16
                } else {
                    (16..=30).contains(&o.end)
                }
        },
    );
}

#[test]
fn boundary_truncation_across_segments() {
    explore(
        "truncate_to(3) removing segments",
        |log| log.truncate_to(Offset(3)).is_ok(),
        |o, acked| {
            o.start == 0
                && if acked {
                    o.end == 3
                } else {
                    (3..=30).contains(&o.end)
                }
        },
    );
}

#[test]
fn full_truncation() {
    explore(
        "truncate_fully_and_start_at(100)",
        |log| log.truncate_fully_and_start_at(Offset(100), None).is_ok(),
        |o, acked| (o.start, o.end) == (100, 100) || (!acked && (o.start, o.end) == (0, 30)),
    );
}

#[test]
fn prefix_truncation() {
    explore(
        "truncate_prefix_to(20)",
        |log| log.truncate_prefix_to(Offset(20)).is_ok(),
        |o, acked| o.end == 30 && (o.start == 20 || (!acked && o.start == 0)),
    );
}

#[test]
fn rolling_append_then_flush() {
    explore(
        "append 12 batches (rolls) + flush",
        |log| {
            for i in 0..12u64 {
                let recs = [payload(30 + i, 0, 150)];
                if log.append_as_leader(Epoch(2), &recs).is_err() {
                    return false;
                }
            }
            log.flush().is_ok()
        },
        |o, acked| {
            o.start == 0
                && if acked {
                    o.end == 42
                } else {
                    (30..=42).contains(&o.end)
                }
        },
    );
}

/// Every sync padding length from 0 to more than a batch header (issue 9):
/// in a segment of several pages, a batch ending `gap` bytes before a page
/// boundary is synced, then a small batch is appended and synced, then one
/// more is appended; the power is cut at every call with every tear. A
/// strict open must succeed, keep every synced record, and return only
/// records written at their offsets.
#[test]
fn every_padding_length_survives_every_crash_point() {
    let opts = quorumlog_log::LogOptions {
        segment_size_bytes: 32 << 10,
        max_batch_bytes: 8 << 10,
        ..small_options()
    };
    let sizes = |gap: u64| [usize::try_from(4096 - 44 - gap).unwrap(), 30, 30];
    let run = |gap: u64, crash: Option<(u64, CrashPlan)>, seed: u64| -> (SimFs, u64, u64) {
        let (disk, fs) = sim(seed);
        disk.set_page_tearing(seed % 2 == 1);
        let mut log = open_log(&fs, Path::new(DIR), &opts).unwrap();
        let before = disk.calls();
        if let Some((point, _)) = crash {
            disk.crash_after(point);
        }
        let mut acked = 0;
        for (o, size) in sizes(gap).into_iter().enumerate() {
            let o = o as u64;
            if log
                .append_as_leader(Epoch(1), &[payload(o, 0, size)])
                .is_err()
            {
                break;
            }
            if o < 2 {
                if log.flush().is_err() {
                    break;
                }
                acked = o + 1;
            }
        }
        let calls = disk.calls() - before;
        drop(log);
        let plan = crash.map_or(CrashPlan::KeepAll, |(_, p)| p);
        (disk.crash_with(plan), calls, acked)
    };
    let mut states = 0;
    for gap in 0..=48u64 {
        let (_, total, _) = run(gap, None, 0);
        for point in 0..=total {
            for (p, plan) in plans().into_iter().enumerate() {
                let seed = gap * 1000 + point * 10 + p as u64;
                let (disk, _, acked) = run(gap, Some((point, plan)), seed);
                let what = format!("gap {gap}: crash after {point}/{total} calls, {plan:?}");
                let log = open_log(&shared(&disk), Path::new(DIR), &opts)
                    .unwrap_or_else(|e| panic!("{what}: strict open refused: {e}"));
                let records = read_all(&log, Offset(0));
                assert!(
                    records.len() as u64 >= acked,
                    "{what}: lost acknowledged records"
                );
                for (o, _, r) in &records {
                    let size = sizes(gap)[usize::try_from(*o).unwrap()];
                    assert_eq!(r, &payload(*o, 0, size), "{what}: offset {o}");
                }
                states += 1;
            }
        }
    }
    eprintln!("every padding length: {states} crash states");
    assert!(states > 49 * 8);
}
