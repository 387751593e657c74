//! [`Node`]: many Raft groups in one data directory, one shared log and
//! one group commit for all of them (docs/design.md §9).
//!
//! Every change to a group is a batch of the shared log whose first
//! record, the node record header ([`record`]), names the group and what
//! the batch does: entries, a rewrite of live entries moved forward, a
//! suffix truncation, a purge, a restart at a snapshot, a vote, a durable
//! high watermark, application metadata, the group's creation or drop. A
//! group's state is the fold of its records in log order, the same fold
//! at runtime and at recovery. One sync round of the shared log makes
//! every group's queued batches durable; each group's completions fire in
//! its own submission order because they fire in the log's.
//!
//! Recovery loads `groups.ckpt` (every group's state as of a log
//! position, written every [`NodeOptions::checkpoint_every_bytes`] of log
//! and at close, only once the log is durable to that position) and
//! replays the log after it: the work follows the tail, not the number of
//! groups times the log size.
//!
//! Space: a segment is deleted once no group's live entries are in it and
//! a checkpoint is past it. A group that never purges would pin every
//! segment after its oldest entry; when the log's segments pass
//! [`NodeOptions::garbage_percent`] of the live bytes, the live entries
//! of the oldest segment are rewritten at the head (a `Rewrite` batch,
//! the same offsets and epochs) and the segment goes.
//!
//! One handle per group ([`Node::group`]): a second is refused with
//! [`Error::GroupInUse`], so one writer orders a group's appends.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use quorumlog_checkpoint::{format_with, DataDir, Epoch, Meta, Offset, OpenOptions, SharedFs};
use quorumlog_log::{DurableLog, EncodedBatch, SyncPolicy};

mod batch;
pub(crate) mod ckpt;
mod fold;
mod group;
mod import;
pub(crate) mod index;
mod inspect;
mod maintain;
mod options;
mod place;
pub(crate) mod record;
mod repair;
mod worker;

pub use batch::WriteBatch;
pub use group::{Encode, Extent, Group, GroupInstall, GroupSnapshot, GroupWriter, Purge, Records};
pub use import::ImportReport;
pub use index::RUN_BYTES;
pub use inspect::{inspect_node, DamageCost, GroupSummary, NodeDamage, NodeFold, NodeSummary};
pub use options::{NodeOpenReport, NodeOptions, NodeStats, SpaceUse, WatermarkDurability};
pub use record::{describe_node_record, NodeRecordInfo};
pub use repair::NodeRepairReport;

use crate::error::{Error, Result};
use crate::types::Identity;
pub(crate) use ckpt::is_node_dir;
use ckpt::{read_checkpoint, write_checkpoint_file};
use fold::{check_position, fold, replay};
use index::{GroupState, IdMap};
use record::{Header, Kind, HEADER_BYTES};
use worker::{background, Signal, StopOnDrop};

/// The shared log's epoch for every node batch (group epochs are in the
/// node record header).
const NODE_EPOCH: Epoch = Epoch(1);

#[derive(Debug, Default)]
pub(crate) struct NodeState {
    pub(crate) groups: IdMap<GroupState>,
    pub(crate) dropped: BTreeSet<u64>,
    /// The position of the last durable checkpoint.
    pub(crate) ckpt_position: u64,
    /// Bytes appended since it.
    pub(crate) since_ckpt: u64,
    /// The shared-log offset after the last batch folded: only grows
    /// (every batch is folded once, in log order).
    pub(crate) folded_end: u64,
    /// Per group, a high watermark record queued for a round not yet
    /// durable: its value and the shared end after it (kept here, not in
    /// the group's state: few groups have one, and every group's state
    /// counts against its idle size).
    pub(crate) queued_hw: IdMap<(u64, u64)>,
}

#[derive(Debug, Default)]
struct Counters {
    appended: AtomicU64,
    rewritten: AtomicU64,
    checkpoints: AtomicU64,
    freed: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) dd: Arc<DataDir>,
    pub(crate) log: DurableLog,
    pub(crate) state: Mutex<NodeState>,
    pub(crate) options: NodeOptions,
    /// One checkpoint or reclamation at a time.
    maintenance: Mutex<()>,
    /// The background thread's stop flag and wake-up (stopped when this
    /// state goes).
    pub(crate) signal: StopOnDrop,
    counters: Counters,
}

/// Many Raft groups in one data directory.
#[derive(Debug)]
pub struct Node {
    inner: Arc<Inner>,
}

const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Node>();
    shared::<Group>();
};

