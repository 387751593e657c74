//! Exhaustive crash tests of every small-file update (docs/design.md invariants 5,
//! 8 and 9): power is cut at every I/O call of a quorum-state update, of each
//! checkpoint write and of `format`, the disk keeps each of several subsets of
//! the unsynced state (none, all, torn with zeros / garbage / old bytes,
//! random), and the directory is reopened — itself crashed at every call of
//! recovery once more. The state read is always the old or the new one, never
//! a mix, and an acknowledged update never regresses.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{
    format_with, ClusterId, DataDir, DirectoryId, Epoch, EpochMap, Error, Meta, NodeId,
    NotFormattedReason, Offset, OpenOptions, QuorumState, RecoveryPoint, SharedFs, Vote,
};
use quorumlog_io::{CrashPlan, SimFs, Tear};

const DIR: &str = "/data";

fn plans() -> Vec<CrashPlan> {
    let mut v = vec![
        CrashPlan::LoseUnsynced,
        CrashPlan::KeepAll,
        CrashPlan::Torn(Tear::Zeros),
        CrashPlan::Torn(Tear::Garbage),
        CrashPlan::Torn(Tear::Old),
    ];
    v.extend(std::iter::repeat_n(CrashPlan::Random, 4));
    v
}

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(0xD1))
}

fn open(fs: &SimFs) -> Result<DataDir, Error> {
    let shared: SharedFs = Arc::new(fs.clone());
    DataDir::open(shared, Path::new(DIR), &OpenOptions::default())
}

/// A sequence of states of one file, the first written at setup.
struct Workload<T> {
    name: &'static str,
    states: Vec<T>,
    write: fn(&DataDir, &T) -> Result<(), Error>,
    observe: fn(&DataDir) -> T,
}

/// Counts of what a workload explored.
#[derive(Default, Debug)]
struct Explored {
    crash_points: u64,
    crash_states: u64,
}

fn setup<T>(seed: u64, w: &Workload<T>) -> (SimFs, DataDir) {
    let fs = SimFs::new(seed);
    let shared: SharedFs = Arc::new(fs.clone());
    format_with(&shared, Path::new(DIR), meta()).unwrap();
    let dd = open(&fs).unwrap();
    (w.write)(&dd, &w.states[0]).unwrap();
    assert!(!fs.has_unsynced(), "setup must leave everything durable");
    (fs, dd)
}

/// Runs the updates `states[1..]` with the power cut after `crash_after`
/// calls; returns how many updates were acknowledged.
fn run_until_crash<T>(dd: &DataDir, fs: &SimFs, w: &Workload<T>, crash_after: u64) -> usize {
    fs.crash_after(crash_after);
    let mut acked = 0;
    for s in &w.states[1..] {
        if (w.write)(dd, s).is_err() {
            break;
        }
        acked += 1;
    }
    acked
}

/// Reopens the crashed disk, checks the state, then crashes recovery itself
/// at every call and checks it again (idempotent recovery).
fn check_reopen<T: PartialEq + Debug>(
    disk: &SimFs,
    w: &Workload<T>,
    acked: usize,
    what: &str,
) -> (T, u64) {
    let dd = open(disk).unwrap_or_else(|e| panic!("{what}: reopen failed: {e}"));
    assert!(dd.report().degraded.is_empty(), "{what}: {:?}", dd.report());
    let seen = (w.observe)(&dd);
    let idx = w
        .states
        .iter()
        .position(|s| *s == seen)
        .unwrap_or_else(|| panic!("{what}: state {seen:?} is neither old nor new"));
    assert!(
        idx >= acked,
        "{what}: acknowledged state {acked} regressed to {idx}"
    );
    (seen, disk.calls())
}

fn explore<T: PartialEq + Debug>(w: &Workload<T>) -> Explored {
    // Count the calls of the whole update sequence.
    let (fs, dd) = setup(0, w);
    let before = fs.calls();
    assert_eq!(
        run_until_crash(&dd, &fs, w, u64::MAX / 2),
        w.states.len() - 1
    );
    let total = fs.calls() - before;
    drop(dd);
    assert!(
        total >= 5 * (w.states.len() as u64 - 1),
        "{}: {total} calls",
        w.name
    );

    let mut explored = Explored::default();
    for point in 0..=total {
        explored.crash_points += 1;
        for (p, plan) in plans().into_iter().enumerate() {
            let seed = point * 100 + p as u64;
            // The crashed disk, rebuilt identically from its seed on demand.
            let crashed = || {
                let (fs, dd) = setup(seed, w);
                let acked = run_until_crash(&dd, &fs, w, point);
                drop(dd);
                (fs.crash_with(plan), acked)
            };
            let what = format!("{} point {point} plan {plan:?} seed {seed}", w.name);
            let (disk, acked) = crashed();
            let base = disk.calls();
            let (first, end) = check_reopen(&disk, w, acked, &what);
            explored.crash_states += 1;
            // Crash recovery itself at each of its calls, then recover again.
            for r in 0..(end - base) {
                let (disk, _) = crashed();
                disk.crash_after(r);
                drop(open(&disk));
                let again = disk.crash_with(if r % 2 == 0 {
                    CrashPlan::LoseUnsynced
                } else {
                    CrashPlan::KeepAll
                });
                let (second, _) = check_reopen(&again, w, acked, &what);
                assert_eq!(
                    first, second,
                    "{what}: recovery not idempotent (crash at {r})"
                );
                explored.crash_states += 1;
            }
        }
    }
    eprintln!("{}: {explored:?}", w.name);
    explored
}

fn vote(n: u64) -> Vote {
    Vote {
        node_id: NodeId(n),
        directory_id: DirectoryId(u128::from(n) + 100),
    }
}

