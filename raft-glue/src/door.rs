//! [`RaftStorage`]: the door a Raft library's storage adapter talks
//! through, implemented by a one-group [`Store`] and by a node's
//! [`Group`], so an adapter is written once for one group or many.

use std::fmt::Debug;
use std::sync::Arc;

use quorumlog_checkpoint::{Epoch, Offset, QuorumState};
use quorumlog_log::AppendInfo;
use quorumlog_snapshot::{Retention, SnapshotId, SnapshotInfo, WriterOptions};

use crate::error::Result;
use crate::node::{Group, GroupInstall, GroupWriter};
use crate::store::{Entry, Isolation, OnDurable, Store, StoreInstall, StoreWriter};

/// A local snapshot being written: state bytes, then a durable publish.
pub trait SnapshotWrite {
    /// Appends state bytes.
    ///
    /// # Errors
    /// I/O.
    fn write(&mut self, data: &[u8]) -> Result<()>;

    /// Syncs and publishes the snapshot.
    ///
    /// # Errors
    /// I/O.
    fn freeze(self) -> Result<SnapshotInfo>;
}

/// A snapshot download from the leader, owning what it writes through.
pub trait SnapshotInstall: Debug + Send + 'static {
    /// The snapshot being installed.
    fn id(&self) -> SnapshotId;
    /// Where the next chunk goes.
    fn position(&self) -> u64;
    /// The snapshot's size.
    fn total_size(&self) -> u64;
    /// Writes the chunk at `position`, durably.
    ///
    /// # Errors
    /// Out of order; I/O.
    fn write_chunk(&mut self, position: u64, bytes: &[u8]) -> Result<()>;
    /// Verifies the whole file without publishing it.
    ///
    /// # Errors
    /// Incomplete; verification; I/O.
    fn verify(&self) -> Result<()>;
    /// Verifies, publishes, and makes the log continue the snapshot.
    ///
    /// # Errors
    /// Verification; I/O.
    fn finish(self) -> Result<SnapshotInfo>;
}

