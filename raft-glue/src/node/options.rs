//! How a node is opened, and what it reports: its options (each
//! documented with its default), the open's report, its counters and its
//! disk use.

use quorumlog_checkpoint::Offset;
use quorumlog_log::{LogOptions, RecoveryReport, SyncPolicy};

/// How a node is opened.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// The shared log's options. Default: `LogOptions::default()` with
    /// `index_interval_bytes` 1, an index entry for every batch (8 bytes
    /// each), so a read of one group finds its batch at once and never
    /// reads another group's bytes; a larger interval saves that memory
    /// and makes a read walk up to one interval of other groups' batches.
    pub log: LogOptions,
    /// The shared log's sync policy. Default: group commit.
    pub sync: SyncPolicy,
    /// Log bytes between two checkpoints: what a reopen after a crash
    /// replays at most (plus what was written while the last one was
    /// taken). Default: 64 MiB.
    pub checkpoint_every_bytes: u64,
    /// How large the log's segments may grow against the live bytes
    /// before the oldest segment's live entries are rewritten forward, in
    /// percent. Default: 200 (disk ≤ 2 × live + two segments).
    pub garbage_percent: u64,
    /// Run checkpoints and reclamation on a background thread (every
    /// 100 ms and when an append passes the checkpoint interval). Off,
    /// [`Node::maintain`](super::Node::maintain) does it when called. Default: on.
    pub background: bool,
    /// When a group's high watermark is made durable. Default:
    /// [`WatermarkDurability::NextRound`].
    pub watermark: WatermarkDurability,
}

/// When [`Group::set_high_watermark`](super::Group::set_high_watermark)
/// makes the watermark durable. A Raft library recomputes its commit
/// point after a restart either way; what the durable one buys is what a
/// restarted node may apply before it hears from a leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WatermarkDurability {
    /// Queued as one small record for the shared log's next round, which
    /// the next appends share (no sync of its own); a wait at the group's
    /// end forces that round.
    #[default]
    NextRound,
    /// Kept in memory; durable with the next checkpoint or clean close.
    Checkpoint,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            // An index entry for every batch: a read of one group goes
            // straight to its batch and reads no other group's bytes.
            log: LogOptions {
                index_interval_bytes: 1,
                ..LogOptions::default()
            },
            sync: SyncPolicy::GroupCommit,
            checkpoint_every_bytes: 64 << 20,
            garbage_percent: 200,
            background: true,
            watermark: WatermarkDurability::NextRound,
        }
    }
}

impl NodeOptions {
    /// The defaults with segments of `bytes` (batches at most a quarter of
    /// one) and none prepared ahead: for small deployments and tests, whose
    /// nodes then open in milliseconds (the defaults preallocate 128 MiB
    /// segments, two ahead).
    #[must_use]
    pub fn with_segment_bytes(bytes: u64) -> NodeOptions {
        let d = NodeOptions::default();
        NodeOptions {
            log: LogOptions {
                segment_size_bytes: bytes,
                max_batch_bytes: d.log.max_batch_bytes.min(bytes / 4),
                prefill_segments: 0,
                ..d.log
            },
            ..d
        }
    }
}

/// What a node's open found and did.
#[derive(Debug, Clone)]
pub struct NodeOpenReport {
    /// The shared log's recovery.
    pub log: RecoveryReport,
    /// The groups open.
    pub groups: usize,
    /// The checkpoint's log position.
    pub checkpoint_position: Offset,
    /// Batches replayed after it.
    pub replayed_batches: u64,
    /// Their bytes.
    pub replayed_bytes: u64,
}

impl std::fmt::Display for NodeOpenReport {
    /// One line: the groups, the checkpoint and the replay after it, then
    /// the shared log's recovery.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} groups; checkpoint at log offset {}, {} batches ({} B) replayed after it; {}",
            self.groups,
            self.checkpoint_position,
            self.replayed_batches,
            self.replayed_bytes,
            self.log
        )
    }
}

/// A node's work since it opened and what it holds now
/// ([`Node::stats`](super::Node::stats)).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeStats {
    /// Bytes of batches appended by groups (entries and control records).
    pub appended_bytes: u64,
    /// Bytes of live entries rewritten forward to free old segments.
    pub rewritten_bytes: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Segments deleted or recycled.
    pub segments_freed: u64,
    /// The shared log's syncs.
    pub syncs: u64,
    /// The shared log's counts and latency histograms.
    pub log: quorumlog_log::LogStats,
    /// Disk use against live data.
    pub space: SpaceUse,
    /// Bytes of memory the shared log's sparse index takes (8 per batch
    /// with the default options: an entry for every batch).
    pub log_index_memory_bytes: usize,
    /// Bytes of memory the groups' states take (indexes included).
    pub index_memory_bytes: usize,
}

/// Disk use against live data, now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpaceUse {
    /// Bytes of the log's segment files.
    pub log_bytes: u64,
    /// Bytes of the batches holding some group's live entries.
    pub live_bytes: u64,
    /// Segment files.
    pub segments: usize,
}
