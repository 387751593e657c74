//! Retention keeps the newest N and/or a byte budget, never the latest
//! snapshot's deletion, and startup hygiene removes abandoned partial files
//! while keeping resumable installs.
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

use common::{both, id, small_chunks, state, write, DIR};
use quorumlog_checkpoint::SharedFs;
use quorumlog_io::{FileSystem, OpenMode, SimFs};
use quorumlog_snapshot::{Retention, SnapshotStore};

#[test]
fn keep_latest_and_byte_budget() {
    both(|fs, dir| {
        let store = SnapshotStore::open(fs.clone(), dir).unwrap();
        for end in 1..=5u64 {
            write(&store, id(end * 10, 1), &state(2000, end), small_chunks());
        }
        let size = store.latest().unwrap().size_bytes;
        let deleted = store
            .retain(Retention {
                keep_latest: 3,
                max_total_bytes: None,
            })
            .unwrap();
        assert_eq!(deleted, vec![id(10, 1), id(20, 1)]);
        let deleted = store
            .retain(Retention {
                keep_latest: 10,
                max_total_bytes: Some(size * 2),
            })
            .unwrap();
        assert_eq!(deleted, vec![id(30, 1)]);
        // A budget smaller than one snapshot still keeps the latest.
        let deleted = store
            .retain(Retention {
                keep_latest: 0,
                max_total_bytes: Some(1),
            })
            .unwrap();
        assert_eq!(deleted, vec![id(40, 1)]);
        assert_eq!(store.list().len(), 1);
        assert_eq!(store.latest().unwrap().id, id(50, 1));
        let again = SnapshotStore::open(fs.clone(), dir).unwrap();
        assert_eq!(again.list(), store.list());
    });
}

#[test]
fn startup_hygiene_follows_the_decision_table() {
    let sim = SimFs::new(1);
    let fs: SharedFs = Arc::new(sim.clone());
    let store = SnapshotStore::open(fs.clone(), Path::new(DIR)).unwrap();
    write(&store, id(50, 2), &state(100, 1), small_chunks());
    let touch = |name: &str| {
        let f = sim
            .open(&Path::new(DIR).join(name), OpenMode::CreateNew)
            .unwrap();
        f.write_all_at(b"x", 0).unwrap();
    };
    touch(&format!("{}.part", id(60, 2).stem()));
    touch(&format!("{}-{:020}.install", id(70, 3).stem(), 5000));
    touch(&format!("{}-{:020}.install", id(40, 1).stem(), 5000));
    touch("README");
    let store = SnapshotStore::open(fs, Path::new(DIR)).unwrap();
    let r = store.report();
    assert_eq!(r.partials_removed.len(), 1);
    assert_eq!(
        r.obsolete_installs_removed.len(),
        1,
        "older than the latest: removed"
    );
    assert_eq!(r.unknown_files, vec!["README".to_string()]);
    assert_eq!(
        store.installs().unwrap(),
        vec![(id(70, 3), 5000)],
        "newer install kept"
    );
    assert_eq!(store.list().len(), 1);
}
