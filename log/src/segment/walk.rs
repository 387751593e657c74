//! The one batch walker: the only code that decides what the bytes at a
//! position of a segment are (a batch header, sync padding, the end of the
//! data, or invalid bytes). The writer's alignment rule, `Log::read`,
//! `Segment::locate`/`header_at`, the recovery scan and the tail inspection
//! all go through it, so they cannot disagree about where a batch starts.
//!
//! The rule (docs/format.md, "Padding"):
//! - a batch starts with the batch magic, whose first byte is not zero;
//! - after a sync the writer continues at the next page boundary
//!   ([`padded_end`]); the bytes skipped are zeros, and there may be
//!   anything from 1 to 4095 of them (fewer than a batch header too);
//! - so at an unaligned position, bytes that are all zero up to the next
//!   page boundary are padding, and the next batch (if any) starts at that
//!   boundary; at a page boundary, zeros where a header would be are the end
//!   of the data;
//! - anything else where a batch should start is invalid.
//!
//! Invariants: the walker never reads past its limit, never reads more than
//! one page plus one batch header to classify a position, and classifies a
//! position the same way whatever the source (file or buffer).

use quorumlog_checkpoint::Offset;
use quorumlog_io::File;

use crate::batch::{verify_batch, MAX_BATCH_BYTES};
use crate::error::{CorruptionKind, Result};
use crate::format::{
    align_up, truncated, BatchHeader, Salt, BATCH_HEADER_BYTES, BATCH_MAGIC, PAGE_BYTES,
};

/// Where the writer continues after a sync that ended the data at `end`
/// (with page alignment): the next page boundary. The walker's padding rule
/// is the inverse of this.
pub(crate) fn padded_end(end: u64) -> u64 {
    align_up(end)
}

/// The position the data of a segment cannot extend past (its known end, or
/// the file's length): a type of its own, so it is never swapped with the
/// position being classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DataEnd(pub(crate) u64);

/// Bytes of a segment by position.
pub(crate) trait Source {
    /// The bytes `[pos, pos + len)`, clipped to what the source holds (the
    /// file's end, or the end of a buffer).
    ///
    /// # Errors
    /// `Io` on read failure.
    fn bytes(&mut self, pos: u64, len: usize) -> Result<&[u8]>;
}

/// What the bytes at a position are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A batch header (parsed, the batch not yet verified) at `position`:
    /// the position asked about, or the next page boundary after padding.
    Header {
        /// Where the batch starts.
        position: u64,
        /// Its header.
        header: BatchHeader,
    },
    /// Zeros where the next batch would start, or the limit reached: no
    /// batch follows.
    End,
    /// Bytes that are neither a batch header nor padding, at `position`.
    Invalid {
        /// Where the invalid bytes start.
        position: u64,
        /// What is wrong with them.
        kind: CorruptionKind,
    },
    /// The source ends before the position could be classified (a buffer cut
    /// short by the caller); never returned by a file source below its limit.
    NeedMore,
}

/// Classifies the bytes at `pos` of a segment whose data cannot extend past
/// `end`.
///
/// # Errors
/// `Io` on read failure.
pub(crate) fn slot(src: &mut impl Source, pos: u64, end: DataEnd) -> Result<Slot> {
    let limit = end.0;
    if pos >= limit {
        return Ok(Slot::End);
    }
    let boundary = align_up(pos);
    if pos != boundary {
        let gap = boundary.min(limit) - pos;
        // Lossless: less than a page.
        let gap_len = usize::try_from(gap).unwrap_or(0);
        let bytes = src.bytes(pos, gap_len.min(BATCH_MAGIC.len()))?;
        if bytes.first().is_some_and(|&b| b != 0) {
            return at(src, pos, limit);
        }
        let bytes = src.bytes(pos, gap_len)?;
        if bytes.len() < gap_len {
            return Ok(Slot::NeedMore);
        }
        if !super::all_zero(bytes) {
            return Ok(Slot::Invalid {
                position: pos,
                kind: CorruptionKind::Malformed("non-zero bytes in sync padding"),
            });
        }
        if boundary >= limit {
            return Ok(Slot::End);
        }
        return aligned(src, boundary, limit);
    }
    aligned(src, pos, limit)
}

/// A page-aligned position: a header, zeros (the end), or invalid bytes.
fn aligned(src: &mut impl Source, pos: u64, limit: u64) -> Result<Slot> {
    debug_assert_eq!(pos % PAGE_BYTES, 0);
    let want = header_len(pos, limit);
    let bytes = src.bytes(pos, want)?;
    if bytes.len() < want {
        return Ok(Slot::NeedMore);
    }
    if super::all_zero(bytes) {
        return Ok(Slot::End);
    }
    at(src, pos, limit)
}

