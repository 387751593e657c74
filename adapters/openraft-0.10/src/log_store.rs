//! [`LogStore`]: openraft 0.10's `RaftLogStorage` and `RaftLogReader`
//! over a group of a node ([`Group`]: one group or many on one shared log).
//!
//! | call | how |
//! |---|---|
//! | `append` | returns at once: the entries go into the adapter's tail (readable from then on) and are queued for the shared log's next sync round, one batch per epoch; the `IOFlushed` is completed from the round that makes the last of them durable (`on_durable`: each submitter's completions run in its submission order, so openraft's flush notifications arrive in order) |
//! | `save_vote` | waits until every append before it is durable, then writes the vote durably: a vote saved after an append is never durable before it (on a node's group the vote is a record of the same shared log, behind the appends anyway) |
//! | `truncate_after`, `purge` | durable on return; a purge writes openraft's last purged id first, then cuts the log |
//! | `save_committed` | sets the group's high watermark (clamped to the written log, never back; queued as one small record for the shared log's next round); a task forces that round at most every [`COMMIT_PERSIST_EVERY`] (100 ms, on the runtime's blocking pool) while the log is idle; `read_committed` reads the group's watermark back (after a restart, the durable one) |
//! | reads | the tail first (the engine's [`RecentEntries`]: entries not yet durable, and of the durable ones the last up to [`READ_CACHE_ENTRIES`] in all), then the store |
//!
//! These calls block the calling task for a sync at most (`save_vote`,
//! `truncate_after`, `purge`); `append` never does.

mod commit;
mod flushes;

use commit::{raise_commit, schedule_persist, Commit};
use flushes::{complete, Flushes};

use std::collections::VecDeque;
use std::fmt::Debug;
use std::io;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Weak;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use openraft10::entry::RaftEntry;
use openraft10::impls::Vote;
use openraft10::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft10::type_config::alias::{CommittedLeaderIdOf, LogIdOf};
use openraft10::{OptionalSend, RaftLogReader, RaftTypeConfig};
use quorumlog_raft::{Encode, Epoch, Group, Isolation, Offset, Purge, RecentEntries};
use serde::{de::DeserializeOwned, Serialize};

use crate::mapping::{self, AppMeta, EpochLeaderId};

fn io_err(e: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(e)
}

/// openraft 0.10's log storage over a node's [`Group`],
/// shared by `Arc`; clones are readers of the same log and share its
/// tail.
pub struct LogStore<C: RaftTypeConfig> {
    store: Arc<Group>,
    me: u64,
    /// Entries appended and not yet known durable (a queued append is not
    /// readable from the store until its round writes it), and the last
    /// [`LogStore::read_cache_entries`] durable ones (what openraft reads
    /// next, to replicate and apply, served from memory), by index.
    tail: Arc<Mutex<RecentEntries<C::Entry>>>,
    /// Each append's `IOFlushed` with the end it waits for, in submission
    /// order: completed strictly in that order (a truncation completes
    /// those before it at once, as its own sync made what survives
    /// durable), never one registered later before one registered earlier.
    flushes: Arc<Mutex<Flushes<C>>>,
    /// How often the commit point is made durable.
    persist_every: Option<std::time::Duration>,
    /// The commit point openraft gave, deferred to durability.
    commit: Arc<Commit>,
    /// The last commit point `save_committed` saved: what
    /// `read_committed` answers until a restart (then the durable
    /// watermark answers).
    saved: Arc<Mutex<Option<LogIdOf<C>>>>,
    _config: PhantomData<fn() -> C>,
}

/// Durable entries a [`LogStore`] keeps in memory by default, besides
/// those not yet durable: openraft reads an entry again soon after it is
/// appended (a leader to replicate it, every node to apply it), and a
/// store read of it would go to the disk (the tail is written with direct
/// I/O, past the page cache). raft-engine and raft-log keep theirs in
/// memory too.
pub const READ_CACHE_ENTRIES: u64 = 8192;

