//! The store's rules, each found broken from outside and each failing on
//! the code before its fix. Invariants protected:
//! - a record is reported durable only once it is: a suffix truncation
//!   that removes nothing syncs what it reports (docs/design.md
//!   invariant 1);
//! - the high watermark never moves back, so committed entries can never
//!   be truncated, whichever call sequence reaches them;
//! - a follower installed from the leader's latest snapshot, wherever its
//!   end falls in the leader's batches, catches up through the leader's
//!   `read` and its own `append_as_follower`; the install raises its high
//!   watermark to the snapshot's end;
//! - a foreign directory (another cluster, node or directory id) is
//!   refused before a byte of it changes;
//! - a voter set is bounded by what every file it reaches holds, checked
//!   before anything is written, and the largest accepted one closes,
//!   snapshots and reopens;
//! - the first I/O failure poisons every part at once: an election
//!   transition after a failed log sync is refused with no `poisoned()`
//!   call first.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};

use common::{lead, meta, options, DIR};
use quorumlog_checkpoint::{ClusterId, NodeId, Offset, SharedFs};
use quorumlog_io::{CrashPlan, FaultKind, FaultOp, SimFs};
use quorumlog_raft::voters::{VoterEntry, VoterError, VoterSet, MAX_VOTER_SET_BYTES};
use quorumlog_raft::{Error, Identity, Isolation, KraftReplica};
use quorumlog_snapshot::WriterOptions;

fn store_on(sim: &SimFs, node: u64) -> KraftReplica {
    let fs: SharedFs = Arc::new(sim.clone());
    quorumlog_raft::Store::format(&fs, Path::new(DIR), meta(node), None, &options()).unwrap();
    reopen_on(sim, node)
}

fn reopen_on(sim: &SimFs, node: u64) -> KraftReplica {
    let fs: SharedFs = Arc::new(sim.clone());
    KraftReplica::open(&fs, Path::new(DIR), &Identity::of(&meta(node)), &options())
        .unwrap()
        .0
}

fn entries(s: &KraftReplica, from: u64, to: u64) -> Vec<(u64, Vec<u8>)> {
    s.read_entries(Offset(from), Offset(to), u64::MAX, Isolation::Uncommitted)
        .unwrap()
        .into_iter()
        .map(|e| (e.offset.0, e.bytes))
        .collect()
}

#[test]
fn a_truncation_that_removes_nothing_reports_only_what_is_durable() {
    let sim = SimFs::new(1);
    let s = store_on(&sim, 1);
    let epoch = lead(&s);
    s.append_as_leader(epoch, &[b"a", b"b", b"c"]).unwrap();
    s.truncate_to(s.log_end_offset()).unwrap();
    let fired = Arc::new(Mutex::new(None));
    let f = Arc::clone(&fired);
    s.on_durable(
        Offset(3),
        Box::new(move |r| *f.lock().unwrap() = Some(r.map(|o| o.0).ok())),
    );
    assert_eq!(s.flushed_offset(), Offset(3));
    assert_eq!(*fired.lock().unwrap(), Some(Some(3)));
    // What was reported durable survives a power cut.
    drop(s);
    let sim = sim.crash_with(CrashPlan::LoseUnsynced);
    let s = reopen_on(&sim, 1);
    assert_eq!(
        entries(&s, 0, 3),
        vec![(0, b"a".to_vec()), (1, b"b".to_vec()), (2, b"c".to_vec())]
    );
}

#[test]
fn the_high_watermark_never_moves_back_and_committed_entries_stay() {
    let sim = SimFs::new(2);
    let s = store_on(&sim, 1);
    let epoch = lead(&s);
    let records: Vec<Vec<u8>> = (0..25u8).map(|i| vec![i]).collect();
    s.append_durable(epoch, &records).unwrap();
    s.set_high_watermark(Offset(21)).unwrap();
    assert!(matches!(
        s.truncate_to(Offset(13)),
        Err(Error::BelowHighWatermark { .. })
    ));
    let e = s.set_high_watermark(Offset(12)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::HighWatermarkBackwards {
                offset: Offset(12),
                high_watermark: Offset(21)
            }
        ),
        "{e}"
    );
    assert_eq!(s.high_watermark(), Some(Offset(21)));
    // Still refused: the stale value changed nothing.
    assert!(matches!(
        s.truncate_to(Offset(13)),
        Err(Error::BelowHighWatermark { .. })
    ));
    assert_eq!(s.log_end_offset(), Offset(25));
    s.set_high_watermark(Offset(21)).unwrap(); // the same value again is fine
    s.truncate_to(Offset(21)).unwrap();
    assert_eq!(s.log_end_offset(), Offset(21));
}

