//! Appends: encoded outside the lock, placed and queued under it, written
//! at once or by the next round, and durable on return when asked.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

impl DurableLog {
    /// Encodes (no lock held), then queues a leader append: it takes the
    /// next offsets under the state lock, which is all a concurrent append
    /// waits for; returns that lock, still held.
    pub(super) fn queue<R: AsRef<[u8]>>(
        &self,
        epoch: Epoch,
        records: &[R],
    ) -> Result<(AppendInfo, std::sync::MutexGuard<'_, SyncState>)> {
        let encoder = crate::batch::BatchEncoder::from_options(&self.options);
        self.queue_with(encoder, None, epoch, records)
    }

    /// [`DurableLog::queue`] with `encoder`, at `at` if given (which must be
    /// the next offset).
    pub(super) fn queue_with<R: AsRef<[u8]>>(
        &self,
        encoder: crate::batch::BatchEncoder,
        at: Option<Offset>,
        epoch: Epoch,
        records: &[R],
    ) -> Result<(AppendInfo, std::sync::MutexGuard<'_, SyncState>)> {
        let unplaced = encoder.encode_unplaced(Vec::new(), epoch, records)?;
        self.shared.enqueue_at(at, unplaced)
    }

    /// Queues an append and writes the queue out (buffered: it does not wait
    /// for a sync), so the batch is readable on return.
    pub(super) fn append_written<R: AsRef<[u8]>>(
        &self,
        encoder: crate::batch::BatchEncoder,
        at: Option<Offset>,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        let (info, st) = self.queue_with(encoder, at, epoch, records)?;
        drop(st);
        self.write_queued()?;
        Ok(info)
    }

    /// Appends `records` as one **control** batch in `epoch` (leader
    /// change, voter set, snapshot markers: flagged so they are never taken
    /// for user records, `BatchRef::is_control`); as
    /// [`DurableLog::append_as_leader`] otherwise.
    ///
    /// # Errors
    /// As [`DurableLog::append_as_leader`].
    pub fn append_control<R: AsRef<[u8]>>(
        &self,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        let encoder = crate::batch::BatchEncoder::from_options(&self.options).control();
        let info = self.append_written(encoder, None, epoch, records)?;
        self.shared.note_written(info.next_offset, true);
        Ok(info)
    }

    /// A leader append written out (see [`DurableLog::append_written`]).
    pub(super) fn append_queued<R: AsRef<[u8]>>(
        &self,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        let encoder = crate::batch::BatchEncoder::from_options(&self.options);
        self.append_written(encoder, None, epoch, records)
    }

    /// Appends `records` as one batch in `epoch` at `base_offset`, which
    /// must be the log end (for Raft libraries that assign indexes
    /// themselves), through the same queue as leader appends; returns
    /// before they are durable, once they are readable.
    ///
    /// # Errors
    /// `NonContiguous` unless `base_offset` is where the next append goes;
    /// otherwise as [`DurableLog::append_as_leader`].
    pub fn append_at<R: AsRef<[u8]>>(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        self.append_at_end(base_offset, epoch, records, true)
    }

    /// Queues `records` as one batch in `epoch` at `base_offset` (which
    /// must be where the next append goes) **without writing it**: the
    /// next sync round writes the queue and makes it durable in one step
    /// (straight to the device when it can: `TailWrites::Direct`), and
    /// `on_durable` completions fire after it. Until that round the batch
    /// is not readable through the log ([`DurableLog::queued_end`] counts
    /// it, [`DurableLog::log_end_offset`] does not): for a caller that
    /// keeps what it appended (a Raft library's cache of its log tail).
    ///
    /// # Errors
    /// As [`DurableLog::append_at`] (no I/O happens here).
    pub fn append_at_queued<R: AsRef<[u8]>>(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        self.append_at_end(base_offset, epoch, records, false)
    }

