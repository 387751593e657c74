//! The node a harness run drives (`Log` or `DurableLog` beside the quorum
//! state and the snapshots) and how each operation is applied to it and to
//! the model. The engine above the log has crash models of its own: a
//! node's groups (`quorumlog-raft`'s `tests/node_model.rs`,
//! `tests/node_crash.rs`) and the `KRaft` wing ([`crate::kraft_crash`]).
#![expect(
    clippy::indexing_slicing,
    reason = "test machinery: indices into its own model; a panic fails the test that drives it"
)]

mod install;

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{
    DataDir, DirectoryId, Epoch, NodeId, Offset, OpenOptions, QuorumState, SharedFs, Vote,
};
use quorumlog_io::SimFs;
use quorumlog_log::{
    DurableLog, Error as LogError, FollowerBatch, Log, LogOptions, ReadBatches, SyncPolicy,
    TailWrites,
};
use quorumlog_snapshot::{SnapshotId, SnapshotStore, WriterOptions};

use crate::{payload, small_log_options};

use super::workload::{page_end_len, Op, DIR};
use super::Model;

/// Segments of 4 pages: padding happens inside segments, and they roll
/// often (bit flips go to sealed segments).
fn options() -> LogOptions {
    LogOptions {
        segment_size_bytes: 16 << 10,
        max_batch_bytes: 8 << 10,
        ..small_log_options()
    }
}

/// The log type a run drives: the plain `Log`, or `DurableLog` (the type
/// embedders use; with `SyncPolicy::Never` and explicit flushes, so the
/// order of I/O calls stays deterministic for the crash points).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// [`Log`].
    Plain,
    /// [`DurableLog`].
    Durable,
    /// [`DurableLog`] with `TailWrites::Buffered` (the default, `Direct`,
    /// sends flushed group writes straight to the simulated device,
    /// aligned and durable on return).
    DurableBuffered,
}

impl Backend {
    /// The backend a seed runs on: bit 5 of the seed (independent of the
    /// page tearing, bit 0; the seeds pinned before the backend choice
    /// existed keep running on `Log`), then bit 6 for buffered tail writes.
    pub fn of_seed(seed: u64) -> Backend {
        if (seed >> 5) & 1 == 0 {
            Backend::Plain
        } else if (seed >> 6) & 1 == 0 {
            Backend::Durable
        } else {
            Backend::DurableBuffered
        }
    }
}

/// `Log` or `DurableLog`, driven alike.
pub(super) enum AnyLog {
    Plain(Box<Log>),
    Durable(DurableLog),
}

macro_rules! both {
    ($log:expr, $l:ident => $e:expr) => {
        match $log {
            AnyLog::Plain($l) => $e,
            AnyLog::Durable($l) => $e,
        }
    };
}

