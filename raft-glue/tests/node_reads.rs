//! The read path's rules, each a regression test of a case found from
//! outside (the read model in `quorumlog_testkit::read_model` draws them
//! at random; these pin the cases by name):
//! - a budgeted read stops at the first entry that does not fit, and never
//!   returns a later, smaller one after a hole (on zstd batches the runs
//!   are planned by their compressed size);
//! - a committed read that starts at or above the commit point is empty
//!   (it overflowed), on a group and through the `KRaft` wing;
//! - a range whose end is at or below its start is empty.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, SharedFs};
use quorumlog_io::SimFs;
use quorumlog_log::Compression;
use quorumlog_raft::{Identity, Isolation, KraftReplica, Node, NodeOptions};

const DIR: &str = "/node";

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(2))
}

fn options(zstd: bool) -> NodeOptions {
    let mut o = NodeOptions {
        background: false,
        ..NodeOptions::default()
    };
    if zstd {
        o.log.compression = Compression::Zstd { level: 1 };
        o.log.compression_threshold_bytes = 64;
    }
    o
}

fn node(zstd: bool) -> Node {
    let fs: SharedFs = Arc::new(SimFs::new(1));
    Node::format(&fs, Path::new(DIR), meta(), &options(zstd)).unwrap();
    Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options(zstd))
        .unwrap()
        .0
}

fn offsets(e: &[quorumlog_raft::Entry]) -> Vec<u64> {
    e.iter().map(|e| e.offset.0).collect()
}

/// Invariant: a read is contiguous from `from`; the budget ends it at the
/// first entry that does not fit.
#[test]
fn a_budgeted_read_stops_at_the_first_entry_that_does_not_fit() {
    for zstd in [true, false] {
        let node = node(zstd);
        node.create_group(1, Offset(0)).unwrap();
        let g = node.group(1).unwrap();
        // Compressible records: 100, 100, 6,000 and 100 bytes in one
        // batch, then one of 100 in another.
        let rec = |n: usize, b: u8| vec![b; n];
        g.append(
            Offset(0),
            Epoch(1),
            &[rec(100, 1), rec(100, 2), rec(6_000, 3), rec(100, 4)],
        )
        .unwrap();
        g.append(Offset(4), Epoch(1), &[rec(100, 5)]).unwrap();
        g.wait_durable(Offset(5)).unwrap();
        let read = |from: u64, max: u64| {
            offsets(
                &g.read_entries(Offset(from), Offset(5), max, Isolation::Uncommitted)
                    .unwrap(),
            )
        };
        for max in [200, 1_000, 4_096, 6_199] {
            assert_eq!(read(0, max), [0, 1], "zstd {zstd} budget {max}");
        }
        assert_eq!(read(0, 6_200), [0, 1, 2], "zstd {zstd}");
        assert_eq!(read(0, 6_300), [0, 1, 2, 3], "zstd {zstd}");
        assert_eq!(read(0, u64::MAX), [0, 1, 2, 3, 4], "zstd {zstd}");
        // The first entry comes whatever its size.
        assert_eq!(read(2, 0), [2], "zstd {zstd}");
        assert_eq!(read(2, 6_099), [2], "zstd {zstd}");
        assert_eq!(read(1, 100), [1], "zstd {zstd}");
        drop(g);
        node.close().unwrap();
    }
}

/// Invariant: a committed read never passes the commit point, and one
/// that starts at or above it is empty (it overflowed).
#[test]
fn a_committed_read_above_the_commit_point_is_empty() {
    let node = node(false);
    node.create_group(1, Offset(1)).unwrap();
    let g = node.group(1).unwrap();
    g.append(Offset(1), Epoch(1), &[b"a", b"b", b"c", b"d", b"e"])
        .unwrap();
    g.wait_durable(Offset(6)).unwrap();
    g.set_high_watermark(Offset(3)).unwrap();
    for from in [3, 4, 5, 6] {
        let got = g
            .read_entries(
                Offset(from),
                Offset(u64::MAX),
                u64::MAX,
                Isolation::Committed,
            )
            .unwrap();
        assert!(got.is_empty(), "from {from}: {got:?}");
    }
    let got = g
        .read_entries(Offset(1), Offset(u64::MAX), u64::MAX, Isolation::Committed)
        .unwrap();
    assert_eq!(offsets(&got), [1, 2]);
    // A range whose end is at or below its start is empty.
    for (from, to) in [(4, 4), (4, 2), (2, 1)] {
        let got = g
            .read_entries(Offset(from), Offset(to), u64::MAX, Isolation::Uncommitted)
            .unwrap();
        assert!(got.is_empty(), "[{from}, {to}): {got:?}");
    }
    drop(g);
    node.close().unwrap();
}

/// The same through the `KRaft` wing's read (what a follower's fetch is
/// answered with).
#[test]
fn a_kraft_committed_read_above_the_commit_point_is_empty() {
    let fs: SharedFs = Arc::new(SimFs::new(2));
    Node::format(&fs, Path::new(DIR), meta(), &options(false)).unwrap();
    let (s, _) =
        KraftReplica::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options(false)).unwrap();
    let epoch = {
        let mut e = s.election();
        let epoch = e.become_candidate().unwrap();
        e.become_leader().unwrap();
        epoch
    };
    // Five entries in one batch: the run holding the read's start begins
    // below the commit point.
    s.append_as_leader(epoch, &[b"a", b"b", b"c", b"d", b"e"])
        .unwrap();
    let end = s.wait_durable(s.extent().queued_end).unwrap();
    let commit = Offset(end.0 - 2);
    s.set_high_watermark(commit).unwrap();
    let got = s
        .read_entries(
            Offset(commit.0 + 1),
            Offset(u64::MAX),
            u64::MAX,
            Isolation::Committed,
        )
        .unwrap();
    assert!(got.is_empty(), "{got:?}");
    let got = s
        .read_entries(Offset(0), Offset(u64::MAX), u64::MAX, Isolation::Committed)
        .unwrap();
    assert_eq!(got.last().map(|e| e.offset.0 + 1), Some(commit.0));
}