/// The store's door (docs/design.md §8): what a Raft library's adapter
/// calls, with the same rules behind it for a [`Store`] and a [`Group`].
/// Each method is the type's own, documented there.
#[allow(
    clippy::missing_errors_doc,
    reason = "each method's errors are its implementations' (Store, Group)"
)]
pub trait RaftStorage: Debug + Send + Sync + 'static {
    /// A local snapshot's writer.
    type Writer<'a>: SnapshotWrite
    where
        Self: 'a;
    /// A download from the leader.
    type Install: SnapshotInstall;

    /// The failure that poisoned it, if one did.
    fn poisoned(&self) -> Option<quorumlog_io::Failure>;
    /// The durable election state.
    fn quorum_state(&self) -> QuorumState;
    /// Replaces the election state, durable on return.
    fn persist_quorum_state(&self, next: &QuorumState) -> Result<()>;
    /// The Raft library's metadata.
    fn app_metadata(&self) -> Option<Vec<u8>>;
    /// Replaces the Raft library's metadata, durable on return.
    fn write_app_metadata(&self, bytes: &[u8]) -> Result<()>;
    /// The largest batch of entries one append may hold.
    fn max_batch_bytes(&self) -> u64;
    /// Queues `count` entries that `write` encodes, at `base_offset`.
    fn append_replicated_queued_with(
        &self,
        base_offset: Offset,
        epoch: Epoch,
        count: usize,
        len_hint: u64,
        write: impl FnMut(usize, &mut Vec<u8>) -> std::io::Result<()>,
    ) -> Result<AppendInfo>;
    /// Where the next append goes.
    fn queued_end(&self) -> Offset;
    /// Deletes every entry below `offset`.
    fn purge_to(&self, offset: Offset, epoch: Epoch) -> Result<()>;
    /// Suffix truncation, durably.
    fn truncate_to(&self, offset: Offset) -> Result<()>;
    /// Below it every entry is durable.
    fn flushed_offset(&self) -> Offset;
    /// The first offset.
    fn log_start_offset(&self) -> Offset;
    /// The end of what is readable.
    fn log_end_offset(&self) -> Offset;
    /// The high watermark.
    fn high_watermark(&self) -> Option<Offset>;
    /// Sets the high watermark (never back).
    fn set_high_watermark(&self, offset: Offset) -> Result<()>;
    /// Makes the high watermark durable as far as the log is.
    fn persist_high_watermark(&self) -> Result<Option<Offset>>;
    /// Queues the high watermark for the log's next round without
    /// waiting (durable with that round); `false` where the store cannot
    /// (then [`RaftStorage::persist_high_watermark`] makes it durable).
    fn queue_high_watermark(&self) -> Result<bool>;
    /// The high watermark as a crash now would recover it.
    fn durable_high_watermark(&self) -> Option<Offset>;
    /// A hint that `[from, to)` will be read soon.
    fn prefetch(&self, from: Offset, to: Offset);
    /// Blocks until every entry below `offset` is durable.
    fn wait_durable(&self, offset: Offset) -> Result<Offset>;
    /// Calls `completion` once every entry below `offset` is durable.
    fn on_durable(&self, offset: Offset, completion: OnDurable);
    /// The entries of `[from, to)`, up to `max_bytes`.
    fn read_entries(
        &self,
        from: Offset,
        to: Offset,
        max_bytes: u64,
        isolation: Isolation,
    ) -> Result<Vec<Entry>>;
    /// The epoch of the entry at `offset`.
    fn epoch_at(&self, offset: Offset) -> Option<Epoch>;
    /// The last entry deleted below the log start.
    fn last_purged(&self) -> Option<(Offset, Epoch)>;
    /// Starts a local snapshot of committed state.
    fn create_snapshot(
        &self,
        end_offset: Offset,
        epoch: Epoch,
        metadata: &[u8],
        options: WriterOptions,
    ) -> Result<Self::Writer<'_>>;
    /// Makes the log continue the latest snapshot.
    fn truncate_to_latest_snapshot(&self) -> Result<SnapshotId>;
    /// Reads a chunk of snapshot `id`'s file.
    fn read_snapshot_chunk(
        &self,
        id: SnapshotId,
        position: u64,
        max_bytes: usize,
    ) -> Result<Vec<u8>>;
    /// Starts or resumes an install, holding the store by `Arc`.
    fn install_snapshot_owned(
        self: &Arc<Self>,
        id: SnapshotId,
        total_size: u64,
    ) -> Result<Self::Install>;
    /// Discards an unfinished install.
    fn discard_install(&self, id: SnapshotId) -> Result<()>;
    /// The size of snapshot `id`'s file.
    fn snapshot_size(&self, id: SnapshotId) -> Result<u64>;
    /// Whether snapshot `id` is durable here.
    fn has_snapshot(&self, id: SnapshotId) -> bool;
    /// Snapshot `id`'s caller metadata and state, verified.
    fn read_snapshot(&self, id: SnapshotId) -> Result<(Vec<u8>, Vec<u8>)>;
    /// Snapshot `id`'s caller metadata.
    fn snapshot_metadata(&self, id: SnapshotId) -> Result<Vec<u8>>;
    /// Snapshot `id`'s file as on disk.
    fn snapshot_file(&self, id: SnapshotId) -> Result<Vec<u8>>;
    /// The latest snapshot.
    fn latest_snapshot(&self) -> Option<SnapshotId>;
    /// Deletes snapshots `retention` does not keep.
    fn retain_snapshots(&self, retention: Retention) -> Result<Vec<SnapshotId>>;
    /// Purges below `up_to`, bounded by the latest snapshot.
    fn clean_log_prefix(&self, up_to: Offset) -> Result<Offset>;

    /// The counts and latency histograms of the log this storage writes
    /// (a node's group: the node's shared log).
    fn log_stats(&self) -> quorumlog_log::LogStats;
}