    /// [`DurableLog::append_at_queued`] of `count` records that `write`
    /// encodes straight into the batch body (record `i` appended to the
    /// buffer it is given), so a caller's own encoding is the only copy of
    /// its value before the batch. `len_hint` (the expected batch size,
    /// headers included) sizes the buffer and is checked against the batch
    /// limit before anything is encoded.
    ///
    /// # Errors
    /// As [`DurableLog::append_at_queued`]; `RecordEncoding` if `write`
    /// fails (nothing queued).
    pub fn append_at_queued_with(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        count: usize,
        len_hint: u64,
        write: impl FnMut(usize, &mut Vec<u8>) -> std::io::Result<()>,
    ) -> Result<AppendInfo> {
        let encoder = crate::batch::BatchEncoder::from_options(&self.options);
        let unplaced = encoder.encode_unplaced_with(Vec::new(), epoch, count, len_hint, write)?;
        let info = self.shared.enqueue_at(Some(base_offset), unplaced)?.0;
        self.shared.note_written(info.next_offset, true);
        Ok(info)
    }

    /// [`DurableLog::append_at`] (`write_now`) or
    /// [`DurableLog::append_at_queued`]; either way the flusher is woken.
    pub(super) fn append_at_end<R: AsRef<[u8]>>(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        records: &[R],
        write_now: bool,
    ) -> Result<AppendInfo> {
        let encoder = crate::batch::BatchEncoder::from_options(&self.options);
        let info = if write_now {
            self.append_written(encoder, Some(base_offset), epoch, records)?
        } else {
            self.queue_with(encoder, Some(base_offset), epoch, records)?
                .0
        };
        self.shared.note_written(info.next_offset, true);
        Ok(info)
    }

    /// Encodes `records` as one batch in `epoch` without placing it: the
    /// CRC and any compression happen here, on the caller's thread, with no
    /// lock held. [`DurableLog::enqueue`] then gives it the next offsets.
    /// A layer that orders appends under its own lock (many Raft groups in
    /// one log) encodes first and holds its lock only for the placing.
    ///
    /// # Errors
    /// `EmptyBatch`, `BatchTooLarge`.
    pub fn encode<R: AsRef<[u8]>>(&self, epoch: Epoch, records: &[R]) -> Result<EncodedBatch> {
        let encoder = crate::batch::BatchEncoder::from_options(&self.options);
        Ok(EncodedBatch(encoder.encode_unplaced(
            Vec::new(),
            epoch,
            records,
        )?))
    }

    /// [`DurableLog::encode`] of `count` records that `write` encodes
    /// straight into the batch (see [`DurableLog::append_at_queued_with`]).
    ///
    /// # Errors
    /// As [`DurableLog::encode`]; `RecordEncoding` if `write` fails.
    pub fn encode_with(
        &self,
        epoch: Epoch,
        count: usize,
        len_hint: u64,
        write: impl FnMut(usize, &mut Vec<u8>) -> std::io::Result<()>,
    ) -> Result<EncodedBatch> {
        let encoder = crate::batch::BatchEncoder::from_options(&self.options);
        Ok(EncodedBatch(encoder.encode_unplaced_with(
            Vec::new(),
            epoch,
            count,
            len_hint,
            write,
        )?))
    }

    /// Places an encoded batch at the next offsets and queues it for the
    /// next sync round, as [`DurableLog::append_at_queued`]: not readable
    /// until that round writes it ([`DurableLog::write_queued_now`] writes
    /// it at once). Returns where it landed.
    ///
    /// # Errors
    /// `EpochRegression`, `OffsetOverflow`; `Poisoned`.
    pub fn enqueue(&self, batch: EncodedBatch) -> Result<AppendInfo> {
        self.enqueue_waking(batch, true)
    }

    /// [`DurableLog::enqueue`] for a caller that waits for it next
    /// ([`DurableLog::wait_durable`]): under `GroupCommit` the waiter
    /// leads the round itself, as [`DurableLog::append_durable`] does, so
    /// the flusher thread is not woken (a wake-up per append is a context
    /// switch per append). A caller that does not wait leaves the batch to
    /// the next round anyone starts.
    ///
    /// # Errors
    /// As [`DurableLog::enqueue`].
    pub fn enqueue_for_wait(&self, batch: EncodedBatch) -> Result<AppendInfo> {
        self.enqueue_waking(batch, false)
    }

