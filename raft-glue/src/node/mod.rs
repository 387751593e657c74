//! [`Node`]: many Raft groups in one data directory, one shared log and
//! one group commit for all of them (docs/design.md §8d).
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

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use quorumlog_checkpoint::{format_with, DataDir, Epoch, Meta, Offset, OpenOptions, QuorumState};
use quorumlog_checkpoint::{SharedFs, SmallFile};
use quorumlog_io::{parent_dir, OpenMode};
use quorumlog_log::{DurableLog, EncodedBatch, LogOptions, RecoveryReport, SyncPolicy};

mod batch;
mod ckpt;
mod group;
mod import;
pub(crate) mod index;
mod inspect;
pub(crate) mod record;
mod repair;

pub use batch::WriteBatch;
pub use group::{Group, GroupInstall, GroupWriter};
pub use import::ImportReport;
pub use index::RUN_BYTES;
pub use inspect::{inspect_node, GroupSummary, NodeSummary};
pub use record::{describe_node_record, NodeRecordInfo};
pub use repair::NodeRepairReport;

use crate::error::{Error, Result};
use crate::store::Identity;
use index::{GroupState, Run};
use record::{Header, Kind, HEADER_BYTES};

/// The shared log's epoch for every node batch (group epochs are in the
/// node record header).
const NODE_EPOCH: Epoch = Epoch(1);

/// How a node is opened.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The shared log's options. Default: `LogOptions::default()` with
    /// `index_interval_bytes` 1, an index entry for every batch (8 bytes
    /// each), so a read of one group finds its batch at once and never
    /// reads another group's bytes; a larger interval saves that memory
    /// and makes a read walk up to one interval of other groups' batches.
    pub log: LogOptions,
    /// The shared log's sync policy. Default: group commit.
    pub sync: SyncPolicy,
    /// Log bytes between two checkpoints: what a reopen after a crash
    /// replays at most (plus what was written while the last one was
    /// taken). Default: 64 MiB.
    pub checkpoint_every_bytes: u64,
    /// How large the log's segments may grow against the live bytes
    /// before the oldest segment's live entries are rewritten forward, in
    /// percent. Default: 200 (disk ≤ 2 × live + two segments).
    pub garbage_percent: u64,
    /// Run checkpoints and reclamation on a background thread (every
    /// 100 ms and when an append passes the checkpoint interval). Off,
    /// [`Node::maintain`] does it when called. Default: on.
    pub background: bool,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            // An index entry for every batch: a read of one group goes
            // straight to its batch and reads no other group's bytes.
            log: LogOptions {
                index_interval_bytes: 1,
                ..LogOptions::default()
            },
            sync: SyncPolicy::GroupCommit,
            checkpoint_every_bytes: 64 << 20,
            garbage_percent: 200,
            background: true,
        }
    }
}

impl NodeOptions {
    /// The defaults with segments of `bytes` (batches at most a quarter of
    /// one) and none prepared ahead: for small deployments and tests, whose
    /// nodes then open in milliseconds (the defaults preallocate 128 MiB
    /// segments, two ahead).
    #[must_use]
    pub fn with_segment_bytes(bytes: u64) -> NodeOptions {
        let d = NodeOptions::default();
        NodeOptions {
            log: LogOptions {
                segment_size_bytes: bytes,
                max_batch_bytes: d.log.max_batch_bytes.min(bytes / 4),
                prefill_segments: 0,
                ..d.log
            },
            ..d
        }
    }
}

/// What a node's open found and did.
#[derive(Debug, Clone)]
pub struct NodeOpenReport {
    /// The shared log's recovery.
    pub log: RecoveryReport,
    /// The groups open.
    pub groups: usize,
    /// The checkpoint's log position.
    pub checkpoint_position: Offset,
    /// Batches replayed after it.
    pub replayed_batches: u64,
    /// Their bytes.
    pub replayed_bytes: u64,
}