impl Node {
    /// Formats `dir` for a node of identity `meta`, with no group.
    ///
    /// # Errors
    /// As `quorumlog_checkpoint::format_with` (a formatted or foreign
    /// directory is refused); `Log`; I/O.
    pub fn format(fs: &SharedFs, dir: &Path, meta: Meta, options: &NodeOptions) -> Result<()> {
        format_with(fs, dir, meta)?;
        let dd = Arc::new(DataDir::open(fs.clone(), dir, &OpenOptions::default())?);
        let log = DurableLog::open(Arc::clone(&dd), options.log.clone(), SyncPolicy::Never)?;
        let position = log.log_end_offset().0;
        write_checkpoint_file(
            fs,
            dir,
            &ckpt::encode(position, std::iter::empty(), &BTreeSet::new()),
        )?;
        log.close()?;
        Ok(())
    }

    /// Opens the node of `dir`, which must be `expect`'s: loads its
    /// checkpoint and replays the log after it.
    ///
    /// # Errors
    /// `Checkpoint(IdentityMismatch…)` before anything changes;
    /// `WrongLayout` for a one-group store's directory; `NodeCorrupt`
    /// naming the group and offset; `Log` (recovery refused, I/O).
    pub fn open(
        fs: &SharedFs,
        dir: &Path,
        expect: &Identity,
        options: &NodeOptions,
    ) -> Result<(Node, NodeOpenReport)> {
        let dd = DataDir::open(fs.clone(), dir, &expect.open_options());
        let dd = Arc::new(dd.inspect(|_| log_backend(fs, dir))?);
        let checkpoint = read_checkpoint(fs, dd.path())?;
        let position = checkpoint.position;
        // The checkpoint is checked against what recovery will leave before
        // recovery changes a byte: a refused open changes nothing.
        let mut refusal = None;
        let log = DurableLog::open_checked(
            Arc::clone(&dd),
            options.log.clone(),
            options.sync,
            &mut |plan| {
                refusal = check_position(position, plan.log_start.0, plan.log_end.0)
                    .and_then(|()| {
                        fold::check_runs(checkpoint.groups.iter(), plan.log_start.0, |id| {
                            latest_snapshot_end(fs, &group::snapshot_dir(&dd, id))
                        })
                    })
                    .err();
                refusal
                    .as_ref()
                    .map_or(Ok(()), |_| Err(quorumlog_log::Error::OpenRefused))
            },
        )
        .map_err(|e| refusal.take().unwrap_or_else(|| e.into()))?;
        check_position(position, log.log_start_offset().0, log.log_end_offset().0)?;
        let mut state = NodeState {
            groups: checkpoint.groups,
            dropped: checkpoint.dropped,
            ckpt_position: position,
            since_ckpt: 0,
            folded_end: position,
            queued_hw: IdMap::default(),
        };
        let (replayed_batches, replayed_bytes) = replay(&log, &mut state, position)?;
        settle_replayed(&mut state, replayed_bytes);
        // A drop whose snapshot directory outlived a crash.
        for id in &state.dropped {
            remove_snapshots(fs, &group::snapshot_dir(&dd, *id))?;
        }
        let report = NodeOpenReport {
            log: log.recovery_report(),
            groups: state.groups.len(),
            checkpoint_position: Offset(position),
            replayed_batches,
            replayed_bytes,
        };
        let inner = Arc::new(Inner {
            dd,
            log,
            state: Mutex::new(state),
            options: options.clone(),
            maintenance: Mutex::new(()),
            signal: StopOnDrop(Arc::new(Signal::default())),
            counters: Counters::default(),
        });
        // The thread holds the node weakly: it runs while the node or
        // any group handle does, and stops when the last of them goes.
        let worker = options.background.then(|| {
            let (weak, signal) = (Arc::downgrade(&inner), Arc::clone(&inner.signal.0));
            std::thread::Builder::new()
                .name("quorumlog-node".into())
                .spawn(move || background(&weak, &signal))
        });
        match worker {
            Some(Ok(h)) => inner.signal.0.set_worker(h),
            Some(Err(e)) => return Err(Error::Checkpoint(e.into())),
            None => {}
        }
        inner.signal.0.acquire();
        Ok((Node { inner }, report))
    }

