//! Exhaustive crash tests of snapshot writing, installing (with resume) and
//! retention on the simulated disk: the power is cut at every I/O call, with
//! each tear variant; after reopen the old or the new set of snapshots is
//! listed, never a partial one, every listed snapshot verifies and reads
//! back exactly, an acknowledged publish or deletion holds, and a resumed
//! install produces a byte-identical snapshot.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{id, small_chunks, state, write, DIR};
use quorumlog_checkpoint::SharedFs;
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_snapshot::{Retention, SnapshotId, SnapshotInfo, SnapshotStore};
use quorumlog_testkit::CRASH_PLANS;

fn plans() -> Vec<CrashPlan> {
    let mut plans = CRASH_PLANS.to_vec();
    plans.extend([CrashPlan::Random, CrashPlan::Random]);
    plans
}

fn open(sim: &SimFs) -> SnapshotStore {
    let fs: SharedFs = Arc::new(sim.clone());
    SnapshotStore::open(fs, Path::new(DIR)).unwrap()
}

/// Every listed snapshot must verify and hold the state written for it.
fn check_listed(store: &SnapshotStore, expected: &dyn Fn(SnapshotId) -> Vec<u8>, what: &str) {
    for s in store.list() {
        let got = store
            .reader(s.id)
            .unwrap_or_else(|e| panic!("{what}: listed {} does not verify: {e}", s.id))
            .read_to_end()
            .unwrap();
        assert_eq!(got, expected(s.id), "{what}: {}", s.id);
    }
}

fn data_of(id: SnapshotId) -> Vec<u8> {
    state(2500, id.end_offset.0)
}

/// Runs `op` on a fresh disk prepared by `setup`, with the power cut after
/// `point` calls; returns the crashed disk and whether `op` succeeded.
fn run(
    seed: u64,
    point: Option<u64>,
    plan: CrashPlan,
    setup: fn(&SnapshotStore),
    op: fn(&SnapshotStore) -> bool,
) -> (SimFs, bool, u64) {
    let sim = SimFs::new(seed);
    let store = open(&sim);
    setup(&store);
    let before = sim.calls();
    if let Some(n) = point {
        sim.crash_after(n);
    }
    let ok = op(&store);
    let calls = sim.calls() - before;
    drop(store);
    (sim.crash_with(plan), ok, calls)
}

fn explore(
    name: &str,
    setup: fn(&SnapshotStore),
    op: fn(&SnapshotStore) -> bool,
    check: &dyn Fn(&SnapshotStore, bool, &SimFs, &str),
) -> u64 {
    let (_, ok, total) = run(0, None, CrashPlan::KeepAll, setup, op);
    assert!(ok && total >= 3, "{name}: {total} calls");
    let mut states = 0;
    for point in 0..=total {
        for (p, plan) in plans().into_iter().enumerate() {
            let seed = point * 10 + p as u64;
            let (disk, ok, _) = run(seed, Some(point), plan, setup, op);
            let what = format!("{name}: crash after {point}/{total}, {plan:?}");
            let store = open(&disk);
            check(&store, ok, &disk, &what);
            // Recovery is idempotent: reopening changes nothing.
            assert_eq!(open(&disk).list(), store.list(), "{what}");
            states += 1;
        }
    }
    eprintln!("{name}: {} crash points, {states} crash states", total + 1);
    states
}

