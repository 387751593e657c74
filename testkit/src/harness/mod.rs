//! The model-checked crash tester: one data directory (log, quorum state,
//! checkpoints, snapshots) on the simulated disk, driven by a seeded random
//! workload, crashed at a chosen I/O call (optionally with an injected
//! `EIO`/`ENOSPC` first, and a bit flip in durable data after), reopened —
//! recovery itself crashed once more and redone — and checked against a
//! model of what was acknowledged (docs/design.md section 4):
//!
//! - every acknowledged (flushed) record is there, byte-identical, and the
//!   log is the acknowledged prefix plus possibly unacknowledged records,
//!   with no gap; truncated records never come back (1, 3, 8);
//! - a bit flip in a sealed segment is reported as corruption, never
//!   returned, never silently truncated (2, 3);
//! - after an injected fault nothing more is acknowledged (6);
//! - the quorum state never regresses and never holds another vote in an
//!   acknowledged epoch (5);
//! - every listed snapshot verifies and holds what was written for its id;
//!   acknowledged snapshots stay listed; no log entry below the log start
//!   lacks a snapshot (7);
//! - recovery is idempotent (9).
//!
//! Half the seeds drive `Log`, half `DurableLog`. It is library code so
//! that `cargo test` and the `crash_recovery` fuzz target run the same
//! thing.
#![expect(
    clippy::indexing_slicing,
    reason = "test machinery: indices into its own model and workload lists; a panic fails \
              the test that drives it"
)]

mod node;
mod workload;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quorumlog_checkpoint::{
    format_with, ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, QuorumState, SharedFs,
};
use quorumlog_io::{CrashPlan, FaultKind, FaultOp, SimFs, SimRng, Tear};
use quorumlog_log::Error as LogError;
use quorumlog_snapshot::SnapshotId;

/// The identity of the harness's directory.
fn harness_meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(9))
}

pub use node::Backend;
use node::{apply, open, Node};
use workload::DIR;
pub use workload::{workload, Op};

/// How a run is disturbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disturbance {
    /// Cut the power after this many I/O calls of the workload.
    pub crash_after: Option<u64>,
    /// What the crash keeps.
    pub plan: CrashPlan,
    /// Make the `nth` call of this kind fail first.
    pub fault: Option<(FaultOp, u64, FaultKind)>,
    /// Flip a bit (chosen from this number) in a sealed segment after the
    /// crash.
    pub flip: Option<u64>,
    /// Cut the power again after this many calls of the first recovery.
    pub recovery_crash: Option<u64>,
}

/// What a run checked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checked {
    /// I/O calls the workload made before the crash.
    pub calls: u64,
    /// Reopens checked (the crash, and the recovery crash if any).
    pub reopens: u64,
    /// Records verified byte for byte.
    pub records: u64,
    /// Whether a flipped bit was reported as corruption.
    pub corruption_reported: bool,
    /// Listed snapshots that came in by install.
    pub installed_snapshots: u64,
}

#[derive(Debug, Clone, Default)]
struct Model {
    /// The record at each offset (None: below a truncation point, unknown).
    records: Vec<Option<(u64, Vec<u8>)>>,
    flushed: u64,
    start: u64,
    epoch: u64,
    /// Acknowledged quorum states, in order.
    votes: Vec<QuorumState>,
    /// Acknowledged snapshots and their content.
    snapshots: BTreeMap<SnapshotId, Vec<u8>>,
    /// Suffix truncations so far (a leader snapshot's id changes with them,
    /// as its content may).
    truncations: u64,
}

