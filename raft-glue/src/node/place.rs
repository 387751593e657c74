//! Placing a group's change in the shared log: encoded with no lock held,
//! placed under the node's lock (which orders the log), made durable; the
//! one poisoned state every call checks first.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

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
            self.signal.0.wake();
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
}
