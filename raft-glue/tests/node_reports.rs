//! What the engine says about itself, each a regression test of a case
//! found from outside:
//! - a clean close reopens clean whatever the active segment's earlier
//!   life (a recycled file's stale bytes after a clean end are not a torn
//!   tail, and the report says which they are);
//! - the open report reads in one line (`Display`);
//! - `Node::close` with a group handle alive is refused with the groups
//!   named, and writes nothing; once the handles go, it closes cleanly;
//! - `truncate_to` at or past the end changes nothing.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::cast_possible_truncation,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, SharedFs};
use quorumlog_io::SimFs;
use quorumlog_raft::{Error, Identity, Isolation, Node, NodeOpenReport, NodeOptions, Purge};

const DIR: &str = "/node";

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(2))
}

fn options() -> NodeOptions {
    NodeOptions {
        log: quorumlog_log::LogOptions {
            segment_size_bytes: 32 << 10,
            ..quorumlog_testkit::small_log_options()
        },
        checkpoint_every_bytes: 4096,
        background: false,
        ..NodeOptions::default()
    }
}

fn open(fs: &SharedFs) -> (Node, NodeOpenReport) {
    Node::open(fs, Path::new(DIR), &Identity::of(&meta()), &options()).unwrap()
}

/// Round `round`'s record: its own size and byte.
fn pattern(round: u64) -> Vec<u8> {
    vec![round as u8 + 5; 150 + 37 * round as usize]
}

/// Invariant: after a clean close the next open reports clean, with no
/// torn tail, however many times the active segment is a recycled file.
#[test]
fn a_clean_close_reopens_clean_after_segments_are_recycled() {
    let disk = SimFs::new(3);
    let fs: SharedFs = Arc::new(disk.clone());
    Node::format(&fs, Path::new(DIR), meta(), &options()).unwrap();
    let (node, _) = open(&fs);
    node.create_group(1, Offset(1)).unwrap();
    let mut node = Some(node);
    let mut end = 1u64;
    let mut recycled_reopens = 0;
    let mut stale_reported = 0;
    for round in 0..12u64 {
        let n = node.take().unwrap();
        let g = n.group(1).unwrap();
        // Fill a few segments with a byte pattern of this round, then
        // purge all but the last entry: the next segments are recycled
        // files holding an earlier round's bytes.
        // Sizes differ per round, so the old batches' boundaries are not
        // the new ones': the clean end lands inside a stale record.
        for _ in 0..150 {
            g.append(Offset(end), Epoch(1), &[pattern(round)]).unwrap();
            end += 1;
        }
        g.wait_durable(Offset(end)).unwrap();
        g.set_high_watermark(Offset(end)).unwrap();
        g.purge(Purge::To {
            offset: Offset(end - 1),
            epoch: Epoch(1),
        })
        .unwrap();
        n.maintain().unwrap();
        let freed = n.stats().segments_freed;
        drop(g);
        n.close().unwrap();
        let (again, report) = open(&fs);
        if report.log.stale_after_clean_end.is_some() {
            stale_reported += 1;
        }
        assert!(
            report.log.clean && report.log.torn_tail.is_none(),
            "round {round}: a clean close reopened as {report:?}"
        );
        let line = report.to_string();
        assert!(!line.contains('\n') && line.contains("clean"), "{line}");
        if freed > 0 {
            recycled_reopens += 1;
        }
        let g = again.group(1).unwrap();
        let last = g
            .read_entries(
                Offset(end - 1),
                Offset(end),
                u64::MAX,
                Isolation::Uncommitted,
            )
            .unwrap();
        assert_eq!(last[0].bytes, pattern(round));
        drop(g);
        node = Some(again);
    }
    assert!(recycled_reopens > 0, "no segment was ever recycled");
    // The case the fix is for did happen, and the report named it.
    assert!(
        stale_reported > 0,
        "no clean end met a recycled file's bytes"
    );
    node.unwrap().close().unwrap();
}

