//! A read of one group never reads another group's bytes (issue 22): with
//! the node's default index (an entry for every batch) the shared log goes
//! from a group's run straight to its batch. Every byte the file system
//! hands out during one group's reads is recorded, on the active segment
//! and after a reopen from disk; another group's payload never appears in
//! it. The same reads with a sparse index (one entry per 4 KiB) do read
//! the other group's bytes, which shows the recorder would see them.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, SharedFs};
use quorumlog_io::SimFs;
use quorumlog_raft::{Group, Identity, Isolation, Node, NodeOptions};
use quorumlog_testkit::hooked::{HookedFs, Hooks};

/// The other group's payload byte.
const THEIRS: u8 = 0xBB;

/// Records what reads return while armed.
#[derive(Debug, Default)]
struct Recorder {
    armed: AtomicBool,
    seen: Mutex<Vec<Vec<u8>>>,
}

impl Hooks for Recorder {
    fn after_read(&self, bytes: &[u8]) {
        if self.armed.load(Ordering::SeqCst) {
            self.seen.lock().unwrap().push(bytes.to_vec());
        }
    }
}

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(2))
}

/// Reads all of group 1 while armed; returns whether any byte handed out
/// was a run of the other group's payload.
fn reads_see_the_other_group(mine: &Group, rec: &Recorder, end: u64) -> bool {
    rec.seen.lock().unwrap().clear();
    rec.armed.store(true, Ordering::SeqCst);
    // One entry at a time (each read finds its batch anew) and all at once.
    let mut got = Vec::new();
    for o in 1..end {
        got.extend(
            mine.read_entries(Offset(o), Offset(o + 1), 1, Isolation::Uncommitted)
                .unwrap(),
        );
    }
    let all = mine
        .read_entries(Offset(1), Offset(end), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    rec.armed.store(false, Ordering::SeqCst);
    assert_eq!(got, all);
    assert_eq!(all.len(), usize::try_from(end - 1).unwrap());
    for e in &all {
        assert_eq!(e.bytes, mine_record(e.offset.0), "offset {:?}", e.offset);
    }
    let seen = rec.seen.lock().unwrap();
    seen.iter()
        .any(|b| b.windows(32).any(|w| w.iter().all(|&x| x == THEIRS)))
}

fn mine_record(o: u64) -> Vec<u8> {
    let mut r = vec![0xAA; 200];
    r[..8].copy_from_slice(&o.to_le_bytes());
    r
}

/// Two groups interleaved in the shared log (group 2's batches between
/// every two of group 1's, some in the same round), then group 1 read on
/// the active segment and after a reopen. Returns (seen before, seen
/// after the reopen).
fn run(index_interval_bytes: u64) -> (bool, bool) {
    let rec = Arc::new(Recorder::default());
    let fs: SharedFs = Arc::new(HookedFs::new(SimFs::new(7), Arc::clone(&rec)));
    let mut options = NodeOptions {
        background: false,
        ..NodeOptions::default()
    };
    options.log.index_interval_bytes = index_interval_bytes;
    let dir = Path::new("/n");
    Node::format(&fs, dir, meta(), &options).unwrap();
    let (node, _) = Node::open(&fs, dir, &Identity::of(&meta()), &options).unwrap();
    node.create_group(1, Offset(1)).unwrap();
    node.create_group(2, Offset(1)).unwrap();
    let (mine, theirs) = (node.group(1).unwrap(), node.group(2).unwrap());
    let their_records = vec![vec![THEIRS; 300]; 3];
    let end = 200u64;
    for o in 1..end {
        mine.append(Offset(o), Epoch(1), &[mine_record(o)]).unwrap();
        theirs
            .append(Offset(1 + 3 * (o - 1)), Epoch(1), &their_records)
            .unwrap();
        if o % 3 == 0 {
            theirs.wait_durable(theirs.extent().queued_end).unwrap();
        }
    }
    mine.wait_durable(mine.extent().queued_end).unwrap();
    theirs.wait_durable(theirs.extent().queued_end).unwrap();
    let before = reads_see_the_other_group(&mine, &rec, end);
    drop((mine, theirs));
    node.close().unwrap();
    let (node, _) = Node::open(&fs, dir, &Identity::of(&meta()), &options).unwrap();
    let mine = node.group(1).unwrap();
    let after = reads_see_the_other_group(&mine, &rec, end);
    drop(mine);
    node.close().unwrap();
    (before, after)
}

#[test]
fn a_read_of_one_group_never_reads_another_groups_bytes() {
    assert_eq!(
        NodeOptions::default().log.index_interval_bytes,
        1,
        "the node indexes every batch by default"
    );
    assert_eq!(run(1), (false, false));
}

#[test]
fn with_a_sparse_index_the_recorder_sees_the_other_group() {
    let (before, after) = run(4 << 10);
    assert!(before || after, "the recorder would miss a walk");
}
