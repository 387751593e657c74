//! Random crash cycles of the `KRaft` wing ([`quorumlog_raft::kraft::KraftReplica`]
//! over a one-group node): a seed draws a sequence of its operations on one
//! replica (votes,
//! following, fetches from a leader — valid, diverging or snapshot needed —,
//! flushes, high watermarks, prefix cleaning, candidacy and leader appends),
//! cuts the power at a random call with a random crash plan, and checks the
//! reopened replica:
//! - it opens (a plain crash never makes it refuse);
//! - no epoch regression and no second vote in an epoch;
//! - everything acknowledged durable is still there (in the log or under
//!   the latest snapshot), with the bytes written, except what a
//!   truncation in flight was removing;
//! - no entry below the log start lacks a snapshot (invariant 7).
//!
//! The leader it fetches from is a second replica, never crashed. Used by
//! the `crash_recovery` fuzz target and by `tests/kraft_crash_cycles.rs`.

use crate::WingTest;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{
    ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, QuorumState, SharedFs,
};
use quorumlog_io::{CrashPlan, SimFs, SimRng, Tear};
use quorumlog_log::{LogOptions, SegmentPreparation, SyncPolicy};
use quorumlog_raft::{
    kraft::FetchPosition, kraft::KraftReplica, kraft::LogPosition, Identity, Isolation, NodeOptions,
};
use quorumlog_snapshot::WriterOptions;

const DIR: &str = "/data";

/// Node options for crash tests: 16 KiB segments (rolls happen),
/// deterministic I/O order (inline preparation, no background thread), no
/// prefilled pool, group commit.
pub fn crash_node_options() -> NodeOptions {
    NodeOptions {
        log: LogOptions {
            segment_size_bytes: 16 << 10,
            max_batch_bytes: 8 << 10,
            segment_preparation: SegmentPreparation::Inline,
            prefill_segments: 0,
            ..LogOptions::default()
        },
        sync: SyncPolicy::GroupCommit,
        background: false,
        ..NodeOptions::default()
    }
}

fn store(disk: &SimFs, node: u64) -> Result<KraftReplica, String> {
    let fs: SharedFs = Arc::new(disk.clone());
    let meta = Meta::new(
        ClusterId(3),
        NodeId(node),
        DirectoryId(u128::from(node) + 1),
    );
    quorumlog_raft::Node::format(&fs, Path::new(DIR), meta, &crash_node_options())
        .map_err(|e| e.to_string())?;
    Ok(KraftReplica::open(
        &fs,
        Path::new(DIR),
        &Identity::of(&meta),
        &crash_node_options(),
    )
    .map_err(|e| e.to_string())?
    .0)
}

/// The leader: 40 committed entries of epoch 2 and a snapshot at 24.
fn leader() -> Result<KraftReplica, String> {
    let l = store(&SimFs::new(7), 2)?;
    let e = |r: quorumlog_raft::Result<()>| r.map_err(|e| e.to_string());
    {
        let mut el = l.election();
        e(el.become_unattached(Epoch(1)))?;
        e(el.become_candidate().map(|_| ()))?;
        e(el.become_leader())?;
    }
    for o in 0..40u64 {
        let r = l.append_durable(Epoch(2), &[format!("leader {o}").into_bytes()]);
        e(r.map(|_| ()))?;
    }
    e(l.set_high_watermark(Offset(40)))?;
    let mut w = l
        .create_snapshot(Offset(24), Epoch(2), b"", WriterOptions::default())
        .map_err(|e| e.to_string())?;
    w.write(b"state below 24").map_err(|e| e.to_string())?;
    w.freeze().map_err(|e| e.to_string())?;
    Ok(l)
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Vote,
    Follow,
    Fetch(u64),
    Flush,
    HighWatermark,
    Clean,
    Lead,
    LeaderAppend,
}

