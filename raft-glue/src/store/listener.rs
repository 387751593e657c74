//! [`LogListener`]: what a layer above the store is told after the log
//! changes (raft-engine's `EventListener`): the `KRaft` wing's voter
//! history follows truncations, prefix cuts, restarts at a snapshot and
//! high-watermark updates through it, so the store itself knows nothing
//! of voters and a store without the wing pays nothing for them.

use quorumlog_snapshot::SnapshotId;

use super::Store;
use crate::error::Result;

/// Told after every change of a store's log. Called with the store's
/// state already changed, on the caller's thread; keep it short.
pub(crate) trait LogListener: Send + Sync + std::fmt::Debug {
    /// The log's extent changed: a suffix truncation or a prefix cut.
    fn after_extent(&self, store: &Store);
    /// The log restarted, empty, at snapshot `id` (an install the log did
    /// not continue).
    fn after_restart_at(&self, store: &Store, id: SnapshotId);
    /// The high watermark was set to `offset`.
    ///
    /// # Errors
    /// What the listener's own writes fail with (the store is poisoned by
    /// an I/O failure).
    fn after_high_watermark(
        &self,
        store: &Store,
        offset: quorumlog_checkpoint::Offset,
    ) -> Result<()>;
}
