//! Writing, publishing, listing and reading snapshots, plain and zstd,
//! on the real file system and the simulated disk.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use common::{both, id, small_chunks, state, write};
use quorumlog_checkpoint::Offset;
use quorumlog_snapshot::{Error, SnapshotStore, WriterOptions};

#[test]
fn round_trip_plain_and_compressed() {
    both(|fs, dir| {
        let store = SnapshotStore::open(fs.clone(), dir).unwrap();
        let data = state(10_000, 1);
        let plain = write(&store, id(10, 1), &data, small_chunks());
        let zstd = write(
            &store,
            id(20, 1),
            &data,
            WriterOptions {
                chunk_bytes: 1000,
                zstd_level: Some(3),
            },
        );
        assert!(zstd.size_bytes < plain.size_bytes, "{zstd:?} vs {plain:?}");
        for s in [plain, zstd] {
            let mut r = store.reader(s.id).unwrap();
            assert_eq!(r.header().metadata, b"meta");
            assert_eq!(r.header().id, s.id);
            assert_eq!(r.data_len(), 10_000);
            assert_eq!(r.read_to_end().unwrap(), data);
        }
        // An empty snapshot is valid too.
        let empty = store
            .create(id(30, 2), b"", small_chunks())
            .unwrap()
            .freeze()
            .unwrap();
        assert_eq!(store.reader(empty.id).unwrap().read_to_end().unwrap(), b"");
    });
}

#[test]
fn listing_latest_earliest_lookup_and_coverage() {
    both(|fs, dir| {
        let store = SnapshotStore::open(fs.clone(), dir).unwrap();
        assert!(store.latest().is_none());
        for (end, epoch) in [(50, 2), (10, 1), (90, 3)] {
            write(&store, id(end, epoch), &state(100, end), small_chunks());
        }
        let ids: Vec<_> = store.list().iter().map(|s| s.id).collect();
        assert_eq!(ids, vec![id(10, 1), id(50, 2), id(90, 3)]);
        assert_eq!(store.latest().unwrap().id, id(90, 3));
        assert_eq!(store.earliest().unwrap().id, id(10, 1));
        assert!(store.get(id(50, 2)).is_some());
        assert!(store.get(id(50, 3)).is_none());
        assert_eq!(store.latest_covering(Offset(90)).unwrap().id, id(90, 3));
        assert!(store.latest_covering(Offset(91)).is_none());
        assert!(matches!(
            store.create(id(50, 2), b"", small_chunks()),
            Err(Error::AlreadyExists(_))
        ));
        assert!(matches!(store.reader(id(7, 7)), Err(Error::NotFound(_))));
        // Reopen: the same list.
        let again = SnapshotStore::open(fs.clone(), dir).unwrap();
        assert_eq!(again.list(), store.list());
    });
}

#[test]
fn a_writer_dropped_without_freeze_leaves_nothing() {
    both(|fs, dir| {
        let store = SnapshotStore::open(fs.clone(), dir).unwrap();
        let mut w = store.create(id(5, 1), b"", small_chunks()).unwrap();
        w.write(&state(5000, 2)).unwrap();
        drop(w);
        assert!(store.list().is_empty());
        assert!(
            fs.list(dir).unwrap().is_empty(),
            "{:?}",
            fs.list(dir).unwrap()
        );
    });
}

#[test]
fn read_chunk_serves_raw_file_bytes() {
    both(|fs, dir| {
        let store = SnapshotStore::open(fs.clone(), dir).unwrap();
        let s = write(&store, id(10, 1), &state(5000, 3), small_chunks());
        let mut all = Vec::new();
        let mut pos = 0;
        while pos < s.size_bytes {
            let c = store.read_chunk(s.id, pos, 999).unwrap();
            pos += c.len() as u64;
            all.extend(c);
        }
        assert_eq!(all.len() as u64, s.size_bytes);
        let direct = fs
            .open(
                &dir.join(format!("{}.snapshot", s.id.stem())),
                quorumlog_io::OpenMode::Read,
            )
            .unwrap()
            .read_to_end()
            .unwrap();
        assert_eq!(all, direct);
        assert!(store.read_chunk(s.id, s.size_bytes + 1, 10).is_err());
        assert!(store.read_chunk(s.id, s.size_bytes, 10).unwrap().is_empty());
    });
}