    /// Creates group `id`, its log empty at `initial_offset` (1 for a Raft
    /// whose first index is 1): durable on return.
    ///
    /// # Errors
    /// `GroupExists`; `GroupDropped` for an id used before; `Poisoned`; I/O.
    pub fn create_group(&self, id: u64, initial_offset: Offset) -> Result<()> {
        let h = Header {
            kind: Kind::Create,
            group: id,
            offset: initial_offset.0,
            epoch: 0,
            control: false,
        };
        self.inner.control(h, None, |st| {
            if st.dropped.contains(&id) {
                return Err(Error::GroupDropped { group: id });
            }
            if st.groups.contains_key(&id) {
                return Err(Error::GroupExists { group: id });
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Drops group `id`: durable on return, its snapshots deleted, its
    /// log's space reclaimed as its segments free up. Its id is never used
    /// again.
    ///
    /// # Errors
    /// `UnknownGroup`, `GroupDropped`; `GroupInUse` while a handle is open;
    /// `Poisoned`; I/O.
    pub fn drop_group(&self, id: u64) -> Result<()> {
        let h = Header {
            kind: Kind::Drop,
            group: id,
            offset: 0,
            epoch: 0,
            control: false,
        };
        self.inner.control(h, None, |st| match st.groups.get(&id) {
            None if st.dropped.contains(&id) => Err(Error::GroupDropped { group: id }),
            None => Err(Error::UnknownGroup { group: id }),
            Some(g) if g.owned => Err(Error::GroupInUse { group: id }),
            Some(_) => Ok(()),
        })?;
        remove_snapshots(self.inner.dd.fs(), &group::snapshot_dir(&self.inner.dd, id))
    }

    /// The groups, in id order.
    pub fn groups(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.inner.state().groups.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Opens the handle of group `id`, reconciling it with its snapshots
    /// as `Store::open` does.
    ///
    /// # Errors
    /// `UnknownGroup`, `GroupDropped`, `GroupInUse`; `Snapshot`;
    /// `MissingSnapshot`; I/O.
    pub fn group(&self, id: u64) -> Result<Group> {
        {
            let mut st = self.inner.state();
            if st.dropped.contains(&id) {
                return Err(Error::GroupDropped { group: id });
            }
            let g = st
                .groups
                .get_mut(&id)
                .ok_or(Error::UnknownGroup { group: id })?;
            if g.owned {
                return Err(Error::GroupInUse { group: id });
            }
            g.owned = true;
        }
        Group::open(Arc::clone(&self.inner), id)
    }

    /// This node's identity.
    pub fn identity(&self) -> Identity {
        Identity::of(&self.inner.dd.meta())
    }

    /// Writes a checkpoint now (the log made durable to where it is), then
    /// frees what no group needs, rewriting old live entries forward while
    /// the log's segments exceed the garbage bound. What the background
    /// thread does on its own.
    ///
    /// # Errors
    /// `Poisoned`; I/O.
    pub fn maintain(&self) -> Result<()> {
        self.inner.maintain(true)
    }

    /// Makes everything queued on the node's shared log so far durable,
    /// on this thread: it leads the round (or waits for the one in flight,
    /// then leads the next). Returns at once when nothing is queued. For
    /// a loop that leads its node's rounds before it sleeps, under
    /// `SyncPolicy::CallerLed` (an async runtime's park hook, a Ready
    /// loop); the completions the round covers fire on this thread.
    ///
    /// # Errors
    /// `Poisoned`; the round's I/O failure (which poisons).
    pub fn lead_round(&self) -> Result<()> {
        let end = self.inner.log.queued_end();
        if self.inner.log.flushed_offset() >= end {
            return Ok(());
        }
        self.inner.make_durable(end.0)
    }

    /// What the node has done since it opened and what it holds now:
    /// its counters, the shared log's counts and latency histograms
    /// (syncs, records per sync, sync and append-to-durable latency, queue
    /// depth, a round overdue…), disk use against live data, and the
    /// memory its indexes take.
    pub fn stats(&self) -> NodeStats {
        let c = &self.inner.counters;
        NodeStats {
            appended_bytes: c.appended.load(Ordering::Relaxed),
            rewritten_bytes: c.rewritten.load(Ordering::Relaxed),
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            segments_freed: c.freed.load(Ordering::Relaxed),
            syncs: self.inner.log.sync_count(),
            log: self.inner.log.stats(),
            space: self.inner.space(),
            log_index_memory_bytes: self.inner.log.index_memory_bytes(),
            index_memory_bytes: self
                .inner
                .state()
                .groups
                .values()
                .map(GroupState::memory_bytes)
                .sum(),
        }
    }

    /// The failure that poisoned the node, if one did.
    pub fn poisoned(&self) -> Option<quorumlog_io::Failure> {
        self.inner.dd.poisoned()
    }

    /// Closes cleanly: the log made durable, a checkpoint at its end (the
    /// next open replays nothing), the log's clean close, the directory's
    /// lock released. Every group handle must be dropped first (a router
    /// or a Raft library that keeps one: remove it before closing).
    ///
    /// A handle that is being released elsewhere is waited for, up to five
    /// seconds: a Raft library drops its storage from its own tasks
    /// after its shutdown returns (openraft 0.10 does), so a close right
    /// after a shutdown would otherwise be refused at random.
    ///
    /// # Errors
    /// `GroupsHeld` naming the groups whose handles are still alive after five
    /// seconds: nothing is written, and the node is dropped as by
    /// `drop` (it stays open, and its directory locked, until the last
    /// handle goes; the next open then replays from the last checkpoint).
    /// As the log's close; the checkpoint's I/O.
    pub fn close(self) -> Result<()> {
        let deadline = std::time::Instant::now() + CLOSE_WAIT;
        let mut pause = std::time::Duration::from_micros(100);
        loop {
            let held = self.held_groups();
            if held.is_empty() {
                break;
            }
            if std::time::Instant::now() >= deadline {
                return Err(Error::GroupsHeld { groups: held });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(20));
        }
        self.inner.signal.0.stop_and_join();
        self.inner.checkpoint()?;
        let inner = Arc::clone(&self.inner);
        drop(self);
        match Arc::try_unwrap(inner) {
            Ok(inner) => Ok(inner.log.close()?),
            // Something still holds the node (a handle taken by another
            // thread since the check above): the close did not complete.
            Err(inner) => {
                let groups = held_groups(&inner);
                Err(Error::GroupsHeld { groups })
            }
        }
    }

    /// The groups whose handles are alive.
    fn held_groups(&self) -> Vec<u64> {
        held_groups(&self.inner)
    }
}

/// The groups of `inner` whose handles are alive.
fn held_groups(inner: &Inner) -> Vec<u64> {
    inner
        .state()
        .groups
        .iter()
        .filter(|(_, g)| g.owned)
        .map(|(id, _)| *id)
        .collect()
}

/// How long [`Node::close`] waits for group handles being released
/// elsewhere before it refuses.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Drop for Node {
    /// Stops the background thread, unless a group handle outlives the
    /// node: then it keeps the node maintained (checkpoints, reclamation)
    /// until the last handle goes.
    fn drop(&mut self) {
        self.inner.signal.0.release();
    }
}

/// The end of the latest snapshot published in `dir`, read from the file
/// names alone (nothing is changed: the open may still refuse).
fn latest_snapshot_end(fs: &SharedFs, dir: &Path) -> Option<u64> {
    fs.list(dir)
        .ok()?
        .iter()
        .filter_map(|e| e.name.strip_suffix(".snapshot"))
        .filter_map(quorumlog_snapshot::SnapshotId::parse_stem)
        .map(|id| id.end_offset.0)
        .max()
}

/// After the replay: everything replayed is durable, the high watermarks
/// within their logs.
fn settle_replayed(state: &mut NodeState, replayed_bytes: u64) {
    for g in state.groups.values_mut() {
        g.pending.clear();
        g.durable_end = g.end;
        g.hw = g.durable_hw.map(|h| h.clamp(g.start, g.end));
    }
    state.since_ckpt = replayed_bytes;
}

/// Logs, once per open, which backend writes and syncs and why (the
/// `io_uring` probe's refusal, or a build without the feature).
fn log_backend(fs: &SharedFs, dir: &Path) {
    tracing::info!(
        target: "quorumlog",
        dir = %dir.display(),
        backend = %fs.backend_description(),
        "opening the node"
    );
}

/// Removes a dropped group's snapshots, if any.
fn remove_snapshots(fs: &SharedFs, dir: &Path) -> Result<()> {
    let io = |e: std::io::Error| Error::Checkpoint(e.into());
    if !fs.exists(dir).map_err(io)? {
        return Ok(());
    }
    let files = fs.list(dir).map_err(io)?;
    if files.is_empty() {
        return Ok(());
    }
    for e in files {
        fs.remove_file(&dir.join(&e.name)).map_err(io)?;
    }
    // The empty directory stays (the file system layer has no directory
    // removal); a dropped id is never used again.
    fs.sync_dir(dir).map_err(io)?;
    Ok(())
}

/// The bytes a node batch of `records` takes beyond them: the batch
/// header (40), the node record header and its length prefix.
pub const NODE_BATCH_OVERHEAD: usize = 40 + HEADER_BYTES + 4;