/// How often [`LogStore`] makes the commit point durable by default, so a
/// restarted node re-applies up to where it was (`read_committed`)
/// instead of waiting for a leader; after a crash it may return an id up
/// to that interval older, which openraft allows.
pub const COMMIT_PERSIST_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// One batch of an append: its epoch, entries and their encoded bytes.
type Batch<C> = (Epoch, Vec<<C as RaftTypeConfig>::Entry>, u64);

/// `entries` as batches: one per epoch, within the batch limit `max`.
/// Each entry is encoded once later, straight into its batch (its size is
/// counted here without encoding it).
fn batches<C>(entries: impl IntoIterator<Item = C::Entry>, max: u64) -> io::Result<Vec<Batch<C>>>
where
    C: RaftTypeConfig,
    C::LeaderId: EpochLeaderId,
    C::Entry: Serialize,
{
    let mut batches: Vec<Batch<C>> = Vec::new();
    for e in entries {
        let epoch = C::LeaderId::committed_epoch(e.log_id_parts().0).map_err(io_err)?;
        let len = mapping::encoded_size(&e).map_err(io_err)? + 16;
        let fresh = batches
            .last()
            .is_none_or(|(ep, _, bytes)| *ep != epoch || bytes + len + 64 > max);
        if fresh {
            batches.push((epoch, Vec::new(), 0));
        }
        if let Some((_, es, bytes)) = batches.last_mut() {
            es.push(e);
            *bytes += len;
        }
    }
    Ok(batches)
}