    pub(super) fn enqueue_waking(&self, batch: EncodedBatch, wake: bool) -> Result<AppendInfo> {
        self.check_poisoned()?;
        self.check_space()?;
        let info = self.shared.enqueue_at(None, batch.0)?.0;
        self.shared.note_written(info.next_offset, wake);
        Ok(info)
    }

    /// Starts a round for what is queued, unless one is under way (wakes
    /// the flusher): for a completion waiting on a batch queued without a
    /// wake-up ([`DurableLog::enqueue_for_wait`]).
    pub fn start_round(&self) {
        self.shared.note_written(Offset(0), true);
    }

    /// Writes every queued batch now (buffered, no sync), so it is readable.
    ///
    /// # Errors
    /// `Io` (which poisons); `Poisoned`.
    pub fn write_queued_now(&self) -> Result<()> {
        self.check_poisoned()?;
        self.write_queued()
    }

    /// Where the next append goes: the log end plus the appends queued for
    /// the next sync round ([`DurableLog::append_at_queued`]).
    pub fn queued_end(&self) -> Offset {
        self.shared.state().next_offset
    }

    /// Writes what is queued (buffered), so queued appends are readable.
    pub(super) fn write_queued(&self) -> Result<()> {
        let r = {
            let _gate = self.shared.gate();
            let mut log = self.shared.log_write();
            self.shared.drain(&mut log, false)
        };
        if r.is_err() {
            // A failed write (or a roll's failed sync) poisons.
            self.after_log_change(&r);
        }
        r
    }

    /// Appends `records` as one batch in `epoch` (see
    /// [`Log::append_as_leader`]); returns before they are durable, once
    /// they are readable. Concurrent appends are written together.
    ///
    /// # Errors
    /// As [`Log::append_as_leader`]; `Poisoned` after a failed sync.
    pub fn append_as_leader<R: AsRef<[u8]>>(
        &self,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        let info = self.append_queued(epoch, records)?;
        self.shared.note_written(info.next_offset, true);
        Ok(info)
    }

    /// Appends batches replicated from the leader (see
    /// [`Log::append_as_follower`]); returns before they are durable.
    ///
    /// # Errors
    /// As [`Log::append_as_follower`]; `Poisoned` after a failed sync.
    pub fn append_as_follower<R: AsRef<[u8]>>(
        &self,
        batches: &[FollowerBatch<'_, R>],
    ) -> Result<AppendInfo> {
        self.check_poisoned()?;
        let r = {
            let _gate = self.shared.gate();
            let mut log = self.shared.log_write();
            // Queued leader appends first, in order; the state lock is held
            // until the queue continues after the follower's batches.
            let mut st = self.shared.state();
            let r = Shared::drain_locked(&mut st, &mut log)
                .and_then(|()| log.append_as_follower(batches));
            Shared::resync(&mut st, &log);
            r
        };
        self.after_append(r, true)
    }

    pub(super) fn after_append(
        &self,
        r: Result<AppendInfo>,
        wake_flusher: bool,
    ) -> Result<AppendInfo> {
        match r {
            Ok(info) => {
                self.shared.note_written(info.next_offset, wake_flusher);
                Ok(info)
            }
            Err(e) => {
                // A failed write (or a roll's failed sync) poisons.
                let r = Err(e);
                self.after_log_change(&r);
                r
            }
        }
    }

    /// Appends and blocks until the records are durable. Concurrent callers
    /// share writes and syncs.
    ///
    /// # Errors
    /// As [`DurableLog::append_as_leader`] and [`DurableLog::wait_durable`].
    pub fn append_durable<R: AsRef<[u8]>>(
        &self,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        // This writer waits, and leads a round itself if none is in flight
        // (the round writes the queue and syncs): no need to wake the
        // flusher. Under another policy the batch is written now.
        if !self.shared.policy.writers_lead() {
            let info = self.append_queued(epoch, records)?;
            // The flusher runs this round: tell it (it may be idle).
            self.shared.note_written(info.next_offset, true);
            self.wait_durable(info.next_offset)?;
            return Ok(info);
        }
        // Queued and waiting in one critical section.
        let (info, st) = self.queue(epoch, records)?;
        self.shared.wait_locked(st, info.next_offset)?;
        Ok(info)
    }
}
