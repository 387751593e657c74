//! Validating a follower's fetch position, with `KRaft`'s semantics
//! (`ReplicatedLog::validateOffsetAndEpoch`): the follower says where its
//! log ends (`offset`) and the epoch of its last record (`epoch`); the
//! leader answers whether that position is on its log, where the two logs
//! diverge, or that the follower needs a snapshot.

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_snapshot::SnapshotId;

use crate::error::{Error, Result};

/// What the leader knows of its own log and snapshots, for validation.
pub trait LogView {
    /// The first offset in the log.
    fn log_start_offset(&self) -> Offset;
    /// The offset after the last record.
    fn log_end_offset(&self) -> Offset;
    /// The largest epoch `<= epoch` in the log and the offset where it ends
    /// (the next epoch's start, or the log end); `None` if the log holds no
    /// record of such an epoch.
    fn end_offset_for_epoch(&self, epoch: Epoch) -> Option<(Epoch, Offset)>;
}

impl LogView for crate::Group {
    fn log_start_offset(&self) -> Offset {
        self.extent().start
    }
    fn log_end_offset(&self) -> Offset {
        self.extent().queued_end
    }
    fn end_offset_for_epoch(&self, epoch: Epoch) -> Option<(Epoch, Offset)> {
        crate::Group::end_offset_for_epoch(self, epoch)
    }
}

impl LogView for quorumlog_log::Log {
    fn log_start_offset(&self) -> Offset {
        quorumlog_log::Log::log_start_offset(self)
    }
    fn log_end_offset(&self) -> Offset {
        quorumlog_log::Log::log_end_offset(self)
    }
    fn end_offset_for_epoch(&self, epoch: Epoch) -> Option<(Epoch, Offset)> {
        quorumlog_log::Log::end_offset_for_epoch(self, epoch)
    }
}

/// The answer to a fetch position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchPosition {
    /// The position is on the leader's log: fetch from `offset`.
    Valid,
    /// The logs diverge: the follower truncates to `end_offset` (the end of
    /// the leader's largest epoch not newer than the follower's, `epoch`)
    /// and fetches again from there.
    Diverging {
        /// Where the follower's log must end.
        end_offset: Offset,
        /// The epoch of the leader's records just below it.
        epoch: Epoch,
    },
    /// The position is below what the leader's log holds: the follower
    /// installs this snapshot (the latest) first.
    SnapshotNeeded(SnapshotId),
}

/// Validates a follower's fetch position (`offset`, `epoch`) against the
/// leader's `log` and its snapshots: `at_start`, the snapshot whose end is
/// exactly the log start (if any), and `latest`. As in `KRaft`:
/// - below the log start, the follower needs the latest snapshot;
/// - at the log start with another epoch than the snapshot there, or with
///   an epoch older than it, likewise;
/// - otherwise the position is valid when the log has `epoch` ending at or
///   after `offset`, and diverging at the end of the log's largest epoch
///   `<= epoch` else;
/// - an epoch older than every epoch the log still holds, past the log
///   start, cannot be placed: the follower needs the latest snapshot (or,
///   with none, truncates to the log start).
///
/// # Errors
/// `OffsetOutOfRange` for a position below the log start when no snapshot
/// exists (the prefix went without a snapshot covering it, which invariant
/// 7 forbids; nothing here can bring that follower up).
pub fn validate_offset_and_epoch(
    log: &impl LogView,
    snapshots: (Option<SnapshotId>, Option<SnapshotId>),
    offset: Offset,
    epoch: Epoch,
) -> Result<FetchPosition> {
    let (at_start, latest) = snapshots;
    let start = log.log_start_offset();
    let snapshot_needed = |latest: Option<SnapshotId>| {
        latest
            .map(FetchPosition::SnapshotNeeded)
            .ok_or(Error::OffsetOutOfRange {
                offset,
                start,
                end: log.log_end_offset(),
                snapshot: None,
            })
    };
    if offset < start {
        return snapshot_needed(latest);
    }
    if let Some(s) = at_start.filter(|s| s.end_offset == start) {
        if (offset == start && epoch != s.epoch) || epoch < s.epoch {
            return snapshot_needed(latest);
        }
    }
    let (end_epoch, end_offset) = match log.end_offset_for_epoch(epoch) {
        Some(found) => found,
        None => match at_start.filter(|s| s.end_offset == start && s.epoch <= epoch) {
            Some(s) => (s.epoch, s.end_offset),
            None if offset == start && latest.is_none() => (epoch, start),
            None if latest.is_some() => return snapshot_needed(latest),
            None => (epoch, start),
        },
    };
    Ok(if end_epoch != epoch || end_offset < offset {
        FetchPosition::Diverging {
            end_offset: end_offset.min(log.log_end_offset()),
            epoch: end_epoch,
        }
    } else {
        FetchPosition::Valid
    })
}
