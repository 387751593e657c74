//! Log options: plain data with documented defaults and a `validate()`.

use crate::error::{Error, Result};
use crate::format::{BATCH_HEADER_BYTES, PAGE_BYTES, SEGMENT_HEADER_BYTES};

/// What recovery does with corruption found at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryMode {
    /// Corruption in data that was durable, or an invalid batch followed by
    /// valid data, fails open with `Corruption`. Only a torn tail is
    /// truncated. Default.
    #[default]
    Strict,
    /// Truncates the log at the first corruption and reports exactly what
    /// was dropped. For a replica that will re-fetch from its leader.
    TruncateAtCorruption,
}

/// Compression of batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Never compress. Default.
    #[default]
    None,
    /// zstd at `level` for batches whose records reach
    /// `LogOptions::compression_threshold_bytes`, when it makes them smaller.
    Zstd {
        /// zstd level (1 = fastest).
        level: i32,
    },
}

/// Where appends go after a sync (docs/design.md invariant 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteAlignment {
    /// After every sync the next batch starts on a fresh 4 KiB page, so no
    /// later write dirties a page that holds acknowledged bytes and a torn
    /// page write can only damage unacknowledged data. Costs disk space (up
    /// to a page per sync), not I/O: a sync writes whole pages anyway.
    /// Default.
    #[default]
    Page,
    /// Appends continue in the partly synced page, which the next sync
    /// writes again: acknowledged bytes then rely on the device writing
    /// pages atomically. Denser; for benchmarks and comparison.
    Packed,
}

/// How the writes of a sync round reach the disk (appends that do not
/// wait for durability are always written through the page cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TailWrites {
    /// A sync round's group write goes straight to the device with
    /// `O_DIRECT | O_DSYNC`, padded to whole pages from an aligned buffer,
    /// and is durable when it returns: no `fdatasync` after it, no page
    /// cache. Measured on this project's test disk (virtio, ext4, segments
    /// on written blocks): 20–27 % more syncs per second for 4 KiB and
    /// 20 KiB writes, 7 % for 256 KiB, and W1–W5 of `compare` all ahead of
    /// `Buffered`. Where the file system refuses
    /// `O_DIRECT` (tmpfs, some network file systems) the log falls back to
    /// `Buffered` by itself. With `WriteAlignment::Packed` writes rarely
    /// start a page, so they are mostly buffered. Default.
    #[default]
    Direct,
    /// As `Direct`, and a round that ends submits the next round's write
    /// (through `io_uring`, without waiting for it) before it wakes
    /// anyone: the device never idles while the next round's leader is
    /// scheduled, at the price of smaller rounds (what was queued when the
    /// previous write completed, not what arrived while its writers woke).
    /// Measured on this project's test disk (virtio, ext4): 8 writers lose
    /// 15–22 % against `Direct` (rounds per second fall too, 16.7k to
    /// 15.9k, and entries per round 2.5 to 2.1) and 64 writers are within
    /// noise, so `Direct` stays
    /// the default. For devices whose durable write is short against a
    /// thread wake-up.
    DirectPipelined,
    /// Through the page cache; a sync round ends with one `fdatasync`.
    /// Choose it where direct I/O is slow (devices with slow FUA or cache
    /// flushes, where one `fdatasync` after several writes is cheaper than
    /// a durable write each time), or where the file system implements
    /// `O_DIRECT` by buffering anyway.
    Buffered,
}

/// How new segment files are preallocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preallocation {
    /// `ZeroFill` while syncs are small (under 64 KiB of log per sync on
    /// average in the active segment, or no history yet), `Fallocate` once
    /// they are large: a sync that touches unwritten extents makes the file
    /// system write the inode (extent conversion) before its cache flush,
    /// one more dependent device write per sync, which small syncs feel
    /// most; large ones pay more for writing every byte twice. Recycled
    /// segments (`LogOptions::recycled_segments`) need neither. Default.
    #[default]
    Adaptive,
    /// Zeros are written (in small writes, and synced) over the whole file
    /// before it is used, so appends overwrite allocated, written blocks and
    /// a sync writes data and a cache flush, no metadata (measured on ext4:
    /// 1.5x the durable appends per second of `Fallocate` for one 256-byte
    /// record per sync, but half for 256 KiB per sync, since every byte is
    /// written twice).
    ZeroFill,
    /// `fallocate`: instant, but the blocks are unwritten extents that every
    /// sync must convert: a metadata write (inode, extent tree) before each
    /// sync's cache flush.
    Fallocate,
}

/// Where the next segment file is prepared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SegmentPreparation {
    /// On a background thread, so appends never wait for a zero fill.
    /// Default.
    #[default]
    Background,
    /// On the appending thread (deterministic I/O order, for crash tests).
    Inline,
}

impl TailWrites {
    /// Whether a sync round's group write goes straight to the device.
    pub fn is_direct(self) -> bool {
        matches!(self, TailWrites::Direct | TailWrites::DirectPipelined)
    }
}

