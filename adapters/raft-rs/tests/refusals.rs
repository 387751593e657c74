//! A call the adapter or the group refuses changes nothing: each refusal
//! the group can make is made to happen through `RegionStorage`, and the
//! group is checked identical after it (extent, metadata, election state,
//! entries), the adapter's answers unchanged, and the directory opens
//! again with the same state. Found from outside: an append whose first
//! entry's term went back behind the log's truncated the log (durably)
//! and was then refused; a hard state whose commit index passed the last
//! index wrote the new term and vote and was then refused.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::too_many_lines,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;
use std::sync::Arc;

use quorumlog_io::SimFs;
use quorumlog_raft::SharedFs;
use quorumlog_raftrs::RegionStorage;
use quorumlog_testkit::group_image;
use raft::eraftpb::{ConfState, Entry, HardState};
use raft::{GetEntriesContext, Storage};

fn adapter_state(s: &RegionStorage) -> impl PartialEq + std::fmt::Debug {
    let (first, last) = (s.first_index().unwrap(), s.last_index().unwrap());
    let entries = s
        .entries(first, last + 1, None, GetEntriesContext::empty(false))
        .unwrap();
    (first, last, s.hard_state(), s.conf_state(), entries)
}

fn entry(index: u64, term: u64, len: usize) -> Entry {
    Entry {
        index,
        term,
        data: vec![7u8; len].into(),
        ..Entry::default()
    }
}

/// A call that must be refused: `true` when it was.
type Refusal<'a> = Box<dyn Fn() -> bool + 'a>;

fn sync(s: &RegionStorage) {
    s.store()
        .wait_durable(quorumlog_raft::Offset(u64::MAX))
        .unwrap();
}

#[test]
fn every_refused_call_through_the_adapter_changes_nothing() {
    let sim = SimFs::new(3);
    let fs: SharedFs = Arc::new(sim.clone());
    let dir = Path::new("/n");
    common::format(&fs, dir, 1);
    let node = common::open(&fs, dir, 1);
    let s = common::region(&node, 5, 1);
    s.initialize_with_conf_state(ConfState::from((vec![1], vec![])))
        .unwrap();
    s.set_hard_state(&HardState {
        term: 3,
        vote: 1,
        commit: 0,
        ..HardState::default()
    })
    .unwrap();
    s.append(&(1..=6).map(|i| entry(i, 2 + i / 4, 10)).collect::<Vec<_>>())
        .unwrap();
    sync(&s);
    s.set_hard_state(&HardState {
        term: 3,
        vote: 1,
        commit: 3,
        ..HardState::default()
    })
    .unwrap();
    sync(&s);
    let snap = s.create_snapshot(2, &s.conf_state(), b"state").unwrap();
    assert_eq!(snap.index, 2);
    s.compact(2).unwrap();
    sync(&s);
    let (group, adapter) = (group_image(s.store()), adapter_state(&s));
    let max = s.store().max_batch_bytes();
    let refusals: Vec<(&str, Refusal<'_>)> = vec![
        (
            "an append whose first term goes back behind the log's (a truncation)",
            Box::new(|| s.append(&[entry(5, 2, 10)]).is_err()),
        ),
        (
            "an append at the end in an older term",
            Box::new(|| s.append(&[entry(7, 2, 10)]).is_err()),
        ),
        (
            "an append with an entry no batch holds, after one that fits",
            Box::new(|| {
                let huge = usize::try_from(max).unwrap();
                s.append(&[entry(7, 3, 10), entry(8, 3, huge)]).is_err()
            }),
        ),
        (
            "a truncation below the commit point",
            Box::new(|| s.append(&[entry(3, 9, 10)]).is_err()),
        ),
        (
            "an append below the first index",
            Box::new(|| s.append(&[entry(1, 3, 10)]).is_err()),
        ),
        (
            "an append past the last index",
            Box::new(|| s.append(&[entry(9, 3, 10)]).is_err()),
        ),
        (
            "a hard state with a new term and a commit index past the last",
            Box::new(|| {
                s.set_hard_state(&HardState {
                    term: 4,
                    vote: 2,
                    commit: 9,
                    ..HardState::default()
                })
                .is_err()
            }),
        ),
        (
            "a hard state whose commit goes back",
            Box::new(|| {
                s.set_hard_state(&HardState {
                    term: 3,
                    vote: 1,
                    commit: 1,
                    ..HardState::default()
                })
                .is_err()
            }),
        ),
        (
            "a second vote in the same term",
            Box::new(|| {
                s.set_hard_state(&HardState {
                    term: 3,
                    vote: 2,
                    commit: 3,
                    ..HardState::default()
                })
                .is_err()
            }),
        ),
        (
            "a compaction past the latest snapshot",
            Box::new(|| s.compact(5).is_err()),
        ),
        (
            "a compaction past the last index",
            Box::new(|| s.compact(9).is_err()),
        ),
    ];
    for (what, call) in &refusals {
        assert!(call(), "{what}: accepted");
        sync(&s);
        assert_eq!(group_image(s.store()), group, "{what}: the group changed");
        assert_eq!(adapter_state(&s), adapter, "{what}: the adapter changed");
    }
    drop(refusals);
    drop(s);
    node.close().unwrap();
    let node = common::open(&fs, dir, 1);
    let s = common::region(&node, 5, 1);
    assert_eq!(group_image(s.store()), group, "after a reopen");
    assert_eq!(adapter_state(&s), adapter, "after a reopen");
    drop(s);
    node.close().unwrap();
}