/// Copies snapshot `id` from `leader` to `follower` through the chunked
/// install, 7 bytes a chunk.
fn transfer(leader: &KraftReplica, follower: &KraftReplica, id: quorumlog_snapshot::SnapshotId) {
    let file = leader.snapshot_file(id).unwrap();
    let mut install = follower.install_snapshot(id, file.len() as u64).unwrap();
    for (i, chunk) in file.chunks(7).enumerate() {
        install.write_chunk(i as u64 * 7, chunk).unwrap();
    }
    install.finish().unwrap();
}

#[test]
fn a_follower_installed_inside_a_leader_batch_catches_up_through_read() {
    for end in 1..8u64 {
        let leader = store_on(&SimFs::new(3), 1);
        let epoch = lead(&leader);
        let first: Vec<Vec<u8>> = (0..5u8).map(|i| vec![b'a', i]).collect();
        let second: Vec<Vec<u8>> = (5..8u8).map(|i| vec![b'b', i]).collect();
        leader.append_durable(epoch, &first).unwrap();
        leader.append_durable(epoch, &second).unwrap();
        leader.set_high_watermark(Offset(8)).unwrap();
        let w = leader
            .create_snapshot(Offset(end), epoch, b"", WriterOptions::default())
            .unwrap();
        let id = w.freeze().unwrap().id;
        leader.clean_log_prefix(Offset(end)).unwrap();

        let follower = store_on(&SimFs::new(4), 2);
        transfer(&leader, &follower, id);
        assert_eq!(follower.log_end_offset(), Offset(end));
        assert_eq!(
            follower.high_watermark(),
            Some(Offset(end)),
            "the install raises the high watermark to the snapshot's end"
        );
        while follower.log_end_offset() < leader.log_end_offset() {
            let batches = leader.read(follower.log_end_offset(), 1 << 20).unwrap();
            let raw: Vec<&[u8]> = batches.iter().map(|b| b.raw()).collect();
            follower.append_as_follower(&raw).unwrap();
        }
        assert_eq!(
            entries(&follower, end, 8),
            entries(&leader, end, 8),
            "snapshot end {end}"
        );
        assert_eq!(follower.epoch_at(Offset(7)), Some(epoch));
    }
}

#[test]
fn an_install_keeping_the_log_raises_the_high_watermark() {
    let leader = store_on(&SimFs::new(5), 1);
    let epoch = lead(&leader);
    let records: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i]).collect();
    leader.append_durable(epoch, &records).unwrap();
    leader.set_high_watermark(Offset(6)).unwrap();
    let id = leader
        .create_snapshot(Offset(4), epoch, b"", WriterOptions::default())
        .unwrap()
        .freeze()
        .unwrap()
        .id;
    // The follower holds the same entries, uncommitted as far as it knows.
    let follower = store_on(&SimFs::new(6), 2);
    let batches = leader.read(Offset(0), 1 << 20).unwrap();
    let raw: Vec<&[u8]> = batches.iter().map(|b| b.raw()).collect();
    follower.append_as_follower(&raw).unwrap();
    follower.wait_durable(Offset(6)).unwrap();
    transfer(&leader, &follower, id);
    assert_eq!(follower.log_end_offset(), Offset(6), "the log is kept");
    assert_eq!(follower.high_watermark(), Some(Offset(4)));
    // Cleaning to the snapshot leaves the start at or below the watermark.
    follower.clean_log_prefix(Offset(4)).unwrap();
    assert!(follower.log_start_offset() <= follower.high_watermark().unwrap());
}

#[test]
fn a_foreign_directory_is_refused_and_left_unchanged() {
    let sim = SimFs::new(7);
    let s = store_on(&sim, 8);
    let epoch = lead(&s);
    let records: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 300]).collect();
    for chunk in records.chunks(4) {
        s.append_durable(epoch, chunk).unwrap();
    }
    s.append_as_leader(epoch, &[b"unsynced"]).unwrap();
    drop(s);
    // A crash, so the next open has recovery work to do (and would write).
    let sim = sim.crash_with(CrashPlan::LoseUnsynced);
    let fs: SharedFs = Arc::new(sim.clone());
    let before = quorumlog_testkit::dir_image(fs.as_ref(), Path::new(DIR)).unwrap();
    let foreign = [
        (Identity::node(ClusterId(1), NodeId(7)), "node id"),
        (Identity::node(ClusterId(2), NodeId(8)), "cluster id"),
        (
            Identity {
                directory_id: Some(quorumlog_checkpoint::DirectoryId(12345)),
                ..Identity::of(&meta(8))
            },
            "directory id",
        ),
    ];
    for (expect, what) in foreign {
        let e = KraftReplica::open(&fs, Path::new(DIR), &expect, &options()).unwrap_err();
        match &e {
            Error::Checkpoint(quorumlog_checkpoint::Error::IdentityMismatch {
                field,
                expected,
                found,
                ..
            }) => {
                assert_eq!(*field, what);
                assert_ne!(expected, found, "{e}");
            }
            other => panic!("{what}: {other}"),
        }
        let after = quorumlog_testkit::dir_image(fs.as_ref(), Path::new(DIR)).unwrap();
        assert_eq!(before, after, "{what}: the directory changed");
    }
    // Its own node opens it.
    let s = reopen_on(&sim, 8);
    assert_eq!(entries(&s, 0, 40).len(), 40);
}

