//! The error type of the log crate.

use std::io;

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::Failure;

/// What is wrong with bytes that failed verification: the one structured
/// kind shared by every crate of quorumlog.
pub use quorumlog_checkpoint::{CorruptionKind, Location};

/// Errors of the log crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error; its message names the operation and the path.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The caller's check of what recovery found refused the open, before
    /// recovery changed anything ([`crate::DurableLog::open_checked`]).
    #[error("the open was refused by its caller's check (nothing changed)")]
    OpenRefused,
    /// The disk is full: the log was opened on it after an unclean stop,
    /// and writes wait until `needed` more bytes are free (the next
    /// segment and the recovery checkpoint). Nothing was written; the
    /// write succeeds once the space is there.
    #[error(
        "the disk is full: writes wait for {needed} bytes of free space \
         (the next segment and the recovery checkpoint); nothing was written"
    )]
    NoSpace {
        /// Free bytes the log needs before it takes writes again.
        needed: u64,
    },
    /// An error of the data directory's checkpoint files.
    #[error(transparent)]
    Checkpoint(#[from] quorumlog_checkpoint::Error),
    /// Bytes that failed verification, and where. Never returned as data.
    #[error("corruption in {at}{}: {kind}", epoch.map_or_else(String::new, |e| format!(" (epoch {e})")))]
    Corruption {
        /// Where: a segment, the byte position, and the offset expected (or
        /// found) there.
        at: Location,
        /// The epoch of the batch, when its header could be read.
        epoch: Option<Epoch>,
        /// What is wrong.
        kind: CorruptionKind,
    },
    /// A batch handed to `DurableLog::append_raw` does not verify (CRC,
    /// structure); nothing was written.
    #[error("raw batch {index} does not verify: {kind}")]
    InvalidRawBatch {
        /// Its position in the slice given.
        index: usize,
        /// What is wrong.
        kind: CorruptionKind,
    },
    /// A read or truncation outside `[log start, log end]`.
    #[error("offset {offset} outside the log [{start}, {end})")]
    OffsetOutOfRange {
        /// The offset asked for.
        offset: Offset,
        /// The log start offset.
        start: Offset,
        /// The log end offset.
        end: Offset,
    },
    /// A follower batch that does not continue the log.
    #[error("batch starts at offset {found}, the log continues at {expected}")]
    NonContiguous {
        /// The log end offset (or the previous batch's end).
        expected: Offset,
        /// The batch's base offset.
        found: Offset,
    },
    /// An append with an epoch older than the log's last epoch.
    #[error("epoch {proposed} is older than the log's epoch {current}")]
    EpochRegression {
        /// The last epoch in the log.
        current: Epoch,
        /// The epoch of the append.
        proposed: Epoch,
    },
    /// An append whose offsets would not fit in a `u64`: offsets never
    /// wrap.
    #[error("{records} records from offset {base} would overflow the offset space")]
    OffsetOverflow {
        /// The first offset of the append.
        base: Offset,
        /// The records appended.
        records: u64,
    },
    /// A raw follower batch overlapping the log's end whose records below
    /// the end are not the log's: the log holds `offset` in epoch `log`,
    /// the batch in epoch `batch` (nothing written; the follower must
    /// truncate to where it diverges first).
    #[error("a raw batch overlaps the log at offset {offset} in epoch {batch}, but the log holds {} there", log.map_or_else(|| "no epoch".to_string(), |e| format!("epoch {e}")))]
    RawOverlapDiverges {
        /// The first offset where the epochs differ.
        offset: Offset,
        /// The log's epoch there.
        log: Option<Epoch>,
        /// The batch's epoch.
        batch: Epoch,
    },
    /// An append with no records.
    #[error("a batch needs at least one record")]
    EmptyBatch,
    /// An append larger than the maximum batch size.
    #[error("batch of {bytes} bytes exceeds the maximum of {max}")]
    BatchTooLarge {
        /// Encoded size.
        bytes: u64,
        /// `LogOptions::max_batch_bytes`.
        max: u64,
    },
    /// A suffix truncation below the high watermark.
    #[error("truncation to {offset} is below the high watermark {high_watermark}")]
    BelowHighWatermark {
        /// The offset asked for.
        offset: Offset,
        /// The high watermark.
        high_watermark: Offset,
    },
    /// A caller's record encoder failed ([`crate::DurableLog::append_at_queued_with`]):
    /// nothing was queued.
    #[error("a record could not be encoded: {0}")]
    RecordEncoding(#[source] std::io::Error),
    /// A verified batch whose records do not decode (a compressed payload
    /// that does not decompress to its records).
    #[error("the batch at {offset} (epoch {epoch}) does not decode: {kind}")]
    Undecodable {
        /// The batch's base offset.
        offset: Offset,
        /// Its epoch.
        epoch: quorumlog_checkpoint::Epoch,
        /// What is wrong.
        kind: CorruptionKind,
    },
    /// A high watermark lower than the current one: the commit offset
    /// never moves back (a stale fetch response, a Raft library's bug).
    #[error("high watermark {offset} is below the current high watermark {high_watermark}")]
    HighWatermarkBackwards {
        /// The offset asked for.
        offset: Offset,
        /// The current high watermark.
        high_watermark: Offset,
    },
    /// A high watermark above the log end offset.
    #[error("high watermark {offset} is beyond the log end {end}")]
    HighWatermarkBeyondEnd {
        /// The offset asked for.
        offset: Offset,
        /// The log end offset.
        end: Offset,
    },
    /// A wait for durability under `SyncPolicy::Never`, which never syncs
    /// by itself.
    #[error("durability was requested but the sync policy is Never")]
    SyncDisabled,
    /// Options that make no sense.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// `close` while another handle still shares the log (a clone of its
    /// `Arc` held elsewhere).
    #[error("the log is still shared and cannot be closed")]
    StillShared,
    /// A write or sync failed earlier; nothing more is acknowledged until
    /// the log is reopened (docs/design.md invariant 6).
    #[error("log poisoned by an earlier failure: {op} failed ({kind:?})")]
    Poisoned {
        /// The operation that failed first (`"close"` once closed).
        op: &'static str,
        /// What it reported.
        kind: io::ErrorKind,
    },
}

impl Error {
    /// Whether this is an I/O failure (or the poisoning one left): the only
    /// errors that poison the log. Refusals (a checkpoint rule, bad input)
    /// do not.
    pub fn is_io(&self) -> bool {
        match self {
            Error::Io(_) | Error::Poisoned { .. } => true,
            // A checkpoint file refused for space in the middle of the
            // log's own work (a roll, a truncation) leaves that work half
            // done: it poisons the log like any failed write. Only the
            // open's deferred checkpoint takes it as a refusal.
            Error::Checkpoint(c) => {
                c.is_io() || matches!(c, quorumlog_checkpoint::Error::NoSpace { .. })
            }
            _ => false,
        }
    }

    /// The failure to record when this error poisons the log.
    pub fn failure(&self) -> Failure {
        match self {
            Error::Io(e) => Failure::of(e),
            Error::Checkpoint(c) => c.failure(),
            Error::Poisoned { op, kind } => Failure { op, kind: *kind },
            _ => Failure {
                op: "log",
                kind: io::ErrorKind::Other,
            },
        }
    }

    /// The `Poisoned` error for `failure`.
    pub(crate) fn poisoned(failure: Failure) -> Error {
        Error::Poisoned {
            op: failure.op,
            kind: failure.kind,
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