/// Options of a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogOptions {
    /// Size of a segment file (preallocated). Default: 128 MiB. At most
    /// 2 GiB (positions are 32-bit in the index); with page alignment at
    /// least two pages (the header has a page to itself).
    pub segment_size_bytes: u64,
    /// Largest encoded batch accepted. Default: 8 MiB. Must fit in an empty
    /// segment.
    pub max_batch_bytes: u64,
    /// Bytes of log between two sparse index entries. Default: 4 KiB, which
    /// keeps the index at 2 MiB per GiB of log.
    pub index_interval_bytes: u64,
    /// Batch compression. Default: none.
    pub compression: Compression,
    /// Smallest records section compressed. Default: 4 KiB.
    pub compression_threshold_bytes: u64,
    /// What recovery does with corruption. Default: `Strict`.
    pub recovery_mode: RecoveryMode,
    /// A sync round running longer than this is overdue: the
    /// `sync_overdue` gauge and [`crate::LogStats::sync_overdue`] say so
    /// (a device that stopped answering). Default: 1 s.
    pub sync_overdue_after: std::time::Duration,
    /// Fraction (in percent) of the active segment after which the next
    /// segment file is prepared. Default: 75.
    pub prepare_next_segment_percent: u8,
    /// Where appends go after a sync. Default: `Page`.
    pub write_alignment: WriteAlignment,
    /// How new segment files are preallocated. Default: `Adaptive`.
    pub preallocation: Preallocation,
    /// Where the next segment file is prepared. Default: `Background`.
    pub segment_preparation: SegmentPreparation,
    /// How many segment files a prefix truncation keeps for reuse instead
    /// of deleting them. A roll takes one before preparing a new file:
    /// appends then overwrite written blocks (no extent conversion, no
    /// zero fill, no discard). Each costs `segment_size_bytes` of disk while
    /// pooled. Default: 4. 0 deletes them.
    pub recycled_segments: usize,
    /// How the active segment's sync-round writes reach the disk. Default:
    /// `Direct` (falls back to `Buffered` where refused).
    pub tail_writes: TailWrites,
    /// Segment files written full of zeros into the pool when a log is
    /// created (its first open), as many as `recycled_segments` allows: the
    /// first rolls of a new log then reuse written blocks too, instead of
    /// zero-filling the next segment while appends run (every byte written
    /// twice) or `fallocate`ing it (a metadata write per sync). Costs that
    /// many segment writes once, at creation. Default: 2.
    pub prefill_segments: usize,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_size_bytes: 128 << 20,
            max_batch_bytes: 8 << 20,
            index_interval_bytes: 4 << 10,
            compression: Compression::None,
            compression_threshold_bytes: 4 << 10,
            recovery_mode: RecoveryMode::Strict,
            sync_overdue_after: std::time::Duration::from_secs(1),
            prepare_next_segment_percent: 75,
            write_alignment: WriteAlignment::Page,
            preallocation: Preallocation::Adaptive,
            segment_preparation: SegmentPreparation::Background,
            recycled_segments: 4,
            tail_writes: TailWrites::Direct,
            prefill_segments: 2,
        }
    }
}

impl LogOptions {
    /// Rejects options that make no sense.
    ///
    /// # Errors
    /// `InvalidOptions` naming the field.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::InvalidOptions(m.to_string()));
        let min_segment = (SEGMENT_HEADER_BYTES + BATCH_HEADER_BYTES + 8) as u64;
        if self.segment_size_bytes < min_segment || self.segment_size_bytes > (2 << 30) {
            return bad("segment_size_bytes must be between 64 B and 2 GiB");
        }
        if self.max_batch_bytes < (BATCH_HEADER_BYTES as u64 + 8)
            || self.max_batch_bytes > self.segment_size_bytes - SEGMENT_HEADER_BYTES as u64
        {
            return bad("max_batch_bytes must hold a record and fit in an empty segment");
        }
        if self.write_alignment == WriteAlignment::Page
            && (self.segment_size_bytes < 2 * PAGE_BYTES
                || self.max_batch_bytes > self.segment_size_bytes - PAGE_BYTES)
        {
            return bad("with page alignment a segment needs two pages, and a batch must fit after the header page");
        }
        if self.index_interval_bytes == 0 {
            return bad("index_interval_bytes must be positive");
        }
        if let Compression::Zstd { level } = self.compression {
            if !(1..=22).contains(&level) {
                return bad("zstd level must be 1..=22");
            }
        }
        if self.prepare_next_segment_percent > 100 {
            return bad("prepare_next_segment_percent must be at most 100");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_nonsense_is_rejected() {
        LogOptions::default().validate().unwrap();
        let cases = [
            LogOptions {
                segment_size_bytes: 10,
                ..LogOptions::default()
            },
            LogOptions {
                max_batch_bytes: 1 << 40,
                ..LogOptions::default()
            },
            LogOptions {
                index_interval_bytes: 0,
                ..LogOptions::default()
            },
            LogOptions {
                compression: Compression::Zstd { level: 99 },
                ..LogOptions::default()
            },
        ];
        for c in cases {
            assert!(
                matches!(c.validate(), Err(Error::InvalidOptions(_))),
                "{c:?}"
            );
        }
    }
}
