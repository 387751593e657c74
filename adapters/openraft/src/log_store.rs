//! [`LogStore`]: openraft's `RaftLogStorage` and `RaftLogReader`
//! (`storage-v2`) over the quorumlog Raft store.
//!
//! What runs where:
//!
//! | call | how |
//! |---|---|
//! | `append` | on the caller's task, never blocking on the disk: the entries are encoded and queued for the store's next sync round (`Group::append`: not written yet; the tail cache serves them until the round writes them, straight to the device when it can, durable on return), and openraft's `LogFlushed` is completed from the store's durability callback when that round ends |
//! | `save_vote`, `truncate`, `purge` | on tokio's blocking pool (`spawn_blocking`): one record of the shared log each, durable on return (one shared sync round) |
//! | `try_get_log_entries`, `get_log_state`, `read_vote`, `read_committed` | on the caller's task: reads never wait behind a sync |
//! | `save_committed` | on the caller's task: sets the group's high watermark (queued as one small record for the shared log's next round, which later appends share); a task forces that round at most every [`COMMIT_PERSIST_EVERY`] (100 ms, on the blocking pool) while the log is idle, so a restarted node re-applies up to where it was (`read_committed`) instead of waiting for a leader; after a crash it may return an id up to that interval older, which openraft allows |
//!
//! Not shared with the 0.10 adapter: 0.9's `RaftLogStorage` is another
//! trait over other types (its append completes a `LogFlushed`, and its purge
//! may not pass a snapshot file); what both need is the engine's
//! (`RecentEntries`, `quorumlog_raft::vote`).

mod ahead;
mod cut;
mod purge_wait;

use ahead::Ahead;
pub use ahead::{READ_AHEAD_BYTES, READ_AHEAD_ENTRIES, READ_AHEAD_MIN};
use quorumlog_raft::RecentEntries;

/// Entries kept in the tail cache at most.
pub const TAIL_ENTRIES: usize = 16_384;
/// Record bytes kept in the tail cache at most.
pub const TAIL_BYTES: usize = 16 << 20;

/// The most recent entries, decoded (the engine's cache,
/// [`RecentEntries`]): what a leader's replication reads right after the
/// append, before or after its sync round (which writes to the device
/// directly, so reading them back from the log would be a device read each
/// time). Bounded by [`TAIL_ENTRIES`] and [`TAIL_BYTES`].
type Tail<C> = RecentEntries<Entry<C>>;

pub(crate) use cut::physical_cut;

/// When openraft's purge deletes the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeMode {
    /// At once ([`LogStore::new`]).
    Immediate,
    /// Only as far as the latest snapshot file covers it, the rest once a
    /// later one does ([`LogStore::new_bounded`]).
    CoveredBySnapshot,
}

use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, Entry, ErrorSubject, ErrorVerb, LogId, OptionalSend, RaftLogReader, RaftTypeConfig,
    StorageError, StorageIOError, Vote,
};
use quorumlog_raft::{Encode, Epoch, Group, Isolation, Offset, Purge};
use serde::{de::DeserializeOwned, Serialize};

use crate::mapping::{self, AppMeta};

/// openraft's storage error with node ids `u64`.
pub type StoreError = StorageError<u64>;