/// Counters of a node's work since it opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Bytes of batches appended by groups (entries and control records).
    pub appended_bytes: u64,
    /// Bytes of live entries rewritten forward to free old segments.
    pub rewritten_bytes: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Segments deleted or recycled.
    pub segments_freed: u64,
    /// The shared log's syncs.
    pub syncs: u64,
}

/// Disk use against live data, now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpaceUse {
    /// Bytes of the log's segment files.
    pub log_bytes: u64,
    /// Bytes of the batches holding some group's live entries.
    pub live_bytes: u64,
    /// Segment files.
    pub segments: usize,
}

#[derive(Debug, Default)]
pub(crate) struct NodeState {
    pub(crate) groups: HashMap<u64, GroupState>,
    pub(crate) dropped: BTreeSet<u64>,
    /// The position of the last durable checkpoint.
    pub(crate) ckpt_position: u64,
    /// Bytes appended since it.
    pub(crate) since_ckpt: u64,
    /// The shared-log offset after the last batch folded: only grows
    /// (every batch is folded once, in log order).
    pub(crate) folded_end: u64,
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
    stop: Mutex<bool>,
    wake: Condvar,
    counters: Counters,
}

/// Many Raft groups in one data directory.
#[derive(Debug)]
pub struct Node {
    inner: Arc<Inner>,
    worker: Option<JoinHandle<()>>,
}

const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Node>();
    shared::<Group>();
};

/// Writes `bytes` as the node checkpoint of `dir` by atomic replace.
fn write_checkpoint_file(fs: &SharedFs, dir: &Path, bytes: &[u8]) -> Result<()> {
    let path = dir.join(ckpt::FILE_NAME);
    let tmp = dir.join(format!("{}.tmp", ckpt::FILE_NAME));
    let io = |e: std::io::Error| Error::Checkpoint(quorumlog_checkpoint::Error::from(e));
    let file = fs.open(&tmp, OpenMode::CreateOrTruncate).map_err(io)?;
    file.write_all_and_sync_at(bytes, 0).map_err(io)?;
    drop(file);
    fs.rename(&tmp, &path).map_err(io)?;
    fs.sync_dir(parent_dir(&path)).map_err(io)?;
    Ok(())
}

/// Reads and decodes the node checkpoint of the directory `dir` (the
/// open's reader and the inspectors'). No file: `WrongLayout`, a one-group
/// store's directory.
pub(crate) fn read_checkpoint(fs: &SharedFs, dir: &Path) -> Result<ckpt::Checkpoint> {
    let bytes = match fs.open(&dir.join(ckpt::FILE_NAME), OpenMode::Read) {
        Ok(f) => f.read_to_end().map_err(|e| Error::Checkpoint(e.into()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Told apart by what the log holds, not by the file alone: a
            // node that lost its checkpoint is damage, never a store.
            if log_holds_node_records(fs, dir)? {
                return Err(Error::NodeCorrupt {
                    group: None,
                    offset: Offset(0),
                    what: "the node checkpoint (groups.ckpt) is missing, but the log holds node records",
                });
            }
            return Err(Error::WrongLayout {
                path: dir.to_path_buf(),
                found: "a one-group store's directory (previous format: bring it over with `quorumlog import`)",
                expected: "a node's directory",
            });
        }
        Err(e) => return Err(Error::Checkpoint(e.into())),
    };
    ckpt::decode(&bytes).map_err(|what| Error::NodeCorrupt {
        group: None,
        offset: Offset(0),
        what,
    })
}

/// Whether the first batch of `dir`'s log is a node record (a node batch's
/// first record is a node record header, in the node's batch epoch): read
/// only, nothing changed. An empty log holds none.
fn log_holds_node_records(fs: &SharedFs, dir: &Path) -> Result<bool> {
    use quorumlog_log::inspect::{batch_records, walk_segments, Walk};
    let mut node = false;
    walk_segments::<_, Error>(fs.as_ref(), &dir.join("log"), Walk::Stop, |s, file, _| {
        let Some(b) = s.batches.first() else {
            return Ok(s.problems.is_empty());
        };
        let start = usize::try_from(b.position).unwrap_or(usize::MAX);
        let raw = file.get(start..start.saturating_add(b.bytes as usize));
        node = b.epoch == NODE_EPOCH
            && raw
                .and_then(|raw| batch_records(raw).ok())
                .and_then(|r| r.first().map(|h| Header::decode(h).is_ok()))
                .unwrap_or(false);
        Ok(false)
    })?;
    Ok(node)
}

/// Decodes a node checkpoint file (fuzzing).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn ckpt_decode(bytes: &[u8]) -> std::result::Result<ckpt::Checkpoint, &'static str> {
    ckpt::decode(bytes)
}

