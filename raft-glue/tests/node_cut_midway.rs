//! A power cut in the middle of concurrent appends of many groups, with
//! the background checkpointer running: every entry whose `on_durable`
//! completion fired before the cut survives it.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::too_many_lines,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, SharedFs};
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_raft::{Identity, Isolation, Node, NodeOptions};

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(2))
}

fn run(seed: u64, background: bool) {
    let options = NodeOptions {
        background,
        ..NodeOptions::default()
    };
    let disk = SimFs::new(seed);
    let fs: SharedFs = Arc::new(disk.clone());
    Node::format(&fs, Path::new("/n"), meta(), &options).unwrap();
    let (node, _) = Node::open(&fs, Path::new("/n"), &Identity::of(&meta()), &options).unwrap();
    for g in 0..8 {
        node.create_group(g, Offset(0)).unwrap();
    }
    let node = Arc::new(node);
    let fired: Arc<Mutex<BTreeMap<u64, u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (node, fired, stop) = (Arc::clone(&node), Arc::clone(&fired), Arc::clone(&stop));
            s.spawn(move || {
                let groups: Vec<_> = (0..8)
                    .filter(|g| g % 4 == t)
                    .map(|g| node.group(g).unwrap())
                    .collect();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for g in &groups {
                        if g.append(Offset(i), Epoch(1), &[format!("{} {i}", g.id())])
                            .is_err()
                        {
                            return;
                        }
                        let (fired, id) = (Arc::clone(&fired), g.id());
                        g.on_durable(
                            Offset(i + 1),
                            Box::new(move |r| {
                                if r.is_ok() {
                                    let mut f = fired.lock().unwrap();
                                    let e = f.entry(id).or_default();
                                    *e = (*e).max(i + 1);
                                }
                            }),
                        );
                    }
                    i += 1;
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(50 + seed * 37 % 300));
        disk.crash_after(0);
        stop.store(true, Ordering::Relaxed);
    });
    let fired = fired.lock().unwrap().clone();
    let after = disk.crash_with(CrashPlan::LoseUnsynced);
    let fs: SharedFs = Arc::new(after);
    let (node2, _) = Node::open(&fs, Path::new("/n"), &Identity::of(&meta()), &options).unwrap();
    for (g, end) in &fired {
        let h = node2.group(*g).unwrap();
        assert!(
            h.extent().end.0 >= *end,
            "seed {seed} background {background}: group {g} acknowledged to {end}, holds {}",
            h.extent().end.0
        );
        let got = h
            .read_entries(Offset(0), Offset(*end), u64::MAX, Isolation::Uncommitted)
            .unwrap();
        assert_eq!(got.len() as u64, *end);
    }
}

#[test]
fn every_completed_append_survives_a_cut_midway() {
    for seed in 0..6 {
        run(seed, false);
        run(seed, true);
    }
}
