//! The read-only inspection reads a log exactly as recovery does, over logs
//! the engine wrote under crash plans with every record size from 1 byte to
//! 2 pages (so every sync padding length, 0 to 4095 bytes, and batches that
//! end 1 byte short of a page). Invariants:
//! - **no false alarm**: an intact or torn-only log has no problem, and the
//!   walk ends exactly where a strict open's recovery ends the log;
//! - **no miss**: a planted bit flip, zeroed page (at any alignment) or
//!   truncation inside data something durable vouches for (a sealed
//!   segment; the last one after a clean close; a batch followed by one
//!   that still verifies) is reported in the damaged batch's file, at its
//!   offset, no later than its first byte and no earlier than the batch
//!   before it ends; zeros planted only over padding are no problem.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::many_single_char_names,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::{Path, PathBuf};

use common::{open_log, payload, sim, small_options, DIR};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::{CrashPlan, FileSystem, OpenMode, SimFs, SimRng, Tear};
use quorumlog_log::inspect::{inspect_log_dir, BatchInfo, SegmentReport, Walk};
use quorumlog_log::LogOptions;

const PAGE: u64 = 4096;
/// The segment header's bytes: the data starts after them.
const HEADER: u64 = 32;

fn options() -> LogOptions {
    LogOptions {
        segment_size_bytes: 8 * PAGE,
        max_batch_bytes: 5 * PAGE,
        ..small_options()
    }
}

/// How a case's log ends.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Clean,
    Crash(CrashPlan),
}

fn ending(size: u64) -> Ending {
    match size % 5 {
        0 => Ending::Clean,
        1 => Ending::Crash(CrashPlan::LoseUnsynced),
        2 => Ending::Crash(CrashPlan::Torn(Tear::Garbage)),
        3 => Ending::Crash(CrashPlan::Torn(Tear::Zeros)),
        _ => Ending::Crash(CrashPlan::Random),
    }
}

/// A log of records of `size` bytes: the first one alone and synced (its
/// batch ends where `size` puts it, so every padding length occurs), then
/// appends of 1 or 2 records, some synced; crashed or closed by `ending`.
fn write(size: u64, ending: Ending) -> SimFs {
    let (disk, fs) = sim(size);
    let mut rng = SimRng::new(size);
    let mut log = open_log(&fs, Path::new(DIR), &options()).unwrap();
    let len = usize::try_from(size).unwrap();
    let mut next = 0u64;
    let mut append = |log: &mut quorumlog_log::Log, n: u64, epoch: u64| {
        let recs: Vec<Vec<u8>> = (0..n).map(|i| payload(next + i, 1, len)).collect();
        log.append_as_leader(Epoch(epoch), &recs).unwrap();
        next += n;
    };
    append(&mut log, 1, 1);
    log.flush().unwrap();
    for i in 0..6u64 {
        append(&mut log, 1 + rng.below(2), 1 + i / 3);
        if rng.below(3) > 0 {
            log.flush().unwrap();
        }
    }
    log.flush().unwrap();
    match ending {
        Ending::Clean => {
            log.close().unwrap();
            disk.crash_with(CrashPlan::KeepAll)
        }
        Ending::Crash(plan) => {
            for _ in 0..2 {
                append(&mut log, 1, 3);
            }
            drop(log);
            disk.crash_with(plan)
        }
    }
}

fn walk(disk: &SimFs) -> Vec<SegmentReport> {
    inspect_log_dir(disk, &Path::new(DIR).join("log"), Walk::Raw).unwrap()
}

fn problems(r: &[SegmentReport]) -> Vec<String> {
    r.iter()
        .flat_map(|s| &s.problems)
        .map(|p| format!("{} at {}: {}", p.file.display(), p.position, p.kind))
        .collect()
}

#[test]
fn an_intact_or_torn_log_has_no_problem_and_ends_where_recovery_ends_it() {
    for size in 1..=2 * PAGE {
        let e = ending(size);
        let disk = write(size, e);
        let r = walk(&disk);
        assert!(
            problems(&r).is_empty(),
            "size {size}, {e:?}: false alarm {:?}",
            problems(&r)
        );
        let end = r.last().unwrap().end_offset;
        let fs = common::shared(&disk);
        let log = open_log(&fs, Path::new(DIR), &options())
            .unwrap_or_else(|err| panic!("size {size}, {e:?}: the open refused: {err}"));
        assert_eq!(
            log.log_end_offset(),
            end,
            "size {size}, {e:?}: the walk and recovery end the log apart"
        );
        let walked: u64 = r
            .iter()
            .flat_map(|s| &s.batches)
            .map(|b| u64::from(b.record_count))
            .sum();
        assert_eq!(walked, end.0, "size {size}: every record walked once");
    }
}

