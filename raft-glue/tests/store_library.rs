//! The calls for Raft libraries that own the election and compaction
//! (openraft, raft-rs): `append_replicated` needs no durable leadership,
//! goes at the log end (an empty log restarts where the library's log
//! begins), refuses a gap or an older epoch; `purge_to` deletes below an
//! offset without a snapshot bound, past the end restarting the log, and
//! records the last purged id.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_raft::{Error, Isolation};

#[test]
fn replicated_appends_need_no_leadership_and_no_gaps() {
    let s = common::store(1, 1);
    // An empty log at 0; the library's first index is 1.
    s.append_replicated(Offset(1), Epoch(1), &[b"a", b"b"])
        .unwrap();
    assert_eq!(
        (s.log_start_offset(), s.log_end_offset()),
        (Offset(1), Offset(3))
    );
    s.append_replicated(Offset(3), Epoch(2), &[b"c"]).unwrap();
    assert!(matches!(
        s.append_replicated(Offset(5), Epoch(2), &[b"gap"]),
        Err(Error::Log(quorumlog_log::Error::NonContiguous { .. }))
    ));
    assert!(matches!(
        s.append_replicated(Offset(4), Epoch(1), &[b"older"]),
        Err(Error::Log(quorumlog_log::Error::EpochRegression { .. }))
    ));
    let got = s
        .read_entries(Offset(1), Offset(4), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    let epochs: Vec<u64> = got.iter().map(|e| e.epoch.0).collect();
    assert_eq!(epochs, vec![1, 1, 2]);
    assert!(s.poisoned().is_none(), "refusals poison nothing");
}

#[test]
fn purges_are_not_bounded_by_snapshots_and_keep_the_last_id() {
    let s = common::store(1, 2);
    s.append_replicated(Offset(0), Epoch(1), &[b"a", b"b", b"c"])
        .unwrap();
    s.append_replicated(Offset(3), Epoch(2), &[b"d", b"e"])
        .unwrap();
    // No snapshot: `clean_log_prefix` deletes nothing, `purge_to` does.
    assert_eq!(s.clean_log_prefix(Offset(2)).unwrap(), Offset(0));
    s.purge_to(Offset(3), Epoch(1)).unwrap();
    assert_eq!(s.log_start_offset(), Offset(3));
    assert_eq!(s.last_purged(), Some((Offset(2), Epoch(1))));
    // Below the start: nothing happens.
    s.purge_to(Offset(1), Epoch(1)).unwrap();
    assert_eq!(s.log_start_offset(), Offset(3));
    // Past the end: the log restarts there, and continues in the purged
    // entry's epoch or later.
    s.purge_to(Offset(10), Epoch(4)).unwrap();
    assert_eq!(
        (s.log_start_offset(), s.log_end_offset()),
        (Offset(10), Offset(10))
    );
    assert_eq!(s.last_purged(), Some((Offset(9), Epoch(4))));
    assert!(s
        .append_replicated(Offset(10), Epoch(3), &[b"old"])
        .is_err());
    s.append_replicated(Offset(10), Epoch(4), &[b"f"]).unwrap();
}

/// `append_replicated_queued` (the openraft adapter's append: queued for
/// the next sync round, not written): an empty log still restarts where
/// the library's log begins, and a purge reaching into the queue keeps the
/// queued entries above it (it must not take them for "past the end" and
/// restart the log there). Under `SyncPolicy::Never` no round runs, so the
/// entries stay queued until the purge.
#[test]
fn purges_reaching_into_queued_appends_keep_them() {
    let fs: quorumlog_checkpoint::SharedFs = std::sync::Arc::new(quorumlog_io::SimFs::new(7));
    let options = quorumlog_raft::StoreOptions {
        sync: quorumlog_log::SyncPolicy::Never,
        ..common::options()
    };
    let dir = std::path::Path::new(common::DIR);
    quorumlog_raft::Store::format(&fs, dir, common::meta(1), None, &options).unwrap();
    let expect = quorumlog_raft::Identity::of(&common::meta(1));
    let s = quorumlog_raft::KraftReplica::open(&fs, dir, &expect, &options)
        .unwrap()
        .0;
    s.append_replicated_queued(Offset(4), Epoch(1), &[b"a", b"b"])
        .unwrap();
    s.append_replicated_queued(Offset(6), Epoch(2), &[b"c", b"d"])
        .unwrap();
    assert_eq!(s.queued_end(), Offset(8));
    assert_eq!(s.log_end_offset(), Offset(4), "queued, not written");
    s.purge_to(Offset(6), Epoch(1)).unwrap();
    assert_eq!(
        (s.log_start_offset(), s.log_end_offset()),
        (Offset(6), Offset(8))
    );
    let got = s
        .read_entries(Offset(6), Offset(8), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    let bytes: Vec<&[u8]> = got.iter().map(|e| e.bytes.as_slice()).collect();
    assert_eq!(bytes, vec![b"c".as_slice(), b"d".as_slice()]);
    s.append_replicated_queued(Offset(8), Epoch(2), &[b"e"])
        .unwrap();
    assert_eq!(s.queued_end(), Offset(9));
}