/// Parses the header at `pos`, which does not start with a zero byte.
fn at(src: &mut impl Source, pos: u64, limit: u64) -> Result<Slot> {
    let want = header_len(pos, limit);
    let bytes = src.bytes(pos, want)?;
    if bytes.len() < want {
        return Ok(Slot::NeedMore);
    }
    Ok(match BatchHeader::parse(bytes) {
        Ok(header) => Slot::Header {
            position: pos,
            header,
        },
        Err(kind) => Slot::Invalid {
            position: pos,
            kind,
        },
    })
}

fn header_len(pos: u64, limit: u64) -> usize {
    // Lossless: at most a batch header.
    usize::try_from((limit - pos).min(BATCH_HEADER_BYTES as u64)).unwrap_or(0)
}

/// Reads and verifies the whole batch of `header` at `position` of a
/// segment salted `salt`, which must end by `end` and hold `expected` as its
/// base offset. Returns its bytes, or what is wrong with it (a stale batch
/// of an earlier salt is a `ChecksumMismatch`).
///
/// # Errors
/// `Io` on read failure (invalid bytes are the inner error).
pub(crate) fn batch<'s>(
    src: &'s mut impl Source,
    position: u64,
    header: &BatchHeader,
    expected: Offset,
    end: DataEnd,
    salt: Salt,
) -> Result<std::result::Result<&'s [u8], CorruptionKind>> {
    let limit = end.0;
    let len = u64::from(header.batch_len);
    if len > MAX_BATCH_BYTES + BATCH_HEADER_BYTES as u64 {
        return Ok(Err(CorruptionKind::Malformed(
            "batch length over the maximum",
        )));
    }
    if position + len > limit {
        return Ok(Err(CorruptionKind::Truncated {
            len: limit.saturating_sub(position),
            needed: len,
        }));
    }
    // Lossless: bounded by MAX_BATCH_BYTES above.
    let want = usize::try_from(len).unwrap_or(0);
    let bytes = src.bytes(position, want)?;
    if bytes.len() < want {
        return Ok(Err(truncated(bytes.len(), want)));
    }
    if let Err(kind) = verify_batch(bytes, salt) {
        return Ok(Err(kind));
    }
    if header.base_offset != expected {
        return Ok(Err(CorruptionKind::Misplaced {
            expected,
            found: header.base_offset,
        }));
    }
    Ok(Ok(bytes))
}

/// A window of file bytes read ahead in chunks of `chunk` bytes.
pub(crate) struct FileSource<'a> {
    file: &'a dyn File,
    file_len: u64,
    chunk: usize,
    start: u64,
    buf: Vec<u8>,
}

impl<'a> FileSource<'a> {
    /// A window over `file`, `file_len` bytes long, reading ahead `chunk`
    /// bytes at a time.
    pub(crate) fn new(file: &'a dyn File, file_len: u64, chunk: usize) -> Self {
        FileSource {
            file,
            file_len,
            chunk,
            start: 0,
            buf: Vec::new(),
        }
    }

    /// Reads ahead `chunk` bytes at a time from now on.
    pub(crate) fn set_chunk(&mut self, chunk: usize) {
        self.chunk = chunk;
    }
}

impl Source for FileSource<'_> {
    fn bytes(&mut self, pos: u64, len: usize) -> Result<&[u8]> {
        let pos = pos.min(self.file_len);
        let end = (pos + len as u64).min(self.file_len);
        let have = pos >= self.start && end <= self.start + self.buf.len() as u64;
        if !have {
            let want = usize::try_from(self.file_len - pos)
                .unwrap_or(usize::MAX)
                .min(len.max(self.chunk));
            self.buf.resize(want, 0);
            self.file.read_exact_at(&mut self.buf, pos)?;
            self.start = pos;
        }
        // Lossless: both are within the buffer, which fits in memory.
        let from = usize::try_from(pos - self.start).unwrap_or(0);
        let to = usize::try_from(end - self.start).unwrap_or(0);
        Ok(self.buf.get(from..to).unwrap_or(&[]))
    }
}

/// Bytes already read into memory: `buf` holds the segment's bytes from
/// position `start`.
pub(crate) struct BufSource<'a> {
    /// The bytes.
    pub buf: &'a [u8],
    /// The segment position of `buf[0]`.
    pub start: u64,
}

impl Source for BufSource<'_> {
    fn bytes(&mut self, pos: u64, len: usize) -> Result<&[u8]> {
        let from = usize::try_from(pos.saturating_sub(self.start))
            .unwrap_or(usize::MAX)
            .min(self.buf.len());
        let to = from.saturating_add(len).min(self.buf.len());
        Ok(self.buf.get(from..to).unwrap_or(&[]))
    }
}