macro_rules! delegate {
    ($t:ty) => {
        fn poisoned(&self) -> Option<quorumlog_io::Failure> {
            <$t>::poisoned(self)
        }
        fn quorum_state(&self) -> QuorumState {
            <$t>::quorum_state(self)
        }
        fn persist_quorum_state(&self, next: &QuorumState) -> Result<()> {
            <$t>::persist_quorum_state(self, next)
        }
        fn app_metadata(&self) -> Option<Vec<u8>> {
            <$t>::app_metadata(self)
        }
        fn write_app_metadata(&self, bytes: &[u8]) -> Result<()> {
            <$t>::write_app_metadata(self, bytes)
        }
        fn max_batch_bytes(&self) -> u64 {
            <$t>::max_batch_bytes(self)
        }
        fn append_replicated_queued_with(
            &self,
            base_offset: Offset,
            epoch: Epoch,
            count: usize,
            len_hint: u64,
            write: impl FnMut(usize, &mut Vec<u8>) -> std::io::Result<()>,
        ) -> Result<AppendInfo> {
            <$t>::append_replicated_queued_with(self, base_offset, epoch, count, len_hint, write)
        }
        fn queued_end(&self) -> Offset {
            <$t>::queued_end(self)
        }
        fn purge_to(&self, offset: Offset, epoch: Epoch) -> Result<()> {
            <$t>::purge_to(self, offset, epoch)
        }
        fn truncate_to(&self, offset: Offset) -> Result<()> {
            <$t>::truncate_to(self, offset)
        }
        fn flushed_offset(&self) -> Offset {
            <$t>::flushed_offset(self)
        }
        fn log_start_offset(&self) -> Offset {
            <$t>::log_start_offset(self)
        }
        fn log_end_offset(&self) -> Offset {
            <$t>::log_end_offset(self)
        }
        fn high_watermark(&self) -> Option<Offset> {
            <$t>::high_watermark(self)
        }
        fn set_high_watermark(&self, offset: Offset) -> Result<()> {
            <$t>::set_high_watermark(self, offset)
        }
        fn persist_high_watermark(&self) -> Result<Option<Offset>> {
            <$t>::persist_high_watermark(self)
        }
        fn durable_high_watermark(&self) -> Option<Offset> {
            <$t>::durable_high_watermark(self)
        }
        fn prefetch(&self, from: Offset, to: Offset) {
            <$t>::prefetch(self, from, to);
        }
        fn wait_durable(&self, offset: Offset) -> Result<Offset> {
            <$t>::wait_durable(self, offset)
        }
        fn on_durable(&self, offset: Offset, completion: OnDurable) {
            <$t>::on_durable(self, offset, completion);
        }
        fn read_entries(
            &self,
            from: Offset,
            to: Offset,
            max_bytes: u64,
            isolation: Isolation,
        ) -> Result<Vec<Entry>> {
            <$t>::read_entries(self, from, to, max_bytes, isolation)
        }
        fn epoch_at(&self, offset: Offset) -> Option<Epoch> {
            <$t>::epoch_at(self, offset)
        }
        fn last_purged(&self) -> Option<(Offset, Epoch)> {
            <$t>::last_purged(self)
        }
        fn truncate_to_latest_snapshot(&self) -> Result<SnapshotId> {
            <$t>::truncate_to_latest_snapshot(self)
        }
        fn read_snapshot_chunk(
            &self,
            id: SnapshotId,
            position: u64,
            max_bytes: usize,
        ) -> Result<Vec<u8>> {
            <$t>::read_snapshot_chunk(self, id, position, max_bytes)
        }
        fn discard_install(&self, id: SnapshotId) -> Result<()> {
            <$t>::discard_install(self, id)
        }
        fn snapshot_size(&self, id: SnapshotId) -> Result<u64> {
            <$t>::snapshot_size(self, id)
        }
        fn has_snapshot(&self, id: SnapshotId) -> bool {
            <$t>::has_snapshot(self, id)
        }
        fn read_snapshot(&self, id: SnapshotId) -> Result<(Vec<u8>, Vec<u8>)> {
            <$t>::read_snapshot(self, id)
        }
        fn snapshot_metadata(&self, id: SnapshotId) -> Result<Vec<u8>> {
            <$t>::snapshot_metadata(self, id)
        }
        fn snapshot_file(&self, id: SnapshotId) -> Result<Vec<u8>> {
            <$t>::snapshot_file(self, id)
        }
        fn latest_snapshot(&self) -> Option<SnapshotId> {
            <$t>::latest_snapshot(self)
        }
        fn retain_snapshots(&self, retention: Retention) -> Result<Vec<SnapshotId>> {
            <$t>::retain_snapshots(self, retention)
        }
        fn clean_log_prefix(&self, up_to: Offset) -> Result<Offset> {
            <$t>::clean_log_prefix(self, up_to)
        }
    };
}

