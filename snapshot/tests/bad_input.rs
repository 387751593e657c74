//! Bad input: a flipped byte anywhere in a published snapshot is detected
//! before any byte of it is returned; truncated or footer-less files are
//! never listed; a full disk while writing or installing leaves the previous
//! snapshot intact and the partial file removable.
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
use quorumlog_io::{FaultKind, FaultOp, FileSystem, OpenMode, SimFs};
use quorumlog_snapshot::{Error, SnapshotStore, WriterOptions};

fn snapshot_path(id: quorumlog_snapshot::SnapshotId) -> std::path::PathBuf {
    Path::new(DIR).join(format!("{}.snapshot", id.stem()))
}

#[test]
fn a_flipped_byte_anywhere_is_detected_before_any_byte_is_returned() {
    for zstd_level in [None, Some(1)] {
        let opts = WriterOptions {
            chunk_bytes: 500,
            zstd_level,
        };
        let sim = SimFs::new(1);
        let fs: SharedFs = Arc::new(sim.clone());
        let store = SnapshotStore::open(fs.clone(), Path::new(DIR)).unwrap();
        let s = write(&store, id(10, 1), &state(3000, 5), opts);
        let path = snapshot_path(s.id);
        for byte in 0..s.size_bytes {
            sim.flip_bit(&path, byte * 8 + (byte % 8)).unwrap();
            match SnapshotStore::open(fs.clone(), Path::new(DIR))
                .unwrap()
                .reader(s.id)
            {
                Err(Error::Corruption { .. } | Error::NotFound(_)) => {}
                Ok(_) => panic!("flip at byte {byte} went unnoticed ({zstd_level:?})"),
                Err(e) => panic!("byte {byte}: {e}"),
            }
            sim.flip_bit(&path, byte * 8 + (byte % 8)).unwrap();
        }
        assert!(store.reader(s.id).is_ok(), "restored");
    }
}

#[test]
fn truncated_or_footerless_files_are_never_listed() {
    let sim = SimFs::new(2);
    let fs: SharedFs = Arc::new(sim.clone());
    let store = SnapshotStore::open(fs.clone(), Path::new(DIR)).unwrap();
    let a = write(&store, id(10, 1), &state(3000, 1), small_chunks());
    let b = write(&store, id(20, 1), &state(3000, 2), small_chunks());
    let f = sim.open(&snapshot_path(b.id), OpenMode::ReadWrite).unwrap();
    f.set_len(b.size_bytes - 1).unwrap();
    let reopened = SnapshotStore::open(fs.clone(), Path::new(DIR)).unwrap();
    assert_eq!(reopened.list().len(), 1);
    assert_eq!(reopened.latest().unwrap().id, a.id);
    assert_eq!(reopened.report().invalid_snapshots.len(), 1);
    // A file that never got its footer (say, copied in by hand).
    let g = sim
        .open(&snapshot_path(id(30, 1)), OpenMode::CreateNew)
        .unwrap();
    g.write_all_at(&state(500, 3), 0).unwrap();
    let reopened = SnapshotStore::open(fs, Path::new(DIR)).unwrap();
    assert_eq!(reopened.list().len(), 1);
}

#[test]
fn a_full_disk_while_writing_keeps_the_previous_snapshot() {
    for nth in 1..6 {
        let sim = SimFs::new(3);
        let fs: SharedFs = Arc::new(sim.clone());
        let store = SnapshotStore::open(fs.clone(), Path::new(DIR)).unwrap();
        let old = write(&store, id(10, 1), &state(2000, 1), small_chunks());
        sim.inject_fault(FaultOp::Write, nth, FaultKind::Enospc);
        let result = (|| {
            let mut w = store.create(id(20, 1), b"", small_chunks())?;
            w.write(&state(4000, 2))?;
            w.freeze()
        })();
        assert!(result.is_err(), "write #{nth} should fail");
        assert_eq!(store.latest().unwrap().id, old.id);
        assert_eq!(
            store.reader(old.id).unwrap().read_to_end().unwrap(),
            state(2000, 1)
        );
        let names: Vec<String> = sim
            .list(Path::new(DIR))
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names.len(), 1, "the partial file was removed: {names:?}");
    }
}

#[test]
fn a_full_disk_while_installing_keeps_the_previous_snapshot() {
    let sim = SimFs::new(4);
    let fs: SharedFs = Arc::new(sim.clone());
    let leader_fs: SharedFs = Arc::new(SimFs::new(5));
    let leader = SnapshotStore::open(leader_fs, Path::new(DIR)).unwrap();
    let s = write(&leader, id(20, 2), &state(3000, 9), small_chunks());
    let store = SnapshotStore::open(fs, Path::new(DIR)).unwrap();
    let old = write(&store, id(10, 1), &state(100, 1), small_chunks());
    let mut install = store.begin_install(s.id, s.size_bytes).unwrap();
    let first = leader.read_chunk(s.id, 0, 1000).unwrap();
    install.write_chunk(0, &first).unwrap();
    sim.inject_fault(FaultOp::Write, 1, FaultKind::Enospc);
    let second = leader.read_chunk(s.id, 1000, 1000).unwrap();
    assert!(install.write_chunk(1000, &second).is_err());
    assert_eq!(store.latest().unwrap().id, old.id);
    assert_eq!(
        store.reader(old.id).unwrap().read_to_end().unwrap(),
        state(100, 1)
    );
    // The partial install can be removed (or resumed) cleanly.
    drop(install);
    let mut install = store.begin_install(s.id, s.size_bytes).unwrap();
    assert!(install.position() <= 1000);
    let mut pos = install.position();
    while pos < s.size_bytes {
        let c = leader.read_chunk(s.id, pos, 700).unwrap();
        install.write_chunk(pos, &c).unwrap();
        pos += c.len() as u64;
    }
    install.finish().unwrap();
    assert_eq!(
        store.reader(s.id).unwrap().read_to_end().unwrap(),
        state(3000, 9)
    );
}
