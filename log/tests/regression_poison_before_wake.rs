//! Regression: after a failed `fdatasync` the group commit woke its
//! waiters and fired their completions before it poisoned the data
//! directory. In that window a call that does not go through the log
//! (openraft's `save_vote` on another task writes the quorum state, which
//! checks only the data directory) could still write after the failure.
//!
//! Invariant: a sync failure poisons the data directory before anyone
//! learns of it: every waiter and every completion told `Poisoned` finds
//! the data directory poisoned at that moment.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{open_dd, payload, sim, small_options, DIR};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::{FaultKind, FaultOp};
use quorumlog_log::{DurableLog, SyncPolicy};

#[test]
fn every_party_told_of_a_failed_sync_finds_the_directory_poisoned() {
    for seed in 0..40u64 {
        let (disk, fs) = sim(seed);
        let dd = open_dd(&fs, Path::new(DIR));
        let log = Arc::new(
            DurableLog::open(Arc::clone(&dd), small_options(), SyncPolicy::GroupCommit).unwrap(),
        );
        log.append_at(Offset(0), Epoch(1), &[payload(0, 0, 64)])
            .unwrap();
        log.wait_durable(Offset(1)).unwrap();
        disk.inject_fault(FaultOp::Sync, 1, FaultKind::Eio);
        let told = Arc::new(AtomicUsize::new(0));
        let unmarked = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (1..=6u64)
            .map(|o| {
                let (log, dd) = (Arc::clone(&log), Arc::clone(&dd));
                let (told, unmarked) = (Arc::clone(&told), Arc::clone(&unmarked));
                std::thread::spawn(move || {
                    let Ok(info) = log.append_at_queued(Offset(o), Epoch(1), &[payload(o, 0, 64)])
                    else {
                        return;
                    };
                    {
                        let (dd, told, unmarked) =
                            (Arc::clone(&dd), Arc::clone(&told), Arc::clone(&unmarked));
                        log.on_durable(
                            info.next_offset,
                            Box::new(move |r| {
                                if r.is_err() {
                                    told.fetch_add(1, Ordering::SeqCst);
                                    if dd.poisoned().is_none() {
                                        unmarked.fetch_add(1, Ordering::SeqCst);
                                    }
                                }
                            }),
                        );
                    }
                    if log.wait_durable(info.next_offset).is_err() {
                        told.fetch_add(1, Ordering::SeqCst);
                        if dd.poisoned().is_none() {
                            unmarked.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(
            told.load(Ordering::SeqCst) > 0,
            "seed {seed}: the sync failed"
        );
        assert_eq!(
            unmarked.load(Ordering::SeqCst),
            0,
            "seed {seed}: told of the failure before the directory was poisoned"
        );
        assert!(dd.poisoned().is_some());
    }
}