impl AnyLog {
    pub(super) fn log_end_offset(&self) -> Offset {
        both!(self, l => l.log_end_offset())
    }
    pub(super) fn log_start_offset(&self) -> Offset {
        both!(self, l => l.log_start_offset())
    }
    /// The offset a suffix truncation may not go below.
    pub(super) fn truncation_floor(&self) -> u64 {
        both!(self, l => l.high_watermark()).map_or(0, |h| h.0)
    }
    pub(super) fn append_as_leader(&mut self, epoch: Epoch, records: &[Vec<u8>]) -> bool {
        both!(self, l => l.append_as_leader(epoch, records).is_ok())
    }
    fn append_as_follower(&mut self, batches: &[FollowerBatch<'_, Vec<u8>>]) -> bool {
        both!(self, l => l.append_as_follower(batches).is_ok())
    }
    /// Rolls into recycled segment files since this log was opened.
    pub(super) fn segments_recycled(&self) -> u64 {
        both!(self, l => l.segments_recycled())
    }

    pub(super) fn flush(&mut self) -> bool {
        both!(self, l => l.flush().is_ok())
    }
    fn truncate_to(&mut self, offset: Offset) -> bool {
        both!(self, l => l.truncate_to(offset).is_ok())
    }
    fn close(self) -> bool {
        match self {
            AnyLog::Plain(l) => l.close().is_ok(),
            AnyLog::Durable(l) => l.close().is_ok(),
        }
    }
    pub(super) fn read(&self, from: Offset, max_bytes: u64) -> Result<ReadBatches, LogError> {
        both!(self, l => l.read(from, max_bytes))
    }
}

impl AnyLog {
    /// Deletes the log prefix below `up_to`, never past the latest durable
    /// snapshot nor the log end (invariant 7).
    fn clean_prefix(&mut self, snapshots: &SnapshotStore, up_to: Offset) -> bool {
        let Some(latest) = snapshots.latest() else {
            return true;
        };
        let bound = up_to
            .min(latest.id.end_offset)
            .min(AnyLog::log_end_offset(self));
        if bound <= AnyLog::log_start_offset(self) {
            return true;
        }
        match self {
            AnyLog::Plain(l) => l.truncate_prefix_to(bound).is_ok(),
            AnyLog::Durable(l) => l.truncate_prefix_to(bound).is_ok(),
        }
    }
}

pub(super) struct Node {
    pub(super) dd: Arc<DataDir>,
    pub(super) log: AnyLog,
    pub(super) store: SnapshotStore,
    backend: Backend,
}

pub(super) fn open(sim: &SimFs, backend: Backend) -> Result<Node, String> {
    let fs: SharedFs = Arc::new(sim.clone());
    let dd = Arc::new(
        DataDir::open(fs.clone(), Path::new(DIR), &OpenOptions::default())
            .map_err(|e| format!("data dir: {e}"))?,
    );
    let store =
        SnapshotStore::open(fs, &dd.snapshots_dir()).map_err(|e| format!("snapshots: {e}"))?;
    let log = match backend {
        Backend::Plain => Log::open(Arc::clone(&dd), options()).map(|l| AnyLog::Plain(Box::new(l))),
        Backend::Durable => {
            DurableLog::open(Arc::clone(&dd), options(), SyncPolicy::Never).map(AnyLog::Durable)
        }
        Backend::DurableBuffered => {
            let buffered = LogOptions {
                tail_writes: TailWrites::Buffered,
                ..options()
            };
            DurableLog::open(Arc::clone(&dd), buffered, SyncPolicy::Never).map(AnyLog::Durable)
        }
    }
    .map_err(|e| format!("log: {e}"))?;
    Ok(Node {
        dd,
        log,
        store,
        backend,
    })
}

pub(super) fn state_below(m: &Model, end: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for r in m
        .records
        .iter()
        .take(usize::try_from(end).unwrap_or(0))
        .flatten()
    {
        out.extend_from_slice(&r.1);
    }
    out
}

/// Leader append of `count` records of `size` bytes (in a new epoch if
/// `bump`).
fn leader_append(n: &mut Node, m: &mut Model, count: u8, size: u16, bump: bool, gen: u64) -> bool {
    let epoch = m.epoch + u64::from(bump);
    let base = n.log.log_end_offset().0;
    let recs: Vec<Vec<u8>> = (0..u64::from(count))
        .map(|i| payload(base + i, gen, usize::from(size)))
        .collect();
    m.epoch = epoch;
    m.records
        .extend(recs.iter().cloned().map(|r| Some((epoch, r))));
    n.log.append_as_leader(Epoch(epoch), &recs)
}

/// Follower append: `count` records of `size` bytes arriving as
/// replicated batches of one record each.
fn follower_append(n: &mut Node, m: &mut Model, count: u8, size: u16, gen: u64) -> bool {
    let base = n.log.log_end_offset().0;
    let recs: Vec<Vec<u8>> = (0..u64::from(count))
        .map(|i| payload(base + i, gen, usize::from(size)))
        .collect();
    let batches: Vec<FollowerBatch<'_, Vec<u8>>> = recs
        .iter()
        .enumerate()
        .map(|(i, r)| FollowerBatch {
            base_offset: Offset(base + i as u64),
            epoch: Epoch(m.epoch),
            records: std::slice::from_ref(r),
        })
        .collect();
    m.records
        .extend(recs.iter().cloned().map(|r| Some((m.epoch, r))));
    n.log.append_as_follower(&batches)
}

/// Applies `op` to the model (its intended effect) and then to the node.
/// Returns whether the node acknowledged it; if not, the model holds the
/// state the operation was heading for (the caller keeps the one before).
pub(super) fn apply(node: &mut Option<Node>, sim: &SimFs, m: &mut Model, op: Op, gen: u64) -> bool {
    let Some(n) = node.as_mut() else {
        return false;
    };
    match op {
        Op::Append {
            n: count,
            size,
            bump,
        } => leader_append(n, m, count, size, bump, gen),
        Op::Follower { n: count, size } => follower_append(n, m, count, size, gen),
        Op::Flush => {
            m.flushed = m.records.len() as u64;
            n.log.flush()
        }
        Op::PageEnd { gap, pages } => {
            let base = n.log.log_end_offset().0;
            let rec = payload(base, gen, page_end_len(gap, pages));
            m.records.push(Some((m.epoch, rec.clone())));
            m.flushed = m.records.len() as u64;
            n.log.append_as_leader(Epoch(m.epoch), &[rec]) && n.log.flush()
        }
        Op::Install { chunks, finish } => install::install(n, m, chunks, finish),
        Op::Truncate(x) => {
            let lo = n.log.truncation_floor().max(m.start);
            let end = m.records.len() as u64;
            let x = lo + x % (end - lo + 1);
            m.records.truncate(usize::try_from(x).unwrap_or(0));
            m.flushed = m.flushed.min(x);
            m.truncations += 1;
            n.log.truncate_to(Offset(x))
        }
        Op::Vote(candidate) => {
            let current = n.dd.quorum_state();
            let next = QuorumState {
                epoch: Epoch(current.epoch.0 + 1),
                leader: None,
                voted: Some(Vote {
                    node_id: NodeId(candidate),
                    directory_id: DirectoryId(u128::from(candidate) + 1),
                }),
            };
            m.votes.push(next.clone());
            n.dd.persist_quorum_state(&next).is_ok()
        }
        Op::SnapshotAndClean => snapshot_and_clean(n, m),
        Op::Reopen => {
            m.flushed = m.records.len() as u64;
            let backend = n.backend;
            let closed = node.take().is_some_and(|n| {
                super::note_recycled(&n.log);
                n.log.close()
            });
            if !closed {
                return false;
            }
            match open(sim, backend) {
                Ok(fresh) => {
                    *node = Some(fresh);
                    true
                }
                Err(_) => false,
            }
        }
    }
}

/// The metadata of a leader's snapshot (how the checks tell an installed
/// snapshot from a local one).
pub(super) const LEADER_MARK: &[u8] = b"leader";

/// The leader's snapshot of the model's flushed state, as raw file bytes
/// (made on a separate simulated disk, deterministic for a given state).
/// Its epoch is newer than any in the log (the leader's log diverged).
pub(super) fn leader_snapshot(m: &Model) -> Option<(SnapshotId, Vec<u8>)> {
    let end = m.flushed;
    if end == 0 {
        return None;
    }
    let epoch = 1000 + m.epoch * 1000 + m.truncations;
    let id = SnapshotId {
        end_offset: Offset(end),
        epoch: Epoch(epoch),
    };
    let fs: SharedFs = Arc::new(SimFs::new(end));
    let store = SnapshotStore::open(fs, Path::new("/leader")).ok()?;
    let mut w = store
        .create(
            id,
            LEADER_MARK,
            WriterOptions {
                chunk_bytes: 512,
                zstd_level: None,
            },
        )
        .ok()?;
    w.write(&state_below(m, end)).ok()?;
    w.freeze().ok()?;
    Some((id, store.read_chunk(id, 0, usize::MAX).ok()?))
}

fn snapshot_and_clean(n: &mut Node, m: &mut Model) -> bool {
    let end = m.flushed;
    let Some(epoch) = (end > 0)
        .then(|| {
            m.records[usize::try_from(end - 1).unwrap_or(0)]
                .as_ref()
                .map(|r| r.0)
        })
        .flatten()
    else {
        return true;
    };
    let id = SnapshotId {
        end_offset: Offset(end),
        epoch: Epoch(epoch),
    };
    if n.store.latest().is_some_and(|l| l.id >= id) {
        return true;
    }
    let data = state_below(m, end);
    m.snapshots.insert(id, data.clone());
    let frozen = (|| {
        let mut w = n.store.create(
            id,
            b"",
            WriterOptions {
                chunk_bytes: 512,
                zstd_level: None,
            },
        )?;
        w.write(&data)?;
        w.freeze()
    })();
    if frozen.is_err() {
        return false;
    }
    m.start = m.start.max(end.min(m.records.len() as u64));
    let Node { log, store, .. } = n;
    log.clean_prefix(store, Offset(end))
}
