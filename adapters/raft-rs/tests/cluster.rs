//! Three raft-rs nodes in one process (channels as the network), each
//! with `QUORUMLOG_REGIONS` regions (default 20) on its shared log,
//! proposals on every region, node 3 restarted from its directory
//! halfway. Invariants: every proposal is applied on every node; every
//! region's applied entries agree index by index on all three nodes;
//! the restarted node re-applies from its log everything committed.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

#[path = "../examples/regions/cluster.rs"]
mod cluster;

use std::time::Duration;

use cluster::Cluster;

#[test]
fn many_regions_agree_on_every_node_across_a_restart() {
    let regions = std::env::var("QUORUMLOG_REGIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path(), regions);
    let first = cluster::payloads(regions, 0, 5);
    assert!(
        c.write_all(&first, Duration::from_secs(120)),
        "round 0 incomplete"
    );
    c.restart(3);
    let second = cluster::payloads(regions, 1, 5);
    assert!(
        c.write_all(&second, Duration::from_secs(120)),
        "round 1 incomplete"
    );
    // The restarted node holds round 0 again, from its own log.
    assert!(
        c.wait_applied(&first, Duration::from_secs(120)),
        "round 0 lost on node 3"
    );
    let checked = c.check_agreement();
    eprintln!("{regions} regions, {checked} entry pairs agree");
    assert!(checked as u64 >= regions * 10 * 3);
    c.stop();
}
