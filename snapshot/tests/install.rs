//! Installing a snapshot from the leader in chunks: ordering and size
//! errors are typed, older snapshots are refused, an interrupted install
//! resumes after a restart from its last durable chunk and produces a
//! byte-identical snapshot, and a corrupt transfer is never published.
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
use quorumlog_io::{CrashPlan, FileSystem, SimFs};
use quorumlog_snapshot::{Error, SnapshotInfo, SnapshotStore};

fn leader(seed: u64) -> (SnapshotStore, SnapshotInfo, Vec<u8>) {
    let fs: SharedFs = Arc::new(SimFs::new(seed));
    let store = SnapshotStore::open(fs, Path::new("/leader")).unwrap();
    let data = state(7000, seed);
    let s = write(&store, id(100, 4), &data, small_chunks());
    (store, s, data)
}

fn raw(store: &SnapshotStore, s: &SnapshotInfo) -> Vec<u8> {
    store.read_chunk(s.id, 0, usize::MAX).unwrap()
}

#[test]
fn chunked_transfer_publishes_an_identical_snapshot() {
    let (l, s, data) = leader(1);
    both(|fs, dir| {
        let store = SnapshotStore::open(fs.clone(), dir).unwrap();
        let mut install = store.begin_install(s.id, s.size_bytes).unwrap();
        let mut pos = 0;
        while pos < s.size_bytes {
            let c = l.read_chunk(s.id, pos, 1234).unwrap();
            install.write_chunk(pos, &c).unwrap();
            pos += c.len() as u64;
        }
        let info = install.finish().unwrap();
        assert_eq!(info, s);
        assert_eq!(store.reader(s.id).unwrap().read_to_end().unwrap(), data);
        assert_eq!(store.read_chunk(s.id, 0, usize::MAX).unwrap(), raw(&l, &s));
        assert!(store.installs().unwrap().is_empty());
    });
}

#[test]
fn bad_chunks_are_typed_errors() {
    let (l, s, _) = leader(2);
    both(|fs, dir| {
        let store = SnapshotStore::open(fs.clone(), dir).unwrap();
        let mut install = store.begin_install(s.id, s.size_bytes).unwrap();
        let c = l.read_chunk(s.id, 0, 100).unwrap();
        assert!(matches!(
            install.write_chunk(50, &c),
            Err(Error::WrongPosition {
                position: 50,
                expected: 0
            })
        ));
        install.write_chunk(0, &c).unwrap();
        assert!(matches!(
            install.write_chunk(0, &c),
            Err(Error::WrongPosition { expected: 100, .. })
        ));
        let too_much = vec![0u8; usize::try_from(s.size_bytes).unwrap()];
        assert!(matches!(
            install.write_chunk(100, &too_much),
            Err(Error::Oversize { .. })
        ));
        let install_id = install.id();
        assert_eq!(install_id, s.id);
        assert!(matches!(
            install.finish(),
            Err(Error::Incomplete { received: 100, .. })
        ));
        // Older than (or equal to) the latest: refused.
        write(&store, id(200, 5), b"newer", small_chunks());
        assert!(matches!(
            store.begin_install(s.id, s.size_bytes),
            Err(Error::NotNewer { .. })
        ));
    });
}

#[test]
fn a_corrupt_transfer_is_never_published() {
    let (l, s, _) = leader(3);
    let store = SnapshotStore::open(Arc::new(SimFs::new(9)), Path::new(DIR)).unwrap();
    let mut bytes = raw(&l, &s);
    bytes[500] ^= 0x40;
    let mut install = store.begin_install(s.id, s.size_bytes).unwrap();
    install.write_chunk(0, &bytes).unwrap();
    assert!(matches!(install.finish(), Err(Error::Corruption { .. })));
    assert!(store.list().is_empty());
    assert!(
        store.installs().unwrap().is_empty(),
        "the bad partial is removed"
    );
}

