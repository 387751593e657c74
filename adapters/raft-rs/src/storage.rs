//! [`RegionStorage`]: one raft-rs region's storage over a store or a
//! node's group. It implements `raft::Storage` (what `RawNode` reads) and
//! the writes a Ready loop makes (append, hard state, conf state,
//! snapshot apply, compaction, snapshot creation).
//!
//! How raft-rs's values live in the store:
//! - an entry is one record at offset = index, in a batch whose epoch is
//!   the entry's term; the record is the entry's protobuf bytes, so its
//!   length is the size raft-rs counts (`compute_size`);
//! - term and vote are the store's quorum state (the epoch is the term,
//!   the vote a voter with `DirectoryId(vote + 1)`); the commit index is
//!   the high watermark minus one (the watermark is the end of what is
//!   committed);
//! - the conf state is the application metadata, in protobuf;
//! - a snapshot at index `i`, term `t` is the store's snapshot
//!   `(end_offset i + 1, epoch t)`: its metadata the conf state, its state
//!   the application's bytes; `Snapshot::data` carries the whole snapshot
//!   file, checked chunk by chunk by the receiver's install.

mod reads;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use protobuf::Message as _;
use quorumlog_raft::{
    options::WriterOptions, Encode, Epoch, Group, Isolation, NodeId, Offset, Purge, QuorumState,
    RecentEntries, SnapshotId,
};
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, StorageError};

use crate::error::{budget, Error, Result};
use crate::event::{wake, Event, Fetcher, Job};

/// Entries kept in memory at the log's end per region by default: the
/// queued ones (readable before their round writes them, as
/// `advance_append_async` requires) and the most recent durable ones
/// (what a leader sends its followers next).
pub const CACHE_ENTRIES: usize = 256;

/// One region's raft-rs storage. Cheap to clone: clones share it.
#[derive(Debug)]
pub struct RegionStorage {
    inner: Arc<Inner>,
}

impl Clone for RegionStorage {
    fn clone(&self) -> Self {
        RegionStorage {
            inner: Arc::clone(&self.inner),
        }
    }
}

#[derive(Debug)]
struct Inner {
    store: Arc<Group>,
    region: u64,
    cache_entries: usize,
    state: Mutex<State>,
    fetcher: Mutex<Option<Fetcher>>,
    /// The first and last index, kept as the adapter's writes (the only
    /// ones to the region's log) move them: raft-rs asks for them, and
    /// for terms, far more often than it writes.
    first: AtomicU64,
    last: AtomicU64,
}

#[derive(Debug)]
struct State {
    /// Contiguous entries ending at the last index (the engine's cache,
    /// `cache_entries` of them once durable).
    tail: RecentEntries<Entry>,
    /// The tail's last run of one term, `(from, term)`: every entry of
    /// the tail at `from` or above is in `term`. raft-rs asks for the
    /// terms of recent entries on every step; this answers them from the
    /// lock's own cache lines instead of each entry's.
    last_run: (u64, u64),
    hard: HardState,
    conf: ConfState,
    /// An asynchronous fetch's result: the entries from its first index.
    fetched: Option<Vec<Entry>>,
    fetching: bool,
}

fn decode<M: protobuf::Message>(what: &'static str, bytes: &[u8]) -> Result<M> {
    M::parse_from_bytes(bytes).map_err(|source| Error::Decode { what, source })
}

fn encode<M: protobuf::Message>(what: &'static str, m: &M) -> Result<Vec<u8>> {
    m.write_to_bytes()
        .map_err(|source| Error::Decode { what, source })
}

/// The quorum state of raft-rs's hard state: its term and vote (the
/// voter every adapter records for a library's node,
/// [`quorumlog_raft::vote::library_voter`]); raft-rs keeps no leader in it.
fn vote_of(hs: &HardState) -> QuorumState {
    QuorumState {
        epoch: Epoch(hs.term),
        leader: None,
        voted: (hs.vote != 0).then(|| quorumlog_raft::vote::library_voter(NodeId(hs.vote))),
    }
}