impl<C: RaftTypeConfig> Clone for LogStore<C> {
    fn clone(&self) -> Self {
        LogStore {
            store: Arc::clone(&self.store),
            me: self.me,
            tail: Arc::clone(&self.tail),
            flushes: Arc::clone(&self.flushes),
            persist_every: self.persist_every,
            commit: Arc::clone(&self.commit),
            saved: Arc::clone(&self.saved),
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
    C: RaftTypeConfig<NodeId = u64, Term = u64, Vote = Vote<<C as RaftTypeConfig>::LeaderId>>,
    C::LeaderId: EpochLeaderId,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    /// The log storage of node `me` over `store` (opened with
    /// `SyncPolicy::GroupCommit`, so appends complete from sync rounds).
    /// Completes a purge a crash interrupted (the purged id is written
    /// first, then the log is cut).
    ///
    /// # Errors
    /// `InvalidInput` for a group that begins after offset 0 with nothing
    /// to begin after (openraft's first index is 0: the message names the
    /// offset to create it at); the metadata does not decode; the store
    /// fails.
    pub fn new(store: Arc<Group>, me: u64) -> io::Result<Self> {
        let s = Self::unrepaired(store, me);
        s.check_first_offset()?;
        s.cut_purged()?;
        Ok(s)
    }

    /// Refuses a group openraft cannot use: one that begins after offset
    /// 0 with nothing to begin after (no entry, no snapshot, no purge),
    /// where openraft's first append would come at index 0.
    fn check_first_offset(&self) -> io::Result<()> {
        let x = self.store.extent();
        if x.start.0 == 0 || x.end > x.start {
            return Ok(());
        }
        if self.meta()?.last_purged.is_some() || !self.store.snapshots().is_empty() {
            return Ok(());
        }
        let g = self.store.id();
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "group {g} begins at offset {}, but an openraft log begins at index 0 and this \
                 group has no snapshot or purge to begin after: create it at offset 0 \
                 (`node.create_group({g}, Offset(0))`)",
                x.start.0
            ),
        ))
    }

    /// As [`LogStore::new`], leaving an interrupted purge as found: for
    /// readers that must change nothing (`recover::survey`).
    pub(crate) fn unrepaired(store: Arc<Group>, me: u64) -> Self {
        LogStore {
            store,
            me,
            tail: Arc::new(Mutex::new(RecentEntries::new(
                usize::try_from(READ_CACHE_ENTRIES).unwrap_or(usize::MAX),
                usize::MAX,
            ))),
            flushes: Arc::new(Mutex::new(Flushes::default())),
            persist_every: Some(COMMIT_PERSIST_EVERY),
            commit: Arc::new(Commit::default()),
            saved: Arc::new(Mutex::new(None)),
            _config: PhantomData,
        }
    }

    /// Sets how many durable entries stay in memory for reads (0: none,
    /// every read of a durable entry goes to the store).
    #[must_use]
    pub fn read_cache_entries(mut self, entries: u64) -> Self {
        self.tail = Arc::new(Mutex::new(RecentEntries::new(
            usize::try_from(entries).unwrap_or(usize::MAX),
            usize::MAX,
        )));
        self
    }

    /// Sets how often the commit point is made durable (`None`: only at
    /// the store's checkpoints and clean close; the cost is one durable
    /// write per interval while commits advance, off the write path).
    #[must_use]
    pub fn persist_commit_every(mut self, every: Option<std::time::Duration>) -> Self {
        self.persist_every = every;
        self
    }

    /// Schedules a persist of the commit point, unless one is (on the
    /// runtime's blocking pool, [`COMMIT_PERSIST_EVERY`] from now).
    fn schedule_persist(&self) {
        schedule_persist(
            &Arc::downgrade(&self.store),
            &self.commit,
            self.persist_every,
            &tokio::runtime::Handle::current(),
        );
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<Group> {
        &self.store
    }

    fn tail(&self) -> MutexGuard<'_, RecentEntries<C::Entry>> {
        self.tail.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn meta(&self) -> io::Result<AppMeta<C>> {
        AppMeta::decode(self.store.app_metadata().as_deref()).map_err(io_err)
    }

    /// Deletes the log below openraft's last purged id, if it still holds
    /// any of it.
    fn cut_purged(&self) -> io::Result<()> {
        let Some(purged) = self.meta()?.last_purged else {
            return Ok(());
        };
        let cut = purged.index + 1;
        if cut <= self.store.extent().start.0 {
            return Ok(());
        }
        let epoch = C::LeaderId::committed_epoch(&purged.leader_id).map_err(io_err)?;
        self.store
            .purge(Purge::To {
                offset: Offset(cut),
                epoch,
            })
            .map(|_| ())
            .map_err(io_err)
    }

    /// The group's refusals of a purge through `log_id` (`Purge::check`:
    /// another epoch than the log's, past the latest snapshot), asked
    /// before the adapter writes anything.
    fn check_purge(&self, log_id: &LogIdOf<C>) -> io::Result<()> {
        let epoch = C::LeaderId::committed_epoch(&log_id.leader_id).map_err(io_err)?;
        Purge::To {
            offset: Offset(log_id.index + 1),
            epoch,
        }
        .check(&self.store)
        .map_err(io_err)
    }

    /// The entries of `[lo, hi)`: the store's part, then the tail's.
    fn entries(&self, lo: u64, hi: u64) -> io::Result<Vec<C::Entry>> {
        let mut out = Vec::new();
        if lo >= hi {
            return Ok(out);
        }
        let (tail_start, tail_part) = self.tail().suffix(lo, hi);
        let x = self.store.extent();
        let from = lo.max(x.start.0);
        let to = tail_start.min(x.end.0);
        if from < to {
            let got = self
                .store
                .read_entries(Offset(from), Offset(to), u64::MAX, Isolation::Uncommitted)
                .map_err(io_err)?;
            for e in got {
                out.push(mapping::decode_entry(&e.bytes).map_err(io_err)?);
            }
        }
        out.extend(tail_part);
        // openraft replicates what it reads as one contiguous run: a hole
        // would become a follower's wrong log (a bug: the process stops).
        let base = out.first().map_or(lo, RaftEntry::index).max(lo);
        for (i, e) in out.iter().enumerate() {
            assert!(
                e.index() == base + i as u64 && e.index() < hi,
                "entries [{lo}, {hi}) would return index {} at position {i}",
                e.index()
            );
        }
        Ok(out)
    }

    fn last_log_id(&self) -> io::Result<Option<LogIdOf<C>>> {
        if let Some(e) = self.tail().last() {
            return Ok(Some(e.log_id()));
        }
        let x = self.store.extent();
        let end = x.end.0;
        if end > x.start.0 {
            let epoch = self
                .store
                .epoch_at(Offset(end - 1))
                .ok_or_else(|| io::Error::other("no epoch for the last entry"))?;
            return Ok(Some(mapping::log_id::<C::LeaderId>(epoch, end - 1)));
        }
        Ok(self.meta()?.last_purged)
    }
}

