//! The harness's workloads: operations and the seeded generator.

use quorumlog_io::SimRng;

pub(super) const DIR: &str = "/data";

/// One step of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Leader append of `n` records of `size` bytes (a new epoch if `bump`).
    Append {
        /// Records.
        n: u8,
        /// Bytes per record.
        size: u16,
        /// Start a new epoch first.
        bump: bool,
    },
    /// Follower append: the same records arriving as replicated batches
    /// (offsets and epoch from the leader), `n` batches of one record.
    Follower {
        /// Batches.
        n: u8,
        /// Bytes per record.
        size: u16,
    },
    /// Make everything written durable.
    Flush,
    /// Suffix truncation to this offset (clamped to what is allowed).
    Truncate(u64),
    /// Persist a vote in a new epoch for this candidate.
    Vote(u64),
    /// Write and freeze a snapshot of everything flushed, then clean the log
    /// prefix up to it.
    SnapshotAndClean,
    /// Receive the leader's snapshot of everything flushed: `chunks` more
    /// chunks of the transfer (resuming a partial one), then `finish`.
    Install {
        /// Chunks of 700 bytes to receive now.
        chunks: u8,
        /// Finish (verify and publish) if all bytes are in.
        finish: bool,
    },
    /// Clean close and reopen.
    Reopen,
    /// One record whose batch ends `gap` bytes before a page boundary if it
    /// starts on one (`pages` pages long), then flush. The generator puts a
    /// `Flush` before it (after a sync a batch starts on a fresh page), so
    /// every sync padding length occurs.
    PageEnd {
        /// Bytes of padding the batch leaves (0 to 4,052).
        gap: u16,
        /// Pages the batch spans.
        pages: u8,
    },
}

/// Bytes of a batch header plus one record's length prefix.
const BATCH_OVERHEAD: usize = 44;

pub(super) fn page_end_len(gap: u16, pages: u8) -> usize {
    (usize::from(pages) * 4096)
        .saturating_sub(BATCH_OVERHEAD + usize::from(gap))
        .max(1)
}

/// Turns a seed into a workload of `len` steps (a few more when a
/// `PageEnd` brings its `Flush`).
pub fn workload(seed: u64, len: usize) -> Vec<Op> {
    let mut rng = SimRng::new(seed ^ 0x5EED);
    let mut ops = Vec::with_capacity(len + len / 8);
    while ops.len() < len {
        let op = match rng.below(100) {
            0..=49 => Op::Append {
                n: 1 + u8::try_from(rng.below(4)).unwrap_or(0),
                size: 1 + u16::try_from(rng.below(300)).unwrap_or(0),
                bump: rng.below(12) == 0,
            },
            50..=56 => Op::Follower {
                n: 1 + u8::try_from(rng.below(3)).unwrap_or(0),
                size: 1 + u16::try_from(rng.below(200)).unwrap_or(0),
            },
            57..=66 => Op::Flush,
            67..=72 => Op::Truncate(rng.below(1 << 20)),
            73..=78 => Op::Vote(rng.below(5)),
            79..=84 => Op::SnapshotAndClean,
            85..=89 => Op::Install {
                chunks: u8::try_from(rng.below(8)).unwrap_or(0),
                finish: rng.below(2) == 0,
            },
            90..=95 => {
                ops.push(Op::Flush);
                // Half the time every padding length up to past a batch
                // header; otherwise any end position within the page.
                let gap = if rng.below(2) == 0 {
                    rng.below(49)
                } else {
                    rng.below(4053)
                };
                Op::PageEnd {
                    gap: u16::try_from(gap).unwrap_or(0),
                    pages: 1 + u8::try_from(rng.below(2)).unwrap_or(0),
                }
            }
            _ => Op::Reopen,
        };
        ops.push(op);
    }
    ops
}
