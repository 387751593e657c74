//! The read model: what a read of a group's log must return, and the
//! generator of reads the model tests and the adapters' tests share.
//!
//! The rule every read keeps (`Group::read_entries`, and through it each
//! adapter's read): an error when `from` is below the log's start or past
//! its readable end; otherwise the entries of `[from, limit)`, where
//! `limit` is `to` clipped to the readable end and, for a committed read,
//! to the commit point: the first of them whatever its size, then each
//! following one while the total size stays within the budget, stopping
//! at the first that does not fit (never a hole).
//!
//! [`random_read`] draws reads with every budget shape: 0, 1, exactly the
//! first entry's size, exactly a prefix's total, one byte either side of
//! it, a random figure and no limit; ranges starting below the start, at
//! it, inside, at the end and past it, ending before `from`, inside, at
//! the end and at `u64::MAX`.
#![allow(
    clippy::indexing_slicing,
    clippy::cast_possible_truncation,
    clippy::missing_panics_doc,
    reason = "test machinery: a panic is the violated invariant it reports"
)]

use std::sync::atomic::{AtomicU64, Ordering};

use quorumlog_io::SimRng;

/// Reads checked against the model in this process (for the notes).
pub static READS_CHECKED: AtomicU64 = AtomicU64::new(0);

/// One read to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadQuery {
    /// The first offset asked for.
    pub from: u64,
    /// The end of the range asked for (exclusive).
    pub to: u64,
    /// The byte budget.
    pub max_bytes: u64,
    /// Only committed entries.
    pub committed: bool,
}

/// A log as the model holds it: its start, its entries (epoch, bytes)
/// from the start, how far it is readable and its commit point.
#[derive(Debug, Clone, Copy)]
pub struct ModelLog<'a> {
    /// The first offset.
    pub start: u64,
    /// The entries from `start`: epoch and bytes.
    pub entries: &'a [(u64, Vec<u8>)],
    /// The readable end (entries queued past it are not read).
    pub readable_end: u64,
    /// The commit point; a committed read of a log without one is empty.
    pub commit: Option<u64>,
}

/// What a read must answer: `None` for "outside the log", else the
/// offsets of the entries it returns (their epochs and bytes are the
/// model's).
pub fn expected_read(
    log: &ModelLog<'_>,
    q: &ReadQuery,
    size: impl Fn(&[u8]) -> u64,
) -> Option<std::ops::Range<u64>> {
    if q.from < log.start || q.from > log.readable_end {
        return None;
    }
    let mut limit = q.to.min(log.readable_end);
    if q.committed {
        limit = limit.min(log.commit.unwrap_or(log.start));
    }
    let mut end = q.from;
    let mut total = 0u64;
    while end < limit {
        let n = size(&log.entries[(end - log.start) as usize].1);
        if end > q.from && total.saturating_add(n) > q.max_bytes {
            break;
        }
        total = total.saturating_add(n);
        end += 1;
    }
    Some(q.from..end)
}

/// A random read of `log` (see the module documentation for its shapes).
pub fn random_read(rng: &mut SimRng, log: &ModelLog<'_>, size: impl Fn(&[u8]) -> u64) -> ReadQuery {
    let (start, end) = (log.start, log.readable_end);
    let from = match rng.below(8) {
        0 => start.saturating_sub(1),
        1 => start,
        2 => end,
        3 => end + 1,
        _ => start + rng.below(end - start + 1),
    };
    let to = match rng.below(6) {
        0 => from.saturating_sub(rng.below(2)),
        1 => end,
        2 => u64::MAX,
        _ => from + rng.below(end.saturating_sub(from) + 3),
    };
    // The sizes of the entries from `from`, for budgets at their edges.
    let sizes: Vec<u64> = (from.max(start)..end)
        .take(64)
        .map(|o| size(&log.entries[(o - start) as usize].1))
        .collect();
    let prefix = |k: usize| sizes.iter().take(k).sum::<u64>();
    let k = if sizes.is_empty() {
        0
    } else {
        1 + rng.index(sizes.len())
    };
    let max_bytes = match rng.below(9) {
        0 => 0,
        1 => 1,
        2 => sizes.first().copied().unwrap_or(7),
        3 => prefix(k),
        4 => prefix(k).saturating_sub(1),
        5 => prefix(k) + 1,
        6 => rng.below(4096),
        7 => u64::MAX,
        _ => 1 << 20,
    };
    ReadQuery {
        from,
        to,
        max_bytes,
        committed: rng.below(2) == 0,
    }
}

/// Checks a read's answer against the model: `got` is `None` for an
/// "outside the log" error, else each entry's offset, epoch and bytes.
///
/// # Panics
/// When the answer differs from the model's, naming `what`.
pub fn check_read(
    log: &ModelLog<'_>,
    q: &ReadQuery,
    got: Option<Vec<(u64, u64, Vec<u8>)>>,
    size: impl Fn(&[u8]) -> u64,
    what: &str,
) {
    READS_CHECKED.fetch_add(1, Ordering::Relaxed);
    let want = expected_read(log, q, size);
    let Some(want) = want else {
        assert!(
            got.is_none(),
            "{what}: {q:?} outside the log answered {got:?}"
        );
        return;
    };
    let Some(got) = got else {
        panic!("{what}: {q:?} refused, expected {want:?}");
    };
    let offsets: Vec<u64> = got.iter().map(|e| e.0).collect();
    assert_eq!(
        offsets,
        want.clone().collect::<Vec<_>>(),
        "{what}: {q:?} returned the wrong offsets"
    );
    for (o, epoch, bytes) in got {
        let (e, b) = &log.entries[(o - log.start) as usize];
        assert_eq!((epoch, &bytes), (*e, b), "{what}: {q:?} entry {o}");
    }
}

/// Record bytes of `len` (at least 3) for `group`'s entry `at`: tagged
/// with both, the rest random or, half the time, a compressible run.
pub fn entry_bytes(rng: &mut SimRng, group: u64, at: u64, len: usize) -> Vec<u8> {
    let mut r = vec![0u8; len.max(3)];
    rng.fill(&mut r);
    if rng.below(2) == 0 {
        let fill = r[2];
        for b in r.iter_mut().skip(8) {
            *b = fill;
        }
    }
    r[0] = group as u8;
    r[1] = (at % 251) as u8;
    r
}

/// The sizes of one append of up to `max_records` records whose batch
/// stays within `max_batch_bytes`: most small, some medium, some a whole
/// batch's worth.
pub fn record_sizes(rng: &mut SimRng, max_records: usize, max_batch_bytes: u64) -> Vec<usize> {
    let n = 1 + rng.index(max_records);
    // Per record: its bytes plus a generous header allowance; the batch
    // header besides.
    let room = (max_batch_bytes as usize).saturating_sub(64) / n;
    let cap = room.saturating_sub(24).max(3);
    (0..n)
        .map(|_| match rng.below(6) {
            0 => cap,
            1 => 3 + rng.index(cap.max(4) - 2),
            2 => cap.min(100 + rng.index(300)),
            _ => cap.min(3 + rng.index(40)),
        })
        .collect()
}