fn draw(rng: &mut SimRng) -> Op {
    match rng.below(16) {
        0 => Op::Vote,
        1 | 2 => Op::Follow,
        3..=7 => Op::Fetch(1 + rng.below(12)),
        8 | 9 => Op::Flush,
        10 => Op::HighWatermark,
        11 => Op::Clean,
        12 => Op::Lead,
        _ => Op::LeaderAppend,
    }
}

/// What the replica acknowledged: election states, and the durable
/// prefix with its bytes.
#[derive(Debug, Default)]
struct Acked {
    election: Vec<QuorumState>,
    durable: u64,
    /// Bytes at each offset the replica holds (as far as it knows).
    bytes: BTreeMap<u64, Vec<u8>>,
    /// A truncation in flight may remove entries down to here.
    floor: Option<u64>,
}

struct Run<'a> {
    s: &'a KraftReplica,
    l: &'a KraftReplica,
    acked: Acked,
}

impl Run<'_> {
    fn apply(&mut self, op: Op) -> Result<(), String> {
        let err = |e: quorumlog_raft::Error| e.to_string();
        match op {
            Op::Vote => {
                let epoch = Epoch(self.s.election().epoch().0 + 1);
                let pos = LogPosition {
                    last_epoch: Some(Epoch(2)),
                    end_offset: Offset(40),
                };
                let ours = self.position();
                self.s
                    .election()
                    .grant_vote(epoch, (NodeId(2), None), pos, ours)
                    .map_err(err)?;
                self.note_election();
            }
            Op::Follow => {
                let epoch = self.s.election().epoch();
                // Refused when the epoch has another leader: not a crash.
                if self.s.election().become_follower(epoch, NodeId(2)).is_ok() {
                    self.note_election();
                }
            }
            Op::Fetch(max) => self.fetch(max)?,
            Op::Flush => {
                let end = self.s.extent().queued_end;
                let f = self.s.wait_durable(end).map_err(|e| e.to_string())?;
                self.acked.durable = self.acked.durable.max(f.0);
            }
            Op::HighWatermark => {
                let end = self.s.extent().queued_end.min(Offset(40));
                let hw = self.s.extent().high_watermark.unwrap_or(Offset(0));
                if end > hw && self.s.epoch_at(Offset(end.0 - 1)) == Some(Epoch(2)) {
                    self.s.set_high_watermark(end).map_err(err)?;
                }
            }
            Op::Clean => {
                self.s.clean_log_prefix(Offset(40)).map_err(err)?;
            }
            Op::Lead => {
                self.s.election().become_candidate().map_err(err)?;
                self.note_election();
                self.s.election().become_leader().map_err(err)?;
                self.note_election();
            }
            Op::LeaderAppend => {
                let epoch = self.s.election().epoch();
                if self.s.election().check_leader_append(epoch).is_ok() {
                    let at = self.s.extent().queued_end.0;
                    let rec = format!("own {at} epoch {}", epoch.0).into_bytes();
                    self.acked.bytes.insert(at, rec.clone());
                    let info = self.s.append_durable(epoch, &[rec]).map_err(err)?;
                    self.acked.durable = self.acked.durable.max(info.next_offset.0);
                }
            }
        }
        Ok(())
    }

    fn position(&self) -> LogPosition {
        self.s.log_position()
    }

    fn note_election(&mut self) {
        self.acked.election.push(self.s.election().state().clone());
    }

    fn fetch(&mut self, max: u64) -> Result<(), String> {
        let err = |e: quorumlog_raft::Error| e.to_string();
        for _ in 0..4 {
            let end = self.s.extent().queued_end;
            let last = self.s.log_position().last_epoch.unwrap_or(Epoch(0));
            match self.l.validate_offset_and_epoch(end, last).map_err(err)? {
                FetchPosition::Valid => {
                    let to = (end.0 + max).min(40);
                    if end.0 >= to {
                        return Ok(());
                    }
                    let entries = self
                        .l
                        .read_entries(end, Offset(to), 1 << 20, Isolation::Uncommitted)
                        .map_err(err)?;
                    for e in &entries {
                        self.acked.bytes.insert(e.offset.0, e.bytes.clone());
                    }
                    self.s.append_as_follower(&entries).map_err(err)?;
                    return Ok(());
                }
                FetchPosition::Diverging { end_offset, epoch } => {
                    // The truncation may remove durable entries down to
                    // where this log and the leader's agree.
                    let local = self
                        .s
                        .end_offset_for_epoch(epoch)
                        .map_or(self.s.extent().start, |(_, o)| o);
                    self.acked.floor = Some(local.min(end_offset).0.min(self.acked.durable));
                    let to = self
                        .s
                        .truncate_to_diverging(end_offset, epoch)
                        .map_err(err)?;
                    self.acked.durable = self.acked.durable.min(to.0);
                    self.acked.bytes.retain(|&o, _| o < to.0);
                    self.acked.floor = None;
                }
                FetchPosition::SnapshotNeeded(id) => self.install(id)?,
            }
        }
        Ok(())
    }

    /// Installs the leader's snapshot `id`; the log then continues it.
    fn install(&mut self, id: quorumlog_snapshot::SnapshotId) -> Result<(), String> {
        let err = |e: quorumlog_raft::Error| e.to_string();
        let size = self
            .l
            .snapshot(id)
            .map_err(|_| "the leader lost its snapshot")?
            .info()
            .size_bytes;
        // The floor drops while the log is restarted (before the finish
        // returns, the log may already be cut to the snapshot).
        self.acked.floor = Some(0);
        if self.s.snapshot(id).is_err() {
            // Through the wing: the finish publishes, then makes the log
            // continue the snapshot.
            let mut inst = self.s.install_snapshot(id, size).map_err(err)?;
            while inst.install().position() < size {
                let at = inst.install().position();
                let chunk = self
                    .l
                    .snapshot(id)
                    .and_then(|r| r.read_chunk(at, 64))
                    .map_err(err)?;
                inst.install().write_chunk(at, &chunk).map_err(err)?;
            }
            inst.finish().map_err(err)?;
        }
        let start = self.s.extent().start.0;
        self.acked.bytes.retain(|&o, _| o >= start);
        self.acked.durable = self.acked.durable.max(id.end_offset.0);
        self.acked.floor = None;
        Ok(())
    }
}

