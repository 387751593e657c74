//! The reads raft-rs makes (`raft::Storage`): the region's tail first, then
//! its group, budgets counted as raft-rs counts them, and reads a Ready loop
//! can wait for run on the persister's fetch thread.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

impl raft::Storage for RegionStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let st = lock(&self.inner.state);
        Ok(RaftState::new(st.hard.clone(), st.conf.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let max = budget(max_size.into());
        let (first, last) = (self.first(), self.last());
        if low < first {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > last + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        if low >= high {
            return Ok(Vec::new());
        }
        if context.can_async() && lock(&self.inner.fetcher).is_some() {
            let mut st = lock(&self.inner.state);
            let in_tail = st.tail.first().is_some_and(|t| t <= low);
            if !in_tail {
                if let Some(f) = st.fetched.take() {
                    if f.first().is_some_and(|e| e.index == low) {
                        let n = usize::try_from(high - low).unwrap_or(usize::MAX);
                        return Ok(contiguous(take_within(f.iter().take(n), max), low, high));
                    }
                }
                if !st.fetching {
                    st.fetching = true;
                    drop(st);
                    self.fetch_async(low, high, max, context);
                }
                return Err(raft::Error::Store(StorageError::LogTemporarilyUnavailable));
            }
        }
        Ok(contiguous(self.read(low, high, max)?, low, high))
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        match self.term_of(idx) {
            Ok(t) => Ok(t),
            Err(Error::Compacted { .. }) => Err(raft::Error::Store(StorageError::Compacted)),
            Err(Error::Store(quorumlog_raft::Error::OffsetOutOfRange { .. })) => {
                Err(raft::Error::Store(StorageError::Unavailable))
            }
            Err(e) => Err(e.into()),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let store = &self.inner.store;
        let unavailable = || raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable);
        let Some(id) = store.extent().latest_snapshot else {
            return Err(unavailable());
        };
        let index = id.end_offset.0.saturating_sub(1);
        if index < request_index {
            return Err(unavailable());
        }
        let conf: ConfState = decode(
            "a snapshot's conf state",
            &store
                .snapshot(id)
                .and_then(|s| s.metadata())
                .map_err(Error::from)?,
        )?;
        let mut s = Snapshot {
            data: store
                .snapshot(id)
                .and_then(|s| s.file())
                .map_err(Error::from)?
                .into(),
            ..Snapshot::default()
        };
        let m = s.mut_metadata();
        m.index = index;
        m.term = id.epoch.0;
        m.set_conf_state(conf);
        Ok(s)
    }
}

impl RegionStorage {
    pub(super) fn term_of(&self, idx: u64) -> Result<u64> {
        {
            let st = lock(&self.inner.state);
            let (from, term) = st.last_run;
            let in_tail = st.tail.first().is_some_and(|f| f <= idx)
                && st.tail.next().is_some_and(|n| idx < n);
            if in_tail && idx >= from {
                debug_assert_eq!(st.tail.at(idx).map(|e| e.term), Some(term));
                return Ok(term);
            }
            if let Some(e) = st.tail.at(idx) {
                return Ok(e.term);
            }
        }
        let (first, last) = (self.first(), self.last());
        let store = &self.inner.store;
        if idx + 1 == first {
            return match store.extent().last_purged {
                Some((o, e)) if o.0 == idx => Ok(e.0),
                _ if idx == 0 => Ok(0),
                _ => Err(Error::Compacted { index: idx, first }),
            };
        }
        if idx < first {
            return Err(Error::Compacted { index: idx, first });
        }
        if idx > last {
            return Err(Error::Store(quorumlog_raft::Error::OffsetOutOfRange {
                offset: Offset(idx),
                start: Offset(first),
                end: Offset(last + 1),
                snapshot: store.extent().latest_snapshot,
            }));
        }
        store.epoch_at(Offset(idx)).map(|e| e.0).ok_or_else(|| {
            Error::Store(quorumlog_raft::Error::OffsetOutOfRange {
                offset: Offset(idx),
                start: Offset(first),
                end: Offset(last + 1),
                snapshot: store.extent().latest_snapshot,
            })
        })
    }

    /// Entries `[low, high)` from the store, then the tail, within `max`.
    pub(super) fn read(&self, low: u64, high: u64, max: u64) -> Result<Vec<Entry>> {
        let tail_start = lock(&self.inner.state).tail.first();
        let upto = tail_start.map_or(high, |t| t.min(high));
        let mut out = Vec::new();
        let mut size = 0u64;
        if low < upto {
            let read = self.inner.store.read_entries(
                Offset(low),
                Offset(upto),
                max,
                Isolation::Uncommitted,
            )?;
            for r in read {
                let e: Entry = decode("an entry", &r.bytes)?;
                size += u64::from(e.compute_size());
                if !out.is_empty() && size > max {
                    return Ok(out);
                }
                out.push(e);
            }
            if out.last().is_none_or(|e| e.index + 1 < upto) {
                // The budget ended the read.
                return Ok(out);
            }
        }
        let from = out.last().map_or(low, |e| e.index + 1);
        if from < high {
            let st = lock(&self.inner.state);
            if st.tail.first().is_none_or(|t| t > from) {
                // The tail moved (a truncation or snapshot): read again.
                drop(st);
                return if out.is_empty() {
                    Err(Error::Gap {
                        index: from,
                        last: self.last(),
                    })
                } else {
                    Ok(out)
                };
            }
            let n = usize::try_from(high - from).unwrap_or(usize::MAX);
            let left = max.saturating_sub(size);
            let more = if out.is_empty() {
                take_within(st.tail.iter_from(from).take(n), max)
            } else {
                let mut s = 0u64;
                st.tail
                    .iter_from(from)
                    .take(n)
                    .take_while(|e| {
                        s += u64::from(e.compute_size());
                        s <= left
                    })
                    .cloned()
                    .collect()
            };
            out.extend(more);
        }
        Ok(out)
    }

    /// Runs an asynchronous fetch of `[low, high)` on the fetch thread.
    pub(super) fn fetch_async(&self, low: u64, high: u64, max: u64, context: GetEntriesContext) {
        let Some(f) = lock(&self.inner.fetcher).clone() else {
            return;
        };
        let me = self.clone();
        let region = self.inner.region;
        let events = f.events.clone();
        let waker = Arc::clone(&f.waker);
        let pending = Arc::clone(&f.wake_pending);
        let job: Job = Box::new(move || {
            let got = me.read(low, high, max);
            let mut st = lock(&me.inner.state);
            st.fetching = false;
            match got {
                Ok(e) => {
                    st.fetched = Some(e);
                    drop(st);
                    let _ = events.send(Event::Fetched { region, context });
                }
                Err(error) => {
                    drop(st);
                    let _ = events.send(Event::Failed { region, error });
                }
            }
            wake(lock(&waker).as_ref(), &pending);
        });
        let _ = f.jobs.send(job);
    }
}
