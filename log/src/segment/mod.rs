//! One segment file: its header, its batches, its sparse index, and reads of
//! whole verified batches.
//!
//! Invariants:
//! - bytes `[SEGMENT_HEADER_BYTES, end_position)` are valid batches (under
//!   the segment's salt) holding offsets `[base, end_offset)`, with zero
//!   sync padding between them and no gaps in offsets;
//! - bytes from `end_position` to the end of the file hold no batch valid
//!   under the segment's salt: they are zeros (a fresh file, or what a
//!   truncation zero-filled), stale batches of the file's earlier life
//!   (a recycled file), or the remains of a write torn by a crash;
//! - a batch never spans segments.

pub(crate) mod index;
pub(crate) mod scan;
pub(crate) mod walk;

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::{File, FileSystem, OpenMode};

use crate::error::{CorruptionKind, Error, Result};
use crate::format::{
    align_up, decode_segment_header, encode_segment_header, segment_file_name, truncated,
    BatchHeader, Salt, BATCH_HEADER_BYTES, PAGE_BYTES, SEGMENT_HEADER_BYTES,
};
use crate::options::Preallocation;
use index::SparseIndex;
use walk::{DataEnd, FileSource, Slot};

/// An open segment.
#[derive(Debug)]
pub(crate) struct Segment {
    /// Offset of the first record.
    pub base: Offset,
    /// The open file (shared with the flusher, which syncs it unlocked).
    pub file: Arc<dyn File>,
    /// The salt of this life of the file (batch CRCs are salted with it).
    pub salt: Salt,
    /// Byte position after the last batch.
    pub end_position: u64,
    /// Bytes `[end_position, zeros_to)` are known zeros of this life (sync
    /// padding written with the data); used to write padding once.
    pub zeros_to: u64,
    /// The active segment's `O_DIRECT | O_DSYNC` handle
    /// (`TailWrites::Direct`), if the file system took it.
    pub direct: Option<Arc<dyn File>>,
    /// A buffered write happened since the last sync of this file: a sync
    /// round must `fdatasync` (direct writes are durable already).
    pub buffered_since_sync: bool,
    /// Offset after the last batch.
    pub end_offset: Offset,
    /// Sparse offset index.
    pub index: SparseIndex,
}

impl Segment {
    /// Turns a prepared (preallocated) or recycled file into segment
    /// `base` with a fresh salt: writes and syncs its header page (the
    /// header, zeros to the page's end, so nothing of an earlier life is
    /// left before the first batch). The caller renames it into place and
    /// syncs the directory.
    ///
    /// # Errors
    /// `Io` on failure.
    pub(crate) fn init_file(
        file: &dyn File,
        base: Offset,
        size_bytes: u64,
        prealloc: Preallocation,
    ) -> Result<()> {
        preallocate(file, size_bytes, prealloc)?;
        let mut page = vec![0u8; usize::try_from(PAGE_BYTES.min(size_bytes)).unwrap_or(0)];
        let header = encode_segment_header(base, Salt::fresh());
        quorumlog_io::codec::copy_into(&mut page, 0, &header);
        file.write_all_and_sync_at(&page, 0)?;
        Ok(())
    }

    /// Opens segment `base` in `dir` for reading and writing, checking its
    /// header. Its data end is unknown until scanned or taken from an index.
    ///
    /// # Errors
    /// `Io`; `Corruption` if the header is invalid.
    pub(crate) fn open(
        fs: &dyn FileSystem,
        dir: &Path,
        base: Offset,
        interval: u64,
    ) -> Result<Segment> {
        let path = dir.join(segment_file_name(base));
        let file = fs.open(&path, OpenMode::ReadWrite)?;
        let mut h = [0u8; SEGMENT_HEADER_BYTES];
        let len = file.len()?;
        let header = if len < SEGMENT_HEADER_BYTES as u64 {
            Err(CorruptionKind::Truncated {
                len,
                needed: SEGMENT_HEADER_BYTES as u64,
            })
        } else {
            file.read_exact_at(&mut h, 0)?;
            decode_segment_header(&h)
        };
        let salt = match header {
            Ok((b, salt)) if b == base => salt,
            Ok((found, _)) => {
                let kind = CorruptionKind::Misplaced {
                    expected: base,
                    found,
                };
                return Err(corruption(Location::header(base), None, kind));
            }
            Err(kind) => return Err(corruption(Location::header(base), None, kind)),
        };
        Ok(Segment {
            base,
            file: Arc::from(file),
            salt,
            zeros_to: SEGMENT_HEADER_BYTES as u64,
            direct: None,
            buffered_since_sync: true,
            end_position: SEGMENT_HEADER_BYTES as u64,
            end_offset: base,
            index: SparseIndex::new(interval),
        })
    }

