//! Leader-coordinated compaction: the advertised log start is the lowest of
//! the leader's latest snapshot end and the fetch offsets seen within the
//! window (voters and observers alike); a replica silent longer than the
//! window no longer holds it back; the retention cap moves it past a
//! laggard (which then needs the snapshot); it never passes the snapshot;
//! and a replica deletes only up to its own latest snapshot whatever is
//! advertised.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::time::{Duration, Instant};

use quorumlog_checkpoint::{NodeId, Offset};
use quorumlog_raft::compaction::LeaderCompaction;

#[test]
fn the_slowest_recent_replica_and_the_snapshot_bound_the_log_start() {
    let t0 = Instant::now();
    let mut c = LeaderCompaction::new(Duration::from_secs(10), None);
    // No snapshot: nothing may go.
    assert_eq!(
        c.safe_log_start(None, Offset(0), Offset(100), t0),
        Offset(0)
    );
    c.record_fetch(NodeId(2), Offset(80), t0);
    c.record_fetch(NodeId(3), Offset(40), t0);
    c.record_fetch(NodeId(9), Offset(60), t0); // an observer counts too
    assert_eq!(
        c.safe_log_start(Some(Offset(70)), Offset(0), Offset(100), t0),
        Offset(40)
    );
    // The snapshot is the ceiling.
    c.record_fetch(NodeId(3), Offset(95), t0);
    assert_eq!(
        c.safe_log_start(Some(Offset(70)), Offset(0), Offset(100), t0),
        Offset(60)
    );
    // Never below what is already deleted.
    assert_eq!(
        c.safe_log_start(Some(Offset(70)), Offset(65), Offset(100), t0),
        Offset(65)
    );
}

#[test]
fn a_replica_silent_past_the_window_stops_holding_logs() {
    let t0 = Instant::now();
    let mut c = LeaderCompaction::new(Duration::from_secs(10), None);
    c.record_fetch(NodeId(2), Offset(10), t0);
    c.record_fetch(NodeId(3), Offset(90), t0 + Duration::from_secs(15));
    let now = t0 + Duration::from_secs(16);
    assert_eq!(
        c.safe_log_start(Some(Offset(80)), Offset(0), Offset(100), now),
        Offset(80)
    );
    let earlier = t0 + Duration::from_secs(5);
    assert_eq!(
        c.safe_log_start(Some(Offset(80)), Offset(0), Offset(100), earlier),
        Offset(10)
    );
}

#[test]
fn the_retention_cap_passes_a_laggard_but_never_the_snapshot() {
    let t0 = Instant::now();
    let mut c = LeaderCompaction::new(Duration::from_secs(10), Some(30));
    c.record_fetch(NodeId(2), Offset(5), t0);
    // Log end 100, keep 30: the bound moves to 70 (the laggard at 5 will
    // be told to fetch the snapshot).
    assert_eq!(
        c.safe_log_start(Some(Offset(90)), Offset(0), Offset(100), t0),
        Offset(70)
    );
    // ... but not past the snapshot's end.
    assert_eq!(
        c.safe_log_start(Some(Offset(50)), Offset(0), Offset(100), t0),
        Offset(50)
    );
}
