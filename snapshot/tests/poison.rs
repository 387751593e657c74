//! A failed write poisons the snapshot writer and the install
//! (docs/design.md §4, invariant 6): after an injected EIO or ENOSPC, every
//! later call returns `Poisoned` naming what failed, nothing is published,
//! and the previous snapshot stays listed and readable.
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

use common::{id, state, write, DIR};
use quorumlog_checkpoint::SharedFs;
use quorumlog_io::{FaultKind, FaultOp, SimFs};
use quorumlog_snapshot::{Error, SnapshotStore, WriterOptions};

const OPTS: WriterOptions = WriterOptions {
    chunk_bytes: 512,
    zstd_level: None,
};

#[test]
fn a_failed_write_poisons_the_writer() {
    for kind in [FaultKind::Eio, FaultKind::Enospc] {
        let sim = SimFs::new(3);
        let fs: SharedFs = Arc::new(sim.clone());
        let store = SnapshotStore::open(fs, Path::new(DIR)).unwrap();
        let first = write(&store, id(10, 1), &state(2000, 1), OPTS);
        let mut w = store.create(id(20, 1), b"", OPTS).unwrap();
        sim.inject_fault(FaultOp::Write, 1, kind);
        let data = state(4000, 2);
        let failed = data.chunks(512).map(|c| w.write(c)).find(Result::is_err);
        assert!(
            matches!(failed, Some(Err(Error::Io(_)))),
            "{kind:?}: {failed:?}"
        );
        assert!(
            matches!(w.write(b"more"), Err(Error::Poisoned { op: "write", .. })),
            "{kind:?}: a write after the failure"
        );
        assert!(
            matches!(w.freeze(), Err(Error::Poisoned { .. })),
            "{kind:?}: freeze after the failure"
        );
        assert_eq!(store.latest().map(|s| s.id), Some(first.id));
        let back = store.reader(first.id).unwrap().read_to_end().unwrap();
        assert_eq!(back, state(2000, 1));
    }
}

#[test]
fn a_failed_chunk_poisons_the_install() {
    let sim = SimFs::new(4);
    let fs: SharedFs = Arc::new(sim.clone());
    let store = SnapshotStore::open(fs, Path::new(DIR)).unwrap();
    // The bytes to install: a snapshot made on another disk.
    let leader_fs: SharedFs = Arc::new(SimFs::new(5));
    let leader = SnapshotStore::open(leader_fs, Path::new("/leader")).unwrap();
    let s = write(&leader, id(30, 2), &state(3000, 3), OPTS);
    let bytes = leader.read_chunk(s.id, 0, usize::MAX).unwrap();
    let mut install = store.begin_install(s.id, bytes.len() as u64).unwrap();
    sim.inject_fault(FaultOp::Sync, 1, FaultKind::Eio);
    let e = install.write_chunk(0, &bytes[..700]).unwrap_err();
    assert!(matches!(e, Error::Io(_)), "{e:?}");
    assert!(matches!(
        install.write_chunk(0, &bytes[..700]),
        Err(Error::Poisoned { .. })
    ));
    assert!(matches!(install.finish(), Err(Error::Poisoned { .. })));
    assert!(store.latest().is_none(), "nothing published");
}