fn range_of<RB: RangeBounds<u64>>(range: &RB) -> (u64, u64) {
    let lo = match range.start_bound() {
        Bound::Included(&i) => i,
        Bound::Excluded(&i) => i + 1,
        Bound::Unbounded => 0,
    };
    let hi = match range.end_bound() {
        Bound::Included(&i) => i + 1,
        Bound::Excluded(&i) => i,
        Bound::Unbounded => u64::MAX,
    };
    (lo, hi)
}

impl<C> RaftLogReader<C> for LogStore<C>
where
    C: RaftTypeConfig<NodeId = u64, Term = u64, Vote = Vote<<C as RaftTypeConfig>::LeaderId>>,
    C::LeaderId: EpochLeaderId,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, io::Error> {
        let (lo, hi) = range_of(&range);
        let end = self.last_log_id()?.map_or(0, |l| l.index + 1);
        self.entries(lo, hi.min(end))
    }

    async fn read_vote(&mut self) -> Result<Option<C::Vote>, io::Error> {
        Ok(mapping::state_to_vote::<C::LeaderId>(
            &self.store.quorum_state(),
            self.me,
        ))
    }
}

impl<C> RaftLogStorage<C> for LogStore<C>
where
    C: RaftTypeConfig<NodeId = u64, Term = u64, Vote = Vote<<C as RaftTypeConfig>::LeaderId>>,
    C::LeaderId: EpochLeaderId,
    C::Entry: Serialize + DeserializeOwned + Clone,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, io::Error> {
        let last_purged_log_id = self.meta()?.last_purged;
        let last_log_id = self.last_log_id()?;
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &C::Vote) -> Result<(), io::Error> {
        // Every append before the vote is durable first.
        self.store.wait_durable(Offset(u64::MAX)).map_err(io_err)?;
        let next = mapping::vote_to_state::<C::LeaderId>(&self.store.quorum_state(), vote, self.me)
            .map_err(io_err)?;
        self.store.persist_quorum_state(&next).map_err(io_err)
    }

    async fn save_committed(&mut self, committed: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        let Some(c) = committed else {
            return Ok(());
        };
        // openraft commits up to what it submitted, which the log may not
        // have written yet: the rest is kept and the watermark rises to it
        // as the entries are written (`append`'s completion), never back.
        self.commit.target.fetch_max(c.index + 1, Ordering::AcqRel);
        {
            let mut saved = self.saved.lock().unwrap_or_else(PoisonError::into_inner);
            if saved.as_ref().is_none_or(|s| s.index <= c.index) {
                *saved = Some(c.clone());
            }
        }
        if raise_commit(self.store.as_ref(), &self.commit).map_err(io_err)? {
            self.schedule_persist();
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogIdOf<C>>, io::Error> {
        // openraft's contract: the last commit point `save_committed`
        // saved, even past what the log has written (a follower's commit
        // comes from its leader).
        let saved = self
            .saved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if saved.is_some() {
            return Ok(saved);
        }
        // After a restart the store's watermark is the durable one.
        let Some(hw) = self.store.extent().high_watermark else {
            return Ok(None);
        };
        let Some(index) = hw.0.checked_sub(1) else {
            return Ok(None);
        };
        match self.store.epoch_at(Offset(index)) {
            Some(epoch) => Ok(Some(mapping::log_id::<C::LeaderId>(epoch, index))),
            // Below the log start: openraft's last purged id covers it.
            None => Ok(self.meta()?.last_purged.filter(|p| p.index >= index)),
        }
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<C>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let batches = batches::<C>(entries, self.store.max_batch_bytes())?;
        let mut end = None;
        for (epoch, es, bytes) in batches {
            let Some(base) = es.first().map(RaftEntry::index) else {
                continue;
            };
            let info = self
                .store
                .append(
                    Offset(base),
                    epoch,
                    Encode {
                        count: es.len(),
                        len_hint: bytes,
                        write: |k, out: &mut Vec<u8>| {
                            let e = es.get(k).ok_or_else(|| io::Error::other("no such entry"))?;
                            mapping::encode_entry_into(out, e).map_err(io::Error::other)
                        },
                    },
                )
                .map_err(io_err)?;
            end = Some(info.next_offset);
            // Readable from the tail until the store serves them (no
            // completion of this append can run before it is registered
            // below).
            let mut tail = self.tail();
            for e in es {
                tail.push(e.index(), e, 0);
            }
        }
        // The group's end after these entries (openraft appends one call at
        // a time): what their flush waits for.
        let end = end.unwrap_or_else(|| self.store.extent().queued_end);
        let (seq, cuts) = {
            let mut q = self.flushes.lock().unwrap_or_else(PoisonError::into_inner);
            let seq = q.next;
            q.next += 1;
            assert!(
                q.queue.back().is_none_or(|&(s, _)| s < seq),
                "flushes are numbered in submission order"
            );
            q.queue.push_back((seq, callback));
            (seq, q.cuts)
        };
        let (flushes, tail) = (Arc::clone(&self.flushes), Arc::clone(&self.tail));
        let (store, commit, every) = (
            Arc::downgrade(&self.store),
            Arc::clone(&self.commit),
            self.persist_every,
        );
        let runtime = tokio::runtime::Handle::current();
        self.store.on_durable(
            end,
            Box::new(move |r| {
                // A commit point saved before these entries were written
                // reaches them now, before openraft learns they are
                // flushed.
                if r.is_ok() && commit.target.load(Ordering::Acquire) > 0 {
                    if let Some(s) = store.upgrade() {
                        if raise_commit(s.as_ref(), &commit).unwrap_or(false) {
                            schedule_persist(&store, &commit, every, &runtime);
                        }
                    }
                }
                complete(&flushes, &tail, &r, seq, cuts);
            }),
        );
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogIdOf<C>>) -> Result<(), io::Error> {
        let keep = last_log_id.map_or(0, |l| l.index + 1);
        if keep < self.store.extent().queued_end.0 {
            // The group first: a truncation it refuses (below the commit
            // point) leaves the cache as it was too.
            self.store.truncate_to(Offset(keep)).map_err(io_err)?;
            self.tail().truncate(keep);
            // Durable now, what survives of every append before: their
            // flushes complete, in order, before any later append's.
            let cuts = {
                let mut q = self.flushes.lock().unwrap_or_else(PoisonError::into_inner);
                q.cuts += 1;
                q.cuts
            };
            complete(&self.flushes, &self.tail, &Ok(Offset(keep)), u64::MAX, cuts);
        } else {
            self.tail().truncate(keep);
        }
        Ok(())
    }

    async fn purge(&mut self, log_id: LogIdOf<C>) -> Result<(), io::Error> {
        let index = log_id.index;
        let mut meta = self.meta()?;
        if meta.last_purged.as_ref().is_some_and(|p| p.index >= index) {
            return Ok(());
        }
        // Every refusal the group would make comes before anything is
        // written (metadata, cache): a refused purge changes nothing.
        self.check_purge(&log_id)?;
        meta.last_purged = Some(log_id);
        let bytes = meta.encode().map_err(io_err)?;
        self.store.write_app_metadata(&bytes).map_err(io_err)?;
        {
            self.tail().purge(index + 1);
        }
        // The purged entries must be durable before the log is cut below
        // them (a cut of queued entries would leave a hole).
        let durable = Offset(index + 1).min(self.store.extent().queued_end);
        self.store.wait_durable(durable).map_err(io_err)?;
        self.cut_purged()
    }
}

/// The committed leader id type of `C` (for callers naming log ids).
pub type Committed<C> = CommittedLeaderIdOf<C>;