// Errors keep their source (the store's typed error, matchable through
// `std::error::Error::source`), never a string of it.
fn io_error(
    subject: ErrorSubject<u64>,
    verb: ErrorVerb,
    e: &(dyn std::error::Error + 'static),
) -> StoreError {
    StorageIOError::new(subject, verb, AnyError::from_dyn(e, None)).into()
}

fn logs_write(e: &(dyn std::error::Error + 'static)) -> StoreError {
    io_error(ErrorSubject::Logs, ErrorVerb::Write, e)
}

fn logs_read(e: &(dyn std::error::Error + 'static)) -> StoreError {
    io_error(ErrorSubject::Logs, ErrorVerb::Read, e)
}

/// openraft's log storage over a node's [`Group`], shared by `Arc`;
/// clones are readers of the same log and share its tail cache.
pub struct LogStore<C: RaftTypeConfig> {
    store: Arc<Group>,
    me: u64,
    tail: Arc<std::sync::Mutex<Tail<C>>>,
    /// Entries read ahead of openraft's 64-entry reads.
    ahead: Arc<std::sync::Mutex<Ahead<C>>>,
    /// The first index not purged (openraft's view; the log may still hold
    /// entries below it until a snapshot covers them).
    purged_next: Arc<std::sync::atomic::AtomicU64>,
    /// When a purge deletes the log ([`LogStore::new_bounded`]).
    purge: PurgeMode,
    /// How often the commit point is made durable (`None`: only at the
    /// log's segment rolls and clean close).
    persist_every: Option<std::time::Duration>,
    /// A persist of the commit point is scheduled.
    persist_pending: Arc<std::sync::atomic::AtomicBool>,
    _config: PhantomData<fn() -> C>,
}

/// How often [`LogStore`] makes the commit point durable by default.
pub const COMMIT_PERSIST_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl<C: RaftTypeConfig> Clone for LogStore<C> {
    fn clone(&self) -> Self {
        LogStore {
            store: Arc::clone(&self.store),
            me: self.me,
            tail: Arc::clone(&self.tail),
            ahead: Arc::clone(&self.ahead),
            purged_next: Arc::clone(&self.purged_next),
            purge: self.purge,
            persist_every: self.persist_every,
            persist_pending: Arc::clone(&self.persist_pending),
            _config: PhantomData,
        }
    }
}

impl<C: RaftTypeConfig> Debug for LogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl<C> LogStore<C>
where
    C: RaftTypeConfig<NodeId = u64, Entry = Entry<C>>,
    Entry<C>: Serialize + DeserializeOwned + Clone,
{
    /// The log storage of node `me` over `store` (opened with
    /// `SyncPolicy::GroupCommit`, so appends complete from sync rounds):
    /// a purge deletes the log at once. Completes a purge a crash
    /// interrupted (the purged id is written first, then the log is cut).
    ///
    /// # Errors
    /// The metadata does not decode; the store fails.
    pub fn new(store: Arc<Group>, me: u64) -> Result<Self, StoreError> {
        Self::with_mode(store, me, PurgeMode::Immediate)
    }

    /// As [`LogStore::new`], for a state machine that keeps its snapshots
    /// with [`crate::SnapshotFiles`]: a purge deletes the log only as far
    /// as the latest snapshot file covers it, the rest once a later one
    /// does. openraft 0.9 issues the purge that follows a snapshot install
    /// while the state machine is still installing it; deleting at once
    /// could leave, after a power cut, a log that starts past the last
    /// snapshot on disk. Reads
    /// and the log state hide the entries openraft purged either way.
    ///
    /// # Errors
    /// As [`LogStore::new`].
    pub fn new_bounded(store: Arc<Group>, me: u64) -> Result<Self, StoreError> {
        Self::with_mode(store, me, PurgeMode::CoveredBySnapshot)
    }

    fn with_mode(store: Arc<Group>, me: u64, purge: PurgeMode) -> Result<Self, StoreError> {
        let s = LogStore {
            store,
            me,
            tail: Arc::new(std::sync::Mutex::new(RecentEntries::new(
                TAIL_ENTRIES,
                TAIL_BYTES,
            ))),
            ahead: Arc::new(std::sync::Mutex::new(Ahead::empty())),
            purged_next: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            purge,
            persist_every: Some(COMMIT_PERSIST_EVERY),
            persist_pending: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            _config: PhantomData,
        };
        if purge == PurgeMode::CoveredBySnapshot {
            s.undo_uncovered_purge()?;
        }
        if let Some(purged) = s.meta()?.last_purged {
            s.purged_next
                .store(purged.index + 1, std::sync::atomic::Ordering::Relaxed);
        }
        physical_cut(&s.store, purge).map_err(|e| logs_write(&*e))?;
        Ok(s)
    }

    /// The first index openraft did not purge, and the first the log holds.
    fn present_start(&self) -> u64 {
        self.purged_next
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(self.store.extent().start.0)
    }

    /// Sets how often the commit point is made durable (`None`: only at the
    /// log's segment rolls and clean close, as before; the cost is one
    /// small-file replace per interval while commits advance, off the
    /// write path).
    #[must_use]
    pub fn persist_commit_every(mut self, every: Option<std::time::Duration>) -> Self {
        self.persist_every = every;
        self
    }

    /// Schedules a persist of the commit point, unless one is.
    fn schedule_persist(&self) {
        let Some(every) = self.persist_every else {
            return;
        };
        if self
            .persist_pending
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        // Weak: a pending persist never keeps a store from closing.
        let store = Arc::downgrade(&self.store);
        let pending = Arc::clone(&self.persist_pending);
        tokio::spawn(async move {
            tokio::time::sleep(every).await;
            // Cleared first: a commit from now on schedules the next one.
            pending.store(false, std::sync::atomic::Ordering::Release);
            if let Some(store) = store.upgrade() {
                // A failure poisons the store; openraft sees it at its
                // next call.
                let _ =
                    tokio::task::spawn_blocking(move || store.wait_durable(Offset(u64::MAX))).await;
            }
        });
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<Group> {
        &self.store
    }

    fn meta(&self) -> Result<AppMeta, StoreError> {
        AppMeta::decode(self.store.app_metadata().as_deref()).map_err(|e| logs_read(&e))
    }

    /// The entry at `index`, which must be in the log (or queued for its
    /// next sync round, then served from the tail cache).
    fn entry_at(&self, index: u64) -> Result<Entry<C>, StoreError> {
        if let Some(hit) = self.tail().get(index, index + 1).and_then(|mut v| v.pop()) {
            return Ok(hit);
        }
        let got = self
            .store
            .read_entries(
                Offset(index),
                Offset(index + 1),
                u64::MAX,
                Isolation::Uncommitted,
            )
            .map_err(|e| logs_read(&e))?;
        let first = got.first().ok_or_else(|| {
            StoreError::from(StorageIOError::<u64>::read_log_at_index(
                index,
                AnyError::error("missing"),
            ))
        })?;
        mapping::decode_entry(&first.bytes).map_err(|e| logs_read(&e))
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, Tail<C>> {
        self.tail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn ahead(&self) -> std::sync::MutexGuard<'_, Ahead<C>> {
        self.ahead
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads a window of up to [`READ_AHEAD_ENTRIES`] around `[lo, hi)`
    /// (before it when a backward scan goes on, else from `lo`), keeps it,
    /// and returns `[lo, hi)` if the window holds it.
    fn read_ahead(&self, lo: u64, hi: u64, start: u64, end: u64) -> Option<Vec<Entry<C>>> {
        // Range reads only: a point lookup (openraft's binary search for
        // leader changes at startup reads single entries all over the log)
        // would read a whole window for one entry.
        if hi - lo >= READ_AHEAD_ENTRIES || hi - lo < READ_AHEAD_MIN {
            return None;
        }
        let backward = self.ahead().backward(hi);
        let (wlo, whi) = if backward {
            (hi.saturating_sub(READ_AHEAD_ENTRIES).max(start), hi)
        } else {
            (lo, lo.saturating_add(READ_AHEAD_ENTRIES).min(end))
        };
        let got = self
            .store
            .read_entries(
                Offset(wlo),
                Offset(whi),
                READ_AHEAD_BYTES,
                Isolation::Uncommitted,
            )
            .ok()?;
        let entries: Vec<Entry<C>> = got
            .iter()
            .map(|e| mapping::decode_entry(&e.bytes))
            .collect::<Result<_, _>>()
            .ok()?;
        // Only a contiguous run from `wlo` is kept.
        let contiguous = entries
            .iter()
            .zip(wlo..)
            .all(|(e, want)| e.log_id.index == want);
        if !contiguous {
            return None;
        }
        let mut ahead = self.ahead();
        *ahead = Ahead {
            first: wlo,
            entries,
        };
        ahead.get(lo, hi)
    }

    fn read_range(&self, from: u64, to: u64) -> Result<Vec<Entry<C>>, StoreError> {
        let end = self.store.extent().queued_end.0;
        if let Some(hit) = self.tail().get(from, to.min(end)) {
            return Ok(hit);
        }
        loop {
            let (start, end) = (self.present_start(), self.store.extent().end.0);
            let (lo, hi) = (from.max(start), to.min(end));
            if lo >= hi {
                return Ok(Vec::new());
            }
            if let Some(hit) = self.ahead().get(lo, hi) {
                return Ok(hit);
            }
            if let Some(hit) = self.read_ahead(lo, hi, start, end) {
                return Ok(hit);
            }
            match self
                .store
                .read_entries(Offset(lo), Offset(hi), u64::MAX, Isolation::Uncommitted)
            {
                Ok(got) => {
                    return got
                        .iter()
                        .map(|e| mapping::decode_entry(&e.bytes).map_err(|e| logs_read(&e)))
                        .collect();
                }
                // A purge moved the start meanwhile: clamp again.
                Err(quorumlog_raft::Error::OffsetOutOfRange { start: now, .. })
                    if now.0 > start => {}
                Err(e) => return Err(logs_read(&e)),
            }
        }
    }

    /// Runs `f` on tokio's blocking pool (a call that waits for the disk).
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Group) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| logs_write(&e))?
    }
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let from = match range.start_bound() {
        Bound::Included(x) => *x,
        Bound::Excluded(x) => x.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let to = match range.end_bound() {
        Bound::Included(x) => x.saturating_add(1),
        Bound::Excluded(x) => *x,
        Bound::Unbounded => u64::MAX,
    };
    (from, to)
}

impl<C> RaftLogReader<C> for LogStore<C>
where
    C: RaftTypeConfig<NodeId = u64, Entry = Entry<C>>,
    Entry<C>: Serialize + DeserializeOwned + Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StoreError> {
        let (from, to) = bounds(&range);
        self.read_range(from, to)
    }
}

impl<C> RaftLogStorage<C> for LogStore<C>
where
    C: RaftTypeConfig<NodeId = u64, Entry = Entry<C>>,
    Entry<C>: Serialize + DeserializeOwned + Clone,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StoreError> {
        let last_purged_log_id = self.meta()?.last_purged;
        let (start, end) = (self.present_start(), self.store.extent().queued_end.0);
        let last_log_id = if end > start {
            Some(self.entry_at(end - 1)?.log_id)
        } else {
            last_purged_log_id
        };
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StoreError> {
        let vote = *vote;
        self.blocking(move |s| {
            let next = mapping::vote_to_state(&s.quorum_state(), &vote)
                .map_err(|e| io_error(ErrorSubject::Vote, ErrorVerb::Write, &e))?;
            s.persist_quorum_state(&next)
                .map_err(|e| io_error(ErrorSubject::Vote, ErrorVerb::Write, &e))
        })
        .await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StoreError> {
        Ok(mapping::state_to_vote(&self.store.quorum_state()))
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), StoreError> {
        let Some(c) = committed else {
            return Ok(());
        };
        let to = Offset(c.index + 1).min(self.store.extent().end);
        if self.store.extent().high_watermark.is_none_or(|h| h < to) {
            self.store
                .set_high_watermark(to)
                .map_err(|e| logs_write(&e))?;
            self.schedule_persist();
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StoreError> {
        let Some(h) = self.store.extent().high_watermark.filter(|h| h.0 > 0) else {
            return Ok(None);
        };
        if h > self.store.extent().start {
            return Ok(Some(self.entry_at(h.0 - 1)?.log_id));
        }
        Ok(self.meta()?.last_purged.filter(|p| p.index + 1 == h.0))
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<C>) -> Result<(), StoreError>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // One batch per run of entries of one leader id (one epoch). Entries at or below
        // the last purged id are purged already (openraft never reads
        // there; its `get_initial_state` purges up to what the state
        // machine applied): they are not written.
        let purged_next = self.purged_next.load(std::sync::atomic::Ordering::Relaxed);
        let entries: Vec<Entry<C>> = entries
            .into_iter()
            .filter(|e| e.log_id.index >= purged_next)
            .collect();
        if let Some(first) = entries.first() {
            self.continue_after_purge(first.log_id.index).await?;
        }
        // Each entry is encoded once, straight into its batch
        // (`append_run`); here only its size is counted.
        let mut run: Vec<u64> = Vec::new();
        let mut run_entries: Vec<Entry<C>> = Vec::new();
        let mut run_start = (0u64, Epoch(0));
        let mut run_bytes = 0u64;
        // A batch holds a run's records up to the log's batch limit (with
        // room for its header and each record's length).
        let limit = self.store.max_batch_bytes().saturating_sub(64);
        let mut end = None;
        for entry in entries {
            let epoch = mapping::epoch_of(&entry.log_id.leader_id).map_err(|e| logs_write(&e))?;
            let index = entry.log_id.index;
            let size = mapping::encoded_size(&entry).map_err(|e| logs_write(&e))?;
            let cost = size + 8;
            if !run.is_empty() && (epoch != run_start.1 || run_bytes + cost > limit) {
                self.append_run(run_start, &mut run, &mut run_entries)?;
                run_bytes = 0;
            }
            if run.is_empty() {
                run_start = (index, epoch);
            }
            run_bytes += cost;
            run.push(size);
            run_entries.push(entry);
            end = Some(index + 1);
        }
        if !run.is_empty() {
            self.append_run(run_start, &mut run, &mut run_entries)?;
        }
        let Some(end) = end else {
            callback.log_io_completed(Ok(()));
            return Ok(());
        };
        self.store.on_durable(
            Offset(end),
            Box::new(move |r| {
                // openraft is told only once its entries are durable.
                assert!(
                    r.as_ref().is_err() || r.as_ref().is_ok_and(|d| d.0 >= end),
                    "a flush completed below its entries' end {end}"
                );
                callback.log_io_completed(r.map(|_| ()).map_err(std::io::Error::other));
            }),
        );
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StoreError> {
        let at = Offset(log_id.index);
        // The group first: a truncation it refuses (below the commit
        // point) leaves the caches as they were too.
        self.blocking(move |s| {
            if at >= s.extent().queued_end {
                return Ok(());
            }
            s.truncate_to(at.max(s.extent().start))
                .map_err(|e| logs_write(&e))
        })
        .await?;
        self.tail().truncate(log_id.index);
        self.ahead().cut_from(log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StoreError> {
        let meta = self.meta()?;
        if meta.last_purged.is_some_and(|p| p >= log_id) {
            return Ok(());
        }
        // The group's refusals first: a refused purge changes nothing
        // (metadata, cache, the purge point).
        if self.purge == PurgeMode::Immediate {
            let epoch = mapping::epoch_of(&log_id.leader_id).map_err(|e| logs_write(&e))?;
            Purge::To {
                offset: Offset(log_id.index + 1),
                epoch,
            }
            .check(&self.store)
            .map_err(|e| logs_write(&e))?;
        }
        self.tail().purge(log_id.index + 1);
        self.purged_next
            .fetch_max(log_id.index + 1, std::sync::atomic::Ordering::Relaxed);
        let purge = self.purge;
        self.blocking(move |s| {
            // The purged id first (its node id is not in the log), then the
            // cut: a crash between the two is completed at open.
            let next = AppMeta {
                last_purged: Some(log_id),
            };
            let bytes = next.encode().map_err(|e| logs_write(&e))?;
            s.write_app_metadata(&bytes).map_err(|e| logs_write(&e))?;
            physical_cut(s, purge).map_err(|e| logs_write(&*e))
        })
        .await
    }
}