/// Encodes a decoded node checkpoint again (fuzzing).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn ckpt_encode(c: &ckpt::Checkpoint) -> Vec<u8> {
    ckpt::encode(c.position, c.groups.iter(), &c.dropped)
}

/// A valid checkpoint: two groups, one with runs, a vote, a purge point,
/// a watermark and metadata; a dropped id (fuzzing corpus).
#[cfg(test)]
pub(crate) fn ckpt_sample() -> Vec<u8> {
    let mut groups = HashMap::new();
    let mut g = GroupState::new(3);
    let run = Run {
        offset: 3,
        shared: 5,
        epoch: 2,
        count: 4,
        bytes: 90,
    };
    let _ = g.append(run);
    g.hw = Some(5);
    g.app_meta = Some(b"m".to_vec());
    g.last_purged = Some((Offset(3), Epoch(1)));
    groups.insert(7, g);
    groups.insert(9, GroupState::new(1));
    ckpt::encode(40, groups.iter(), &[4].into())
}

/// A valid node record header (fuzzing corpus).
#[cfg(test)]
pub(crate) fn record_sample() -> Vec<u8> {
    Header {
        kind: Kind::Purge,
        group: 7,
        offset: 11,
        epoch: 2,
    }
    .encode()
    .to_vec()
}

