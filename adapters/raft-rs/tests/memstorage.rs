//! raft-rs's own `MemStorage` tests (raft 0.7, `src/storage.rs`), every
//! case, on a region of a node's shared log, twice: on a one-group node,
//! and on a group of a many-group node whose other regions' batches sit
//! before and after its own in the shared log: the same inputs, the same
//! expected results, checked again after the node is closed and
//! reopened. Where `MemStorage` panics (a gap, compacted entries
//! overwritten), the adapter returns a typed error and changes nothing;
//! where `MemStorage` fabricates a snapshot index past its state (a test
//! convenience), the adapter answers `SnapshotTemporarilyUnavailable`
//! (it never returns a snapshot it does not hold).
//!
//! Then the caller's mistakes, each refused with its typed error and the
//! state unchanged after a reopen: a gap, unordered entries, a commit
//! index moving back or past the end, a second vote in one term, a term
//! going back, a corrupt or out-of-date snapshot.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::entry as new_entry;
use protobuf::Message as _;
use quorumlog_io::SimFs;
use quorumlog_raft::{Node, SharedFs};
use quorumlog_raftrs::{Error, RegionStorage};
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{Error as RaftError, GetEntriesContext, Storage, StorageError};

const DIR: &str = "/n1";

thread_local! {
    /// Whether this test's fixture node holds other regions too.
    static MANY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `case` on a one-group node, then on a group of a many-group node.
fn on_one_group_and_many(case: fn()) {
    for many in [false, true] {
        MANY.with(|m| m.set(many));
        case();
    }
}

/// On a many-group fixture: regions 7 and 9 append `n` entries each (their
/// batches interleave with region 1's in the shared log).
fn neighbours(node: &Node, n: u64) {
    if !MANY.with(std::cell::Cell::get) {
        return;
    }
    for id in [7, 9] {
        let r = common::region(node, id, 1);
        let next = r.last_index().unwrap() + 1;
        let ents: Vec<Entry> = (next..next + n).map(|i| new_entry(i, 1)).collect();
        r.append(&ents).unwrap();
    }
}

/// A node with region 1 holding `ents` (created at the first's index).
struct Fixture {
    fs: SharedFs,
    node: Option<Node>,
    storage: Option<RegionStorage>,
}

impl Fixture {
    fn new(ents: &[Entry]) -> Fixture {
        let fs: SharedFs = Arc::new(SimFs::new(7));
        common::format(&fs, Path::new(DIR), 1);
        let node = common::open(&fs, Path::new(DIR), 1);
        neighbours(&node, 3);
        let first = ents.first().map_or(1, |e| e.index);
        let storage = common::region(&node, 1, first);
        storage.append(ents).unwrap();
        neighbours(&node, 2);
        Fixture {
            fs,
            node: Some(node),
            storage: Some(storage),
        }
    }

    fn s(&self) -> &RegionStorage {
        self.storage.as_ref().unwrap()
    }

    /// Closes the node (everything durable) and opens it again.
    fn reopen(&mut self) {
        drop(self.storage.take());
        self.node.take().unwrap().close().unwrap();
        let node = common::open(&self.fs, Path::new(DIR), 1);
        self.storage = Some(common::region(&node, 1, 1));
        self.node = Some(node);
    }

    /// Runs `check` now and after a reopen.
    fn twice(&mut self, check: impl Fn(&RegionStorage, &str)) {
        check(self.s(), "before the reopen");
        self.reopen();
        check(self.s(), "after the reopen");
    }
}

fn size_of(e: &Entry) -> u32 {
    e.compute_size()
}

fn all(s: &RegionStorage) -> Vec<Entry> {
    let (first, last) = (s.first_index().unwrap(), s.last_index().unwrap());
    s.entries(first, last + 1, None, GetEntriesContext::empty(false))
        .unwrap()
}

#[test]
fn test_storage_term() {
    on_one_group_and_many(test_storage_term_case);
}

fn test_storage_term_case() {
    let ents = vec![new_entry(3, 3), new_entry(4, 4), new_entry(5, 5)];
    let tests = vec![
        (2, Err(RaftError::Store(StorageError::Compacted))),
        (3, Ok(3)),
        (4, Ok(4)),
        (5, Ok(5)),
        (6, Err(RaftError::Store(StorageError::Unavailable))),
    ];
    for (i, (idx, wterm)) in tests.into_iter().enumerate() {
        let mut f = Fixture::new(&ents);
        f.twice(|s, when| assert_eq!(s.term(idx), wterm, "#{i} {when}"));
    }
}

#[test]
fn test_storage_entries() {
    on_one_group_and_many(test_storage_entries_case);
}

fn test_storage_entries_case() {
    let ents = vec![
        new_entry(3, 3),
        new_entry(4, 4),
        new_entry(5, 5),
        new_entry(6, 6),
    ];
    let max = u64::MAX;
    let (s1, s2, s3) = (
        u64::from(size_of(&ents[1])),
        u64::from(size_of(&ents[2])),
        u64::from(size_of(&ents[3])),
    );
    let tests = vec![
        (2, 6, max, Err(RaftError::Store(StorageError::Compacted))),
        (3, 4, max, Ok(vec![new_entry(3, 3)])),
        (4, 5, max, Ok(vec![new_entry(4, 4)])),
        (4, 6, max, Ok(vec![new_entry(4, 4), new_entry(5, 5)])),
        (
            4,
            7,
            max,
            Ok(vec![new_entry(4, 4), new_entry(5, 5), new_entry(6, 6)]),
        ),
        // Even if the size limit is zero, the first entry is returned.
        (4, 7, 0, Ok(vec![new_entry(4, 4)])),
        (4, 7, s1 + s2, Ok(vec![new_entry(4, 4), new_entry(5, 5)])),
        (
            4,
            7,
            s1 + s2 + s3 / 2,
            Ok(vec![new_entry(4, 4), new_entry(5, 5)]),
        ),
        (
            4,
            7,
            s1 + s2 + s3 - 1,
            Ok(vec![new_entry(4, 4), new_entry(5, 5)]),
        ),
        (
            4,
            7,
            s1 + s2 + s3,
            Ok(vec![new_entry(4, 4), new_entry(5, 5), new_entry(6, 6)]),
        ),
    ];
    for (i, (lo, hi, maxsize, wentries)) in tests.into_iter().enumerate() {
        let mut f = Fixture::new(&ents);
        f.twice(|s, when| {
            let e = s.entries(lo, hi, maxsize, GetEntriesContext::empty(false));
            assert_eq!(e, wentries, "#{i} {when}");
        });
    }
}

#[test]
fn test_storage_last_index() {
    on_one_group_and_many(test_storage_last_index_case);
}

fn test_storage_last_index_case() {
    let ents = vec![new_entry(3, 3), new_entry(4, 4), new_entry(5, 5)];
    let mut f = Fixture::new(&ents);
    f.twice(|s, when| assert_eq!(s.last_index(), Ok(5), "{when}"));
    f.s().append(&[new_entry(6, 5)]).unwrap();
    f.twice(|s, when| assert_eq!(s.last_index(), Ok(6), "{when}"));
}

#[test]
fn test_storage_first_index() {
    on_one_group_and_many(test_storage_first_index_case);
}

fn test_storage_first_index_case() {
    let ents = vec![new_entry(3, 3), new_entry(4, 4), new_entry(5, 5)];
    let mut f = Fixture::new(&ents);
    f.twice(|s, when| assert_eq!(s.first_index(), Ok(3), "{when}"));
    f.s().compact(4).unwrap();
    f.twice(|s, when| {
        assert_eq!(s.first_index(), Ok(4), "{when}");
        // The term before the first index is still known.
        assert_eq!(s.term(3), Ok(3), "{when}");
    });
}

#[test]
fn test_storage_compact() {
    on_one_group_and_many(test_storage_compact_case);
}

fn test_storage_compact_case() {
    let ents = vec![new_entry(3, 3), new_entry(4, 4), new_entry(5, 5)];
    let tests = vec![(2, 3, 3, 3), (3, 3, 3, 3), (4, 4, 4, 2), (5, 5, 5, 1)];
    for (i, (idx, windex, wterm, wlen)) in tests.into_iter().enumerate() {
        let mut f = Fixture::new(&ents);
        f.s().compact(idx).unwrap();
        f.twice(|s, when| {
            let index = s.first_index().unwrap();
            assert_eq!(index, windex, "#{i} {when}");
            let term = s
                .entries(index, index + 1, 1, GetEntriesContext::empty(false))
                .map_or(0, |v| v.first().map_or(0, |e| e.term));
            assert_eq!(term, wterm, "#{i} {when}");
            let last = s.last_index().unwrap();
            let len = s
                .entries(index, last + 1, 100, GetEntriesContext::empty(false))
                .unwrap()
                .len();
            assert_eq!(len, wlen, "#{i} {when}");
        });
    }
}

fn conf(voters: &[u64]) -> ConfState {
    ConfState {
        voters: voters.to_vec(),
        ..ConfState::default()
    }
}

fn hard(term: u64, vote: u64, commit: u64) -> HardState {
    HardState {
        term,
        vote,
        commit,
        ..HardState::default()
    }
}

/// `MemStorage`'s snapshot is at the commit index; here the application
/// writes it there (`create_snapshot`), then `snapshot(windex)` answers.
#[test]
fn test_storage_create_snapshot() {
    on_one_group_and_many(test_storage_create_snapshot_case);
}

fn test_storage_create_snapshot_case() {
    let ents = vec![new_entry(3, 3), new_entry(4, 4), new_entry(5, 5)];
    let nodes = [1, 2, 3];
    let unavailable = Err(RaftError::Store(
        StorageError::SnapshotTemporarilyUnavailable,
    ));
    // (commit, Some((index, term)) or unavailable, request index)
    let tests = vec![
        (4, Some((4, 4)), 0),
        (5, Some((5, 5)), 5),
        // MemStorage fabricates index 6 here; no snapshot at 6 exists.
        (5, None, 6),
        (5, None, 6),
    ];
    for (i, (idx, want, windex)) in tests.into_iter().enumerate() {
        let mut f = Fixture::new(&ents);
        f.s().set_hard_state(&hard(idx, 0, idx)).unwrap();
        f.s().set_conf_state(&conf(&nodes)).unwrap();
        let state = format!("state at {idx}").into_bytes();
        f.s().create_snapshot(idx, &conf(&nodes), &state).unwrap();
        f.twice(|s, when| {
            let got = s.snapshot(windex, 0);
            match want {
                None => assert_eq!(got, unavailable, "#{i} {when}"),
                Some((index, term)) => {
                    let snap = got.unwrap();
                    let m = snap.get_metadata();
                    assert_eq!((m.index, m.term), (index, term), "#{i} {when}");
                    assert_eq!(m.get_conf_state().voters, nodes, "#{i} {when}");
                    assert_eq!(installed_state(&snap), state, "#{i} {when}");
                }
            }
        });
    }
}

/// What a fresh follower's install of `snap` gives the application.
fn installed_state(snap: &Snapshot) -> Vec<u8> {
    let f = Fixture::new(&[]);
    f.s().apply_snapshot(snap).unwrap()
}

#[test]
fn test_storage_append() {
    on_one_group_and_many(test_storage_append_case);
}

fn test_storage_append_case() {
    let ents = vec![new_entry(3, 3), new_entry(4, 4), new_entry(5, 5)];
    let tests = vec![
        (
            vec![new_entry(3, 3), new_entry(4, 4), new_entry(5, 5)],
            Some(vec![new_entry(3, 3), new_entry(4, 4), new_entry(5, 5)]),
        ),
        (
            vec![new_entry(3, 3), new_entry(4, 6), new_entry(5, 6)],
            Some(vec![new_entry(3, 3), new_entry(4, 6), new_entry(5, 6)]),
        ),
        (
            vec![
                new_entry(3, 3),
                new_entry(4, 4),
                new_entry(5, 5),
                new_entry(6, 5),
            ],
            Some(vec![
                new_entry(3, 3),
                new_entry(4, 4),
                new_entry(5, 5),
                new_entry(6, 5),
            ]),
        ),
        // Overwriting compacted entries is refused (MemStorage panics).
        (
            vec![new_entry(2, 3), new_entry(3, 3), new_entry(4, 5)],
            None,
        ),
        // A conflicting suffix is truncated and replaced.
        (
            vec![new_entry(4, 5)],
            Some(vec![new_entry(3, 3), new_entry(4, 5)]),
        ),
        // A direct append.
        (
            vec![new_entry(6, 6)],
            Some(vec![
                new_entry(3, 3),
                new_entry(4, 4),
                new_entry(5, 5),
                new_entry(6, 6),
            ]),
        ),
    ];
    for (i, (entries, wentries)) in tests.into_iter().enumerate() {
        let mut f = Fixture::new(&ents);
        let res = f.s().append(&entries);
        let want = if let Some(w) = wentries {
            res.unwrap();
            w
        } else {
            assert!(
                matches!(res, Err(Error::Compacted { index: 2, first: 3 })),
                "#{i}: {res:?}"
            );
            ents.clone()
        };
        f.twice(|s, when| assert_eq!(all(s), want, "#{i} {when}"));
    }
}

#[test]
fn test_storage_apply_snapshot() {
    on_one_group_and_many(test_storage_apply_snapshot_case);
}

fn test_storage_apply_snapshot_case() {
    let nodes = [1, 2, 3];
    // A leader's snapshots at 3 and 4, as files its store wrote.
    let leader = Fixture::new(&[
        new_entry(1, 1),
        new_entry(2, 2),
        new_entry(3, 3),
        new_entry(4, 4),
    ]);
    leader.s().set_hard_state(&hard(4, 0, 4)).unwrap();
    leader
        .s()
        .create_snapshot(3, &conf(&nodes), b"three")
        .unwrap();
    let snap3 = leader.s().snapshot(3, 2).unwrap();
    leader
        .s()
        .create_snapshot(4, &conf(&nodes), b"four")
        .unwrap();
    let snap4 = leader.s().snapshot(4, 2).unwrap();

    let mut f = Fixture::new(&[]);
    // Applied successfully.
    assert_eq!(f.s().apply_snapshot(&snap4).unwrap(), b"four");
    f.twice(|s, when| {
        assert_eq!(s.first_index(), Ok(5), "{when}");
        assert_eq!(s.last_index(), Ok(4), "{when}");
        assert_eq!(s.term(4), Ok(4), "{when}");
        let st = s.initial_state().unwrap();
        assert_eq!(st.hard_state.commit, 4, "{when}");
        assert_eq!(st.conf_state.voters, nodes, "{when}");
    });
    // Out of date.
    assert!(matches!(
        f.s().apply_snapshot(&snap3),
        Err(Error::SnapshotOutOfDate { index: 3, first: 5 })
    ));
    // The log continues the snapshot.
    f.s().append(&[new_entry(5, 4)]).unwrap();
    f.twice(|s, when| assert_eq!(all(s), vec![new_entry(5, 4)], "{when}"));
}

#[test]
fn a_corrupt_snapshot_is_refused_and_nothing_is_published() {
    on_one_group_and_many(a_corrupt_snapshot_is_refused_and_nothing_is_published_case);
}

fn a_corrupt_snapshot_is_refused_and_nothing_is_published_case() {
    let leader = Fixture::new(&[new_entry(1, 1), new_entry(2, 1)]);
    leader.s().set_hard_state(&hard(1, 0, 2)).unwrap();
    leader
        .s()
        .create_snapshot(2, &conf(&[1]), b"state")
        .unwrap();
    let mut snap = leader.s().snapshot(0, 2).unwrap();
    let mut data = snap.data.to_vec();
    let mid = data.len() / 2;
    data[mid] ^= 0x40;
    snap.data = data.into();
    let mut f = Fixture::new(&[]);
    assert!(matches!(f.s().apply_snapshot(&snap), Err(Error::Store(_))));
    f.twice(|s, when| {
        assert_eq!(s.first_index(), Ok(1), "{when}");
        assert_eq!(s.last_index(), Ok(0), "{when}");
        assert!(s.store().extent().latest_snapshot.is_none(), "{when}");
    });
}

#[test]
fn the_callers_mistakes_are_refused_and_change_nothing() {
    on_one_group_and_many(the_callers_mistakes_are_refused_and_change_nothing_case);
}

fn the_callers_mistakes_are_refused_and_change_nothing_case() {
    let ents = vec![new_entry(1, 1), new_entry(2, 1), new_entry(3, 2)];
    let mut f = Fixture::new(&ents);
    f.s().set_hard_state(&hard(2, 1, 2)).unwrap();
    // A gap after the last index.
    assert!(matches!(
        f.s().append(&[new_entry(5, 2)]),
        Err(Error::Gap { index: 5, last: 3 })
    ));
    // Indexes that skip, terms that go back.
    assert!(matches!(
        f.s().append(&[new_entry(4, 2), new_entry(6, 2)]),
        Err(Error::Unordered { position: 1, .. })
    ));
    assert!(matches!(
        f.s().append(&[new_entry(4, 3), new_entry(5, 2)]),
        Err(Error::Unordered { position: 1, .. })
    ));
    // A truncation below the commit point (a stale leader's entries).
    assert!(matches!(
        f.s().append(&[new_entry(2, 3)]),
        Err(Error::Store(
            quorumlog_raft::Error::BelowHighWatermark { .. }
        ))
    ));
    // A commit index moving back, or past the last index.
    assert!(matches!(
        f.s().set_hard_state(&hard(2, 1, 1)),
        Err(Error::CommitBackwards {
            commit: 1,
            current: 2
        })
    ));
    assert!(f.s().set_hard_state(&hard(2, 1, 9)).is_err());
    // A second vote in term 2, and term 1 after term 2.
    assert!(f.s().set_hard_state(&hard(2, 3, 2)).is_err());
    assert!(f.s().set_hard_state(&hard(1, 1, 2)).is_err());
    // Compaction past the end.
    assert!(matches!(
        f.s().compact(5),
        Err(Error::CompactBeyondEnd { index: 5, last: 3 })
    ));
    f.twice(|s, when| {
        assert_eq!(all(s), ents, "{when}");
        let hs = s.initial_state().unwrap().hard_state;
        assert_eq!((hs.term, hs.vote), (2, 1), "{when}");
        assert!(hs.commit <= 2, "{when}: commit {}", hs.commit);
    });
}

/// Invariant: `term(i)` answers the term of the entry the log holds at
/// `i`, whatever appends, conflicting suffixes and compactions led
/// there (the storage answers recent terms from a run it keeps beside
/// the cache: a run left stale by a truncation or a term change would
/// answer a wrong term here). A generated history against a model,
/// checked after every step and after a reopen.
#[test]
fn terms_follow_every_append_truncation_and_compaction() {
    on_one_group_and_many(terms_follow_case);
}

fn terms_follow_case() {
    let mut f = Fixture::new(&(1..=5).map(|i| new_entry(i, 1)).collect::<Vec<_>>());
    // The model: the term of each index from `first`.
    let (mut first, mut terms) = (1u64, vec![1u64; 5]);
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for step in 0..300 {
        let last = first + terms.len() as u64 - 1;
        let top = *terms.last().unwrap();
        match next(10) {
            // A conflicting suffix in a newer term, from anywhere after
            // the first entry.
            0..=1 if terms.len() > 1 => {
                let at = first + 1 + next(terms.len() as u64 - 1);
                let k = 1 + next(4);
                let ents: Vec<Entry> = (at..at + k).map(|i| new_entry(i, top + 1)).collect();
                f.s().append(&ents).unwrap();
                terms.truncate(usize::try_from(at - first).unwrap());
                terms.extend(std::iter::repeat_n(top + 1, usize::try_from(k).unwrap()));
            }
            // A compaction that keeps at least one entry.
            2 if terms.len() > 2 => {
                let to = first + 1 + next(terms.len() as u64 - 2);
                f.s().compact(to).unwrap();
                terms.drain(..usize::try_from(to - first).unwrap());
                first = to;
            }
            // Appends at the end, now and then in a newer term, now and
            // then with the term changing inside one call.
            _ => {
                let k = 1 + next(5);
                let bump = next(4) == 0;
                let split = next(k + 1);
                let ents: Vec<Entry> = (0..k)
                    .map(|j| {
                        let t = top + u64::from(bump) + u64::from(bump && j >= split);
                        new_entry(last + 1 + j, t)
                    })
                    .collect();
                terms.extend(ents.iter().map(|e| e.term));
                f.s().append(&ents).unwrap();
            }
        }
        let s = f.s();
        for (i, t) in (first..).zip(&terms) {
            assert_eq!(s.term(i), Ok(*t), "step {step}: index {i}");
        }
        let last = first + terms.len() as u64 - 1;
        assert_eq!(
            s.term(last + 1),
            Err(RaftError::Store(StorageError::Unavailable)),
            "step {step}"
        );
    }
    f.twice(|s, when| {
        for (i, t) in (first..).zip(&terms) {
            assert_eq!(s.term(i), Ok(*t), "{when}: index {i}");
        }
    });
}