#[test]
fn write_and_freeze() {
    explore(
        "write + freeze",
        |store| {
            write(store, id(10, 1), &data_of(id(10, 1)), small_chunks());
        },
        |store| {
            let go = || -> quorumlog_snapshot::Result<SnapshotInfo> {
                let mut w = store.create(id(20, 1), b"meta", small_chunks())?;
                w.write(&data_of(id(20, 1)))?;
                w.freeze()
            };
            go().is_ok()
        },
        &|store, acked, disk, what| {
            let ids: Vec<_> = store.list().iter().map(|s| s.id).collect();
            assert!(
                ids == vec![id(10, 1)] || ids == vec![id(10, 1), id(20, 1)],
                "{what}: {ids:?}"
            );
            if acked {
                assert_eq!(ids.len(), 2, "{what}: acknowledged snapshot lost");
            }
            check_listed(store, &data_of, what);
            let names: Vec<String> = quorumlog_io::FileSystem::list(disk, Path::new(DIR))
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect();
            let partial = |n: &String| {
                Path::new(n)
                    .extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("part"))
            };
            assert!(
                !names.iter().any(partial),
                "{what}: partial left: {names:?}"
            );
        },
    );
}

/// The leader's snapshot file, made once (its header carries a creation
/// time, so every caller must see the same bytes).
fn leader_file() -> (SnapshotId, Vec<u8>) {
    static FILE: std::sync::OnceLock<(SnapshotId, Vec<u8>)> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let sim = SimFs::new(99);
        let store = open(&sim);
        let s = write(&store, id(30, 2), &data_of(id(30, 2)), small_chunks());
        (s.id, store.read_chunk(s.id, 0, usize::MAX).unwrap())
    })
    .clone()
}

#[test]
fn install_resume_and_finish() {
    explore(
        "install + finish",
        |store| {
            write(store, id(10, 1), &data_of(id(10, 1)), small_chunks());
        },
        |store| {
            let (sid, bytes) = leader_file();
            let go = || -> quorumlog_snapshot::Result<SnapshotInfo> {
                let mut install = store.begin_install(sid, bytes.len() as u64)?;
                let mut pos = 0;
                while pos < bytes.len() {
                    let end = (pos + 700).min(bytes.len());
                    install.write_chunk(pos as u64, &bytes[pos..end])?;
                    pos = end;
                }
                install.finish()
            };
            go().is_ok()
        },
        &|store, acked, _disk, what| {
            let (sid, bytes) = leader_file();
            let ids: Vec<_> = store.list().iter().map(|s| s.id).collect();
            assert!(
                ids == vec![id(10, 1)] || ids == vec![id(10, 1), sid],
                "{what}: {ids:?}"
            );
            if acked {
                assert_eq!(ids.len(), 2, "{what}: acknowledged install lost");
            }
            check_listed(store, &data_of, what);
            if ids.len() == 1 {
                // Resume (or restart) and finish: byte-identical.
                let mut install = store.begin_install(sid, bytes.len() as u64).unwrap();
                let mut pos = usize::try_from(install.position()).unwrap();
                while pos < bytes.len() {
                    let end = (pos + 500).min(bytes.len());
                    install.write_chunk(pos as u64, &bytes[pos..end]).unwrap();
                    pos = end;
                }
                install
                    .finish()
                    .unwrap_or_else(|e| panic!("{what}: resumed install: {e}"));
            }
            assert_eq!(
                store.read_chunk(sid, 0, usize::MAX).unwrap(),
                bytes,
                "{what}"
            );
        },
    );
}

#[test]
fn retention() {
    explore(
        "retain(keep 2)",
        |store| {
            for end in [10, 20, 30, 40] {
                write(store, id(end, 1), &data_of(id(end, 1)), small_chunks());
            }
        },
        |store| {
            store
                .retain(Retention {
                    keep_latest: 2,
                    max_total_bytes: None,
                })
                .is_ok()
        },
        &|store, acked, _disk, what| {
            let ids: Vec<u64> = store.list().iter().map(|s| s.id.end_offset.0).collect();
            let allowed = [
                vec![10, 20, 30, 40],
                vec![20, 30, 40],
                vec![10, 30, 40],
                vec![30, 40],
            ];
            assert!(allowed.contains(&ids), "{what}: {ids:?}");
            if acked {
                assert_eq!(ids, vec![30, 40], "{what}: acknowledged deletion undone");
            }
            check_listed(store, &data_of, what);
        },
    );
}
