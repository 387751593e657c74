//! The one record walker: the records of an offset range, read through
//! bounded range reads (nothing past the range is read, verified or
//! decoded) and decoded batch by batch. The Raft store's reads, the voter
//! history's scan and the test kit all walk the log with it.

use quorumlog_checkpoint::{Epoch, Offset};

use crate::error::{Error, Result};
use crate::log::ReadBatches;
use crate::{DurableLog, Log};

/// Where a walk reads: [`Log`] and [`DurableLog`].
pub trait ReadRange {
    /// Whole verified batches from the one holding `from`, stopping after
    /// the one holding `to - 1` (see [`Log::read_range`]).
    ///
    /// # Errors
    /// The log's.
    fn read_range(&self, from: Offset, to: Offset, max_bytes: u64) -> Result<ReadBatches>;
}

impl ReadRange for Log {
    fn read_range(&self, from: Offset, to: Offset, max_bytes: u64) -> Result<ReadBatches> {
        Log::read_range(self, from, to, max_bytes)
    }
}

impl ReadRange for DurableLog {
    fn read_range(&self, from: Offset, to: Offset, max_bytes: u64) -> Result<ReadBatches> {
        DurableLog::read_range(self, from, to, max_bytes)
    }
}

/// Which batches a walk decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkBatches {
    /// Every batch.
    All,
    /// Control batches only; the others are skipped without decoding.
    Control,
}

/// One record of a walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Its offset.
    pub offset: Offset,
    /// The epoch it was written in.
    pub epoch: Epoch,
    /// Whether it is in a control batch.
    pub control: bool,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// What a walk returns: the records, and where the next walk continues
/// (after the last batch read; `to` or beyond once the range is done).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Walked {
    /// The records, in offset order.
    pub records: Vec<LogRecord>,
    /// The offset after the last batch read.
    pub next: Offset,
}

/// The records of `[from, to)` (`to` clamped to the log end), up to
/// `max_bytes` of record bytes but at least one record when any is in
/// range, of the batches `which` names. A batch that verifies but does
/// not decode is an error naming it, never data.
///
/// # Errors
/// The log's reads (`OffsetOutOfRange`, corruption, I/O);
/// `Undecodable` naming the batch.
///
/// # Panics
/// If the log returns a batch that does not advance (a bug).
pub fn walk_records(
    log: &impl ReadRange,
    from: Offset,
    to: Offset,
    max_bytes: u64,
    which: WalkBatches,
) -> Result<Walked> {
    let mut out = Walked {
        records: Vec::new(),
        next: from,
    };
    let mut bytes = 0u64;
    while out.next < to && (out.records.is_empty() || bytes < max_bytes) {
        let at = out.next;
        let batches = log.read_range(at, to, max_bytes.max(1))?;
        let Some(next) = batches.next_offset() else {
            break;
        };
        assert!(next > at, "a read advances");
        for b in batches.iter() {
            if which == WalkBatches::Control && !b.is_control() {
                continue;
            }
            let records = b.to_vecs().map_err(|kind| Error::Undecodable {
                offset: b.base_offset(),
                epoch: b.epoch(),
                kind,
            })?;
            for (i, r) in records.into_iter().enumerate() {
                let offset = Offset(b.base_offset().0 + i as u64);
                if offset < at || offset >= to {
                    continue;
                }
                if !out.records.is_empty() && bytes + r.len() as u64 > max_bytes {
                    out.next = offset;
                    return Ok(out);
                }
                bytes += r.len() as u64;
                out.records.push(LogRecord {
                    offset,
                    epoch: b.epoch(),
                    control: b.is_control(),
                    bytes: r,
                });
            }
        }
        out.next = next;
    }
    Ok(out)
}
