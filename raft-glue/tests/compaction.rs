//! Invariant 7: no log entry is deleted before a durable snapshot covers it.
//! A group's cleaning (`Group::purge(Purge::Covered)`) is bounded by the
//! latest published snapshot, and a crash at any I/O call
//! between freezing the snapshot and deleting the log prefix loses
//! nothing: every offset is in the log or covered by a listed, verifiable
//! snapshot.
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
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_log::{LogOptions, SegmentPreparation, SyncPolicy};
use quorumlog_raft::{Group, Identity, Isolation, Node, NodeOptions, Purge};
use quorumlog_snapshot::WriterOptions;
use quorumlog_testkit::CRASH_PLANS;

const DIR: &str = "/data";

fn options() -> NodeOptions {
    NodeOptions {
        log: LogOptions {
            segment_size_bytes: 8192,
            max_batch_bytes: 2048,
            segment_preparation: SegmentPreparation::Inline,
            ..LogOptions::default()
        },
        sync: SyncPolicy::GroupCommit,
        background: false,
        ..NodeOptions::default()
    }
}

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(7))
}

fn record(o: u64) -> Vec<u8> {
    format!("record {o:05}").into_bytes()
}

/// The node of `sim` and its one group.
struct Opened {
    g: Group,
    _node: Node,
}

fn open(sim: &SimFs) -> Opened {
    let fs: SharedFs = Arc::new(sim.clone());
    let (node, _) = Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options()).unwrap();
    Opened {
        g: node.group(1).unwrap(),
        _node: node,
    }
}

/// 100 records (several segments), committed and flushed.
fn setup(seed: u64) -> SimFs {
    let sim = SimFs::new(seed);
    let fs: SharedFs = Arc::new(sim.clone());
    Node::format(&fs, Path::new(DIR), meta(), &options()).unwrap();
    let (node, _) = Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options()).unwrap();
    node.create_group(1, Offset(0)).unwrap();
    let g = node.group(1).unwrap();
    for o in 0..100u64 {
        g.append(Offset(o), Epoch(1), &[record(o)]).unwrap();
    }
    g.wait_durable(Offset(100)).unwrap();
    g.set_high_watermark(Offset(100)).unwrap();
    drop(g);
    node.close().unwrap();
    sim
}

/// The state a snapshot at `end` holds: every record below it.
fn state_below(end: u64) -> Vec<u8> {
    (0..end).flat_map(record).collect()
}

fn snapshot(s: &Opened, end: u64) -> quorumlog_raft::Result<()> {
    let mut w =
        s.g.create_snapshot(Offset(end), Epoch(1), b"", WriterOptions::default())?;
    w.write(&state_below(end))?;
    w.freeze().map(|_| ())
}

fn clean(s: &Opened, up_to: u64) -> quorumlog_raft::Result<Offset> {
    s.g.purge(Purge::Covered {
        up_to: Offset(up_to),
    })
}

#[test]
fn cleaning_is_bounded_by_the_latest_snapshot() {
    let sim = setup(1);
    let s = open(&sim);
    assert_eq!(clean(&s, 90).unwrap(), Offset(0), "no snapshot");
    snapshot(&s, 40).unwrap();
    assert_eq!(clean(&s, 90).unwrap(), Offset(40));
    assert_eq!(clean(&s, 20).unwrap(), Offset(40), "never backwards");
    // A snapshot beyond the commit point is refused; one at the log end
    // lets everything go.
    assert!(snapshot(&s, 200).is_err());
    snapshot(&s, 100).unwrap();
    assert_eq!(clean(&s, 500).unwrap(), Offset(100));
}

#[test]
fn a_crash_between_snapshot_and_truncation_loses_nothing() {
    // Count the calls of the whole path.
    let total = {
        let sim = setup(0);
        let s = open(&sim);
        let before = sim.calls();
        snapshot(&s, 60).unwrap();
        clean(&s, 60).unwrap();
        sim.calls() - before
    };
    let mut states = 0;
    for point in 0..=total {
        for plan in CRASH_PLANS.into_iter().chain([CrashPlan::Random]) {
            let sim = setup(point + 1);
            let s = open(&sim);
            sim.crash_after(point);
            let frozen = snapshot(&s, 60).is_ok();
            let cleaned = frozen && clean(&s, 60).is_ok();
            drop(s);
            let disk = sim.crash_with(plan);
            let s = open(&disk);
            let what = format!("crash after {point}/{total} {plan:?}");
            let x = s.g.extent();
            let start = x.start.0;
            assert!(start == 0 || start == 60, "{what}: start {start}");
            if cleaned {
                assert_eq!(start, 60, "{what}: acknowledged cleaning undone");
            }
            if frozen {
                assert!(
                    x.latest_snapshot.is_some(),
                    "{what}: acknowledged snapshot lost"
                );
            }
            // Every offset below 100 is in the log or in a verified snapshot.
            let covered = x.latest_snapshot.map_or(0, |id| {
                let (_, data) = s.g.snapshot(id).unwrap().read().unwrap();
                assert_eq!(data, state_below(id.end_offset.0), "{what}");
                id.end_offset.0
            });
            assert!(
                covered >= start,
                "{what}: offsets {covered}..{start} have no copy"
            );
            assert_eq!(x.end, Offset(100), "{what}");
            let entries =
                s.g.read_entries(Offset(start), Offset(100), u64::MAX, Isolation::Uncommitted)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(entries.len() as u64, 100 - start, "{what}");
            for e in entries {
                assert_eq!(e.bytes, record(e.offset.0), "{what}");
            }
            states += 1;
        }
    }
    eprintln!(
        "snapshot -> purge: {} crash points, {states} crash states",
        total + 1
    );
}
