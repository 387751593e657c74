//! Crash tests of the store on the simulated disk: the power is cut at
//! every I/O call of a sequence mixing a vote, follower appends of the
//! leader's raw batches, the high watermark, a diverging truncation, a
//! snapshot install (with the log continuing it), prefix deletion, a
//! candidacy and leader appends — under every crash plan. After each
//! crash the store must open, and:
//! - no second vote in an epoch and no epoch regression (the recovered
//!   election state is the last acknowledged one or the one in flight);
//! - nothing acknowledged durable is lost: the log, or the latest snapshot,
//!   reaches every offset acknowledged durable, and every entry present
//!   below it is the one written;
//! - no entry below the log start lacks a snapshot (invariant 7).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{
    ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, QuorumState, SharedFs,
};
use quorumlog_io::SimFs;
use quorumlog_raft::{Isolation, KraftReplica, LogPosition, StoreOptions};
use quorumlog_snapshot::{SnapshotId, WriterOptions};
use quorumlog_testkit::CRASH_PLANS;

const DIR: &str = "/data";

fn options() -> StoreOptions {
    quorumlog_testkit::store_crash::crash_store_options()
}

fn new_store(seed: u64, node: u64) -> (SimFs, KraftReplica) {
    let disk = SimFs::new(seed);
    let fs: SharedFs = Arc::new(disk.clone());
    let meta = Meta::new(
        ClusterId(1),
        NodeId(node),
        DirectoryId(u128::from(node) + 100),
    );
    quorumlog_raft::Store::format(&fs, Path::new(DIR), meta, None, &options()).unwrap();
    let store = KraftReplica::open(
        &fs,
        Path::new(DIR),
        &quorumlog_raft::Identity::of(&meta),
        &options(),
    )
    .unwrap()
    .0;
    (disk, store)
}

fn record(epoch: u64, o: u64) -> Vec<u8> {
    format!("epoch {epoch} offset {o:03}").into_bytes()
}

/// The leader (never crashed): 30 entries of epoch 2, committed, and a
/// snapshot at 20.
fn leader() -> KraftReplica {
    let (_, l) = new_store(99, 2);
    let mut e = l.election();
    e.become_unattached(Epoch(1)).unwrap();
    assert_eq!(e.become_candidate().unwrap(), Epoch(2));
    e.become_leader().unwrap();
    drop(e);
    for o in 0..30 {
        l.append_durable(Epoch(2), &[record(2, o)]).unwrap();
    }
    l.set_high_watermark(Offset(30)).unwrap();
    let mut w = l
        .create_snapshot(Offset(20), Epoch(2), b"", WriterOptions::default())
        .unwrap();
    w.write(b"state below 20").unwrap();
    w.freeze().unwrap();
    l
}

fn raw(l: &KraftReplica, from: u64, to: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = Offset(from);
    while at < Offset(to) {
        let batches = l.read(at, 1 << 20).unwrap();
        for b in batches.iter().filter(|b| b.base_offset() < Offset(to)) {
            out.push(b.raw().to_vec());
        }
        at = batches.next_offset().unwrap();
    }
    out
}

/// What the sequence acknowledged so far.
#[derive(Debug, Clone, Default)]
struct Acked {
    election: Vec<QuorumState>,
    durable: u64,
}

