//! The sparse offset index of one segment: an entry every
//! `index_interval_bytes` of log, mapping a batch's offset (relative to the
//! segment base) to its byte position.
//!
//! Invariants: entries are strictly increasing in offset and position; the
//! first entry, when present, is the segment's first batch; every entry is
//! the start of a batch that was verified when the entry was added.
//! Memory: 8 bytes per entry, so 2 MiB per GiB of log at the default 4 KiB
//! interval, whatever the record size.

use std::path::Path;

use quorumlog_checkpoint::Offset;
use quorumlog_io::{FileSystem, OpenMode};

use crate::error::{CorruptionKind, Result};
use crate::format::{decode_index, encode_index, IndexHeader};

/// A segment's sparse index, in memory.
#[derive(Debug, Clone, Default)]
pub(crate) struct SparseIndex {
    entries: Vec<(u32, u32)>,
    interval: u64,
}

impl SparseIndex {
    /// An empty index adding an entry every `interval` bytes.
    pub(crate) fn new(interval: u64) -> Self {
        SparseIndex {
            entries: Vec::new(),
            interval,
        }
    }

    /// An index from loaded entries.
    pub(crate) fn from_entries(entries: Vec<(u32, u32)>, interval: u64) -> Self {
        SparseIndex { entries, interval }
    }

    /// Whether every batch has an entry (an interval of at most one
    /// byte): a lookup then lands on the batch that holds the offset.
    pub(crate) fn is_dense(&self) -> bool {
        self.interval <= 1
    }

    /// The entries.
    pub(crate) fn entries(&self) -> &[(u32, u32)] {
        &self.entries
    }

    /// Bytes of memory the entries use.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<(u32, u32)>()
    }

    /// Notes a verified batch at `position` starting at relative offset
    /// `rel`; adds an entry if the last one is at least `interval` behind.
    pub(crate) fn observe(&mut self, rel: u32, position: u32) {
        match self.entries.last() {
            Some(&(last_rel, last_pos)) => {
                debug_assert!(rel > last_rel && position > last_pos);
                if u64::from(position - last_pos) >= self.interval {
                    self.entries.push((rel, position));
                }
            }
            None => self.entries.push((rel, position)),
        }
    }

    /// The entry with the largest offset `<= rel`.
    pub(crate) fn lookup(&self, rel: u32) -> Option<(u32, u32)> {
        let i = self.entries.partition_point(|&(r, _)| r <= rel);
        i.checked_sub(1).and_then(|i| self.entries.get(i)).copied()
    }

    /// Forgets entries at or after relative offset `rel`.
    pub(crate) fn truncate(&mut self, rel: u32) {
        let i = self.entries.partition_point(|&(r, _)| r < rel);
        self.entries.truncate(i);
    }

    /// Shrinks the allocation to the entries (for sealed segments).
    pub(crate) fn shrink(&mut self) {
        self.entries.shrink_to_fit();
    }
}

/// Writes an index file durably (file sync; the caller syncs the directory).
///
/// # Errors
/// `Io` on failure.
pub(crate) fn write_index_file(
    fs: &dyn FileSystem,
    path: &Path,
    header: &IndexHeader,
    index: &SparseIndex,
) -> Result<()> {
    let bytes = encode_index(header, index.entries());
    let f = fs.open(path, OpenMode::CreateOrTruncate)?;
    f.write_all_and_sync_at(&bytes, 0)?;
    Ok(())
}

/// Why a stored index could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexProblem {
    /// No index file.
    Missing,
    /// The file failed verification.
    Corrupt(CorruptionKind),
    /// The file is intact but describes another state of the segment.
    Stale,
}

/// Loads the index file at `path` and accepts it only if it describes
/// segment `base` ending exactly at `end_offset` (when known).
///
/// # Errors
/// `Io` for I/O failures other than a missing file.
pub(crate) fn load_index_file(
    fs: &dyn FileSystem,
    path: &Path,
    base: Offset,
    end_offset: Option<Offset>,
    interval: u64,
) -> Result<std::result::Result<(IndexHeader, SparseIndex), IndexProblem>> {
    let f = match fs.open(path, OpenMode::Read) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Err(IndexProblem::Missing))
        }
        Err(e) => return Err(e.into()),
    };
    // An index holds at most one 8-byte entry per batch of a ≤ 2 GiB segment;
    // refuse to read anything larger than that could justify.
    if f.len()? > (2u64 << 30) / 5 {
        return Ok(Err(IndexProblem::Corrupt(CorruptionKind::Malformed(
            "index file too large",
        ))));
    }
    let bytes = f.read_to_end()?;
    let (header, entries) = match decode_index(&bytes) {
        Ok(v) => v,
        Err(k) => return Ok(Err(IndexProblem::Corrupt(k))),
    };
    if header.base_offset != base || end_offset.is_some_and(|e| e != header.end_offset) {
        return Ok(Err(IndexProblem::Stale));
    }
    Ok(Ok((header, SparseIndex::from_entries(entries, interval))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observe_is_sparse_and_lookup_finds_floor() {
        let mut ix = SparseIndex::new(100);
        for i in 0..50u32 {
            ix.observe(i * 2, 32 + i * 30);
        }
        // One entry per >= 100 bytes.
        assert!(ix.entries().len() <= 50 * 30 / 100 + 1);
        assert_eq!(ix.lookup(0), Some((0, 32)));
        let (r, p) = ix.lookup(57).unwrap();
        assert!(r <= 57 && p >= 32);
        ix.truncate(10);
        assert!(ix.entries().iter().all(|&(r, _)| r < 10));
    }
}
