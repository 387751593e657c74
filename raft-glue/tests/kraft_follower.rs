//! Follower appends through the `KRaft` wing on a group: entries exactly as
//! the leader's read returned them (offsets, epochs, control flags) are
//! re-encoded into the follower's group and read back equal; entries below
//! the follower's end must agree with its epochs there (else
//! `RawOverlapDiverges`, nothing written); a gap, a reordering or an epoch
//! regression is refused with nothing written; `append_at` takes the offset
//! the Raft library assigned and refuses any other; control entries keep
//! their flag through reads, replication and a reopen.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use common::{lead, replica};
use quorumlog_checkpoint::{Epoch, NodeId, Offset};
use quorumlog_log::Error as LogError;
use quorumlog_raft::{kraft::KraftReplica, Entry, Error, Isolation};
use quorumlog_testkit::WingTest;

/// Every entry of `s` from `from` (once its appends are written).
fn entries_from(s: &KraftReplica, from: u64) -> Vec<Entry> {
    let end = s.extent().queued_end;
    s.wait_durable(end).unwrap();
    s.read_entries(Offset(from), end, u64::MAX, Isolation::Uncommitted)
        .unwrap()
}

#[test]
fn the_leaders_entries_replicate_with_their_epochs() {
    let leader = replica(1, 1);
    let epoch = lead(&leader);
    for i in 0..12u64 {
        let recs: Vec<Vec<u8>> = (0..=i % 3)
            .map(|j| vec![u8::try_from(i * 3 + j).unwrap(); 300])
            .collect();
        leader.append_durable(epoch, &recs).unwrap();
    }
    let follower = replica(2, 2);
    follower
        .election()
        .become_follower(epoch, NodeId(1))
        .unwrap();
    let got = entries_from(&leader, 0);
    let info = follower.append_as_follower(&got).unwrap();
    assert_eq!(info.next_offset, leader.extent().queued_end);
    assert_eq!(entries_from(&follower, 0), got);
    // The same entries again (a retried fetch) change nothing.
    follower.append_as_follower(&got[5..9]).unwrap();
    assert_eq!(entries_from(&follower, 0), got);
}

/// Leader epochs [30, 30, 32, 32]; a follower holding [0, 3) in epoch 30
/// is sent the leader's [2, 4): the entry at 2 is 32 on the leader and 30
/// here. Before, the follower kept its own entry 2 and took 3 (ending
/// [30, 30, 30, 32], which a later fetch validation calls valid).
#[test]
fn an_overlap_that_disagrees_with_the_followers_epochs_is_refused() {
    let at = |o: u64, e: u64, b: &[u8]| Entry {
        offset: Offset(o),
        epoch: Epoch(e),
        control: false,
        bytes: b.to_vec(),
    };
    let follower = replica(2, 6);
    follower
        .append_as_follower(&[at(0, 30, b"a"), at(1, 30, b"b"), at(2, 30, b"c")])
        .unwrap();
    let before = entries_from(&follower, 0);
    let leaders = [at(2, 32, b"C"), at(3, 32, b"D")];
    assert!(matches!(
        follower.append_as_follower(&leaders),
        Err(Error::Log(LogError::RawOverlapDiverges {
            offset: Offset(2),
            log: Some(Epoch(30)),
            batch: Epoch(32)
        }))
    ));
    assert_eq!(entries_from(&follower, 0), before, "nothing written");
    // Told to diverge, it truncates to where the logs agree, then appends.
    follower
        .truncate_to_diverging(Offset(2), Epoch(30))
        .unwrap();
    follower.append_as_follower(&leaders).unwrap();
    let epochs: Vec<u64> = entries_from(&follower, 0)
        .iter()
        .map(|e| e.epoch.0)
        .collect();
    assert_eq!(epochs, vec![30, 30, 32, 32]);
}

