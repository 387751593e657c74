//! A failed write or sync poisons the data directory (docs/design.md invariant 6):
//! the failed update is not acknowledged, nothing more is written, and after
//! reopen the previous durable state is intact. A full disk loses nothing.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{
    format, ClusterId, DataDir, Epoch, Error, NodeId, Offset, OpenOptions, QuorumState, SharedFs,
};
use quorumlog_io::{CrashPlan, FaultKind, FaultOp, SimFs};

fn open(fs: &SimFs) -> DataDir {
    let shared: SharedFs = Arc::new(fs.clone());
    DataDir::open(shared, Path::new("/d"), &OpenOptions::default()).unwrap()
}

fn epoch(e: u64) -> QuorumState {
    QuorumState {
        epoch: Epoch(e),
        ..QuorumState::default()
    }
}

#[test]
fn every_failing_call_of_an_update_poisons_or_refuses_and_loses_nothing() {
    for op in [
        FaultOp::Create,
        FaultOp::Write,
        FaultOp::Sync,
        FaultOp::Rename,
        FaultOp::SyncDir,
    ] {
        for kind in [FaultKind::Eio, FaultKind::Enospc] {
            let fs = SimFs::new(3);
            let shared: SharedFs = Arc::new(fs.clone());
            format(&shared, Path::new("/d"), ClusterId(1), NodeId(1)).unwrap();
            let dd = open(&fs);
            dd.persist_quorum_state(&epoch(1)).unwrap();
            fs.inject_fault(op, 1, kind);
            let e = dd.persist_quorum_state(&epoch(2)).unwrap_err();
            let staging = matches!(
                op,
                FaultOp::Create | FaultOp::Write | FaultOp::Sync | FaultOp::Rename
            );
            if kind == FaultKind::Enospc && staging {
                // A full disk before the rename: refused, the old file in
                // place, its temporary file gone, nothing poisoned; the
                // same write succeeds once there is space.
                assert!(matches!(e, Error::NoSpace { .. }), "{op:?}: {e}");
                assert!(!e.is_io(), "{op:?}");
                assert_eq!(dd.quorum_state(), epoch(1), "{op:?}: not acknowledged");
                assert!(!dd.is_poisoned(), "{op:?}");
                let tmp = shared
                    .list(Path::new("/d"))
                    .unwrap()
                    .into_iter()
                    .any(|e| Path::new(&e.name).extension().is_some_and(|x| x == "tmp"));
                assert!(!tmp, "{op:?}: a temporary file left behind");
                dd.persist_quorum_state(&epoch(2)).unwrap();
                assert_eq!(dd.quorum_state(), epoch(2));
                continue;
            }
            assert!(matches!(e, Error::Io(_)), "{op:?}: {e}");
            assert_eq!(dd.quorum_state(), epoch(1), "{op:?}: not acknowledged");
            assert!(dd.is_poisoned());
            assert!(matches!(
                dd.persist_quorum_state(&epoch(3)),
                Err(Error::Poisoned { .. })
            ));
            assert!(matches!(
                dd.write_high_watermark(Offset(1)),
                Err(Error::Poisoned { .. })
            ));
            drop(dd);
            // After a crash: epoch 1 or (if the rename reached the disk) 2;
            // never 3, never corrupt. Reopening clears the poison.
            let disk = fs.crash_with(CrashPlan::KeepAll);
            let dd = open(&disk);
            let seen = dd.quorum_state().epoch;
            assert!(seen == Epoch(1) || seen == Epoch(2), "{op:?}: {seen}");
            if matches!(op, FaultOp::Create | FaultOp::Write | FaultOp::Sync) {
                assert_eq!(seen, Epoch(1), "{op:?}: failed before the rename");
            }
            dd.persist_quorum_state(&epoch(5)).unwrap();
        }
    }
}