/// Runs the sequence on `s`; stops at the first failure (the crash).
fn sequence(s: &KraftReplica, l: &KraftReplica, acked: &mut Acked) -> Result<(), String> {
    let e = |r: quorumlog_raft::Result<()>| r.map_err(|e| e.to_string());
    let any = LogPosition {
        last_epoch: Some(Epoch(2)),
        end_offset: Offset(30),
    };
    let ours = LogPosition {
        last_epoch: None,
        end_offset: Offset(0),
    };
    e(s.election()
        .grant_vote(Epoch(2), (NodeId(2), None), any, ours)
        .map(|_| ()))?;
    acked.election.push(s.election().state().clone());
    e(s.election().become_follower(Epoch(2), NodeId(2)))?;
    acked.election.push(s.election().state().clone());
    // Entries 0..12 from the leader, then a flush.
    let batches = raw(l, 0, 12);
    let refs: Vec<&[u8]> = batches.iter().map(Vec::as_slice).collect();
    e(s.append_as_follower(&refs).map(|_| ()))?;
    e(s.log().flush().map(|_| ()).map_err(Into::into))?;
    acked.durable = 12;
    e(s.set_high_watermark(Offset(8)))?;
    // A diverging suffix (not durable-acknowledged), truncated away.
    e(s.log()
        .append_as_leader(Epoch(2), &[b"stray".as_slice()])
        .map(|_| ())
        .map_err(Into::into))?;
    e(s.truncate_to_diverging(Offset(12), Epoch(2)).map(|_| ()))?;
    // The snapshot at 20 from the leader, the log restarted there.
    let id = SnapshotId {
        end_offset: Offset(20),
        epoch: Epoch(2),
    };
    let size = l.snapshots().get(id).unwrap().size_bytes;
    let mut inst = s.install_snapshot(id, size).map_err(|e| e.to_string())?;
    while inst.position() < size {
        let at = inst.position();
        let chunk = l.read_snapshot_chunk(id, at, 16).unwrap();
        inst.write_chunk(at, &chunk).map_err(|e| e.to_string())?;
    }
    // Publishes, then makes the log continue the snapshot.
    e(inst.finish().map(|_| ()))?;
    acked.durable = 20;
    let batches = raw(l, 20, 30);
    let refs: Vec<&[u8]> = batches.iter().map(Vec::as_slice).collect();
    e(s.append_as_follower(&refs).map(|_| ()))?;
    e(s.log().flush().map(|_| ()).map_err(Into::into))?;
    acked.durable = 30;
    e(s.clean_log_prefix(Offset(20)).map(|_| ()))?;
    // A candidacy, leadership, and durable leader appends.
    e(s.election().become_candidate().map(|_| ()))?;
    acked.election.push(s.election().state().clone());
    e(s.election().become_leader())?;
    acked.election.push(s.election().state().clone());
    for o in 30..33 {
        e(s.append_durable(Epoch(3), &[record(3, o)]).map(|_| ()))?;
        acked.durable = o + 1;
    }
    Ok(())
}

fn check(disk: &SimFs, expect: &quorumlog_raft::Identity, acked: &Acked, what: &str) {
    let fs: SharedFs = Arc::new(disk.clone());
    let (s, _) = KraftReplica::open(&fs, Path::new(DIR), expect, &options())
        .unwrap_or_else(|e| panic!("{what}: the store does not open: {e}"));
    // Election: the last acknowledged state, or a later one (in flight).
    let st = s.election().state().clone();
    if let Some(last) = acked.election.last() {
        assert!(st.epoch >= last.epoch, "{what}: epoch regressed");
        if st.epoch == last.epoch {
            if let Some(v) = last.voted {
                assert_eq!(st.voted, Some(v), "{what}: a second vote");
            }
        }
    }
    // Nothing acknowledged durable is lost.
    let log = s.log();
    let snapshot_end = s.snapshots().latest().map_or(0, |x| x.id.end_offset.0);
    let reach = log.log_end_offset().0.max(snapshot_end);
    assert!(
        reach >= acked.durable,
        "{what}: reaches {reach} < acked {}",
        acked.durable
    );
    quorumlog_testkit::store_crash::check_last_purged(&s).unwrap_or_else(|e| panic!("{what}: {e}"));
    // Invariant 7.
    if log.log_start_offset() > Offset(0) {
        assert!(
            snapshot_end >= log.log_start_offset().0,
            "{what}: no snapshot below the start"
        );
    }
    // Entries present below the durable mark are the ones written.
    let (start, end) = (
        log.log_start_offset(),
        log.log_end_offset().min(Offset(acked.durable)),
    );
    if start < end {
        for x in s
            .read_entries(start, end, u64::MAX, Isolation::Uncommitted)
            .unwrap()
        {
            let epoch = if x.offset.0 < 30 { 2 } else { 3 };
            assert_eq!(
                x.bytes,
                record(epoch, x.offset.0),
                "{what}: offset {}",
                x.offset.0
            );
        }
    }
}

#[test]
fn a_crash_at_every_call_of_a_mixed_sequence_keeps_the_contract() {
    let l = leader();
    let total = {
        let (disk, s) = new_store(0, 1);
        let before = disk.calls();
        let mut acked = Acked::default();
        sequence(&s, &l, &mut acked).unwrap();
        disk.calls() - before
    };
    let mut states = 0;
    for point in 0..=total {
        for (p, plan) in CRASH_PLANS.into_iter().enumerate() {
            let seed = point * 10 + p as u64;
            let (disk, s) = new_store(seed, 1);
            disk.set_page_tearing(seed % 2 == 1);
            disk.crash_after(point);
            let mut acked = Acked::default();
            let _ = sequence(&s, &l, &mut acked);
            let expect = s.identity();
            drop(s);
            let disk = disk.crash_with(plan);
            check(
                &disk,
                &expect,
                &acked,
                &format!("crash after {point}/{total} calls, {plan:?}"),
            );
            states += 1;
        }
    }
    eprintln!("store crash states: {states}");
    assert!(states > 200, "{states}");
}