fn default_options() -> quorumlog_raft::StoreOptions {
    quorumlog_raft::StoreOptions {
        log: quorumlog_raft::LogOptions::default(),
        ..options()
    }
}

fn default_store_on(sim: &SimFs) -> KraftReplica {
    let fs: SharedFs = Arc::new(sim.clone());
    quorumlog_raft::Store::format(&fs, Path::new(DIR), meta(1), None, &default_options()).unwrap();
    default_reopen_on(sim)
}

fn default_reopen_on(sim: &SimFs) -> KraftReplica {
    let fs: SharedFs = Arc::new(sim.clone());
    KraftReplica::open(
        &fs,
        Path::new(DIR),
        &Identity::of(&meta(1)),
        &default_options(),
    )
    .unwrap()
    .0
}

/// A voter set of `n` voters whose endpoints are `len` bytes.
fn voter_set(n: u64, len: usize) -> Result<VoterSet, VoterError> {
    VoterSet::new(
        (1..=n)
            .map(|i| VoterEntry {
                endpoint: Some("e".repeat(len)),
                ..VoterEntry::new(i, u128::from(i) + 1)
            })
            .collect(),
    )
}

#[test]
fn voter_sets_are_bounded_by_every_file_they_reach() {
    // What used to be accepted and then brick every open: refused.
    assert_eq!(voter_set(1024, 1024), Err(VoterError::TooLarge));
    // The largest accepted set (26 bytes a voter plus its endpoint, 4 for
    // the count).
    let per = 26 + 100;
    let n = ((MAX_VOTER_SET_BYTES - 4) / per) as u64;
    assert!(voter_set(n + 1, 100).is_err());
    let largest = voter_set(n, 100).unwrap();
    // A log whose batches are smaller than the record refuses it before
    // writing anything.
    let small = store_on(&SimFs::new(80), 1);
    let epoch = lead(&small);
    let e = small.append_voter_set(epoch, largest.clone()).unwrap_err();
    assert!(
        matches!(e, Error::Log(quorumlog_log::Error::BatchTooLarge { .. })),
        "{e}"
    );
    assert_eq!(small.log_end_offset(), Offset(0));
    assert_eq!(small.voters(), None);
    // With the default batch limit it fits.
    let sim = SimFs::new(8);
    let s = default_store_on(&sim);
    let epoch = lead(&s);
    s.append_voter_set(epoch, largest.clone()).unwrap();
    // Fill the voter history until the next record would not fit: that
    // one is refused before it is written.
    let mut appended = 1;
    loop {
        s.set_high_watermark(s.log_end_offset()).unwrap();
        let end = s.log_end_offset();
        match s.append_voter_set(epoch, largest.clone()) {
            Ok(_) => appended += 1,
            Err(Error::Voters(VoterError::HistoryFull { bytes, max })) => {
                assert!(bytes > max);
                assert_eq!(s.log_end_offset(), end, "nothing was written");
                break;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(appended < 1000, "never full");
    }
    s.set_high_watermark(s.log_end_offset()).unwrap();
    let end = s.log_end_offset();
    s.create_snapshot(end, epoch, b"m", WriterOptions::default())
        .unwrap()
        .freeze()
        .unwrap();
    s.close().unwrap();
    let s = default_reopen_on(&sim);
    assert_eq!(s.voters(), Some(largest.clone()));
    // A power cut, then the open rebuilds the history from file and log.
    drop(s);
    let sim = sim.crash_with(CrashPlan::LoseUnsynced);
    let s = default_reopen_on(&sim);
    assert_eq!(s.voters(), Some(largest));
    // Cleaning to the snapshot folds the records: there is room again.
    s.clean_log_prefix(end).unwrap();
    let epoch = lead(&s);
    s.append_voter_set(epoch, voter_set(3, 10).unwrap())
        .unwrap();
}

#[test]
fn an_election_transition_after_a_failed_log_sync_is_refused_at_once() {
    // The sync fails on the background flusher's round: no store call
    // returns the failure (only the completion hears of it).
    let sim = SimFs::new(9);
    let fs: SharedFs = Arc::new(sim.clone());
    let interval = quorumlog_raft::StoreOptions {
        sync: quorumlog_raft::SyncPolicy::Interval { interval_us: 200 },
        ..options()
    };
    quorumlog_raft::Store::format(&fs, Path::new(DIR), meta(1), None, &interval).unwrap();
    let s = KraftReplica::open(&fs, Path::new(DIR), &Identity::of(&meta(1)), &interval)
        .unwrap()
        .0;
    let epoch = lead(&s);
    s.append_durable(epoch, &[b"acked"]).unwrap();
    let info = s.append_as_leader(epoch, &[b"lost"]).unwrap();
    sim.inject_fault(FaultOp::Sync, 1, FaultKind::Eio);
    // The flusher's next round meets the fault (a round that synced before
    // the fault was armed succeeds: append again until one fails).
    let mut end = info.next_offset;
    loop {
        let (tx, rx) = std::sync::mpsc::channel();
        s.on_durable(end, Box::new(move |r| tx.send(r.is_err()).unwrap()));
        if rx.recv().unwrap() {
            break;
        }
        end = s.append_as_leader(epoch, &[b"lost"]).unwrap().next_offset;
    }
    // No `poisoned()` call first.
    let r = s.election().become_candidate();
    assert!(matches!(r, Err(Error::Poisoned(_))), "{r:?}");
    assert_eq!(s.quorum_state().epoch, epoch, "no vote was written");
}

#[test]
fn a_read_of_a_range_reads_nothing_beyond_it() {
    // Invariant: `read_entries` over [from, to) answers from the batches
    // holding that range (read through `read_range`, which stops after the
    // batch holding `to - 1`); damage beyond the range does not reach it,
    // and a read that reaches the damage reports it, never returns it.
    let sim = SimFs::new(10);
    let s = store_on(&sim, 1);
    let epoch = lead(&s);
    // Incompressible records, so the last one is found on disk as is.
    let mut rng = quorumlog_io::SimRng::new(10);
    let records: Vec<Vec<u8>> = (0..3)
        .map(|_| {
            let mut r = vec![0u8; 100];
            rng.fill(&mut r);
            r
        })
        .collect();
    for r in &records {
        s.append_durable(epoch, &[r]).unwrap();
    }
    s.close().unwrap();
    let fs: SharedFs = Arc::new(sim.clone());
    let logs = Path::new(DIR).join("log");
    let (path, at) = fs
        .list(&logs)
        .unwrap()
        .into_iter()
        .find_map(|e| {
            let path = logs.join(&e.name);
            let bytes = sim.durable_contents(&path)?;
            let at = bytes
                .windows(100)
                .position(|w| w == records[2].as_slice())?;
            Some((path, at))
        })
        .unwrap();
    sim.corrupt_durable(&path, at as u64 + 50, &[!records[2][50]])
        .unwrap();
    let s = reopen_on(&sim, 1);
    let got = s
        .read_entries(Offset(0), Offset(2), u64::MAX, Isolation::Uncommitted)
        .unwrap();
    assert_eq!(got.len(), 2);
    let e = s
        .read_entries(Offset(0), Offset(3), u64::MAX, Isolation::Uncommitted)
        .unwrap_err();
    assert!(
        e.to_string().contains("corrupt") || e.to_string().contains("checksum"),
        "{e}"
    );
}

/// `persist_high_watermark` makes the watermark durable only as far as
/// the log is durable, and never lowers the checkpointed value.
#[test]
fn the_persisted_high_watermark_never_passes_the_durable_log_nor_moves_back() {
    let sim = SimFs::new(31);
    let s = store_on(&sim, 1);
    let epoch = lead(&s);
    s.append_as_leader(epoch, &[b"a", b"b", b"c"]).unwrap();
    s.wait_durable(Offset(3)).unwrap();
    s.set_high_watermark(Offset(3)).unwrap();
    assert_eq!(s.persist_high_watermark().unwrap(), Some(Offset(3)));
    // Written, maybe not durable: the watermark may pass the durable end
    // in memory, never on disk.
    s.append_as_leader(epoch, &[b"d", b"e"]).unwrap();
    s.set_high_watermark(Offset(5)).unwrap();
    let flushed = s.flushed_offset();
    let durable = s.persist_high_watermark().unwrap().unwrap();
    assert!(
        durable <= flushed.max(Offset(3)),
        "{durable:?} above {flushed:?}"
    );
    assert!(durable >= Offset(3));
    assert_eq!(s.durable_high_watermark(), Some(durable));
    s.wait_durable(Offset(5)).unwrap();
    assert_eq!(s.persist_high_watermark().unwrap(), Some(Offset(5)));
    // After a power cut the watermark is what was persisted.
    drop(s);
    let sim = sim.crash_with(CrashPlan::LoseUnsynced);
    let s = reopen_on(&sim, 1);
    assert_eq!(s.high_watermark(), Some(Offset(5)));
}