/// Runs `ops` with `d`; returns the crashed disk, the model before the
/// operation in flight and after it, and the calls made.
fn run(seed: u64, ops: &[Op], d: &Disturbance) -> Result<(SimFs, Model, Model, u64, bool), String> {
    let backend = Backend::of_seed(seed);
    let sim = SimFs::new(seed);
    sim.set_page_tearing(seed % 2 == 0);
    let fs: SharedFs = Arc::new(sim.clone());
    format_with(&fs, Path::new(DIR), harness_meta()).map_err(|e| e.to_string())?;
    let mut node = Some(open(&sim, backend)?);
    let start = sim.calls();
    if let Some(n) = d.crash_after {
        sim.crash_after(n);
    }
    if let Some((op, nth, kind)) = d.fault {
        sim.inject_fault(op, nth, kind);
    }
    let mut m = Model {
        epoch: 1,
        ..Model::default()
    };
    let mut before = m.clone();
    let mut failed = false;
    let mut failed_op = None;
    for (step, op) in ops.iter().enumerate() {
        before = m.clone();
        if let Op::Truncate(x) = op {
            // An interrupted suffix truncation may already have removed part
            // of what it was asked to remove.
            let end = m.records.len() as u64;
            before.flushed = before.flushed.min(m.start + x % (end - m.start + 1));
        }
        let ok = apply(
            &mut node,
            &sim,
            &mut m,
            *op,
            seed.wrapping_mul(1000).wrapping_add(step as u64),
        );
        trace_step(step, *op, ok, node.as_ref(), &sim, &m);
        if !ok {
            failed = true;
            failed_op = Some(*op);
            break;
        }
    }
    let log_op_failed = matches!(
        failed_op,
        Some(
            Op::Append { .. }
                | Op::Follower { .. }
                | Op::Flush
                | Op::Truncate(_)
                | Op::PageEnd { .. }
        )
    );
    if failed && log_op_failed && sim.is_alive() {
        // A fault (not the crash) failed the step: nothing more may be
        // acknowledged (invariant 6). The probe append is not in the model,
        // so a log that took it would fail the check below too.
        if let Some(n) = node.as_mut() {
            let r = n.log.append_as_leader(Epoch(m.epoch), &[b"after".to_vec()]);
            if r && n.log.flush() {
                return Err("the log acknowledged a write after a failed one".into());
            }
        }
    }
    let calls = sim.calls() - start;
    if let Some(n) = &node {
        note_recycled(&n.log);
    }
    drop(node);
    Ok((sim.crash_with(d.plan), before, m, calls, failed))
}

/// With `QUORUMLOG_HARNESS_TRACE` set: one line per step (the node's and
/// the model's shape), for replaying a failed seed.
fn trace_step(step: usize, op: Op, ok: bool, node: Option<&Node>, sim: &SimFs, m: &Model) {
    if std::env::var_os("QUORUMLOG_HARNESS_TRACE").is_none() {
        return;
    }
    let shape = node.map(|n| {
        (
            n.log.log_start_offset().0,
            n.log.log_end_offset().0,
            n.dd.quorum_state().epoch.0,
        )
    });
    eprintln!(
        "{step}: {op:?} -> {ok}; calls {}; node [start, end, epoch] {shape:?}; model start {} \
         flushed {} records {} epoch {}",
        sim.calls(),
        m.start,
        m.flushed,
        m.records.len(),
        m.epoch
    );
}

/// Rolls into recycled segment files in this process's workloads.
static RECYCLED_ROLLS: AtomicU64 = AtomicU64::new(0);

fn note_recycled(log: &node::AnyLog) {
    RECYCLED_ROLLS.fetch_add(log.segments_recycled(), Ordering::Relaxed);
}

/// How many rolls into recycled segment files (stale batches of an
/// earlier life in the file) the workloads run so far in this process
/// made: the generator must reach them.
pub fn recycled_rolls() -> u64 {
    RECYCLED_ROLLS.load(Ordering::Relaxed)
}