/// Checks the reopened replica against what was acknowledged.
fn check(disk: &SimFs, expect: &Identity, acked: &Acked) -> Result<u64, String> {
    let fs: SharedFs = Arc::new(disk.clone());
    let (s, _) = KraftReplica::open(&fs, Path::new(DIR), expect, &crash_node_options())
        .map_err(|e| format!("the replica does not open after a crash: {e}"))?;
    let st = s.election().state().clone();
    if let Some(last) = acked.election.last() {
        if st.epoch < last.epoch {
            return Err(format!("epoch regressed: {} < {}", st.epoch, last.epoch));
        }
        if st.epoch == last.epoch && last.voted.is_some() && st.voted != last.voted {
            return Err(format!(
                "a second vote in {}: {:?} then {:?}",
                st.epoch, last.voted, st.voted
            ));
        }
    }
    let x = s.extent();
    let snapshot_end = x.latest_snapshot.map_or(0, |l| l.end_offset.0);
    let floor = acked.floor.map_or(acked.durable, |f| f.min(acked.durable));
    let reach = x.queued_end.0.max(snapshot_end);
    if reach < floor {
        return Err(format!(
            "acknowledged durable {floor} lost: the log reaches {reach}"
        ));
    }
    if x.start.0 > snapshot_end {
        return Err("entries below the log start without a snapshot".into());
    }
    check_last_purged(&s)?;
    let (start, end) = (x.start, x.queued_end.min(Offset(floor)));
    if start < end {
        let entries = s
            .read_entries(start, end, u64::MAX, Isolation::Uncommitted)
            .map_err(|e| format!("read after recovery: {e}"))?;
        for x in entries {
            if let Some(want) = acked.bytes.get(&x.offset.0) {
                if *want != x.bytes {
                    return Err(format!("offset {} differs after recovery", x.offset.0));
                }
            }
        }
    }
    Ok(x.queued_end.0)
}