/// The store snapshot of raft-rs snapshot metadata.
pub(crate) fn snapshot_id(meta: &SnapshotMetadata) -> SnapshotId {
    SnapshotId {
        end_offset: Offset(meta.index + 1),
        epoch: Epoch(meta.term),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// raft-rs's size limit (`raft::util::limit_size`), counted while
/// collecting: the first entry always, then each while the total stays
/// within `max`.
fn take_within<'a>(entries: impl Iterator<Item = &'a Entry>, max: u64) -> Vec<Entry> {
    let mut size = 0u64;
    let mut out = Vec::new();
    for e in entries {
        size += u64::from(e.compute_size());
        if !out.is_empty() && size > max {
            break;
        }
        out.push(e.clone());
    }
    out
}

/// `entries`, asserted contiguous from `low` and below `high`: raft-rs
/// sends what `entries()` returns as one contiguous `MsgAppend`, so a hole
/// handed to it would become a follower's wrong log. A bug, never input:
/// the process stops.
fn contiguous(entries: Vec<Entry>, low: u64, high: u64) -> Vec<Entry> {
    for (i, e) in entries.iter().enumerate() {
        assert!(
            e.index == low + i as u64 && e.index < high,
            "entries({low}, {high}) would return index {} at position {i}",
            e.index
        );
    }
    entries
}

/// Refuses entries whose indexes do not follow one another or whose
/// terms go back.
fn check_order(entries: &[Entry]) -> Result<()> {
    for (position, w) in entries.windows(2).enumerate() {
        if let [a, b] = w {
            if b.index != a.index + 1 || b.term < a.term {
                return Err(Error::Unordered {
                    position: position + 1,
                    index: b.index,
                    term: b.term,
                    prev_index: a.index,
                    prev_term: a.term,
                });
            }
        }
    }
    Ok(())
}

impl RegionStorage {
    /// The region's storage over `store` (a node's group for a region of
    /// many on one log, or a one-group store), with its state read back:
    /// term and vote, the commit index (after a restart, the durable one,
    /// within the log), the conf state.
    ///
    /// A fresh region's store starts at offset 1 (raft-rs's first index;
    /// index 0 is its empty entry), or at the entry after the snapshot it
    /// is created from.
    ///
    /// # Errors
    /// A conf state that does not decode; the store's.
    pub fn open(store: Arc<Group>, region: u64) -> Result<Self> {
        Self::with_cache(store, region, CACHE_ENTRIES)
    }

    /// [`RegionStorage::open`] keeping up to `cache_entries` durable
    /// entries in memory (the queued ones are always kept).
    ///
    /// # Errors
    /// As [`RegionStorage::open`].
    pub fn with_cache(store: Arc<Group>, region: u64, cache_entries: usize) -> Result<Self> {
        if let Some(f) = store.poisoned() {
            return Err(Error::Store(quorumlog_raft::Error::Poisoned(f)));
        }
        let qs = store.quorum_state();
        let conf = match store.app_metadata() {
            Some(b) => decode("the conf state", &b)?,
            None => match store.extent().latest_snapshot {
                Some(id) => decode(
                    "a snapshot's conf state",
                    &store.snapshot(id).and_then(|s| s.metadata())?,
                )?,
                None => ConfState::default(),
            },
        };
        let first = store.extent().start.0;
        let last = store.extent().queued_end.0.saturating_sub(1);
        let commit = store
            .extent()
            .high_watermark
            .map_or(0, |h| h.0.saturating_sub(1))
            .clamp(first.saturating_sub(1), last.max(first.saturating_sub(1)));
        let hard = HardState {
            term: qs.epoch.0,
            vote: qs.voted.map_or(0, |v| v.node_id.0),
            commit,
            ..HardState::default()
        };
        Ok(RegionStorage {
            inner: Arc::new(Inner {
                store,
                region,
                cache_entries,
                state: Mutex::new(State {
                    tail: RecentEntries::new(cache_entries, usize::MAX),
                    last_run: (u64::MAX, 0),
                    hard,
                    conf,
                    fetched: None,
                    fetching: false,
                }),
                fetcher: Mutex::new(None),
                first: AtomicU64::new(first),
                last: AtomicU64::new(last),
            }),
        })
    }

    /// The store underneath.
    pub fn store(&self) -> &Arc<Group> {
        &self.inner.store
    }

    /// The region's id (what [`crate::Event`]s name).
    pub fn region(&self) -> u64 {
        self.inner.region
    }

    /// Where `entries` sends the reads it answers
    /// `LogTemporarilyUnavailable` for
    /// ([`crate::AsyncPersister::enable_async_fetch`]).
    pub(crate) fn set_fetcher(&self, fetcher: Fetcher) {
        *lock(&self.inner.fetcher) = Some(fetcher);
    }

    /// The current hard state (term, vote, commit) as given.
    pub fn hard_state(&self) -> HardState {
        lock(&self.inner.state).hard.clone()
    }

    /// The current conf state.
    pub fn conf_state(&self) -> ConfState {
        lock(&self.inner.state).conf.clone()
    }

    fn first(&self) -> u64 {
        self.inner.first.load(Ordering::Acquire)
    }

    fn last(&self) -> u64 {
        self.inner.last.load(Ordering::Acquire)
    }

    /// Reads the bounds back from the store (after a write that moved
    /// them).
    fn refresh(&self) {
        let store = &self.inner.store;
        self.inner
            .first
            .store(store.extent().start.0, Ordering::Release);
        self.inner.last.store(
            store.extent().queued_end.0.saturating_sub(1),
            Ordering::Release,
        );
    }

    // --- The writes a Ready loop makes. ---

    /// Sets the conf state of a region that has none (a new cluster's
    /// first members, as `MemStorage::initialize_with_conf_state`),
    /// durably.
    ///
    /// # Errors
    /// The store's.
    pub fn initialize_with_conf_state(&self, conf: impl Into<ConfState>) -> Result<()> {
        self.set_conf_state(&conf.into())
    }

    /// Appends a Ready's entries, queued for the shared log's next round
    /// and readable at once. Entries from an index the log holds replace
    /// it and everything after (a new leader's conflict: the truncation
    /// is durable before the append is queued).
    ///
    /// # Errors
    /// `Compacted` below the first index; `Gap` past the last index + 1;
    /// `Unordered` for indexes that do not follow one another or terms
    /// that go back (the first entry's against the log's entry before it
    /// included); `EntryTooLarge` for an entry a batch cannot hold; the
    /// store's (a truncation below the commit point). Each refusal comes
    /// before anything is written: a refused append changes nothing.
    pub fn append(&self, entries: &[Entry]) -> Result<()> {
        let Some(head) = entries.first() else {
            return Ok(());
        };
        check_order(entries)?;
        let store = &self.inner.store;
        // Every refusal before anything is written (a truncation is
        // durable): a refused append changes nothing.
        let limit = self.check_append(entries, head)?;
        let mut st = lock(&self.inner.state);
        let (first, last) = (self.first(), self.last());
        if head.index < first {
            return Err(Error::Compacted {
                index: head.index,
                first,
            });
        }
        if head.index > last + 1 {
            return Err(Error::Gap {
                index: head.index,
                last,
            });
        }
        if head.index <= last {
            let cut = store.truncate_to(Offset(head.index));
            self.refresh();
            cut?;
            st.tail.truncate(head.index);
        }
        let mut rest = entries;
        while let Some(h) = rest.first() {
            // One batch: one term, within the store's batch size.
            let (mut n, mut bytes) = (0usize, 0u64);
            for e in rest {
                let size = u64::from(e.compute_size());
                if e.term != h.term || (n > 0 && bytes + size > limit) {
                    break;
                }
                n += 1;
                bytes += size;
            }
            let (run, after) = rest.split_at(n);
            let queued = store.append(
                Offset(h.index),
                Epoch(h.term),
                Encode {
                    count: run.len(),
                    len_hint: bytes,
                    write: |i: usize, buf: &mut Vec<u8>| -> std::io::Result<()> {
                        run.get(i)
                            .ok_or_else(|| std::io::Error::other("an entry past the run"))?
                            .write_to_vec(buf)
                            .map_err(std::io::Error::other)
                    },
                },
            );
            if let Err(e) = queued {
                self.refresh();
                return Err(e.into());
            }
            if let Some(e) = run.last() {
                self.inner.last.store(e.index, Ordering::Release);
            }
            rest = after;
        }
        for e in entries {
            // A first index that does not continue the tail clears it.
            st.tail.push(e.index, e.clone(), 0);
            // Truncations, purges and clears only drop entries, which
            // keeps the run's rule; a push keeps it by starting a new run
            // where the term changes.
            if e.term != st.last_run.1 {
                st.last_run = (e.index, e.term);
            }
        }
        self.trim(&mut st);
        Ok(())
    }

    /// The refusals of an append that come before anything is written:
    /// an entry no batch holds, a first term behind the log's entry
    /// before it. Returns the batch limit the append splits by.
    fn check_append(&self, entries: &[Entry], head: &Entry) -> Result<u64> {
        let limit = self
            .inner
            .store
            .max_batch_bytes()
            .saturating_sub(4096)
            .max(1);
        if let Some(e) = entries.iter().find(|e| u64::from(e.compute_size()) > limit) {
            return Err(Error::EntryTooLarge {
                index: e.index,
                size: u64::from(e.compute_size()),
                max: limit,
            });
        }
        if head.index > self.first() && head.index <= self.last() + 1 {
            let prev = self.term_of(head.index - 1)?;
            if head.term < prev {
                return Err(Error::Unordered {
                    position: 0,
                    index: head.index,
                    term: head.term,
                    prev_index: head.index - 1,
                    prev_term: prev,
                });
            }
        }
        Ok(limit)
    }

    /// Drops durable entries from the front of the tail past the cache's
    /// size (the queued ones stay: the store cannot read them yet).
    fn trim(&self, st: &mut State) {
        if st.tail.len() <= self.inner.cache_entries {
            return;
        }
        st.tail.trim(self.inner.store.extent().flushed.0);
    }

    /// Applies a Ready's hard state: a new term or vote is durable on
    /// return (before the Ready's persisted messages may leave); the
    /// commit index raises the high watermark, whose small record rides
    /// the node's next sync round (under the node's default
    /// `WatermarkDurability::NextRound`: the Ready's own round when the
    /// pass syncs; a restart re-learns what a cut before it loses).
    ///
    /// # Errors
    /// `CommitBackwards`; `CommitPastLast` (checked before the term and
    /// vote are written); the store's: the term going back or a second
    /// vote in one term (`Checkpoint(EpochRegression | VoteConflict)`), a
    /// commit index past the last index.
    pub fn set_hard_state(&self, hs: &HardState) -> Result<()> {
        let store = &self.inner.store;
        let mut st = lock(&self.inner.state);
        if hs.commit < st.hard.commit {
            return Err(Error::CommitBackwards {
                commit: hs.commit,
                current: st.hard.commit,
            });
        }
        // Checked before the term and vote are written: a refused hard
        // state changes nothing.
        let last = self.last();
        if hs.commit > st.hard.commit && hs.commit > last {
            return Err(Error::CommitPastLast {
                commit: hs.commit,
                last,
            });
        }
        if hs.term != st.hard.term || hs.vote != st.hard.vote {
            store.persist_quorum_state(&vote_of(hs))?;
            st.hard.term = hs.term;
            st.hard.vote = hs.vote;
        }
        if hs.commit > st.hard.commit {
            // A watermark as high already (a snapshot installed past the
            // commit index raised it) stays: it never moves back.
            match store.set_high_watermark(Offset(hs.commit + 1)) {
                Ok(()) | Err(quorumlog_raft::Error::HighWatermarkBackwards { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            st.hard.commit = hs.commit;
        }
        Ok(())
    }

    /// Replaces the conf state (after applying a conf change), durably.
    ///
    /// # Errors
    /// The store's.
    pub fn set_conf_state(&self, conf: &ConfState) -> Result<()> {
        self.inner
            .store
            .write_app_metadata(&encode("the conf state", conf)?)?;
        lock(&self.inner.state).conf = conf.clone();
        Ok(())
    }

    /// Applies a Ready's snapshot: its data (a snapshot file another
    /// replica's [`RegionStorage`] made) is installed through the store,
    /// verified chunk by chunk, published, and the log continues it;
    /// durable on return. Returns the application's state bytes.
    ///
    /// # Errors
    /// `SnapshotOutOfDate` below the first index; the store's (data that
    /// is not a whole, valid snapshot file of that id is refused and
    /// nothing is published).
    pub fn apply_snapshot(&self, snapshot: &Snapshot) -> Result<Vec<u8>> {
        let meta = snapshot.get_metadata();
        let first = self.first();
        if meta.index < first {
            return Err(Error::SnapshotOutOfDate {
                index: meta.index,
                first,
            });
        }
        let id = snapshot_id(meta);
        let data = &snapshot.data;
        let store = &self.inner.store;
        let mut st = lock(&self.inner.state);
        let mut install = store.install_snapshot(id, data.len() as u64)?;
        let at = usize::try_from(install.position()).unwrap_or(usize::MAX);
        if let Some(rest) = data.get(at..).filter(|r| !r.is_empty()) {
            install.write_chunk(at as u64, rest)?;
        }
        let finished = install.finish();
        self.refresh();
        finished?;
        let conf = meta.get_conf_state();
        store.write_app_metadata(&encode("the conf state", conf)?)?;
        st.conf = conf.clone();
        st.tail.clear();
        st.fetched = None;
        st.hard.commit = st.hard.commit.max(meta.index);
        let (_, state) = store.snapshot(id).and_then(|s| s.read())?;
        Ok(state)
    }

    /// Deletes the entries below `index` (raft-rs's `compact`; at or below
    /// the first index nothing happens). With snapshots present, entries
    /// no snapshot covers stay: compaction past the latest snapshot is
    /// refused.
    ///
    /// # Errors
    /// `CompactBeyondEnd` past the last index + 1; the store's
    /// (`MissingSnapshot`).
    pub fn compact(&self, index: u64) -> Result<()> {
        let (first, last) = (self.first(), self.last());
        if index <= first {
            return Ok(());
        }
        if index > last + 1 {
            return Err(Error::CompactBeyondEnd { index, last });
        }
        let term = self.term_of(index - 1)?;
        let purged = self.inner.store.purge(Purge::To {
            offset: Offset(index),
            epoch: Epoch(term),
        });
        self.refresh();
        purged?;
        let mut st = lock(&self.inner.state);
        st.tail.purge(index);
        Ok(())
    }

    /// Writes a snapshot of the application's state at `index` (applied,
    /// at or below the commit index) with the conf state at that index,
    /// durably. Returns its metadata.
    ///
    /// # Errors
    /// The store's: above the commit index, an index the log does not
    /// hold, one that exists.
    pub fn create_snapshot(
        &self,
        index: u64,
        conf: &ConfState,
        state: &[u8],
    ) -> Result<SnapshotMetadata> {
        let term = self.term_of(index)?;
        let id = SnapshotId {
            end_offset: Offset(index + 1),
            epoch: Epoch(term),
        };
        let mut w = self.inner.store.create_snapshot(
            id.end_offset,
            id.epoch,
            &encode("the conf state", conf)?,
            WriterOptions::default(),
        )?;
        w.write(state)?;
        w.freeze()?;
        let mut meta = SnapshotMetadata {
            index,
            term,
            ..SnapshotMetadata::default()
        };
        meta.set_conf_state(conf.clone());
        Ok(meta)
    }
}
