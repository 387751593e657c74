//! The engine's crash model over a node of one group or many
//! (`quorumlog_testkit::engine_model`): 24 pinned seeds and
//! `QUORUMLOG_NODE_SEEDS` (default 4) fresh ones, 400 calls each;
//! `QUORUMLOG_NODE_SEED=S` replays one. And a read spanning any number of
//! batches.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, SharedFs};
use quorumlog_io::SimFs;
use quorumlog_raft::{Identity, Isolation, Node, NodeOptions};
use quorumlog_testkit::engine_model::run_engine_case;

const DIR: &str = "/node";

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(2))
}

fn options() -> NodeOptions {
    NodeOptions {
        log: quorumlog_testkit::small_log_options(),
        background: false,
        ..NodeOptions::default()
    }
}

#[test]
fn random_group_calls_keep_every_groups_rules() {
    let seeds: Vec<u64> = if let Ok(s) = std::env::var("QUORUMLOG_NODE_SEED") {
        vec![s.parse().unwrap()]
    } else {
        let fresh = std::env::var("QUORUMLOG_NODE_SEEDS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(4u64);
        let base = quorumlog_testkit::fresh_seed();
        (1..=24)
            .chain((0..fresh).map(|i| base.wrapping_add(i)))
            .collect()
    };
    for seed in seeds {
        run_engine_case(seed, 400);
    }
    eprintln!(
        "reads checked against the model: {}",
        quorumlog_testkit::read_model::READS_CHECKED.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A read spans any number of batches: the index is walked in parts (a
/// group that never purges holds thousands of runs; the process-kill test
/// found reads of such a group cut at the first part's 1,024 runs), and a
/// byte budget stops it at an entry boundary, at least one entry in.
#[test]
fn a_read_spans_any_number_of_batches_and_stops_at_its_budget() {
    let disk = SimFs::new(5);
    let fs: SharedFs = Arc::new(disk.clone());
    Node::format(&fs, Path::new(DIR), meta(), &options()).unwrap();
    let (node, _) = Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options()).unwrap();
    node.create_group(1, Offset(1)).unwrap();
    let g = node.group(1).unwrap();
    for i in 1..=3_000u64 {
        g.append(Offset(i), Epoch(1), &[format!("entry {i:05}")])
            .unwrap();
    }
    g.wait_durable(Offset(3_001)).unwrap();
    let all = g
        .read_entries(Offset(1), Offset(3_001), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(all.len(), 3_000);
    assert!(all
        .iter()
        .all(|e| e.bytes == format!("entry {:05}", e.offset.0).into_bytes()));
    // Each entry is 11 bytes: a budget of 11 * 2,000 + 5 returns 2,000.
    let some = g
        .read_entries(
            Offset(500),
            Offset(3_001),
            11 * 2_000 + 5,
            Isolation::Uncommitted,
        )
        .unwrap();
    assert_eq!(some.len(), 2_000);
    assert_eq!(some[0].offset, Offset(500));
    let one = g
        .read_entries(Offset(7), Offset(3_001), 1, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(one.len(), 1);
}