#[cfg(test)]
mod tests {
    use quorumlog_checkpoint::Epoch;

    use super::*;
    use crate::batch::BatchEncoder;
    use crate::options::Compression;

    /// A page of segment bytes: a batch ending `gap` bytes before 8192, then
    /// (optionally) a second batch at 8192.
    fn two_pages(gap: u64, second: bool) -> (Vec<u8>, u64) {
        let mut seg = vec![0u8; 3 * 4096];
        let record_len = usize::try_from(4096 - 44 - gap).unwrap();
        let mut buf = Vec::new();
        BatchEncoder {
            compression: Compression::None,
            threshold_bytes: u64::MAX,
            max_bytes: 1 << 20,
            control: false,
        }
        .encode(&mut buf, Offset(0), Epoch(1), &[vec![7u8; record_len]])
        .unwrap();
        seg[4096..4096 + buf.len()].copy_from_slice(&buf);
        let end = 4096 + buf.len() as u64;
        if second {
            BatchEncoder {
                compression: Compression::None,
                threshold_bytes: u64::MAX,
                max_bytes: 1 << 20,
                control: false,
            }
            .encode(&mut buf, Offset(1), Epoch(1), &[b"second"])
            .unwrap();
            seg[8192..8192 + buf.len()].copy_from_slice(&buf);
        }
        (seg, end)
    }

    #[test]
    fn every_padding_length_leads_to_the_next_page() {
        for gap in 0..=64 {
            let (seg, end) = two_pages(gap, true);
            assert_eq!(end, 8192 - gap);
            let mut src = BufSource {
                buf: &seg,
                start: 0,
            };
            let limit = seg.len() as u64;
            match slot(&mut src, end, DataEnd(limit)).unwrap() {
                Slot::Header { position, header } => {
                    assert_eq!(
                        (position, header.base_offset),
                        (8192, Offset(1)),
                        "gap {gap}"
                    );
                    let ok = batch(
                        &mut src,
                        position,
                        &header,
                        Offset(1),
                        DataEnd(limit),
                        Salt::NONE,
                    )
                    .unwrap();
                    assert!(ok.is_ok(), "gap {gap}");
                }
                other => panic!("gap {gap}: {other:?}"),
            }
            // Without a second batch the padding leads to the end.
            let (seg, end) = two_pages(gap, false);
            let mut src = BufSource {
                buf: &seg,
                start: 0,
            };
            assert_eq!(
                slot(&mut src, end, DataEnd(limit)).unwrap(),
                Slot::End,
                "gap {gap}"
            );
        }
    }

    #[test]
    fn non_zero_padding_and_garbage_are_invalid() {
        let (mut seg, end) = two_pages(10, true);
        seg[usize::try_from(end).unwrap() + 3] = 1;
        let mut src = BufSource {
            buf: &seg,
            start: 0,
        };
        assert!(matches!(
            slot(&mut src, end, DataEnd(seg.len() as u64)).unwrap(),
            Slot::Invalid { position, .. } if position == end
        ));
        // Garbage at a page boundary.
        let mut seg = vec![0u8; 8192];
        seg[4096] = 0xEE;
        let mut src = BufSource {
            buf: &seg,
            start: 0,
        };
        assert!(matches!(
            slot(&mut src, 4096, DataEnd(8192)).unwrap(),
            Slot::Invalid {
                position: 4096,
                kind: CorruptionKind::BadMagic { .. }
            }
        ));
        // Zeros at a page boundary end the data; the limit ends it too.
        assert_eq!(
            slot(&mut src, 4097 + 4095, DataEnd(8192)).unwrap(),
            Slot::End
        );
        assert_eq!(slot(&mut src, 8192, DataEnd(8192)).unwrap(), Slot::End);
    }

    #[test]
    fn a_short_buffer_asks_for_more() {
        let (seg, end) = two_pages(30, true);
        let short = &seg[..usize::try_from(end).unwrap() + 10];
        let mut src = BufSource {
            buf: short,
            start: 0,
        };
        assert_eq!(
            slot(&mut src, end, DataEnd(seg.len() as u64)).unwrap(),
            Slot::NeedMore
        );
    }

    #[test]
    fn the_writer_rule_is_the_walker_rule() {
        for end in [4096u64, 4097, 8191, 8152, 8153] {
            let next = padded_end(end);
            assert_eq!(next % PAGE_BYTES, 0);
            assert!(next >= end && next - end < PAGE_BYTES);
        }
    }
}