fn check(node: &Node, candidates: &[&Model], flipped: bool) -> Result<Checked, String> {
    let log = &node.log;
    let start = log.log_start_offset().0;
    let end = log.log_end_offset().0;
    // Quorum state: never regresses, same vote in an acknowledged epoch.
    let qs = node.dd.quorum_state();
    let acked_qs = candidates
        .iter()
        .map(|m| m.votes.last())
        .min_by_key(|v| v.map(|q| q.epoch));
    if let Some(Some(acked)) = acked_qs {
        if qs.epoch < acked.epoch {
            return Err(format!(
                "quorum state regressed: {} < {}",
                qs.epoch, acked.epoch
            ));
        }
        if qs.epoch == acked.epoch && qs.voted != acked.voted {
            return Err(format!("two votes in epoch {}", qs.epoch));
        }
    }
    let mut errors = Vec::new();
    'models: for m in candidates {
        // Snapshots: acknowledged ones listed; listed ones verify and match.
        for id in m.snapshots.keys() {
            if node.store.get(*id).is_none() && node.store.latest().is_none_or(|l| l.id < *id) {
                errors.push(format!("snapshot {id} lost"));
                continue 'models;
            }
        }
        if end < m.flushed {
            errors.push(format!("end {end} below flushed {}", m.flushed));
            continue;
        }
        if end > m.records.len() as u64 {
            errors.push(format!("end {end} beyond written {}", m.records.len()));
            continue;
        }
        // No entry below the log start without a snapshot (invariant 7).
        let covered = node.store.latest().map_or(0, |s| s.id.end_offset.0);
        if start > covered && start < end {
            errors.push(format!("log starts at {start}, snapshots cover {covered}"));
            continue;
        }
        return read_back(node, m, flipped);
    }
    Err(errors.join("; "))
}

fn read_back(node: &Node, m: &Model, flipped: bool) -> Result<Checked, String> {
    let log = &node.log;
    let mut checked = Checked::default();
    for s in node.store.list() {
        let (installed, data) = node
            .store
            .reader(s.id)
            .and_then(|mut r| {
                let installed = r.header().metadata == node::LEADER_MARK;
                Ok((installed, r.read_to_end()?))
            })
            .map_err(|e| format!("listed snapshot {} unreadable: {e}", s.id))?;
        if let Some(want) = m.snapshots.get(&s.id) {
            if &data != want {
                return Err(format!("snapshot {} content differs", s.id));
            }
        }
        if installed {
            checked.installed_snapshots += 1;
        }
    }
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        match log.read(at, 1 << 16) {
            Ok(r) => {
                for b in r.iter() {
                    let recs = b.to_vecs().map_err(|e| format!("{e}"))?;
                    for (i, rec) in recs.iter().enumerate() {
                        let o = b.base_offset().0 + i as u64;
                        if o < at.0 {
                            continue;
                        }
                        match m.records.get(usize::try_from(o).unwrap_or(usize::MAX)) {
                            Some(Some((e, want))) if *e == b.epoch().0 && want == rec => {
                                checked.records += 1;
                            }
                            other => {
                                return Err(format!(
                                    "offset {o}: wrong record returned (epoch {}, {} bytes; the \
                                     model has {:?})",
                                    b.epoch().0,
                                    rec.len(),
                                    other.map(|r| r.as_ref().map(|(e, w)| (*e, w.len())))
                                ))
                            }
                        }
                    }
                }
                at = r.next_offset().ok_or("empty read")?;
            }
            Err(LogError::Corruption { .. }) if flipped => {
                checked.corruption_reported = true;
                // Skip the damaged batch: find the next readable offset.
                at = Offset(at.0 + 1);
            }
            Err(e) => return Err(format!("read at {at}: {e}")),
        }
    }
    Ok(checked)
}

