//! Follower appends: batches exactly as the leader's read returned them are
//! verified and written without re-encoding (the follower's records and
//! epochs equal the leader's); a damaged, misplaced or epoch-regressing
//! batch is refused with nothing written; `append_at` takes the offset the
//! Raft library assigned, through the leader queue, and refuses any other.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use common::{lead, store};
use quorumlog_checkpoint::{Epoch, NodeId, Offset};
use quorumlog_log::Error as LogError;
use quorumlog_raft::{Error, Isolation, KraftReplica};

/// All raw batches of `leader` from `from`.
fn raw_from(leader: &KraftReplica, from: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = Offset(from);
    while at < leader.log().log_end_offset() {
        let batches = leader.read(at, 1 << 20).unwrap();
        for b in batches.iter() {
            out.push(b.raw().to_vec());
        }
        at = batches.next_offset().unwrap();
    }
    out
}

#[test]
fn raw_batches_replicate_byte_for_byte() {
    let leader = store(1, 1);
    let epoch = lead(&leader);
    for i in 0..12u64 {
        let recs: Vec<Vec<u8>> = (0..=i % 3)
            .map(|j| vec![u8::try_from(i * 3 + j).unwrap(); 300])
            .collect();
        leader.append_durable(epoch, &recs).unwrap();
    }
    let follower = store(2, 2);
    follower
        .election()
        .become_follower(epoch, NodeId(1))
        .unwrap();
    let raw = raw_from(&leader, 0);
    let refs: Vec<&[u8]> = raw.iter().map(Vec::as_slice).collect();
    let info = follower.append_as_follower(&refs).unwrap();
    assert_eq!(info.next_offset, leader.log().log_end_offset());
    let end = leader.log().log_end_offset();
    let a = leader
        .read_entries(Offset(0), end, u64::MAX, Isolation::Uncommitted)
        .unwrap();
    let b = follower
        .read_entries(Offset(0), end, u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(a, b);
    // And the follower's raw batches are the leader's, byte for byte.
    assert_eq!(raw_from(&follower, 0), raw);
}

#[test]
fn a_bad_raw_batch_is_refused_and_nothing_is_written() {
    let leader = store(1, 1);
    let epoch = lead(&leader);
    for i in 0..4u8 {
        leader.append_durable(epoch, &[vec![i; 50]]).unwrap();
    }
    let raw = raw_from(&leader, 0);
    let follower = store(2, 2);
    // One flipped bit in the third batch: refused before anything is queued.
    let mut bad = raw.clone();
    bad[2][45] ^= 1;
    let refs: Vec<&[u8]> = bad.iter().map(Vec::as_slice).collect();
    assert!(matches!(
        follower.append_as_follower(&refs),
        Err(Error::Log(LogError::InvalidRawBatch { index: 2, .. }))
    ));
    assert_eq!(follower.log().log_end_offset(), Offset(0));
    // Out of order, or not at the log end.
    let refs: Vec<&[u8]> = vec![&raw[1], &raw[0]];
    assert!(matches!(
        follower.append_as_follower(&refs),
        Err(Error::Log(LogError::NonContiguous { .. }))
    ));
    let refs: Vec<&[u8]> = vec![&raw[1]];
    assert!(matches!(
        follower.append_as_follower(&refs),
        Err(Error::Log(LogError::NonContiguous { .. }))
    ));
    assert_eq!(follower.log().log_end_offset(), Offset(0));
    let refs: Vec<&[u8]> = raw.iter().map(Vec::as_slice).collect();
    follower.append_as_follower(&refs).unwrap();
    assert_eq!(follower.log().log_end_offset(), Offset(4));
}

#[test]
fn append_at_takes_the_assigned_offset_only() {
    let s = store(1, 3);
    let epoch = lead(&s);
    let info = s
        .append_at(Offset(0), epoch, &[b"a".as_slice(), b"b"])
        .unwrap();
    assert_eq!(info.next_offset, Offset(2));
    assert!(matches!(
        s.append_at(Offset(5), epoch, &[b"c".as_slice()]),
        Err(Error::Log(LogError::NonContiguous {
            expected: Offset(2),
            found: Offset(5)
        }))
    ));
    // Mixed with leader appends, through the same queue.
    s.append_as_leader(epoch, &[b"c".as_slice()]).unwrap();
    s.append_at(Offset(3), epoch, &[b"d".as_slice()]).unwrap();
    let got = s
        .read_entries(Offset(0), Offset(4), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    let bytes: Vec<&[u8]> = got.iter().map(|e| e.bytes.as_slice()).collect();
    assert_eq!(bytes, vec![b"a".as_slice(), b"b", b"c", b"d"]);
    // Not a leader of that epoch: refused.
    assert!(matches!(
        s.append_at(Offset(4), Epoch(epoch.0 + 1), &[b"e".as_slice()]),
        Err(Error::WrongRole { .. })
    ));
}

#[test]
fn control_records_are_flagged_through_reads_and_replication() {
    let leader = store(1, 4);
    let epoch = lead(&leader);
    leader
        .append_control(epoch, &[b"leader is 1".as_slice()])
        .unwrap();
    leader.append_durable(epoch, &[b"user".as_slice()]).unwrap();
    let end = leader.log().log_end_offset();
    let got = leader
        .read_entries(Offset(0), end, u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(
        got.iter().map(|e| e.control).collect::<Vec<_>>(),
        vec![true, false]
    );
    let follower = store(2, 5);
    let raw = raw_from(&leader, 0);
    let refs: Vec<&[u8]> = raw.iter().map(Vec::as_slice).collect();
    follower.append_as_follower(&refs).unwrap();
    let copied = follower
        .read_entries(Offset(0), end, u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(copied, got);
    // Only the leader of the epoch writes control records.
    assert!(matches!(
        follower.append_control(epoch, &[b"x".as_slice()]),
        Err(Error::WrongRole { .. })
    ));
}
