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
    clippy::too_many_lines,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use quorumlog_testkit::WingTest;
use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, SharedFs};
use quorumlog_io::SimFs;
use quorumlog_log::Compression;
use quorumlog_raft::{kraft::KraftReplica, Identity, Isolation, Node, NodeOptions};

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

/// The `KRaft` wing's reads (what a follower's fetch is answered with)
/// held to the read model: random leader appends of every size (zstd on
/// half the seeds), voter-set control records, commits; after each step
/// random reads in every budget shape and both isolations. The model's
/// user entries are what was appended; its control entries are taken from
/// a whole read of the log (their bytes are the wing's), flagged.
#[test]
fn kraft_reads_match_the_read_model() {
    use quorumlog_checkpoint::Voter;
    use quorumlog_raft::kraft::voters::{VoterEntry, VoterSet};
    use quorumlog_testkit::read_model::{check_read, entry_bytes, random_read, ModelLog};
    let mut checked = 0;
    for seed in 1..=16u64 {
        let zstd = seed % 2 == 1;
        let fs: SharedFs = Arc::new(SimFs::new(seed));
        Node::format(&fs, Path::new(DIR), meta(), &options(zstd)).unwrap();
        let (s, _) =
            KraftReplica::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options(zstd))
                .unwrap();
        let epoch = {
            let mut e = s.election();
            let epoch = e.become_candidate().unwrap();
            e.become_leader().unwrap();
            epoch
        };
        let mut rng = quorumlog_io::SimRng::new(seed);
        let mut user: Vec<Vec<u8>> = Vec::new();
        for step in 0..60 {
            match rng.below(6) {
                0..=3 => {
                    let n = 1 + rng.index(6);
                    let records: Vec<Vec<u8>> = (0..n)
                        .map(|i| {
                            let len = if rng.below(4) == 0 {
                                3 + rng.index(5000)
                            } else {
                                3 + rng.index(80)
                            };
                            entry_bytes(&mut rng, 1, (user.len() + i) as u64, len)
                        })
                        .collect();
                    s.append_durable(epoch, &records).unwrap();
                    user.extend(records);
                }
                4 => {
                    let end = s.wait_durable(s.extent().queued_end).unwrap();
                    let x = s.extent();
                    let at = x.high_watermark.map_or(x.start.0, |h| h.0);
                    s.set_high_watermark(Offset(at + rng.below(end.0 - at + 1)))
                        .unwrap();
                }
                _ => {
                    // A voter set (committed changes first).
                    let end = s.wait_durable(s.extent().queued_end).unwrap();
                    s.set_high_watermark(end).unwrap();
                    let set = VoterSet::new(vec![VoterEntry {
                        voter: Voter {
                            node_id: NodeId(1),
                            directory_id: DirectoryId(2 + u128::from(rng.below(3))),
                        },
                        endpoint: None,
                    }])
                    .unwrap();
                    s.append_voter_set(epoch, set).unwrap();
                    s.wait_durable(s.extent().queued_end).unwrap();
                }
            }
            let x = s.extent();
            let all = s
                .read_entries(x.start, x.end, u64::MAX, Isolation::Uncommitted)
                .unwrap();
            let users: Vec<&Vec<u8>> = all
                .iter()
                .filter(|e| !e.control)
                .map(|e| &e.bytes)
                .collect();
            assert_eq!(
                users,
                user.iter().collect::<Vec<_>>(),
                "seed {seed} step {step}"
            );
            let entries: Vec<(u64, Vec<u8>)> =
                all.iter().map(|e| (e.epoch.0, e.bytes.clone())).collect();
            let control: Vec<bool> = all.iter().map(|e| e.control).collect();
            let log = ModelLog {
                start: x.start.0,
                entries: &entries,
                readable_end: x.end.0,
                commit: x.high_watermark.map(|h| h.0),
            };
            for _ in 0..8 {
                let q = random_read(&mut rng, &log, |b| b.len() as u64);
                let isolation = if q.committed {
                    Isolation::Committed
                } else {
                    Isolation::Uncommitted
                };
                let got = match s.read_entries(Offset(q.from), Offset(q.to), q.max_bytes, isolation)
                {
                    Ok(es) => {
                        for e in &es {
                            let k = usize::try_from(e.offset.0 - x.start.0).unwrap();
                            assert_eq!(e.control, control[k], "seed {seed}: flag of {}", e.offset);
                        }
                        Some(
                            es.into_iter()
                                .map(|e| (e.offset.0, e.epoch.0, e.bytes))
                                .collect(),
                        )
                    }
                    Err(quorumlog_raft::Error::OffsetOutOfRange { .. }) => None,
                    Err(e) => panic!("seed {seed} step {step}: {q:?}: {e}"),
                };
                check_read(
                    &log,
                    &q,
                    got,
                    |b| b.len() as u64,
                    &format!("seed {seed} step {step}"),
                );
                checked += 1;
            }
        }
        s.close().unwrap();
    }
    eprintln!("KRaft reads checked against the model: {checked}");
}