/// Runs one disturbed cycle of `ops` and checks it; the error names what
/// broke.
///
/// # Errors
/// A description of the violated invariant.
pub fn run_cycle(seed: u64, ops: &[Op], d: &Disturbance) -> Result<Checked, String> {
    let backend = Backend::of_seed(seed);
    let (disk, before, after, calls, _failed) = run(seed, ops, d)?;
    let mut flipped = false;
    if let Some(bit) = d.flip {
        flipped = flip_in_sealed_segment(&disk, bit);
    }
    let base = disk.calls();
    let log_before = log_dir_image(&disk);
    let first = open(&disk, backend);
    let mut checked = match first {
        Ok(node) => check(&node, &[&before, &after], flipped)?,
        Err(e) if flipped && e.contains("corrupt") => {
            // A refused open destroys no evidence. The one thing it does
            // first is finish a truncation whose intent was durable (it only
            // removes what the truncation removes): then the next refused
            // open must change nothing.
            let log_before = if log_before.contains_key("truncation.intent") {
                let again = log_dir_image(&disk);
                if open(&disk, backend).is_ok() {
                    return Err(format!(
                        "a second open accepted what the first refused: {e}"
                    ));
                }
                again
            } else {
                log_before
            };
            let log_after = log_dir_image(&disk);
            if log_after != log_before {
                let changed: Vec<&String> = log_before
                    .keys()
                    .chain(log_after.keys())
                    .filter(|k| log_before.get(*k) != log_after.get(*k))
                    .collect();
                return Err(format!(
                    "the refused open changed the log directory ({changed:?}): {e}"
                ));
            }
            Checked {
                corruption_reported: true,
                ..Checked::default()
            }
        }
        // A plain crash never makes a strict open refuse.
        Err(e) => return Err(format!("recovery failed: {e}")),
    };
    checked.calls = calls;
    checked.reopens = 1;
    if let Some(r) = d.recovery_crash {
        // The same crash, recovery cut short, then recovered again.
        // The run is repeated, and with a background flusher it need not
        // repeat the first one's I/O: whether the bit flip found a sealed
        // segment is this disk's own fact (the first disk's answer made a
        // flip here look like damage from the crash).
        let (disk2, before, after, _, _) = run(seed, ops, d)?;
        let flipped = d
            .flip
            .is_some_and(|bit| flip_in_sealed_segment(&disk2, bit));
        disk2.crash_after(r % (disk.calls() - base + 1));
        drop(open(&disk2, backend));
        let again = disk2.crash_with(CrashPlan::Random);
        match open(&again, backend) {
            Ok(node) => {
                check(&node, &[&before, &after], flipped)
                    .map_err(|e| format!("after a crash in recovery: {e}"))?;
            }
            Err(e) if flipped && e.contains("corrupt") => {}
            Err(e) => return Err(format!("second recovery failed: {e}")),
        }
        checked.reopens += 1;
    }
    Ok(checked)
}

/// Every file of the log directory with its bytes.
fn log_dir_image(disk: &SimFs) -> BTreeMap<String, Vec<u8>> {
    use quorumlog_io::{FileSystem, OpenMode};
    let dir = Path::new(DIR).join("log");
    let mut out = BTreeMap::new();
    for e in disk.list(&dir).unwrap_or_default() {
        let bytes = disk
            .open(&dir.join(&e.name), OpenMode::Read)
            .and_then(|f| f.read_to_end())
            .unwrap_or_default();
        out.insert(e.name, bytes);
    }
    out
}

/// Flips a bit inside the batches of a sealed (synced, checkpointed)
/// segment, if there is one. Returns whether it did.
fn flip_in_sealed_segment(disk: &SimFs, bit: u64) -> bool {
    use quorumlog_io::FileSystem;
    let dir = Path::new(DIR).join("log");
    let Ok(entries) = disk.list(&dir) else {
        return false;
    };
    let segs: Vec<String> = entries
        .into_iter()
        .map(|e| e.name)
        .filter(|n| {
            Path::new(n)
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("log"))
        })
        .collect();
    if segs.len() < 2 {
        return false;
    }
    let seg = &segs[usize::try_from(bit).unwrap_or(0) % (segs.len() - 1)];
    let path = dir.join(seg);
    let Some(bytes) = disk.durable_contents(&path) else {
        return false;
    };
    // Only bytes of batches (not padding, not the header page).
    let data: Vec<u64> = (4096..bytes.len() as u64)
        .filter(|&i| bytes[usize::try_from(i).unwrap_or(0)] != 0)
        .collect();
    if data.is_empty() {
        return false;
    }
    let pos = data[usize::try_from(bit / 7).unwrap_or(0) % data.len()];
    disk.flip_bit(&path, pos * 8 + bit % 8).is_ok()
}

