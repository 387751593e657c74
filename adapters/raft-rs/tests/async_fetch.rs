//! Asynchronous fetch: `entries` answers `LogTemporarilyUnavailable` only
//! to a caller that can wait (`context.can_async()`) and only for a range
//! outside the in-memory tail; the range is read on the persister's fetch
//! thread, the loop is told (`Event::Fetched`, with the context back),
//! and the next call returns exactly what a synchronous read returns.
#![allow(
    clippy::unwrap_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quorumlog_io::SimFs;
use quorumlog_raft::SharedFs;
use quorumlog_raftrs::{AsyncPersister, Event};
use raft::{GetEntriesContext, Storage, StorageError};

#[test]
fn a_range_outside_the_tail_is_fetched_on_the_fetch_thread() {
    let fs: SharedFs = Arc::new(SimFs::new(3));
    common::format(&fs, Path::new("/n"), 1);
    let node = common::open(&fs, Path::new("/n"), 1);
    // One entry kept in memory: the last one appended stays in the tail
    // whether or not the background round has made it durable yet (with
    // none kept, entry 41 could be durable and gone before the read
    // below, and a caller that can wait would rightly be told to wait).
    let s = common::region_with_cache(&node, 1, 1, 1);
    let entries: Vec<_> = (1..=40).map(|i| common::entry(i, 1)).collect();
    s.append(&entries).unwrap();
    s.store()
        .wait_durable(s.store().extent().queued_end)
        .unwrap();
    // The tail is trimmed to entry 41 at the next append: 1..=40 are
    // durable.
    s.append(&[common::entry(41, 1)]).unwrap();
    let persister = AsyncPersister::new();
    let woken = Arc::new(AtomicUsize::new(0));
    let w = Arc::clone(&woken);
    persister.set_waker(Arc::new(move || {
        w.fetch_add(1, Ordering::Relaxed);
    }));
    persister.enable_async_fetch(&s);

    // A caller that cannot wait reads at once.
    let sync = s
        .entries(5, 20, None, GetEntriesContext::empty(false))
        .unwrap();
    assert_eq!(sync, entries[4..19].to_vec());
    // One that can is told to wait, and gets its context back.
    assert_eq!(
        s.entries(5, 20, None, GetEntriesContext::empty(true)),
        Err(raft::Error::Store(StorageError::LogTemporarilyUnavailable))
    );
    match persister.recv_timeout(Duration::from_secs(30)).unwrap() {
        Event::Fetched { region, context } => {
            assert_eq!(region, 1);
            assert!(context.can_async());
        }
        other => panic!("expected a fetch, got {other:?}"),
    }
    // The waker runs right after the event is queued.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while woken.load(Ordering::Relaxed) == 0 && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert!(
        woken.load(Ordering::Relaxed) >= 1,
        "the waker was not called"
    );
    // The next call returns what the synchronous read did.
    assert_eq!(
        s.entries(5, 20, None, GetEntriesContext::empty(true)),
        Ok(sync)
    );
    // The in-memory tail is answered at once even to a caller that can wait.
    assert_eq!(
        s.entries(41, 42, None, GetEntriesContext::empty(true)),
        Ok(vec![common::entry(41, 1)])
    );
}

/// With no durable entries kept in memory, an entry that became durable
/// leaves the tail at the next append, and a caller that can wait is
/// sent to the fetch thread for it, even for the newest durable entry.
#[test]
fn with_no_cache_a_durable_entry_is_fetched_even_at_the_end() {
    let fs: SharedFs = Arc::new(SimFs::new(4));
    common::format(&fs, Path::new("/n"), 1);
    let node = common::open(&fs, Path::new("/n"), 1);
    let s = common::region_with_cache(&node, 1, 1, 0);
    s.append(&[common::entry(1, 1), common::entry(2, 1)])
        .unwrap();
    s.store()
        .wait_durable(s.store().extent().queued_end)
        .unwrap();
    // The append trims every durable entry before it from the tail.
    s.append(&[common::entry(3, 1)]).unwrap();
    let persister = AsyncPersister::new();
    persister.enable_async_fetch(&s);
    assert_eq!(
        s.entries(2, 3, None, GetEntriesContext::empty(true)),
        Err(raft::Error::Store(StorageError::LogTemporarilyUnavailable))
    );
    match persister.recv_timeout(Duration::from_secs(30)).unwrap() {
        Event::Fetched { region, .. } => assert_eq!(region, 1),
        other => panic!("expected a fetch, got {other:?}"),
    }
    assert_eq!(
        s.entries(2, 3, None, GetEntriesContext::empty(true)),
        Ok(vec![common::entry(2, 1)])
    );
}