/// Whether `dir` holds a node (its checkpoint file exists, or its log
/// holds node records).
pub(crate) fn is_node_dir(fs: &SharedFs, dir: &Path) -> bool {
    fs.exists(&dir.join(ckpt::FILE_NAME)).unwrap_or(false)
        || log_holds_node_records(fs, dir).unwrap_or(false)
}

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
        let dd = Arc::new(DataDir::open(fs.clone(), dir, &expect.open_options())?);
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
                refusal = check_position(position, plan.log_start.0, plan.log_end.0).err();
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
        };
        let (replayed_batches, replayed_bytes) = replay(&log, &mut state, position)?;
        for g in state.groups.values_mut() {
            g.pending.clear();
            g.durable_end = g.end;
            g.hw = g.durable_hw.map(|h| h.clamp(g.start, g.end));
        }
        state.since_ckpt = replayed_bytes;
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
            stop: Mutex::new(false),
            wake: Condvar::new(),
            counters: Counters::default(),
        });
        let worker = options.background.then(|| {
            let inner = Arc::clone(&inner);
            std::thread::Builder::new()
                .name("quorumlog-node".into())
                .spawn(move || inner.background())
        });
        let worker = match worker {
            Some(Ok(h)) => Some(h),
            Some(Err(e)) => return Err(Error::Checkpoint(e.into())),
            None => None,
        };
        Ok((Node { inner, worker }, report))
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

    /// Counters since open.
    pub fn stats(&self) -> NodeStats {
        let c = &self.inner.counters;
        NodeStats {
            appended_bytes: c.appended.load(Ordering::Relaxed),
            rewritten_bytes: c.rewritten.load(Ordering::Relaxed),
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            segments_freed: c.freed.load(Ordering::Relaxed),
            syncs: self.inner.log.sync_count(),
        }
    }

    /// The shared log's counts and latency histograms since open
    /// (`quorumlog_log::LogStats`: syncs, records per sync, sync and
    /// append-to-durable latency, queue depth, a round overdue…).
    pub fn log_stats(&self) -> quorumlog_log::LogStats {
        self.inner.log.stats()
    }

    /// Disk use against live data.
    pub fn space(&self) -> SpaceUse {
        self.inner.space()
    }

    /// Bytes of memory the shared log's sparse index takes (8 per batch
    /// with the default options: an entry for every batch).
    pub fn log_index_memory_bytes(&self) -> usize {
        self.inner.log.index_memory_bytes()
    }

    /// Bytes of memory the groups' states take (indexes included).
    pub fn index_memory_bytes(&self) -> usize {
        self.inner
            .state()
            .groups
            .values()
            .map(GroupState::memory_bytes)
            .sum()
    }

    /// The failure that poisoned the node, if one did.
    pub fn poisoned(&self) -> Option<quorumlog_io::Failure> {
        self.inner.dd.poisoned()
    }

    /// Closes cleanly: the log made durable, a checkpoint at its end (the
    /// next open replays nothing), the log's clean close.
    ///
    /// # Errors
    /// As the log's close; the checkpoint's I/O.
    pub fn close(mut self) -> Result<()> {
        self.stop_worker();
        self.inner.checkpoint()?;
        let inner = Arc::clone(&self.inner);
        drop(self);
        match Arc::try_unwrap(inner) {
            Ok(inner) => Ok(inner.log.close()?),
            // A group handle outlives the node: the log closes with the
            // last one (the checkpoint above is at its end either way).
            Err(_) => Ok(()),
        }
    }

    fn stop_worker(&mut self) {
        if let Some(h) = self.worker.take() {
            *self
                .inner
                .stop
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = true;
            self.inner.wake.notify_all();
            let _ = h.join();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop_worker();
    }
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

/// Folds the batches of `log` from `from` into `state`. Returns the
/// batches and bytes read.
fn replay(log: &DurableLog, state: &mut NodeState, from: u64) -> Result<(u64, u64)> {
    let (mut batches, mut bytes) = (0u64, 0u64);
    let mut at = Offset(from);
    let end = log.log_end_offset();
    while at < end {
        let read = log.read(at, 8 << 20)?;
        let Some(next) = read.next_offset() else {
            break;
        };
        for b in read.iter() {
            if b.next_offset() <= at {
                continue;
            }
            let base = b.base_offset().0;
            let corrupt = |what| Error::NodeCorrupt {
                group: None,
                offset: Offset(base),
                what,
            };
            let mut records = b
                .records()
                .map_err(|_| corrupt("a node batch's records do not decode"))?;
            let head = records
                .next_record()
                .ok_or_else(|| corrupt("a node batch without its header"))?;
            let h = Header::decode(head).map_err(corrupt)?;
            let payload = records.next_record();
            let len = u32::try_from(b.raw().len()).unwrap_or(u32::MAX);
            fold(state, &h, base, b.record_count() - 1, len, payload).map_err(|what| {
                Error::NodeCorrupt {
                    group: Some(h.group),
                    offset: Offset(h.offset),
                    what,
                }
            })?;
            batches += 1;
            bytes += u64::from(len);
        }
        at = next;
    }
    Ok((batches, bytes))
}

/// Applies one node record (its batch at shared offset `base`, with
/// `count` records after the header) to the state: the one fold, at
/// runtime and at recovery.
///
/// # Errors
/// What breaks the format's rules, as a phrase.
/// Refuses a checkpoint at `position` outside a log of `[start, end]`.
fn check_position(position: u64, start: u64, end: u64) -> Result<()> {
    if position < start {
        return Err(Error::NodeCorrupt {
            group: None,
            offset: Offset(position),
            what: "the checkpoint is older than the log's start",
        });
    }
    if position > end {
        return Err(Error::NodeCorrupt {
            group: None,
            offset: Offset(position),
            what: "the log ends before the checkpoint's position",
        });
    }
    Ok(())
}

pub(crate) fn fold(
    st: &mut NodeState,
    h: &Header,
    base: u64,
    count: u32,
    bytes: u32,
    payload: Option<&[u8]>,
) -> std::result::Result<(), &'static str> {
    // The fold's end only grows: each batch once, in log order (`count`
    // counts its records after the header). Read from a directory, a batch
    // out of order is damage; placed at run time, a bug (`place`).
    if base < st.folded_end {
        return Err("a batch before the end of those already folded");
    }
    st.folded_end = base + 1 + u64::from(count);
    if h.kind == Kind::Create {
        if st.groups.contains_key(&h.group) || st.dropped.contains(&h.group) {
            return Err("a group created twice");
        }
        st.groups.insert(h.group, GroupState::new(h.offset));
        return Ok(());
    }
    if h.kind == Kind::Drop {
        if st.groups.remove(&h.group).is_none() {
            return Err("a drop of a group that does not exist");
        }
        st.dropped.insert(h.group);
        return Ok(());
    }
    let g = st
        .groups
        .get_mut(&h.group)
        .ok_or("a record of a group that does not exist")?;
    if matches!(h.kind, Kind::Entries | Kind::Rewrite)
        && h.offset.checked_add(u64::from(count)).is_none()
    {
        // Offsets never wrap: an append that would is refused before it is
        // written, so such a record is damage.
        return Err("entries whose offsets pass the offset space");
    }
    match h.kind {
        Kind::Create | Kind::Drop => {}
        Kind::Entries => {
            if count == 0 {
                return Err("an entries batch without entries");
            }
            g.append(Run {
                offset: h.offset,
                shared: base + 1,
                epoch: h.epoch,
                count,
                bytes,
            })
            .map_err(|_| "entries that do not continue the group's log")?;
        }
        Kind::Rewrite => rewrite_fold(
            g,
            Run {
                offset: h.offset,
                shared: base + 1,
                epoch: h.epoch,
                count,
                bytes,
            },
        ),
        Kind::Truncate => g.truncate(h.offset),
        Kind::Purge => g.purge(h.offset, Epoch(h.epoch)),
        Kind::Reset => g.reset(h.offset, Some(Epoch(h.epoch))),
        Kind::Vote => {
            let body = payload.ok_or("a vote record without its state")?;
            g.vote = QuorumState::decode_body(body).map_err(|_| "a vote that does not decode")?;
        }
        Kind::HighWatermark => fold_high_watermark(g, h.offset),
        Kind::AppMetadata => {
            g.app_meta = Some(
                payload
                    .ok_or("a metadata record without its bytes")?
                    .to_vec(),
            );
        }
    }
    Ok(())
}

