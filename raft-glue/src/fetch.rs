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

impl LogView for quorumlog_log::DurableLog {
    fn log_start_offset(&self) -> Offset {
        quorumlog_log::DurableLog::log_start_offset(self)
    }
    fn log_end_offset(&self) -> Offset {
        quorumlog_log::DurableLog::log_end_offset(self)
    }
    fn end_offset_for_epoch(&self, epoch: Epoch) -> Option<(Epoch, Offset)> {
        quorumlog_log::DurableLog::end_offset_for_epoch(self, epoch)
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
/// leader's `log` and its snapshots (`earliest`, `latest`). A snapshot is
/// needed when the position lies before the log start, or at the log start
/// with another epoch than the snapshot there, or has an epoch older than
/// the oldest snapshot's. Otherwise the position is valid when the
/// leader's log has `epoch` ending at or after `offset`, and diverging at
/// the end of the leader's largest epoch `<= epoch` else.
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
    let (earliest, latest) = snapshots;
    let start = log.log_start_offset();
    if let (Some(oldest), Some(latest)) = (earliest, latest) {
        let before_start = offset < start;
        let wrong_epoch_at_start = offset == start && epoch != oldest.epoch;
        if before_start || wrong_epoch_at_start || epoch < oldest.epoch {
            return Ok(FetchPosition::SnapshotNeeded(latest));
        }
    } else if offset < start {
        return Err(Error::OffsetOutOfRange {
            offset,
            start,
            end: log.log_end_offset(),
            snapshot: None,
        });
    }
    let (end_epoch, end_offset) = match log.end_offset_for_epoch(epoch) {
        Some(found) => found,
        // No record of an epoch <= `epoch` in the log: the log's prefix is
        // covered by the oldest snapshot (or the log is empty).
        None => match earliest {
            Some(oldest) if oldest.epoch <= epoch => (oldest.epoch, oldest.end_offset),
            _ if start == Offset(0) && offset == Offset(0) => (epoch, Offset(0)),
            _ => (epoch, start),
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