/// The log start keeps the id of the entry below it, after any crash: known
/// whenever something was deleted, just below the start, and in the epoch
/// of a snapshot that ends there.
///
/// # Errors
/// What is wrong.
pub fn check_last_purged(s: &KraftReplica) -> Result<(), String> {
    let start = s.extent().start;
    match s.extent().last_purged {
        None if start > Offset(0) => Err(format!(
            "the log starts at {start} but the last purged entry is unknown"
        )),
        Some((o, _)) if o.0 + 1 != start.0 => Err(format!(
            "the last purged entry {o} is not just below the start {start}"
        )),
        // A snapshot ending at the start ends in the purged entry's epoch:
        // none in another epoch (none newer than the election's) opens.
        Some((o, e)) => match (0..=s.election().epoch().0)
            .map(Epoch)
            .filter(|&ep| ep != e)
            .find(|&ep| {
                s.snapshot(quorumlog_snapshot::SnapshotId {
                    end_offset: start,
                    epoch: ep,
                })
                .is_ok()
            }) {
            Some(other) => Err(format!(
                "the last purged entry {o} has epoch {e}, the snapshot ending there {other}"
            )),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

/// One cycle of seed `seed`: the workload, a crash at a random call with a
/// random plan, the checks. Returns the I/O calls made before the crash.
///
/// # Errors
/// The violated invariant, with the seed.
pub fn run_kraft_case(seed: u64) -> Result<u64, String> {
    let l = leader()?;
    let mut rng = SimRng::new(seed);
    let ops: Vec<Op> = (0..24).map(|_| draw(&mut rng)).collect();
    // Count the calls, then cut the power somewhere in them.
    let total = {
        let disk = SimFs::new(seed);
        let s = store(&disk, 1)?;
        let before = disk.calls();
        let mut run = Run {
            s: &s,
            l: &l,
            acked: Acked::default(),
        };
        for op in &ops {
            let _ = run.apply(*op);
        }
        disk.calls() - before
    };
    let point = rng.below(total + 1);
    let plans = [
        CrashPlan::LoseUnsynced,
        CrashPlan::KeepAll,
        CrashPlan::Torn(Tear::Zeros),
        CrashPlan::Torn(Tear::Garbage),
        CrashPlan::Random,
    ];
    let plan = plans
        .get(usize::try_from(rng.below(5)).unwrap_or(0))
        .copied()
        .unwrap_or(CrashPlan::Random);
    let disk = SimFs::new(seed);
    disk.set_page_tearing(seed % 2 == 0);
    let s = store(&disk, 1)?;
    disk.crash_after(point);
    let mut run = Run {
        s: &s,
        l: &l,
        acked: Acked::default(),
    };
    let trace = std::env::var_os("QUORUMLOG_KRAFT_TRACE").is_some();
    for op in &ops {
        let r = run.apply(*op);
        if trace {
            eprintln!(
                "{op:?}: {r:?}; calls {}; log [{}, {}) flushed {}; acked durable {} floor {:?}; epoch {}",
                disk.calls(),
                s.extent().start.0,
                s.extent().queued_end.0,
                s.extent().flushed.0,
                run.acked.durable,
                run.acked.floor,
                s.election().epoch().0
            );
        }
        if r.is_err() {
            break;
        }
    }
    let acked = run.acked;
    let expect = s.identity_in(ClusterId(3));
    drop(s);
    let rebooted = disk.crash_with(plan);
    check(&rebooted, &expect, &acked).map_err(|e| {
        format!(
            "kraft seed {seed}: crash after {point}/{total} calls, {plan:?}, ops {ops:?}: {e} \\
             (replay: QUORUMLOG_KRAFT_SEED={seed} cargo test -p quorumlog-testkit --test kraft_crash_cycles)"
        )
    })?;
    Ok(point)
}
