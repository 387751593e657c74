//! The memory a node's groups take, held to the bound docs/design.md §9
//! states: an idle group (created, never written) takes at most
//! `IDLE_GROUP_BYTES`; a group's index takes `RUN_BYTES` (32) per batch
//! of its live log, so 1 GiB of log in batches of `b` bytes takes about
//! `32 / b` GiB: 1 MiB per GiB at 32 KiB batches, 8 MiB per GiB at
//! 4 KiB batches (the one-group store's sparse index: 2 MiB per GiB, plus
//! its epoch map). Purged and truncated runs are freed.
#![allow(clippy::unwrap_used, missing_docs, reason = "test code")]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, SharedFs};
use quorumlog_io::SimFs;
use quorumlog_raft::Purge;
use quorumlog_raft::{inspect::RUN_BYTES, Identity, Node, NodeOptions};

/// The bound for a group that holds nothing.
const IDLE_GROUP_BYTES: usize = 256;

fn node(fs: &SharedFs) -> Node {
    let meta = Meta::new(ClusterId(1), NodeId(1), DirectoryId(2));
    let options = NodeOptions {
        background: false,
        ..NodeOptions::default()
    };
    Node::format(fs, Path::new("/n"), meta, &options).unwrap();
    Node::open(fs, Path::new("/n"), &Identity::of(&meta), &options)
        .unwrap()
        .0
}

#[test]
fn an_idle_group_and_a_batch_of_log_cost_what_the_design_states() {
    assert_eq!(RUN_BYTES, 32, "one run per batch");
    let fs: SharedFs = Arc::new(SimFs::new(1));
    let n = node(&fs);
    for id in 0..1_000 {
        n.create_group(id, Offset(1)).unwrap();
    }
    let idle = n.stats().index_memory_bytes;
    eprintln!("idle: {} bytes per group", idle / 1_000);
    assert!(
        idle <= 1_000 * IDLE_GROUP_BYTES,
        "1,000 idle groups take {idle} bytes"
    );

    // 4,000 batches of 4 KiB (16 MiB of log) in 10 groups.
    let records: Vec<Vec<u8>> = (0..4).map(|i| vec![i; 1000]).collect();
    let groups: Vec<_> = (0..10).map(|id| n.group(id).unwrap()).collect();
    for i in 0..400u64 {
        for g in &groups {
            g.append(Offset(1 + 4 * i), Epoch(1), &records).unwrap();
        }
    }
    for g in &groups {
        g.wait_durable(g.extent().queued_end).unwrap();
        // What is known durable is popped from the pending queue.
        assert_eq!(g.extent().flushed, g.extent().queued_end);
    }
    let live = n.stats().index_memory_bytes - idle;
    eprintln!("live: {live} bytes for 4,000 batches");
    let batches = 4_000;
    // The shared log's index: an entry per batch (8 bytes; its vectors'
    // growth slack at most 2x), for the creates too.
    let log_index = n.stats().log_index_memory_bytes;
    eprintln!("log index: {log_index} bytes");
    assert!(
        log_index >= batches * 8 && log_index <= (batches + 1_000) * 2 * 8,
        "the log's index takes {log_index} bytes for {batches} batches"
    );
    // Each run once, plus the growth slack of its deque (at most 2x) and
    // the pending queue's capacity (16 bytes per batch, at most 2x).
    assert!(
        live <= batches * (2 * RUN_BYTES + 2 * 16),
        "{batches} batches take {live} bytes of index"
    );
    // 16 MiB of log: per GiB, 64 times as much (both indexes).
    let per_gib = (live + log_index) * 64;
    assert!(
        per_gib <= 24 << 20,
        "{per_gib} bytes per GiB at 4 KiB batches"
    );

    // Purged runs are freed (the deque keeps its capacity: shrink happens
    // at the next checkpoint load; what matters is that runs go).
    for g in &groups {
        let end = g.extent().queued_end;
        g.purge(Purge::To {
            offset: Offset(end.0 - 4),
            epoch: Epoch(1),
        })
        .unwrap();
    }
    drop(groups);
    n.close().unwrap();
    let meta = Meta::new(ClusterId(1), NodeId(1), DirectoryId(2));
    let options = NodeOptions {
        background: false,
        ..NodeOptions::default()
    };
    let (n, _) = Node::open(&fs, Path::new("/n"), &Identity::of(&meta), &options).unwrap();
    let after = n.stats().index_memory_bytes;
    assert!(
        after <= 1_000 * IDLE_GROUP_BYTES + 10 * (RUN_BYTES + 64),
        "after purging to one batch per group: {after} bytes"
    );
}

/// Regression: a group's queue of appends not yet known durable was
/// emptied only by `Group::flushed_offset`, which a Raft library's
/// storage never needs to call: a caller that appends and then waits
/// (`wait_durable`, or a completion through `on_durable`) grew the queue
/// by 16 bytes per append without bound, and every wait scanned it from
/// the front under the node's lock (64 writers on one group ran at 0.28x a
/// one-group store). Invariant: the queue holds at most what is not yet durable:
/// waits and completions pop what the log made durable.
#[test]
fn a_caller_that_only_waits_keeps_the_pending_queue_to_one_round() {
    let fs: SharedFs = Arc::new(SimFs::new(2));
    let n = node(&fs);
    n.create_group(1, Offset(1)).unwrap();
    let idle = n.stats().index_memory_bytes;
    let g = n.group(1).unwrap();
    for i in 1..=10_000u64 {
        g.append(Offset(i), Epoch(1), &[b"entry"]).unwrap();
        if i % 2 == 0 {
            g.wait_durable(Offset(i + 1)).unwrap();
        } else {
            let (tx, rx) = std::sync::mpsc::channel();
            g.on_durable(
                Offset(i + 1),
                Box::new(move |r| {
                    let _ = tx.send(r.is_ok());
                }),
            );
            assert!(rx.recv().unwrap());
        }
        // The log is purged behind the writer, as a Raft log is: the runs
        // stay few, so what grows is the pending queue alone.
        if i % 100 == 0 {
            g.purge(Purge::To {
                offset: Offset(i - 50),
                epoch: Epoch(1),
            })
            .unwrap();
        }
    }
    let used = n.stats().index_memory_bytes - idle;
    // At most ~150 live runs (2x growth slack) and a short queue: far below
    // the 160,000 bytes 10,000 queued appends take.
    assert!(
        used <= 32 << 10,
        "one group after 10,000 waited appends takes {used} bytes of index"
    );
    drop(g);
    n.close().unwrap();
}
