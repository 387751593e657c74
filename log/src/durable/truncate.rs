//! Truncations through the group commit: queued appends are written first, and the sync state follows the log (what a truncation reports durable is durable).

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's private items, as it sees them"
)]
use super::*;

impl DurableLog {
    /// Suffix truncation (see [`Log::truncate_to`]); durable on return.
    ///
    /// # Errors
    /// As [`Log::truncate_to`].
    pub fn truncate_to(&self, offset: Offset) -> Result<()> {
        self.truncating(|log| log.truncate_to(offset))
    }

    /// Restarts the log, empty, at `offset` (see
    /// [`Log::truncate_fully_and_start_at`]).
    ///
    /// # Errors
    /// As [`Log::truncate_fully_and_start_at`].
    pub fn truncate_fully_and_start_at(
        &self,
        offset: Offset,
        purged_epoch: Option<Epoch>,
    ) -> Result<()> {
        self.truncating(|log| log.truncate_fully_and_start_at(offset, purged_epoch))
    }

    /// Prefix truncation (see [`Log::truncate_prefix_to`]).
    ///
    /// # Errors
    /// As [`Log::truncate_prefix_to`].
    pub fn truncate_prefix_to(&self, offset: Offset) -> Result<()> {
        let r = {
            let _gate = self.shared.gate();
            let mut log = self.shared.log_write();
            // Appends queued for the next round are written first (the cut
            // may reach into them); the round still syncs them.
            let r = self
                .shared
                .drain(&mut log, false)
                .and_then(|()| log.truncate_prefix_to(offset));
            if r.is_ok() {
                self.shared
                    .state()
                    .meters
                    .truncated(&self.shared.facade, true);
                tracing::debug!(target: "quorumlog::log", to = offset.0, "log prefix truncated");
            }
            r
        };
        self.after_log_change(&r);
        r
    }

    /// Runs a suffix or full truncation: rounds captured before it are void
    /// (generation), and the watermark becomes the new end, which the
    /// truncation's own sync made durable.
    fn truncating(&self, f: impl FnOnce(&mut Log) -> Result<()>) -> Result<()> {
        self.check_poisoned()?;
        let r = {
            let _gate = self.shared.gate();
            let mut log = self.shared.log_write();
            // Appends queued before the truncation are written first (the
            // truncation then applies to them too); none can queue until
            // the offsets continue after the new end.
            let mut st = self.shared.state();
            let r = Shared::drain_locked(&mut st, &mut log).and_then(|()| f(&mut log));
            Shared::resync(&mut st, &log);
            if r.is_ok() {
                let end = log.log_end_offset();
                st.meters.truncated(&self.shared.facade, false);
                tracing::info!(target: "quorumlog::log", end = end.0, "log truncated");
                st.generation += 1;
                st.flushed = end;
                st.written = end;
                st.captured = end;
            }
            r
        };
        self.after_log_change(&r);
        r
    }

    /// After a direct log operation: poison the sync state if it failed with
    /// I/O, and release what became durable.
    pub(super) fn after_log_change<T>(&self, r: &Result<T>) {
        let (fired, wake) = {
            let mut st = self.shared.state();
            if let Err(e) = r {
                if e.is_io() && st.poisoned.is_none() {
                    st.meters.poisoned(&self.shared.facade);
                    tracing::error!(target: "quorumlog::log", error = %e, "the log is poisoned");
                    st.poisoned = Some(e.failure());
                }
            }
            (sync::claim_firing(&mut st), sync::to_wake(&mut st))
        };
        sync::unpark(wake);
        if fired {
            self.shared.fire_due();
        }
    }
}
