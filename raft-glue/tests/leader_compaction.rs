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
use quorumlog_raft::kraft::compaction::{LeaderCompaction, LogExtent, RetentionCap};

/// A log `[start, end)` in one segment.
fn extent(start: u64, end: u64) -> LogExtent {
    LogExtent {
        start: Offset(start),
        end: Offset(end),
        segments: vec![(Offset(start), 4096)],
    }
}

#[test]
fn the_slowest_recent_replica_and_the_snapshot_bound_the_log_start() {
    let t0 = Instant::now();
    let mut c = LeaderCompaction::new(Duration::from_secs(10), RetentionCap::default());
    // No snapshot: nothing may go.
    assert_eq!(c.safe_log_start(None, &extent(0, 100), t0), Offset(0));
    c.record_fetch(NodeId(2), Offset(80), t0);
    c.record_fetch(NodeId(3), Offset(40), t0);
    c.record_fetch(NodeId(9), Offset(60), t0); // an observer counts too
    assert_eq!(
        c.safe_log_start(Some(Offset(70)), &extent(0, 100), t0),
        Offset(40)
    );
    // The snapshot is the ceiling.
    c.record_fetch(NodeId(3), Offset(95), t0);
    assert_eq!(
        c.safe_log_start(Some(Offset(70)), &extent(0, 100), t0),
        Offset(60)
    );
    // Never below what is already deleted.
    assert_eq!(
        c.safe_log_start(Some(Offset(70)), &extent(65, 100), t0),
        Offset(65)
    );
}

#[test]
fn a_replica_silent_past_the_window_stops_holding_logs() {
    let t0 = Instant::now();
    let mut c = LeaderCompaction::new(Duration::from_secs(10), RetentionCap::default());
    c.record_fetch(NodeId(2), Offset(10), t0);
    c.record_fetch(NodeId(3), Offset(90), t0 + Duration::from_secs(15));
    let now = t0 + Duration::from_secs(16);
    assert_eq!(
        c.safe_log_start(Some(Offset(80)), &extent(0, 100), now),
        Offset(80)
    );
    let earlier = t0 + Duration::from_secs(5);
    assert_eq!(
        c.safe_log_start(Some(Offset(80)), &extent(0, 100), earlier),
        Offset(10)
    );
}

#[test]
fn the_entry_cap_passes_a_laggard_but_never_the_snapshot() {
    let t0 = Instant::now();
    let mut c = LeaderCompaction::new(
        Duration::from_secs(10),
        RetentionCap {
            max_entries: Some(30),
            ..RetentionCap::default()
        },
    );
    c.record_fetch(NodeId(2), Offset(5), t0);
    // Log end 100, keep 30: the bound moves to 70 (the laggard at 5 will
    // be told to fetch the snapshot).
    assert_eq!(
        c.safe_log_start(Some(Offset(90)), &extent(0, 100), t0),
        Offset(70)
    );
    // ... but not past the snapshot's end.
    assert_eq!(
        c.safe_log_start(Some(Offset(50)), &extent(0, 100), t0),
        Offset(50)
    );
}

/// The byte cap counts whole segments from the newest back (the newest is
/// always kept), then passes a laggard up to the snapshot.
#[test]
fn the_byte_cap_keeps_whole_segments_from_the_newest() {
    let t0 = Instant::now();
    let log = LogExtent {
        start: Offset(0),
        end: Offset(400),
        segments: vec![
            (Offset(0), 1000),
            (Offset(100), 1000),
            (Offset(200), 1000),
            (Offset(300), 500),
        ],
    };
    let with = |max_bytes| {
        let mut c = LeaderCompaction::new(
            Duration::from_secs(10),
            RetentionCap {
                max_bytes: Some(max_bytes),
                ..RetentionCap::default()
            },
        );
        c.record_fetch(NodeId(2), Offset(10), t0);
        c
    };
    let snapshot = Some(Offset(350));
    // 2,500 bytes hold the last three segments: the start moves to 100.
    assert_eq!(with(2500).safe_log_start(snapshot, &log, t0), Offset(100));
    assert_eq!(with(2499).safe_log_start(snapshot, &log, t0), Offset(200));
    // Less than the newest segment: only it is kept.
    assert_eq!(with(10).safe_log_start(snapshot, &log, t0), Offset(300));
    // Never past the snapshot.
    assert_eq!(
        with(10).safe_log_start(Some(Offset(250)), &log, t0),
        Offset(250)
    );
    // Enough for everything: the laggard holds the log.
    assert_eq!(with(1 << 20).safe_log_start(snapshot, &log, t0), Offset(10));
}

/// The age cap uses the leader's own record of when the log grew: entries
/// below an end recorded longer ago than the cap may go.
#[test]
fn the_age_cap_passes_entries_older_than_it() {
    let t0 = Instant::now();
    let mut c = LeaderCompaction::new(
        Duration::from_secs(1000),
        RetentionCap {
            max_age: Some(Duration::from_secs(60)),
            ..RetentionCap::default()
        },
    );
    c.record_fetch(NodeId(2), Offset(0), t0);
    let s = |secs| t0 + Duration::from_secs(secs);
    c.record_append(Offset(10), s(0));
    c.record_append(Offset(20), s(30));
    c.record_append(Offset(30), s(90));
    let log = extent(0, 30);
    let snapshot = Some(Offset(25));
    // At 50 s nothing is 60 s old.
    assert_eq!(c.safe_log_start(snapshot, &log, s(50)), Offset(0));
    // At 61 s the first 10 entries are.
    assert_eq!(c.safe_log_start(snapshot, &log, s(61)), Offset(10));
    // At 100 s the entries below 20 are; below 30 only at 151 s, and the
    // snapshot still bounds it.
    assert_eq!(c.safe_log_start(snapshot, &log, s(100)), Offset(20));
    assert_eq!(c.safe_log_start(snapshot, &log, s(151)), Offset(25));
    // Appends every millisecond are recorded in samples of 1/64 of the
    // cap; the bound is conservative by at most one sample: at 65 s after
    // they started, entries appended in the first 5 s may go, and at least
    // those of the first 5 s minus one sample (937.5 ms) do.
    let base = s(200);
    for i in 0..10_000u64 {
        c.record_append(Offset(30 + i + 1), base + Duration::from_millis(i));
    }
    let log = extent(0, 10_031);
    let bound = c.safe_log_start(Some(Offset(10_031)), &log, base + Duration::from_secs(65));
    assert!(
        (Offset(31 + 5_000 - 938)..=Offset(31 + 5_000)).contains(&bound),
        "{bound}"
    );
}