#[test]
fn a_misplaced_or_regressing_batch_is_refused_and_nothing_is_written() {
    let leader = replica(1, 1);
    let epoch = lead(&leader);
    for i in 0..4u8 {
        leader.append_durable(epoch, &[vec![i; 50]]).unwrap();
    }
    let got = entries_from(&leader, 0);
    let follower = replica(2, 2);
    let reordered = vec![got[1].clone(), got[0].clone()];
    assert!(matches!(
        follower.append_as_follower(&reordered),
        Err(Error::Log(LogError::NonContiguous { .. }))
    ));
    assert!(matches!(
        follower.append_as_follower(&got[1..]),
        Err(Error::Log(LogError::NonContiguous { .. }))
    ));
    let mut regressing = got.clone();
    regressing[3].epoch = Epoch(0);
    assert!(matches!(
        follower.append_as_follower(&regressing),
        Err(Error::Log(LogError::EpochRegression { .. }))
    ));
    assert!(matches!(
        follower.append_as_follower(&[]),
        Err(Error::Log(LogError::EmptyBatch))
    ));
    assert_eq!(follower.extent().queued_end, Offset(0));
    follower.append_as_follower(&got).unwrap();
    assert_eq!(follower.extent().queued_end, Offset(4));
}

#[test]
fn a_leader_append_takes_the_log_end_and_only_in_the_epoch_it_leads() {
    let s = replica(1, 3);
    let epoch = lead(&s);
    let info = s.append_as_leader(epoch, &[b"a".as_slice(), b"b"]).unwrap();
    assert_eq!((info.base_offset, info.next_offset), (Offset(0), Offset(2)));
    s.append_as_leader(epoch, &[b"c".as_slice()]).unwrap();
    let info = s.append_as_leader(epoch, &[b"d".as_slice()]).unwrap();
    assert_eq!(info.base_offset, Offset(3));
    s.wait_durable(Offset(4)).unwrap();
    let got = s
        .read_entries(Offset(0), Offset(4), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    let bytes: Vec<&[u8]> = got.iter().map(|e| e.bytes.as_slice()).collect();
    assert_eq!(bytes, vec![b"a".as_slice(), b"b", b"c", b"d"]);
    // Not a leader of that epoch: refused, nothing appended.
    assert!(matches!(
        s.append_as_leader(Epoch(epoch.0 + 1), &[b"e".as_slice()]),
        Err(Error::WrongRole { .. })
    ));
    assert_eq!(s.extent().queued_end, Offset(4));
}

#[test]
fn control_entries_are_flagged_through_reads_replication_and_a_reopen() {
    let leader = replica(1, 4);
    let epoch = lead(&leader);
    leader
        .append_control(epoch, &[b"leader is 1".as_slice()])
        .unwrap();
    leader.append_durable(epoch, &[b"user".as_slice()]).unwrap();
    let got = entries_from(&leader, 0);
    assert_eq!(
        got.iter().map(|e| e.control).collect::<Vec<_>>(),
        vec![true, false]
    );
    let follower = replica(2, 5);
    follower.append_as_follower(&got).unwrap();
    assert_eq!(entries_from(&follower, 0), got);
    // Only the leader of the epoch writes control entries.
    assert!(matches!(
        follower.append_control(epoch, &[b"x".as_slice()]),
        Err(Error::WrongRole { .. })
    ));
    // The flag is in the node's record and its checkpoint: a reopen after
    // a clean close (checkpoint) and after a power cut (replay) keeps it.
    let disk = quorumlog_io::SimFs::new(8);
    let f = common::replica_on(&disk, 3);
    f.append_as_follower(&got).unwrap();
    f.wait_durable(Offset(2)).unwrap();
    f.close().unwrap();
    let f = common::reopen_replica(&disk, 3);
    assert_eq!(entries_from(&f, 0), got, "after a clean close");
    f.append_as_follower(&[Entry {
        offset: Offset(2),
        epoch,
        control: true,
        bytes: b"marker".to_vec(),
    }])
    .unwrap();
    f.wait_durable(Offset(3)).unwrap();
    drop(f);
    let disk = disk.crash_with(quorumlog_io::CrashPlan::LoseUnsynced);
    let f = common::reopen_replica(&disk, 3);
    let flags: Vec<bool> = entries_from(&f, 0).iter().map(|e| e.control).collect();
    assert_eq!(flags, vec![true, false, true], "after a power cut");
}