/// A high watermark record's fold: both watermarks rise to `offset`
/// (clamped to the log), never back.
fn fold_high_watermark(g: &mut GroupState, offset: u64) {
    let before = (g.durable_hw, g.hw);
    let h = offset.min(g.end);
    g.durable_hw = Some(g.durable_hw.map_or(h, |d| d.max(h)));
    g.hw = Some(g.hw.map_or(h, |d| d.max(h)));
    assert!(
        g.durable_hw >= before.0 && g.hw >= before.1,
        "a high watermark record never moves the watermark back"
    );
}

/// A rewrite's fold: its copy replaces the older one where the entries
/// are still in the log (a rewrite of entries since purged or truncated
/// moves nothing).
fn rewrite_fold(g: &mut GroupState, run: Run) {
    let (a, b) = (run.offset.max(g.start), run.end().min(g.end));
    if a < b {
        let mut clipped = run;
        clipped.shared = run.shared_at(a);
        clipped.offset = a;
        clipped.count = u32::try_from(b - a).unwrap_or(0);
        g.relocate(clipped);
    }
}

impl Inner {
    pub(crate) fn state(&self) -> MutexGuard<'_, NodeState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn check_poisoned(&self) -> Result<()> {
        match self.dd.poisoned() {
            Some(f) => Err(Error::Poisoned(f)),
            None => Ok(()),
        }
    }

    /// Poisons the node on an I/O failure of `r`.
    pub(crate) fn note<T>(&self, r: Result<T>) -> Result<T> {
        if let Some(failure) = r.as_ref().err().and_then(Error::failure) {
            self.dd.poison(failure);
        }
        r
    }

    /// Encodes a node batch: the header, then `records`.
    pub(crate) fn encode<R: AsRef<[u8]>>(&self, h: &Header, records: &[R]) -> Result<EncodedBatch> {
        let head = h.encode();
        let len: usize = records.iter().map(|r| r.as_ref().len() + 4).sum::<usize>() + 72;
        Ok(self
            .log
            .encode_with(NODE_EPOCH, records.len() + 1, len as u64, |i, buf| {
                match i.checked_sub(1).and_then(|j| records.get(j)) {
                    Some(r) => buf.extend_from_slice(r.as_ref()),
                    None => buf.extend_from_slice(&head),
                }
                Ok(())
            })?)
    }

    /// Places `batch` (of `h`) in the log under the state lock held as
    /// `st` and folds it; `waits`: the caller waits for it next (see
    /// `DurableLog::enqueue_for_wait`). Returns the shared offset after it.
    pub(crate) fn place(
        &self,
        st: &mut NodeState,
        h: &Header,
        batch: EncodedBatch,
        payload: Option<&[u8]>,
        count: u32,
        waits: bool,
    ) -> Result<u64> {
        let bytes = u32::try_from(batch.len()).unwrap_or(u32::MAX);
        // A caller that waits next leads the round itself: no wake-up.
        let placed = if waits {
            self.log.enqueue_for_wait(batch)
        } else {
            self.log.enqueue(batch)
        };
        let info = self.note(placed.map_err(Error::from))?;
        assert!(
            info.base_offset.0 >= st.folded_end,
            "a batch placed at {} below the fold's end {}",
            info.base_offset.0,
            st.folded_end
        );
        fold(st, h, info.base_offset.0, count, bytes, payload).map_err(|what| {
            Error::NodeCorrupt {
                group: Some(h.group),
                offset: Offset(h.offset),
                what,
            }
        })?;
        let every = self.options.checkpoint_every_bytes;
        let before = st.since_ckpt;
        st.since_ckpt += u64::from(bytes);
        self.counters
            .appended
            .fetch_add(u64::from(bytes), Ordering::Relaxed);
        // Woken once, when the interval is passed.
        if before < every && st.since_ckpt >= every {
            self.wake.notify_one();
        }
        Ok(info.next_offset.0)
    }

    /// Appends a control record (no entries) after `check` passes, and
    /// waits until it is durable. Returns the shared offset after it.
    pub(crate) fn control(
        &self,
        h: Header,
        payload: Option<&[u8]>,
        check: impl FnOnce(&mut NodeState) -> Result<()>,
    ) -> Result<u64> {
        self.check_poisoned()?;
        let batch = match payload {
            Some(p) => self.encode(&h, &[p])?,
            None => self.encode::<&[u8]>(&h, &[])?,
        };
        let end = {
            let mut st = self.state();
            check(&mut st)?;
            let count = u32::from(payload.is_some());
            self.place(&mut st, &h, batch, payload, count, true)?
        };
        self.make_durable(end)?;
        Ok(end)
    }

    /// Waits until the shared log is durable below `end`.
    pub(crate) fn make_durable(&self, end: u64) -> Result<()> {
        let r = if self.options.sync == SyncPolicy::Never {
            self.log.flush().map(|_| ())
        } else {
            self.log.wait_durable(Offset(end)).map(|_| ())
        };
        self.note(r.map_err(Error::from))
    }

    fn space(&self) -> SpaceUse {
        let sizes = self.log.segment_sizes();
        let live = self
            .state()
            .groups
            .values()
            .map(GroupState::live_bytes)
            .sum();
        SpaceUse {
            log_bytes: sizes.iter().map(|(_, s)| *s).sum(),
            live_bytes: live,
            segments: sizes.len(),
        }
    }

    /// Writes a checkpoint of the state as of the log's queued end, once
    /// the log is durable there.
    fn checkpoint(&self) -> Result<()> {
        self.check_poisoned()?;
        let (position, bytes, since) = {
            let st = self.state();
            let position = self.log.queued_end().0;
            let bytes = ckpt::encode(position, st.groups.iter(), &st.dropped);
            // Encode and decode as a pair, before the write: what is
            // written reads back as this state.
            assert!(
                ckpt::decode(&bytes).is_ok_and(|c| c.position == position
                    && c.groups.len() == st.groups.len()
                    && c.dropped == st.dropped),
                "a node checkpoint reads back as written"
            );
            (position, bytes, st.since_ckpt)
        };
        self.make_durable(position)?;
        let r = write_checkpoint_file(self.dd.fs(), self.dd.path(), &bytes);
        self.note(r)?;
        let mut st = self.state();
        if position > st.ckpt_position {
            st.ckpt_position = position;
        }
        st.since_ckpt = st.since_ckpt.saturating_sub(since);
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The background thread: checkpoints when due, reclamation.
    fn background(&self) {
        loop {
            {
                let stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
                if *stop {
                    return;
                }
                let (stop, _) = self
                    .wake
                    .wait_timeout(stop, Duration::from_millis(100))
                    .unwrap_or_else(PoisonError::into_inner);
                if *stop {
                    return;
                }
            }
            // Watches the shared log's rounds (a hung device shows in the
            // `sync_overdue` gauge even when the flusher leads the round).
            self.log.check_overdue();
            if self.dd.poisoned().is_some() {
                continue;
            }
            // A failure poisons the node: callers see it.
            let _ = self.maintain(false);
        }
    }

    /// A checkpoint if due (or `force`d), then reclamation.
    fn maintain(&self, force: bool) -> Result<()> {
        let _one = self
            .maintenance
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let due = self.state().since_ckpt >= self.options.checkpoint_every_bytes;
        if force || due {
            self.checkpoint()?;
        }
        self.reclaim()
    }

    /// Frees segments no group needs; rewrites the oldest segment's live
    /// entries forward while the log passes the garbage bound.
    fn reclaim(&self) -> Result<()> {
        for _ in 0..4 {
            let segment = self.options.log.segment_size_bytes;
            let space = self.space();
            let over = space.log_bytes
                > space.live_bytes * self.options.garbage_percent / 100 + 2 * segment;
            if over && space.segments > 2 {
                let bases = self.log.segment_bases();
                if let Some(cut) = bases.get(1) {
                    self.rewrite_below(cut.0)?;
                    self.checkpoint()?;
                }
            }
            let freed = self.free_prefix()?;
            if !over || freed == 0 {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Truncates the log's prefix to what the groups and the last
    /// checkpoint still need. Returns the segments freed.
    fn free_prefix(&self) -> Result<usize> {
        let cut = {
            let st = self.state();
            let live = st.groups.values().filter_map(GroupState::min_shared).min();
            let ckpt = st.ckpt_position;
            live.map_or(ckpt, |l| l.min(ckpt))
        };
        let before = self.log.segment_bases().len();
        if Offset(cut) > self.log.log_start_offset() {
            // Segments below the cut go; the one holding it stays.
            let segment_of_cut = self
                .log
                .segment_bases()
                .into_iter()
                .filter(|b| b.0 <= cut)
                .max();
            if let Some(base) = segment_of_cut {
                if base > self.log.log_start_offset() {
                    let r = self.log.truncate_prefix_to(base).map_err(Error::from);
                    self.note(r)?;
                }
            }
        }
        let freed = before.saturating_sub(self.log.segment_bases().len());
        self.counters
            .freed
            .fetch_add(freed as u64, Ordering::Relaxed);
        Ok(freed)
    }

    /// Rewrites at the log's head every live entry whose batch is below
    /// shared offset `cut`.
    fn rewrite_below(&self, cut: u64) -> Result<()> {
        let victims: Vec<(u64, Vec<Run>)> = {
            let st = self.state();
            st.groups
                .iter()
                .filter_map(|(&id, g)| {
                    let runs: Vec<Run> = g
                        .runs
                        .iter()
                        .filter(|r| r.shared <= cut && r.end() > g.start)
                        .map(|r| {
                            let mut r = *r;
                            if r.offset < g.start {
                                r.shared = r.shared_at(g.start);
                                r.count = u32::try_from(r.end() - g.start).unwrap_or(0);
                                r.offset = g.start;
                            }
                            r
                        })
                        .collect();
                    (!runs.is_empty()).then_some((id, runs))
                })
                .collect()
        };
        let limit = self.options.log.max_batch_bytes / 2;
        for (id, runs) in victims {
            // Consecutive runs of one epoch become one batch, up to half the
            // batch limit.
            let mut i = 0;
            while i < runs.len() {
                let mut j = i;
                let mut entries: Vec<Vec<u8>> = Vec::new();
                let mut size = 0u64;
                let first = runs.get(i).copied();
                let Some(first) = first else { break };
                while let Some(r) = runs.get(j) {
                    if r.epoch != first.epoch
                        || (j > i && runs.get(j - 1).map(Run::end) != Some(r.offset))
                        || (j > i && size + u64::from(r.bytes) > limit)
                    {
                        break;
                    }
                    let walked = quorumlog_log::walk_records(
                        &self.log,
                        Offset(r.shared),
                        Offset(r.shared_end()),
                        u64::MAX,
                        quorumlog_log::WalkBatches::All,
                    );
                    let walked = match walked {
                        Ok(w) => w,
                        // Purged meanwhile: the next pass sees it.
                        Err(quorumlog_log::Error::OffsetOutOfRange { .. }) => break,
                        Err(e) => return self.note(Err(e.into())),
                    };
                    size += u64::from(r.bytes);
                    entries.extend(walked.records.into_iter().map(|r| r.bytes));
                    j += 1;
                }
                if j == i {
                    i += 1;
                    continue;
                }
                let moved = runs.get(i..j).unwrap_or_default();
                let offset = first.offset;
                let count = u32::try_from(entries.len()).unwrap_or(0);
                let expected: u64 = moved.iter().map(|r| u64::from(r.count)).sum();
                if u64::from(count) == expected && count > 0 {
                    self.rewrite(id, offset, first.epoch, &entries, moved)?;
                }
                i = j;
            }
        }
        Ok(())
    }

    /// Appends one rewrite batch of group `id` and, once it is written,
    /// moves the group's index to it if `moved` is still where it lives.
    fn rewrite(
        &self,
        id: u64,
        offset: u64,
        epoch: u64,
        entries: &[Vec<u8>],
        moved: &[Run],
    ) -> Result<()> {
        let h = Header {
            kind: Kind::Rewrite,
            group: id,
            offset,
            epoch,
        };
        let batch = self.encode(&h, entries)?;
        let bytes = batch.len() as u64;
        let count = u32::try_from(entries.len()).unwrap_or(0);
        let still_there = |st: &NodeState| {
            st.groups.get(&id).is_some_and(|g| {
                moved.iter().all(|m| {
                    g.run_index(m.offset)
                        .and_then(|k| g.runs.get(k))
                        .is_some_and(|r| r.shared_at(m.offset) == m.shared && r.end() >= m.end())
                })
            })
        };
        let info = {
            let mut st = self.state();
            if !still_there(&st) {
                return Ok(());
            }
            let info = self.note(self.log.enqueue(batch).map_err(Error::from))?;
            st.since_ckpt += bytes;
            info
        };
        // Written before the index points at it: a reader never meets a
        // batch that is only queued.
        self.note(self.log.write_queued_now().map_err(Error::from))?;
        let mut st = self.state();
        if still_there(&st) {
            if let Some(g) = st.groups.get_mut(&id) {
                g.relocate(Run {
                    offset,
                    shared: info.base_offset.0 + 1,
                    epoch,
                    count,
                    bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
                });
            }
        }
        self.counters.rewritten.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }
}

/// The bytes a node batch of `records` takes beyond them: the batch
/// header (40), the node record header and its length prefix.
pub const NODE_BATCH_OVERHEAD: usize = 40 + HEADER_BYTES + 4;