#[test]
fn quorum_state_update_never_mixes_or_regresses() {
    let w = Workload {
        name: "quorum-state",
        states: vec![
            QuorumState {
                epoch: Epoch(3),
                voted: Some(vote(1)),
                ..QuorumState::default()
            },
            QuorumState {
                epoch: Epoch(4),
                voted: Some(vote(2)),
                ..QuorumState::default()
            },
            QuorumState {
                epoch: Epoch(4),
                leader: Some(NodeId(2)),
                voted: Some(vote(2)),
            },
        ],
        write: |dd, s| dd.persist_quorum_state(s),
        observe: DataDir::quorum_state,
    };
    let e = explore(&w);
    assert!(e.crash_states >= 100, "{e:?}");
}

#[test]
fn recovery_point_write_is_old_or_new() {
    let rp = |o| RecoveryPoint {
        offset: Offset(o),
        segment: Offset(0),
        position: o * 10,
    };
    explore(&Workload {
        name: "recovery-point",
        states: vec![rp(10), rp(20), rp(30)],
        write: |dd, s| dd.write_recovery_point(*s),
        observe: |dd| dd.checkpoints().recovery_point.unwrap(),
    });
}

#[test]
fn high_watermark_write_is_old_or_new() {
    explore(&Workload {
        name: "high-watermark",
        states: vec![Offset(5), Offset(6), Offset(9)],
        write: |dd, s| dd.write_high_watermark(*s),
        observe: |dd| dd.checkpoints().high_watermark.unwrap().0,
    });
}

#[test]
fn log_start_offset_write_is_old_or_new() {
    explore(&Workload {
        name: "log-start-offset",
        states: vec![
            (Offset(0), None),
            (Offset(100), Some(Epoch(2))),
            (Offset(200), None),
            (Offset(300), Some(Epoch(4))),
        ],
        write: |dd, s| dd.write_log_start_offset(s.0, s.1),
        observe: |dd| {
            let ls = dd.checkpoints().log_start_offset.unwrap();
            (ls.offset, ls.purged_epoch)
        },
    });
}

#[test]
fn epoch_map_write_is_old_or_new() {
    let mut a = EpochMap::new();
    a.assign(Epoch(1), Offset(0)).unwrap();
    let mut b = a.clone();
    b.assign(Epoch(2), Offset(50)).unwrap();
    let mut c = b.clone();
    c.truncate_from_end(Offset(50));
    c.assign(Epoch(3), Offset(40)).unwrap();
    explore(&Workload {
        name: "epoch-map",
        states: vec![a, b, c],
        write: |dd, s| dd.write_epoch_map(s),
        observe: |dd| dd.checkpoints().epoch_map.unwrap(),
    });
}

#[test]
fn app_metadata_write_is_old_or_new() {
    explore(&Workload {
        name: "app-metadata",
        states: vec![
            b"membership v1".to_vec(),
            vec![7u8; 5000],
            b"last purged 41/3".to_vec(),
        ],
        write: |dd, s| dd.write_app_metadata(s),
        observe: |dd| dd.app_metadata().unwrap(),
    });
}

/// Format at `dir`, which the caller may have made itself first
/// (`create_dir_all`, not synced: what a service does before it formats).
fn format_at(fs: &SimFs, dir: &Path, caller_made: bool) -> Result<Meta, Error> {
    use quorumlog_io::FileSystem as _;
    let shared: SharedFs = Arc::new(fs.clone());
    if caller_made {
        fs.create_dir_all(dir).map_err(Error::from)?;
    }
    format_with(&shared, dir, meta())
}

/// Invariant: a format that returned survives any power cut (the node
/// never comes back blank, with a new directory id); one cut short leaves
/// a directory that is not formatted, and a new format completes.
#[test]
fn crash_during_format_leaves_a_directory_format_completes() {
    for (dir, caller_made) in [(DIR, false), (DIR, true), ("/srv/q/data", true)] {
        crash_during_format(Path::new(dir), caller_made);
    }
}

fn crash_during_format(dir: &Path, caller_made: bool) {
    let count = {
        let fs = SimFs::new(0);
        format_at(&fs, dir, caller_made).unwrap();
        fs.calls()
    };
    let mut states = 0;
    for point in 0..=count {
        for (p, plan) in plans().into_iter().enumerate() {
            let fs = SimFs::new(point * 100 + p as u64);
            fs.crash_after(point);
            let formatted = format_at(&fs, dir, caller_made).is_ok();
            let disk = fs.crash_with(plan);
            let what = format!(
                "format of {} (made by the caller: {caller_made}) point {point} plan {plan:?}",
                dir.display()
            );
            let shared: SharedFs = Arc::new(disk.clone());
            match DataDir::open(Arc::clone(&shared), dir, &OpenOptions::default()) {
                Ok(dd) => assert_eq!(dd.quorum_state(), QuorumState::default(), "{what}"),
                Err(Error::NotFormatted { reason, .. }) => {
                    assert!(!formatted, "{what}: acknowledged format lost");
                    assert!(
                        matches!(
                            reason,
                            NotFormattedReason::NoDirectory | NotFormattedReason::NoMeta
                        ),
                        "{what}: {reason}"
                    );
                    format_at(&disk, dir, caller_made)
                        .unwrap_or_else(|e| panic!("{what}: format again: {e}"));
                    let dd = DataDir::open(shared, dir, &OpenOptions::default()).unwrap();
                    assert!(dd.report().degraded.is_empty(), "{what}");
                }
                Err(e) => panic!("{what}: {e}"),
            }
            states += 1;
        }
    }
    eprintln!("format: {} crash points, {states} crash states", count + 1);
    assert!(count >= 20);
}