impl RaftStorage for Store {
    type Writer<'a> = StoreWriter<'a>;
    type Install = StoreInstall<Arc<Store>>;
    delegate!(Store);
    fn log_stats(&self) -> quorumlog_log::LogStats {
        Store::log_stats(self)
    }
    /// A one-group store's watermark is its own file: not queued.
    fn queue_high_watermark(&self) -> Result<bool> {
        Ok(false)
    }
    fn create_snapshot(
        &self,
        end_offset: Offset,
        epoch: Epoch,
        metadata: &[u8],
        options: WriterOptions,
    ) -> Result<StoreWriter<'_>> {
        Store::create_snapshot(self, end_offset, epoch, metadata, options)
    }
    fn install_snapshot_owned(
        self: &Arc<Self>,
        id: SnapshotId,
        total_size: u64,
    ) -> Result<Self::Install> {
        Store::install_snapshot_owned(self, id, total_size)
    }
}

impl RaftStorage for Group {
    type Writer<'a> = GroupWriter<'a>;
    type Install = GroupInstall<Arc<Group>>;
    delegate!(Group);
    fn log_stats(&self) -> quorumlog_log::LogStats {
        Group::log_stats(self)
    }
    fn queue_high_watermark(&self) -> Result<bool> {
        Group::queue_high_watermark(self).map(|()| true)
    }
    fn create_snapshot(
        &self,
        end_offset: Offset,
        epoch: Epoch,
        metadata: &[u8],
        options: WriterOptions,
    ) -> Result<GroupWriter<'_>> {
        Group::create_snapshot(self, end_offset, epoch, metadata, options)
    }
    fn install_snapshot_owned(
        self: &Arc<Self>,
        id: SnapshotId,
        total_size: u64,
    ) -> Result<Self::Install> {
        Group::install_snapshot_owned(self, id, total_size)
    }
}

impl SnapshotWrite for StoreWriter<'_> {
    fn write(&mut self, data: &[u8]) -> Result<()> {
        StoreWriter::write(self, data)
    }
    fn freeze(self) -> Result<SnapshotInfo> {
        StoreWriter::freeze(self)
    }
}

impl SnapshotWrite for GroupWriter<'_> {
    fn write(&mut self, data: &[u8]) -> Result<()> {
        GroupWriter::write(self, data)
    }
    fn freeze(self) -> Result<SnapshotInfo> {
        GroupWriter::freeze(self)
    }
}

impl SnapshotInstall for StoreInstall<Arc<Store>> {
    fn id(&self) -> SnapshotId {
        StoreInstall::id(self)
    }
    fn position(&self) -> u64 {
        StoreInstall::position(self)
    }
    fn total_size(&self) -> u64 {
        StoreInstall::total_size(self)
    }
    fn write_chunk(&mut self, position: u64, bytes: &[u8]) -> Result<()> {
        StoreInstall::write_chunk(self, position, bytes)
    }
    fn verify(&self) -> Result<()> {
        StoreInstall::verify(self)
    }
    fn finish(self) -> Result<SnapshotInfo> {
        StoreInstall::finish(self)
    }
}

impl SnapshotInstall for GroupInstall<Arc<Group>> {
    fn id(&self) -> SnapshotId {
        GroupInstall::id(self)
    }
    fn position(&self) -> u64 {
        GroupInstall::position(self)
    }
    fn total_size(&self) -> u64 {
        GroupInstall::total_size(self)
    }
    fn write_chunk(&mut self, position: u64, bytes: &[u8]) -> Result<()> {
        GroupInstall::write_chunk(self, position, bytes)
    }
    fn verify(&self) -> Result<()> {
        GroupInstall::verify(self)
    }
    fn finish(self) -> Result<SnapshotInfo> {
        GroupInstall::finish(self)
    }
}