    /// Writes this segment's index file (synced; the caller syncs the
    /// directory), describing its batches up to its current end.
    ///
    /// # Errors
    /// `Io` on failure.
    pub(crate) fn write_index(&self, fs: &dyn FileSystem, dir: &Path) -> Result<()> {
        let header = crate::format::IndexHeader {
            base_offset: self.base,
            end_offset: self.end_offset,
            end_position: self.end_position,
        };
        index::write_index_file(
            fs,
            &dir.join(crate::format::index_file_name(self.base)),
            &header,
            &self.index,
        )
    }

    /// Writes a batch encoded unsalted at the end, salted with this
    /// segment's salt. Not durable until synced.
    ///
    /// # Errors
    /// `Io` on failure (the caller poisons the log).
    pub(crate) fn append(&mut self, bytes: &mut [u8], header: &mut BatchHeader) -> Result<()> {
        assert_eq!(
            header.base_offset, self.end_offset,
            "append must continue the segment"
        );
        self.salt.restamp(Salt::NONE, header, bytes);
        self.buffered_since_sync = true;
        self.file.write_all_at(bytes, self.end_position)?;
        self.note_appended(bytes.len() as u64, header);
        Ok(())
    }

    /// Before a sync with page alignment: writes zeros from the end of the
    /// data to the page boundary, unless they were written already, so the
    /// sync makes the padding durable with the data (a recycled file holds
    /// stale bytes there, and recovery reads the gap as padding).
    ///
    /// # Errors
    /// `Io` on failure (the caller poisons the log).
    pub(crate) fn pad(&mut self, segment_size: u64) -> Result<()> {
        let to = align_up(self.end_position).min(segment_size);
        if to > self.end_position && self.zeros_to < to {
            // Lossless: less than a page.
            let zeros = vec![0u8; usize::try_from(to - self.end_position).unwrap_or(0)];
            self.buffered_since_sync = true;
            self.file.write_all_at(&zeros, self.end_position)?;
        }
        self.zeros_to = self.zeros_to.max(to);
        Ok(())
    }

    /// Updates the in-memory end and index after `len` bytes of batch
    /// `header` were written at the end.
    ///
    /// # Panics
    /// If the batch does not continue the segment (a bug in the caller).
    pub(crate) fn note_appended(&mut self, len: u64, header: &BatchHeader) {
        assert!(
            header.base_offset == self.end_offset && len >= BATCH_HEADER_BYTES as u64,
            "an appended batch continues the segment"
        );
        self.index.observe(
            relative(self.base, header.base_offset),
            position_u32(self.end_position),
        );
        self.end_position += len;
        self.end_offset = header.next_offset();
    }

    /// Reads and verifies the whole batch at `position`, which must start at
    /// `expected` (or, with `expected` `None`, anywhere).
    ///
    /// # Errors
    /// `Corruption` naming this segment and position; `Io`.
    pub(crate) fn read_batch_at(
        &self,
        position: u64,
        expected: Option<Offset>,
    ) -> Result<(BatchHeader, Vec<u8>)> {
        let at = expected.unwrap_or(self.base);
        let mut src = FileSource::new(self.file.as_ref(), self.end_position, PAGE_CHUNK);
        let header = match walk::slot(&mut src, position, DataEnd(self.end_position))? {
            Slot::Header {
                position: p,
                header,
            } if p == position => header,
            Slot::Invalid { kind, .. } => {
                return Err(corruption(
                    Location {
                        segment: self.base,
                        position,
                        offset: at,
                    },
                    None,
                    kind,
                ))
            }
            _ => {
                return Err(corruption(
                    Location {
                        segment: self.base,
                        position,
                        offset: at,
                    },
                    None,
                    truncated(0, BATCH_HEADER_BYTES),
                ))
            }
        };
        let want = expected.unwrap_or(header.base_offset);
        match walk::batch(
            &mut src,
            position,
            &header,
            want,
            DataEnd(self.end_position),
            self.salt,
        )? {
            Ok(bytes) => Ok((header, bytes.to_vec())),
            Err(kind) => Err(corruption(
                Location {
                    segment: self.base,
                    position,
                    offset: at,
                },
                Some(header.epoch),
                kind,
            )),
        }
    }

    /// The header of the batch that starts at `position` (or, past sync
    /// padding, at the next page), which must start at `expected`.
    ///
    /// # Errors
    /// `Corruption` if no batch starting at `expected` is there; `Io`.
    pub(crate) fn header_at(&self, position: u64, expected: Offset) -> Result<(u64, BatchHeader)> {
        let mut src = FileSource::new(self.file.as_ref(), self.end_position, PAGE_CHUNK);
        self.expect_header(&mut src, position, expected)
    }

