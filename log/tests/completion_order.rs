//! Completions run in offset order: appends queued from many threads, each
//! followed by its `on_durable`, while rounds run. A completion registered
//! after a round moved the flushed offset past it, but before that round
//! ran its own due completions, once ran at once on the registering thread,
//! ahead of earlier ones (found through a node's per-group completion test
//! in CI). Each thread's completions must arrive in its submission order
//! (a completion registered late may run after later offsets' completions:
//! the order promised is each submitter's).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use quorumlog_checkpoint::{format, ClusterId, DataDir, Epoch, NodeId, OpenOptions, SharedFs};
use quorumlog_io::SimFs;
use quorumlog_log::{DurableLog, LogOptions, SyncPolicy, TailWrites};

#[test]
fn completions_from_many_threads_run_in_offset_order() {
    // Both tail-write modes, under the group commit the flusher helps
    // and the one only waiters lead (`CallerLed`: completions fire on the
    // waiters' rounds).
    let cases = (0..10).flat_map(|s| {
        [TailWrites::Direct, TailWrites::DirectPipelined]
            .into_iter()
            .flat_map(move |t| {
                [SyncPolicy::GroupCommit, SyncPolicy::CallerLed]
                    .into_iter()
                    .map(move |p| (s, t, p))
            })
    });
    for (seed, tail_writes, policy) in cases {
        let options = LogOptions {
            tail_writes,
            ..LogOptions::default()
        };
        let fs: SharedFs = Arc::new(SimFs::new(seed));
        format(&fs, Path::new("/d"), ClusterId(1), NodeId(1)).unwrap();
        let dd = Arc::new(DataDir::open(fs, Path::new("/d"), &OpenOptions::default()).unwrap());
        let log = Arc::new(DurableLog::open(dd, options, policy).unwrap());
        let order: Arc<Mutex<Vec<(usize, u64)>>> = Arc::default();
        std::thread::scope(|s| {
            for t in 0..4usize {
                let (log, order) = (Arc::clone(&log), Arc::clone(&order));
                s.spawn(move || {
                    for i in 0..300u64 {
                        let info = log.append_as_leader(Epoch(1), &[b"x"]).unwrap();
                        let order = Arc::clone(&order);
                        let end = info.next_offset.0;
                        log.on_durable(
                            info.next_offset,
                            Box::new(move |r| {
                                r.unwrap();
                                order.lock().unwrap().push((t, end));
                            }),
                        );
                        if i % 7 == 0 {
                            log.wait_durable(info.next_offset).unwrap();
                        }
                    }
                });
            }
        });
        log.flush().unwrap();
        // Every completion is due now; the thread running them (the
        // flusher, maybe) may still be at it.
        let t0 = std::time::Instant::now();
        while order.lock().unwrap().len() < 1200 && t0.elapsed().as_secs() < 30 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let order = order.lock().unwrap().clone();
        assert_eq!(order.len(), 1200, "seed {seed} {policy:?}");
        for t in 0..4 {
            let mine: Vec<u64> = order
                .iter()
                .filter(|(u, _)| *u == t)
                .map(|(_, o)| *o)
                .collect();
            for w in mine.windows(2) {
                assert!(
                    w[0] < w[1],
                    "seed {seed} {policy:?}: thread {t}'s completion of {} ran before its completion of {}",
                    w[1],
                    w[0]
                );
            }
        }
    }
}
