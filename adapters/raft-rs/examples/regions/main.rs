//! Three raft-rs nodes in one process (channels as the network), 100
//! regions each on one shared log per node, proposals on every region,
//! node 3 restarted from its directory, then every committed entry
//! checked on every node.
//!
//! `cargo run --release -p quorumlog-raftrs --example regions [REGIONS] [PER_REGION]`
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::print_stdout,
    missing_docs,
    reason = "an example: a panic is a failed check"
)]

#[path = "cluster.rs"]
mod cluster;

use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let regions: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100);
    let per: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let mut c = cluster::Cluster::start(dir.path(), regions);
    let first = cluster::payloads(regions, 0, per);
    assert!(c.write_all(&first, Duration::from_secs(300)));
    println!(
        "{regions} regions x 3 nodes: {} proposals applied everywhere in {:.2?}",
        u64::from(per) * regions,
        t.elapsed()
    );
    let t = Instant::now();
    c.restart(3);
    let second = cluster::payloads(regions, 1, per);
    assert!(c.write_all(&second, Duration::from_secs(300)));
    assert!(c.wait_applied(&first, Duration::from_secs(300)));
    println!(
        "node 3 restarted from disk: it re-applied round 0 from its log and round 1 in {:.2?}",
        t.elapsed()
    );
    let checked = c.check_agreement();
    println!("every committed entry agrees on every node ({checked} entry pairs compared)");
    c.stop();
}