    /// The walker's verdict at `position`, as a header that starts
    /// `expected` or a `Corruption` error.
    fn expect_header(
        &self,
        src: &mut FileSource<'_>,
        position: u64,
        expected: Offset,
    ) -> Result<(u64, BatchHeader)> {
        match walk::slot(src, position, DataEnd(self.end_position))? {
            Slot::Header { position, header } => {
                if header.base_offset != expected {
                    return Err(corruption(
                        Location {
                            segment: self.base,
                            position,
                            offset: expected,
                        },
                        Some(header.epoch),
                        CorruptionKind::Misplaced {
                            expected,
                            found: header.base_offset,
                        },
                    ));
                }
                Ok((position, header))
            }
            Slot::Invalid { position, kind } => Err(corruption(
                Location {
                    segment: self.base,
                    position,
                    offset: expected,
                },
                None,
                kind,
            )),
            Slot::End | Slot::NeedMore => Err(corruption(
                Location {
                    segment: self.base,
                    position,
                    offset: expected,
                },
                None,
                truncated(0, BATCH_HEADER_BYTES),
            )),
        }
    }

    /// Finds the batch holding `offset` (which must be in
    /// `[base, end_offset)`): returns its position and header. Walks headers
    /// from the nearest index entry, verifying each batch's place.
    ///
    /// # Errors
    /// `Corruption` if a batch on the way is not where it must be; `Io`.
    pub(crate) fn locate(&self, offset: Offset) -> Result<(u64, BatchHeader)> {
        debug_assert!(offset >= self.base && offset < self.end_offset);
        let (mut next, mut pos) = match self.index.lookup(relative(self.base, offset)) {
            Some((r, p)) => (Offset(self.base.0 + u64::from(r)), u64::from(p)),
            None => (self.base, SEGMENT_HEADER_BYTES as u64),
        };
        // With an entry for every batch (a node's log) the batch found is
        // the one asked for: the first read takes its header only, so no
        // other batch's bytes are read. A sparse index walks, a chunk at a
        // time from the start.
        let first = if self.index.is_dense() {
            BATCH_HEADER_BYTES
        } else {
            WALK_CHUNK
        };
        let mut src = FileSource::new(self.file.as_ref(), self.end_position, first);
        loop {
            let (at, h) = self.expect_header(&mut src, pos, next)?;
            src.set_chunk(WALK_CHUNK);
            if h.record_count == 0 {
                return Err(corruption(
                    Location {
                        segment: self.base,
                        position: at,
                        offset: next,
                    },
                    Some(h.epoch),
                    CorruptionKind::Malformed("empty batch header"),
                ));
            }
            if offset < h.next_offset() {
                return Ok((at, h));
            }
            next = h.next_offset();
            pos = at + u64::from(h.batch_len);
        }
    }
}

/// Whether every byte of `bytes` is zero. Sync padding and a preallocated
/// tail are long runs of zeros, and byte-at-a-time checks of them were most
/// of a log read (measured: 45% of a restart's CPU); an OR over blocks
/// compiles to vector instructions.
pub(crate) fn all_zero(bytes: &[u8]) -> bool {
    bytes
        .chunks(ZERO_BLOCK)
        .all(|c| c.iter().fold(0u8, |a, &b| a | b) == 0)
}

/// The index of the last non-zero byte of `bytes`, if any.
pub(crate) fn last_nonzero(bytes: &[u8]) -> Option<usize> {
    let mut end = bytes.len();
    for c in bytes.rchunks(ZERO_BLOCK) {
        let start = end - c.len();
        if !all_zero(c) {
            return c.iter().rposition(|&b| b != 0).map(|i| start + i);
        }
        end = start;
    }
    None
}

const ZERO_BLOCK: usize = 256;

/// Read-ahead for classifying one position (a page of padding and a header).
const PAGE_CHUNK: usize = 8 << 10;
/// Read-ahead for walking headers from an index entry.
const WALK_CHUNK: usize = 8 << 10;

/// `offset` relative to the segment base, as stored in the index.
///
/// # Panics
/// If `offset` is below the base or 2^32 or more past it (a segment of at
/// most 2 GiB holds fewer offsets than that, since every record takes at
/// least its 4-byte length prefix).
pub(crate) fn relative(base: Offset, offset: Offset) -> u32 {
    let rel = offset
        .0
        .checked_sub(base.0)
        .and_then(|r| u32::try_from(r).ok());
    assert!(
        rel.is_some(),
        "offset {offset} is not within 2^32 of segment {base}"
    );
    rel.unwrap_or(0)
}

/// A byte position within a segment, as stored in the index.
///
/// # Panics
/// If `position` is 4 GiB or more (segments are at most 2 GiB).
pub(crate) fn position_u32(position: u64) -> u32 {
    let p = u32::try_from(position).ok();
    assert!(p.is_some(), "segment position {position} beyond 4 GiB");
    p.unwrap_or(0)
}