#[test]
fn an_interrupted_install_resumes_after_a_restart() {
    let (l, s, data) = leader(4);
    let whole = raw(&l, &s);
    for plan in [
        CrashPlan::LoseUnsynced,
        CrashPlan::KeepAll,
        CrashPlan::Random,
    ] {
        for cut in [0usize, 1, 30, 1000, 3333, whole.len() - 1] {
            let sim = SimFs::new(cut as u64);
            let fs: SharedFs = Arc::new(sim.clone());
            let store = SnapshotStore::open(fs, Path::new(DIR)).unwrap();
            let mut install = store.begin_install(s.id, s.size_bytes).unwrap();
            // Received up to `cut`, in uneven chunks, then a torn write.
            let mut pos = 0;
            while pos < cut {
                let end = (pos + 700).min(cut);
                install.write_chunk(pos as u64, &whole[pos..end]).unwrap();
                pos = end;
            }
            let f = sim.open(
                &Path::new(DIR).join(format!("{}-{:020}.install", s.id.stem(), s.size_bytes)),
                quorumlog_io::OpenMode::ReadWrite,
            );
            if let Ok(f) = f {
                f.write_all_at(&[0xEE; 300], cut as u64).unwrap(); // never synced
            }
            drop(install);
            let after = sim.crash_with(plan);
            let fs: SharedFs = Arc::new(after.clone());
            let store = SnapshotStore::open(fs, Path::new(DIR)).unwrap();
            assert_eq!(
                store.installs().unwrap(),
                vec![(s.id, s.size_bytes)],
                "kept for resuming"
            );
            let mut install = store.begin_install(s.id, s.size_bytes).unwrap();
            let resume = usize::try_from(install.position()).unwrap();
            // Past the cut only over bytes that are zeros in the snapshot
            // itself: the file is preallocated, so a missing byte that
            // should be zero reads as received (the footer's last byte is
            // zero in about one snapshot of 256; the finish still verifies
            // everything end to end).
            assert!(
                resume <= cut || whole[cut..resume].iter().all(|&b| b == 0),
                "{plan:?} cut {cut}: resumes at {resume}"
            );
            let mut pos = resume;
            while pos < whole.len() {
                let end = (pos + 900).min(whole.len());
                install.write_chunk(pos as u64, &whole[pos..end]).unwrap();
                pos = end;
            }
            install.finish().unwrap();
            assert_eq!(
                store.read_chunk(s.id, 0, usize::MAX).unwrap(),
                whole,
                "byte-identical"
            );
            assert_eq!(store.reader(s.id).unwrap().read_to_end().unwrap(), data);
        }
    }
}

/// `discard_install` removes an unfinished download (durably: it is gone
/// after a crash), leaves published snapshots alone, and is a no-op when
/// there is nothing to discard.
#[test]
fn an_unfinished_install_can_be_discarded() {
    let (l, s, _) = leader(5);
    let sim = SimFs::new(5);
    let fs: SharedFs = Arc::new(sim.clone());
    let store = SnapshotStore::open(fs, Path::new(DIR)).unwrap();
    write(&store, id(50, 3), b"older", small_chunks());
    let mut install = store.begin_install(s.id, s.size_bytes).unwrap();
    install
        .write_chunk(0, &l.read_chunk(s.id, 0, 300).unwrap())
        .unwrap();
    drop(install);
    assert_eq!(store.installs().unwrap(), vec![(s.id, s.size_bytes)]);
    store.discard_install(id(999, 9)).unwrap();
    assert_eq!(store.installs().unwrap().len(), 1, "another id: kept");
    store.discard_install(s.id).unwrap();
    assert!(store.installs().unwrap().is_empty());
    let after = sim.crash_with(CrashPlan::LoseUnsynced);
    let fs: SharedFs = Arc::new(after);
    let store = SnapshotStore::open(fs, Path::new(DIR)).unwrap();
    assert!(store.installs().unwrap().is_empty(), "durably discarded");
    assert_eq!(store.list().len(), 1);
    // Started over, it begins at byte 0.
    assert_eq!(
        store.begin_install(s.id, s.size_bytes).unwrap().position(),
        0
    );
}

/// `verify` checks a whole download without publishing it: a clean one
/// verifies and is still unpublished (its `finish` then publishes it); one
/// with a flipped byte fails `verify`, stays unpublished, and its `finish`
/// fails and removes it.
#[test]
fn verify_checks_a_download_without_publishing_it() {
    let (l, s, data) = leader(9);
    both(|fs, dir| {
        let store = SnapshotStore::open(fs.clone(), dir).unwrap();
        let copy = |flip: bool| {
            let mut install = store.begin_install(s.id, s.size_bytes).unwrap();
            let mut pos = 0;
            while pos < s.size_bytes {
                let mut c = l.read_chunk(s.id, pos, 1234).unwrap();
                if flip && pos == 0 {
                    let at = c.len() - 1;
                    c[at] ^= 0x10;
                }
                install.write_chunk(pos, &c).unwrap();
                pos += c.len() as u64;
            }
            install
        };
        let short = store.begin_install(s.id, s.size_bytes).unwrap();
        assert!(matches!(short.verify(), Err(Error::Incomplete { .. })));
        drop(short);

        let bad = copy(true);
        assert!(bad.verify().is_err(), "a flipped byte fails verify");
        assert!(store.list().is_empty(), "nothing published");
        assert!(bad.finish().is_err());
        assert!(store.installs().unwrap().is_empty(), "finish removed it");

        let good = copy(false);
        good.verify().unwrap();
        assert!(store.list().is_empty(), "verify publishes nothing");
        assert_eq!(good.finish().unwrap(), s);
        assert_eq!(store.reader(s.id).unwrap().read_to_end().unwrap(), data);
    });
}