/// A cycle chosen entirely by `seed` (workload, crash point, plan, fault,
/// flip, recovery crash): what the random tester and the soak run.
///
/// # Errors
/// The violated invariant, with the seed.
pub fn run_seed(seed: u64) -> Result<Checked, String> {
    let ops = workload(seed, 40);
    let calls = run(
        seed,
        &ops,
        &Disturbance {
            crash_after: None,
            plan: CrashPlan::KeepAll,
            fault: None,
            flip: None,
            recovery_crash: None,
        },
    )?
    .3;
    let mut rng = SimRng::new(seed.wrapping_mul(31));
    let plans = [
        CrashPlan::LoseUnsynced,
        CrashPlan::KeepAll,
        CrashPlan::Torn(Tear::Zeros),
        CrashPlan::Torn(Tear::Garbage),
        CrashPlan::Random,
    ];
    let fault_ops = [
        FaultOp::Write,
        FaultOp::Sync,
        FaultOp::Rename,
        FaultOp::SyncDir,
        FaultOp::Create,
        FaultOp::SetLen,
    ];
    let d = Disturbance {
        crash_after: Some(rng.below(calls + 1)),
        plan: plans[rng.index(plans.len())],
        fault: (rng.below(4) == 0).then(|| {
            let kind = if rng.below(2) == 0 {
                FaultKind::Eio
            } else {
                FaultKind::Enospc
            };
            (
                fault_ops[rng.index(fault_ops.len())],
                1 + rng.below(20),
                kind,
            )
        }),
        flip: (rng.below(4) == 0).then(|| rng.next_u64()),
        recovery_crash: (rng.below(2) == 0).then(|| rng.next_u64()),
    };
    run_cycle(seed, &ops, &d).map_err(|e| {
        format!(
            "seed {seed}: {e}\n  disturbance: {d:?}\n  replay: QUORUMLOG_HARNESS_SEED={seed} cargo test -p quorumlog-testkit --test crash_harness replay"
        )
    })
}

/// Exhaustive mode: `ops` (a small canonical workload) crashed at every I/O
/// call with each tear variant. Returns the crash states explored.
///
/// # Errors
/// The violated invariant.
pub fn run_exhaustive(ops: &[Op]) -> Result<u64, String> {
    let none = Disturbance {
        crash_after: None,
        plan: CrashPlan::KeepAll,
        fault: None,
        flip: None,
        recovery_crash: None,
    };
    let calls = run(0, ops, &none)?.3;
    let mut states = 0;
    for point in 0..=calls {
        for plan in [
            CrashPlan::LoseUnsynced,
            CrashPlan::KeepAll,
            CrashPlan::Torn(Tear::Zeros),
            CrashPlan::Torn(Tear::Garbage),
            CrashPlan::Torn(Tear::Old),
        ] {
            let d = Disturbance {
                crash_after: Some(point),
                plan,
                ..none
            };
            run_cycle(point, ops, &d)
                .map_err(|e| format!("{ops:?} crash after {point} {plan:?}: {e}"))?;
            states += 1;
        }
    }
    Ok(states)
}

/// The `crash_recovery` fuzz target: the input chooses the workload and the
/// disturbance.
///
/// # Panics
/// When an invariant is violated (that is the finding).
pub fn fuzz_crash_recovery(data: &[u8]) {
    let mut seed = 0u64;
    for (i, b) in data.iter().take(8).enumerate() {
        seed |= u64::from(*b) << (8 * i);
    }
    if let Err(e) = run_seed(seed) {
        panic!("{e}");
    }
    // The same input drives a crash cycle of the `KRaft` wing and a run
    // of the engine's model (a node of one group or many).
    if let Err(e) = crate::kraft_crash::run_kraft_case(seed) {
        panic!("{e}");
    }
    crate::engine_model::run_engine_case(seed, 120);
}
