//! The simulated disk itself: what survives a crash, how writes tear, and
//! where injected faults fire. Every crash test of the other crates relies on
//! these behaviours, so each is pinned here.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::many_single_char_names,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::io::ErrorKind;
use std::path::Path;

use quorumlog_io::{CrashPlan, FaultKind, FaultOp, FileSystem, OpenMode, SimFs, Tear};

fn p(s: &str) -> &Path {
    Path::new(s)
}

/// A disk with a durable `/d` directory.
fn disk(seed: u64) -> SimFs {
    let fs = SimFs::new(seed);
    fs.create_dir_all(p("/d")).unwrap();
    fs.sync_dir(p("/")).unwrap();
    fs
}

/// A durable file `/d/f` holding `content`.
fn durable_file(fs: &SimFs, content: &[u8]) {
    let f = fs.open(p("/d/f"), OpenMode::CreateNew).unwrap();
    f.write_all_at(content, 0).unwrap();
    f.sync_data().unwrap();
    fs.sync_dir(p("/d")).unwrap();
}

fn read(fs: &SimFs, path: &str) -> Option<Vec<u8>> {
    match fs.open(p(path), OpenMode::Read) {
        Ok(f) => Some(f.read_to_end().unwrap()),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn unsynced_data_vanishes_and_synced_data_survives() {
    let fs = disk(1);
    durable_file(&fs, b"hello");
    let f = fs.open(p("/d/f"), OpenMode::ReadWrite).unwrap();
    f.write_all_at(b" world", 5).unwrap();
    assert_eq!(
        f.read_to_end().unwrap(),
        b"hello world",
        "readable before sync"
    );
    assert!(fs.has_unsynced());
    let after = fs.crash_with(CrashPlan::LoseUnsynced);
    assert_eq!(read(&after, "/d/f").unwrap(), b"hello");
}

#[test]
fn every_random_crash_keeps_synced_data() {
    for seed in 0..200 {
        let fs = disk(seed);
        durable_file(&fs, b"0123456789");
        let f = fs.open(p("/d/f"), OpenMode::ReadWrite).unwrap();
        f.write_all_at(&[b'x'; 3000], 10).unwrap();
        let after = fs.crash();
        let got = read(&after, "/d/f").unwrap();
        assert_eq!(&got[..10], b"0123456789", "seed {seed}");
    }
}

#[test]
fn unsynced_create_vanishes_even_if_data_was_synced() {
    let fs = disk(2);
    let f = fs.open(p("/d/new"), OpenMode::CreateNew).unwrap();
    f.write_all_at(b"data", 0).unwrap();
    f.sync_data().unwrap(); // data durable, directory entry not
    let after = fs.crash_with(CrashPlan::LoseUnsynced);
    assert_eq!(read(&after, "/d/new"), None);
    let kept = {
        let fs = disk(2);
        let f = fs.open(p("/d/new"), OpenMode::CreateNew).unwrap();
        f.write_all_at(b"data", 0).unwrap();
        f.sync_data().unwrap();
        fs.sync_dir(p("/d")).unwrap();
        fs.crash_with(CrashPlan::LoseUnsynced)
    };
    assert_eq!(read(&kept, "/d/new").unwrap(), b"data");
}

#[test]
fn unsynced_directory_vanishes_with_its_files() {
    let fs = disk(3);
    fs.create_dir_all(p("/d/sub")).unwrap();
    let f = fs.open(p("/d/sub/x"), OpenMode::CreateNew).unwrap();
    f.sync_data().unwrap();
    fs.sync_dir(p("/d/sub")).unwrap(); // x's entry durable, sub's is not
    let after = fs.crash_with(CrashPlan::LoseUnsynced);
    assert!(!after.exists(p("/d/sub")).unwrap());
    assert!(!after.exists(p("/d/sub/x")).unwrap());
}

#[test]
fn unsynced_rename_and_remove_vanish() {
    let fs = disk(4);
    durable_file(&fs, b"old");
    let t = fs.open(p("/d/tmp"), OpenMode::CreateNew).unwrap();
    t.write_all_at(b"new", 0).unwrap();
    t.sync_data().unwrap();
    fs.rename(p("/d/tmp"), p("/d/f")).unwrap();
    assert_eq!(read(&fs, "/d/f").unwrap(), b"new");
    let after = fs.crash_with(CrashPlan::LoseUnsynced);
    assert_eq!(read(&after, "/d/f").unwrap(), b"old");

    let fs = disk(5);
    durable_file(&fs, b"keep");
    fs.remove_file(p("/d/f")).unwrap();
    assert!(!fs.exists(p("/d/f")).unwrap());
    let after = fs.crash_with(CrashPlan::LoseUnsynced);
    assert_eq!(read(&after, "/d/f").unwrap(), b"keep");
}

#[test]
fn synced_rename_replaces_atomically() {
    let fs = disk(6);
    durable_file(&fs, b"old");
    let t = fs.open(p("/d/tmp"), OpenMode::CreateNew).unwrap();
    t.write_all_at(b"new", 0).unwrap();
    t.sync_data().unwrap();
    fs.rename(p("/d/tmp"), p("/d/f")).unwrap();
    fs.sync_dir(p("/d")).unwrap();
    let after = fs.crash_with(CrashPlan::LoseUnsynced);
    assert_eq!(read(&after, "/d/f").unwrap(), b"new");
    assert_eq!(read(&after, "/d/tmp"), None);
}

#[test]
fn torn_writes_tear_at_sector_boundaries() {
    let new = vec![0xAB; 4096];
    let mut partial = 0;
    for tear in [Tear::Zeros, Tear::Garbage, Tear::Old] {
        for seed in 0..64 {
            let fs = disk(seed);
            durable_file(&fs, &[0x11; 4096]);
            let f = fs.open(p("/d/f"), OpenMode::ReadWrite).unwrap();
            f.write_all_at(&new, 0).unwrap();
            let got = read(&fs.crash_with(CrashPlan::Torn(tear)), "/d/f").unwrap();
            assert_eq!(got.len(), 4096);
            // The new bytes form a sector-aligned prefix.
            let cut = got.iter().position(|&b| b != 0xAB).unwrap_or(4096);
            let cut_sector = cut / 512 * 512;
            assert!(got[..cut_sector].iter().all(|&b| b == 0xAB));
            let rest = &got[cut_sector..];
            match tear {
                // With no write kept at all, the old bytes remain.
                Tear::Zeros => assert!(
                    rest.iter().all(|&b| b == 0) || (cut == 0 && rest.iter().all(|&b| b == 0x11)),
                    "seed {seed}"
                ),
                Tear::Old => assert!(rest.iter().all(|&b| b == 0x11), "seed {seed}"),
                Tear::Garbage => {}
            }
            if cut_sector > 0 && cut_sector < 4096 {
                partial += 1;
            }
        }
    }
    assert!(
        partial > 10,
        "writes must actually tear ({partial} partial)"
    );
}

#[test]
fn crash_keeps_a_prefix_of_writes() {
    // Three unsynced writes to disjoint ranges: a later one never survives
    // without every earlier one.
    for seed in 0..200 {
        let fs = disk(seed);
        durable_file(&fs, &[0; 3]);
        let f = fs.open(p("/d/f"), OpenMode::ReadWrite).unwrap();
        for i in 0..3u8 {
            f.write_all_at(&[i + 1], u64::from(i)).unwrap();
        }
        let got = read(&fs.crash_with(CrashPlan::Torn(Tear::Zeros)), "/d/f").unwrap();
        let kept = got.iter().take_while(|&&b| b != 0).count();
        assert!(got[kept..].iter().all(|&b| b == 0), "seed {seed}: {got:?}");
    }
}

#[test]
fn injected_errors_fire_on_the_chosen_call_only() {
    let fs = disk(7);
    let f = fs.open(p("/d/f"), OpenMode::CreateNew).unwrap();
    fs.inject_fault(FaultOp::Write, 2, FaultKind::Enospc);
    f.write_all_at(b"a", 0).unwrap();
    let e = f.write_all_at(b"b", 1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StorageFull);
    assert!(e.to_string().contains("/d/f"), "{e}");
    assert_eq!(f.read_to_end().unwrap(), b"a", "failed write wrote nothing");
    f.write_all_at(b"c", 1).unwrap();

    for (op, call) in [
        (FaultOp::SetLen, 0),
        (FaultOp::Rename, 1),
        (FaultOp::SyncDir, 2),
        (FaultOp::Allocate, 3),
        (FaultOp::Remove, 4),
        (FaultOp::Create, 5),
    ] {
        fs.inject_fault(op, 1, FaultKind::Eio);
        let r = match call {
            0 => f.set_len(10),
            1 => fs.rename(p("/d/f"), p("/d/g")),
            2 => fs.sync_dir(p("/d")),
            3 => f.allocate(100),
            4 => fs.remove_file(p("/d/f")),
            _ => fs.open(p("/d/h"), OpenMode::CreateNew).map(|_| ()),
        };
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Other, "{op:?}");
    }
    // Nothing the failed calls were asked to do happened.
    assert_eq!(f.len().unwrap(), 2);
    assert!(fs.exists(p("/d/f")).unwrap());
    assert!(!fs.exists(p("/d/g")).unwrap());
    assert!(!fs.exists(p("/d/h")).unwrap());
}

#[test]
fn failed_sync_loses_data_that_a_later_sync_reports_durable() {
    let fs = disk(8);
    durable_file(&fs, b"base");
    let f = fs.open(p("/d/f"), OpenMode::ReadWrite).unwrap();
    f.write_all_at(b"-more", 4).unwrap();
    fs.inject_fault(FaultOp::Sync, 1, FaultKind::Eio);
    assert!(f.sync_data().is_err());
    assert_eq!(f.read_to_end().unwrap(), b"base-more", "still readable");
    f.sync_data().unwrap(); // Linux: reports success
    let after = fs.crash_with(CrashPlan::KeepAll);
    assert_eq!(read(&after, "/d/f").unwrap(), b"base", "never made durable");
}

#[test]
fn crash_point_stops_all_later_calls() {
    let fs = disk(9);
    let f = fs.open(p("/d/f"), OpenMode::CreateNew).unwrap();
    let start = fs.calls();
    fs.crash_after(2);
    f.write_all_at(b"1", 0).unwrap();
    f.write_all_at(b"2", 1).unwrap();
    assert!(f.write_all_at(b"3", 2).is_err());
    assert!(!fs.is_alive());
    assert!(f.sync_data().is_err());
    assert!(f.read_to_end().is_err(), "a dead machine reads nothing");
    assert_eq!(fs.calls(), start + 2);
    let after = fs.crash_with(CrashPlan::KeepAll);
    assert!(after.is_alive());
}

#[test]
fn bit_flip_changes_exactly_one_durable_bit() {
    let fs = disk(10);
    durable_file(&fs, &[0u8; 16]);
    fs.flip_bit(p("/d/f"), 8 * 5 + 3).unwrap();
    let mut want = vec![0u8; 16];
    want[5] = 0b1000;
    assert_eq!(read(&fs, "/d/f").unwrap(), want);
    assert_eq!(fs.durable_contents(p("/d/f")).unwrap(), want);
    assert!(fs.flip_bit(p("/d/f"), 16 * 8).is_err());
}

#[test]
fn same_seed_same_crash() {
    let run = |seed| {
        let fs = disk(seed);
        durable_file(&fs, b"x");
        let f = fs.open(p("/d/f"), OpenMode::ReadWrite).unwrap();
        for i in 0..10u64 {
            f.write_all_at(&[u8::try_from(i).unwrap(); 700], i * 700)
                .unwrap();
        }
        read(&fs.crash(), "/d/f")
    };
    for seed in 0..20 {
        assert_eq!(run(seed), run(seed));
    }
}

#[test]
fn old_handles_die_with_the_machine() {
    let fs = disk(11);
    durable_file(&fs, b"x");
    let f = fs.open(p("/d/f"), OpenMode::ReadWrite).unwrap();
    let after = fs.crash_with(CrashPlan::KeepAll);
    assert!(f.write_all_at(b"zombie", 0).is_err());
    assert_eq!(read(&after, "/d/f").unwrap(), b"x");
}

#[test]
fn page_tearing_can_damage_durable_bytes_sharing_the_page() {
    let mut damaged = 0;
    for seed in 0..64 {
        let fs = disk(seed);
        fs.set_page_tearing(true);
        durable_file(&fs, &[0xAA; 100]);
        let f = fs.open(p("/d/f"), OpenMode::ReadWrite).unwrap();
        f.write_all_at(&[0xBB; 1000], 100).unwrap(); // same page, unsynced
        let got = read(&fs.crash_with(CrashPlan::Torn(Tear::Zeros)), "/d/f").unwrap();
        if got[..100] != [0xAA; 100] {
            damaged += 1;
        }
    }
    assert!(
        damaged > 0,
        "a torn page write must be able to reach synced bytes"
    );
    // Without page tearing, durable bytes are never touched.
    for seed in 0..64 {
        let fs = disk(seed);
        durable_file(&fs, &[0xAA; 100]);
        let f = fs.open(p("/d/f"), OpenMode::ReadWrite).unwrap();
        f.write_all_at(&[0xBB; 1000], 100).unwrap();
        let got = read(&fs.crash_with(CrashPlan::Torn(Tear::Zeros)), "/d/f").unwrap();
        assert_eq!(got[..100], [0xAA; 100]);
    }
}

/// A held disk: a write waits, unseen, until the hold is let go; a sync
/// waits and makes nothing durable meanwhile; a power cut while held ends
/// the wait with an error (so no test hangs on a held disk it cut).
#[test]
fn a_held_disk_keeps_writes_and_syncs_waiting_until_let_go() {
    let fs = disk(9);
    durable_file(&fs, b"old");
    let f: std::sync::Arc<dyn quorumlog_io::File> =
        fs.open(p("/d/f"), OpenMode::ReadWrite).unwrap().into();
    fs.hold_io(true);
    let writer = {
        let f = std::sync::Arc::clone(&f);
        std::thread::spawn(move || {
            f.write_all_at(b"new", 0).unwrap();
            f.sync_data().unwrap();
        })
    };
    // A deadlock breaker, not a timing threshold: the writer must still
    // be waiting however long this takes.
    std::thread::sleep(std::time::Duration::from_millis(30));
    assert!(!writer.is_finished(), "the write waits while held");
    assert_eq!(read(&fs, "/d/f").unwrap(), b"old", "nothing seen yet");
    fs.hold_io(false);
    writer.join().unwrap();
    assert_eq!(fs.durable_contents(p("/d/f")).unwrap(), b"new");

    fs.hold_io(true);
    let waiting = {
        let f = std::sync::Arc::clone(&f);
        std::thread::spawn(move || f.write_all_at(b"cut", 0))
    };
    let _after = fs.crash();
    assert!(waiting.join().unwrap().is_err(), "a cut ends the wait");
}