/// Invariant: a close that cannot complete says so and writes nothing;
/// the directory's lock is held until it does.
#[test]
fn a_close_with_a_group_handle_alive_is_refused_naming_the_groups() {
    let disk = SimFs::new(4);
    let fs: SharedFs = Arc::new(disk.clone());
    Node::format(&fs, Path::new(DIR), meta(), &options()).unwrap();
    let (node, _) = open(&fs);
    node.create_group(7, Offset(1)).unwrap();
    node.create_group(9, Offset(1)).unwrap();
    let g7 = node.group(7).unwrap();
    let g9 = node.group(9).unwrap();
    g7.append(Offset(1), Epoch(1), &[b"x"]).unwrap();
    drop(g9);
    let r = node.close();
    assert!(
        matches!(&r, Err(Error::GroupsHeld { groups }) if groups == &[7]),
        "{r:?}"
    );
    // The node lives on with its handle: the directory stays locked.
    let again = Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options());
    assert!(again.is_err(), "opened while a handle holds the node");
    g7.wait_durable(Offset(2)).unwrap();
    drop(g7);
    // With the last handle gone the directory opens again, nothing lost.
    let (node, _) = open(&fs);
    let g = node.group(7).unwrap();
    let e = g
        .read_entries(Offset(1), Offset(2), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(e[0].bytes, b"x");
    drop(g);
    node.close().unwrap();
    let (_, report) = open(&fs);
    assert!(report.log.clean, "{report:?}");
}

/// `truncate_to` at or past the end is accepted and changes nothing.
#[test]
fn a_truncation_at_or_past_the_end_changes_nothing() {
    let disk = SimFs::new(5);
    let fs: SharedFs = Arc::new(disk.clone());
    Node::format(&fs, Path::new(DIR), meta(), &options()).unwrap();
    let (node, _) = open(&fs);
    node.create_group(1, Offset(1)).unwrap();
    let g = node.group(1).unwrap();
    g.append(Offset(1), Epoch(1), &[b"a", b"b"]).unwrap();
    g.wait_durable(Offset(3)).unwrap();
    for x in [3, 4, u64::MAX] {
        g.truncate_to(Offset(x)).unwrap();
        assert_eq!(g.extent().queued_end, Offset(3), "truncate_to({x})");
    }
    drop(g);
    node.close().unwrap();
}

/// Invariant: each group's entries are checked against the shared log at
/// open: a log cut past a group's entries is refused there, naming the
/// group (not found later by a read), and the refused open changes nothing.
#[test]
fn an_open_refuses_a_group_whose_entries_the_shared_log_lost() {
    use quorumlog_checkpoint::{DataDir, OpenOptions};
    use quorumlog_log::{DurableLog, SyncPolicy};
    let disk = SimFs::new(6);
    let fs: SharedFs = Arc::new(disk.clone());
    Node::format(&fs, Path::new(DIR), meta(), &options()).unwrap();
    let (node, _) = open(&fs);
    node.create_group(1, Offset(1)).unwrap();
    let g = node.group(1).unwrap();
    for i in 1..31u64 {
        g.append(Offset(i), Epoch(1), &[format!("entry {i}")])
            .unwrap();
    }
    g.wait_durable(Offset(31)).unwrap();
    drop(g);
    node.close().unwrap();
    // Cut the shared log below its end (the checkpoint's position), past
    // the group's first entries, through the log crate.
    let dd = Arc::new(DataDir::open(fs.clone(), Path::new(DIR), &OpenOptions::default()).unwrap());
    let log = DurableLog::open(Arc::clone(&dd), options().log, SyncPolicy::Never).unwrap();
    let end = log.log_end_offset();
    log.truncate_prefix_to(Offset(end.0 - 10)).unwrap();
    log.close().unwrap();
    drop(dd);
    let before = quorumlog_testkit::dir_image(&disk, Path::new(DIR)).unwrap();
    let r = Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options());
    assert!(
        matches!(r, Err(Error::NodeCorrupt { group: Some(1), .. })),
        "{:?}",
        r.map(|(_, report)| report)
    );
    assert_eq!(
        quorumlog_testkit::dir_image(&disk, Path::new(DIR)).unwrap(),
        before,
        "a refused open changed the directory"
    );
}