/// One planted damage: the file, the byte range made wrong, what was done.
#[derive(Debug)]
enum Damage {
    Flip(PathBuf, u64),
    Zeros(PathBuf, u64),
    Truncate(PathBuf, u64),
}

impl Damage {
    fn file(&self) -> &Path {
        match self {
            Damage::Flip(f, _) | Damage::Zeros(f, _) | Damage::Truncate(f, _) => f,
        }
    }

    /// The damaged bytes `[from, to)`.
    fn range(&self, file_len: u64) -> (u64, u64) {
        match self {
            Damage::Flip(_, at) => (*at, at + 1),
            Damage::Zeros(_, at) => (*at, at + PAGE),
            Damage::Truncate(_, at) => (*at, file_len),
        }
    }

    fn plant(&self, disk: &SimFs) {
        match self {
            Damage::Flip(f, at) => disk.flip_bit(f, at * 8 + 3).unwrap(),
            Damage::Zeros(f, at) => {
                let len = disk.durable_contents(f).unwrap().len() as u64;
                let n = usize::try_from(PAGE.min(len - at)).unwrap();
                disk.corrupt_durable(f, *at, &vec![0; n]).unwrap();
            }
            Damage::Truncate(f, at) => {
                let h = disk.open(f, OpenMode::ReadWrite).unwrap();
                h.set_len(*at).unwrap();
                h.sync_all().unwrap();
            }
        }
    }
}

/// Whether something durable vouches for batch `i` of segment `s` (so its
/// damage cannot be taken for a torn tail): a sealed segment, a clean
/// close, or an intact batch after the damage in the same segment.
fn vouched(r: &[SegmentReport], s: usize, damaged_to: u64, clean: bool) -> bool {
    s + 1 < r.len() || clean || r[s].batches.iter().any(|b| b.position >= damaged_to)
}

#[test]
fn planted_damage_is_named_with_its_file_offset_and_position() {
    let (mut named, mut quiet) = (0, 0);
    for size in (1..=2 * PAGE).step_by(7) {
        let e = ending(size);
        let intact = walk(&write(size, e));
        let mut rng = SimRng::new(size ^ 0x5EED);
        let s = usize::try_from(rng.below(intact.len() as u64)).unwrap();
        let seg = &intact[s];
        if seg.batches.is_empty() {
            continue;
        }
        let b = &seg.batches[usize::try_from(rng.below(seg.batches.len() as u64)).unwrap()];
        let within = b.position + rng.below(u64::from(b.bytes));
        let damage = match rng.below(3) {
            0 => Damage::Flip(seg.file.clone(), within),
            1 => {
                let at = within.saturating_sub(rng.below(PAGE)).max(HEADER);
                Damage::Zeros(seg.file.clone(), at)
            }
            _ => Damage::Truncate(seg.file.clone(), within),
        };
        let (from, to) = damage.range(seg.size);
        let first = seg
            .batches
            .iter()
            .find(|b| b.position + u64::from(b.bytes) > from && b.position < to);
        let disk = write(size, e);
        damage.plant(&disk);
        let r = walk(&disk);
        let found = problems(&r);
        let Some(first) = first else {
            // Zeros over padding only: nothing is wrong.
            assert!(found.is_empty(), "size {size}, {damage:?}: {found:?}");
            quiet += 1;
            continue;
        };
        if !vouched(&intact, s, to, matches!(e, Ending::Clean)) {
            continue;
        }
        let prev_end = seg
            .batches
            .iter()
            .filter(|b| b.position < first.position)
            .map(|b: &BatchInfo| b.position + u64::from(b.bytes))
            .max()
            .unwrap_or(HEADER);
        let p = r
            .iter()
            .flat_map(|s| &s.problems)
            .next()
            .unwrap_or_else(|| panic!("size {size}, {e:?}, {damage:?}: missed"));
        assert_eq!(p.file, damage.file(), "size {size}, {damage:?}: {found:?}");
        assert_eq!(
            p.offset,
            Some(first.base_offset),
            "size {size}, {damage:?}: {found:?}"
        );
        assert!(
            (prev_end..=first.position.max(from)).contains(&p.position),
            "size {size}, {damage:?}: at {} outside {prev_end}..={}: {found:?}",
            p.position,
            first.position.max(from)
        );
        named += 1;
    }
    eprintln!("named {named}, quiet {quiet}");
    assert!(named > 500, "named {named}, quiet {quiet}");
    let _ = Offset(0);
}