/// Makes `file` at least `size_bytes` long with zeros, as `prealloc` says
/// (`Adaptive` callers resolve it first; unresolved, it zero-fills).
/// A zero fill is synced here, so the roll that uses the file later only
/// syncs its header page.
///
/// # Errors
/// `Io` on failure.
pub(crate) fn preallocate(file: &dyn File, size_bytes: u64, prealloc: Preallocation) -> Result<()> {
    let len = file.len()?;
    if len >= size_bytes {
        return Ok(());
    }
    match prealloc {
        Preallocation::Fallocate => file.allocate(size_bytes)?,
        Preallocation::ZeroFill | Preallocation::Adaptive => {
            file.fill_zeros(len, size_bytes)?;
            file.sync_data()?;
        }
    }
    Ok(())
}

/// A `Corruption` error.
pub(crate) fn corruption(at: Location, epoch: Option<Epoch>, kind: CorruptionKind) -> Error {
    Error::Corruption {
        at: quorumlog_checkpoint::Location::Segment {
            segment: at.segment,
            position: at.position,
            offset: at.offset,
        },
        epoch,
        kind,
    }
}

impl Location {
    /// The header of segment `base`.
    pub(crate) fn header(base: Offset) -> Location {
        Location {
            segment: base,
            position: 0,
            offset: base,
        }
    }
}

/// Where corruption was found in a segment, as the log's code builds it:
/// three numbers that must not be swapped, so they are named at every call
/// (`corruption` turns it into the shared `Location::Segment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    /// The segment's base offset.
    pub(crate) segment: Offset,
    /// The byte position in the segment file.
    pub(crate) position: u64,
    /// The offset expected (or found) there.
    pub(crate) offset: Offset,
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use quorumlog_io::SimFs;

    use super::*;
    use crate::batch::BatchEncoder;
    use crate::options::Compression;

    fn segment(fs: &SimFs) -> Segment {
        fs.create_dir_all(Path::new("/log")).unwrap();
        let f = fs
            .open(
                &Path::new("/log").join(segment_file_name(Offset(100))),
                OpenMode::CreateNew,
            )
            .unwrap();
        Segment::init_file(f.as_ref(), Offset(100), 8192, Preallocation::ZeroFill).unwrap();
        let mut seg = Segment::open(fs, Path::new("/log"), Offset(100), 64).unwrap();
        let mut buf = Vec::new();
        for b in 0..20u64 {
            let mut h = BatchEncoder {
                compression: Compression::None,
                threshold_bytes: 0,
                max_bytes: 1 << 20,
                control: false,
            }
            .encode(&mut buf, Offset(100 + b * 2), Epoch(1), &[b"ab", b"cd"])
            .unwrap();
            seg.append(&mut buf, &mut h).unwrap();
        }
        seg
    }

    #[test]
    fn zero_checks_agree_with_a_byte_at_a_time_scan() {
        let mut rng = quorumlog_io::SimRng::new(3);
        for len in [0usize, 1, 7, 255, 256, 257, 1000, 4096, 5000] {
            for _ in 0..20 {
                let mut b = vec![0u8; len];
                if len > 0 && rng.below(3) > 0 {
                    let at = rng.index(len);
                    b[at] = 1 + u8::try_from(rng.below(255)).unwrap();
                }
                assert_eq!(super::all_zero(&b), b.iter().all(|&x| x == 0));
                assert_eq!(super::last_nonzero(&b), b.iter().rposition(|&x| x != 0));
            }
        }
    }

    #[test]
    fn locate_finds_the_batch_of_every_offset() {
        let fs = SimFs::new(1);
        let seg = segment(&fs);
        assert!(seg.index.entries().len() > 1 && seg.index.entries().len() < 20);
        for o in 100..140 {
            let (pos, h) = seg.locate(Offset(o)).unwrap();
            assert!(h.base_offset.0 <= o && o < h.next_offset().0);
            let (h2, _) = seg.read_batch_at(pos, Some(h.base_offset)).unwrap();
            assert_eq!(h, h2);
        }
        assert!(matches!(
            seg.read_batch_at(SEGMENT_HEADER_BYTES as u64, Some(Offset(102))),
            Err(Error::Corruption {
                kind: CorruptionKind::Misplaced { .. },
                ..
            })
        ));
    }

    #[test]
    fn open_checks_the_header() {
        let fs = SimFs::new(1);
        let _ = segment(&fs);
        // The file of base 100 renamed to base 5: its header disagrees.
        fs.rename(
            &Path::new("/log").join(segment_file_name(Offset(100))),
            &Path::new("/log").join(segment_file_name(Offset(5))),
        )
        .unwrap();
        assert!(matches!(
            Segment::open(&fs, Path::new("/log"), Offset(5), 64),
            Err(Error::Corruption {
                kind: CorruptionKind::Misplaced { .. },
                ..
            })
        ));
    }
}
