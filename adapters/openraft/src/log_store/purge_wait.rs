//! An append just past a purge that still waits for its snapshot file
//! (bounded mode) waits for the file, then completes the purge.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

impl<C> LogStore<C>
where
    C: RaftTypeConfig<NodeId = u64, Entry = Entry<C>>,
    Entry<C>: Serialize + DeserializeOwned + Clone,
{
    /// Before appending at `index`: if the log ends below it only because
    /// a purge past its end is still waiting for the snapshot file that
    /// covers it (bounded mode, the purge that follows an install), waits
    /// for that file, then completes the purge (the log restarts at the
    /// snapshot's end).
    pub(super) async fn continue_after_purge(&self, index: u64) -> Result<(), StoreError> {
        let end = self.store.extent().queued_end.0;
        if self.purge == PurgeMode::Immediate || index <= end {
            return Ok(());
        }
        let purged_next = self.purged_next.load(std::sync::atomic::Ordering::Relaxed);
        if index > purged_next {
            return Ok(()); // a real gap: the append refuses it
        }
        let t0 = std::time::Instant::now();
        while self
            .store
            .extent()
            .latest_snapshot
            .is_none_or(|s| s.end_offset.0 < index)
        {
            if t0.elapsed() > std::time::Duration::from_secs(60) {
                return Err(logs_write(&std::io::Error::other(
                    "no snapshot covers the purged log before the append",
                )));
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        self.blocking(|s| {
            physical_cut(s, PurgeMode::CoveredBySnapshot).map_err(|e| logs_write(&*e))
        })
        .await
    }

    /// Appends one run of entries of one epoch, then keeps them in the
    /// tail cache; leaves both lists empty.
    pub(super) fn append_run(
        &self,
        (index, epoch): (u64, Epoch),
        sizes: &mut Vec<u64>,
        entries: &mut Vec<Entry<C>>,
    ) -> Result<(), StoreError> {
        // Entries read ahead from here on are overwritten.
        self.ahead().cut_from(index);
        // The batch header, then each record's length prefix and bytes.
        let len_hint = 40 + sizes.iter().map(|s| s + 4).sum::<u64>();
        self.store
            .append(
                Offset(index),
                epoch,
                Encode {
                    count: entries.len(),
                    len_hint,
                    write: |i, out: &mut Vec<u8>| {
                        let entry = entries
                            .get(i)
                            .ok_or_else(|| std::io::Error::other("no such entry"))?;
                        mapping::encode_entry_into(out, entry).map_err(std::io::Error::other)
                    },
                },
            )
            .map_err(|e| logs_write(&e))?;
        let mut tail = self.tail();
        for (i, (e, size)) in entries.drain(..).zip(sizes.drain(..)).enumerate() {
            tail.push(
                index + i as u64,
                e,
                usize::try_from(size).unwrap_or(usize::MAX),
            );
        }
        // Within its bounds, the oldest first (openraft's replication keeps
        // far fewer entries than the bounds in flight).
        tail.trim(u64::MAX);
        Ok(())
    }
}
