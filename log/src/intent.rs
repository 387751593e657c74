//! `log/truncation.intent`: the redo record of a truncation that cannot be
//! done in idempotent steps.
//!
//! Two truncations need it. A suffix truncation whose cut is not on a page
//! boundary: the page holding the cut also holds kept (acknowledged) bytes,
//! and cutting rewrites that page; if the cut splits a batch, its kept
//! records are rewritten as a shorter batch. The intent holds a copy of the
//! page's kept bytes (and the replacement batch), so a crash — or a torn
//! page — in between never loses them. And `truncate_fully_and_start_at`:
//! old segments must never outlive the new start. The intent is written atomically (temp, sync, rename, directory
//! sync) before the truncation touches anything; recovery redoes a truncation
//! whose intent it finds, then removes the intent.
//!
//! ```text
//!  0       4         6      7          8          16         24         32          36       40
//!  +-------+---------+------+----------+----------+----------+----------+-----------+--------+---------
//!  | magic | version | kind | reserved | a        | b        | c        | bytes_len | crc32c | bytes…
//!  |"QLTI" | u16     | u8   | u8 = 0   | u64      | u64      | u64      | u32       | u32    |
//!  +-------+---------+------+----------+----------+----------+----------+-----------+--------+---------
//!  kind 1 (cut):   a = segment base, b = byte position to cut at (a page
//!                  boundary, or the cut itself), c = the log end offset after
//!                  the cut; bytes = what is written back at b (the page's
//!                  kept bytes, then the replacement batch if a batch is cut).
//!  kind 2 (full):  a = new log start offset, b = c = 0, no bytes.
//!  kind 3 (zero):  a = segment base, b = the page boundary at or below the
//!                  end of the data, c = the byte position zeroed up to;
//!                  bytes = the page's kept bytes, written back at b, then
//!                  zeros up to c (recovery's cut of a torn tail, in place:
//!                  the file keeps its written blocks).
//!  crc32c covers bytes [0, 36) and the bytes.
//! ```

use std::io;
use std::path::{Path, PathBuf};

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::{FileSystem, OpenMode};

use crate::batch::MAX_BATCH_BYTES;
use crate::format::PAGE_BYTES;

use quorumlog_io::codec::{Reader, Writer};

use crate::error::{CorruptionKind, Result};
use crate::format::truncated;

/// The most bytes a cut intent carries: a page and a batch.
const MAX_BYTES: u64 = MAX_BATCH_BYTES + PAGE_BYTES;

/// The intent file's name in the log directory.
pub(crate) const INTENT_FILE: &str = "truncation.intent";
const MAGIC: [u8; 4] = *b"QLTI";
const VERSION: u16 = 1;
const HEADER_BYTES: usize = 40;

/// A truncation to redo after a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Intent {
    /// Cut segment `segment` at `position` and write `bytes` there; the log
    /// then ends at `offset`.
    Cut {
        /// The segment's base offset.
        segment: Offset,
        /// Where to cut.
        position: u64,
        /// Written back at `position`.
        bytes: Vec<u8>,
        /// The log end offset after the cut.
        offset: Offset,
    },
    /// Write `bytes` at `position` of segment `segment`, then zeros up to
    /// `until`; the file keeps its length.
    Zero {
        /// The segment's base offset.
        segment: Offset,
        /// A page boundary.
        position: u64,
        /// The page's kept bytes.
        bytes: Vec<u8>,
        /// Zeros end here.
        until: u64,
    },
    /// Remove every segment and restart the log at `start`.
    Full {
        /// The new log start offset.
        start: Offset,
        /// The epoch of the entry at `start - 1`, if known (a snapshot's).
        purged_epoch: Option<Epoch>,
    },
}

impl Intent {
    /// Encodes the intent file.
    ///
    /// # Panics
    /// If the bytes carried exceed a `u32` (they are at most a page and a
    /// batch).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let (kind, a, b, c, batch): (u8, u64, u64, u64, &[u8]) = match self {
            Intent::Cut {
                segment,
                position,
                bytes,
                offset,
            } => (1, segment.0, *position, offset.0, bytes),
            Intent::Full {
                start,
                purged_epoch,
            } => (
                2,
                start.0,
                u64::from(purged_epoch.is_some()),
                purged_epoch.map_or(0, |e| e.0),
                &[],
            ),
            Intent::Zero {
                segment,
                position,
                bytes,
                until,
            } => (3, segment.0, *position, *until, bytes),
        };
        let len = u32::try_from(batch.len()).ok();
        assert!(
            len.is_some(),
            "an intent carries at most a page and a batch"
        );
        let mut head = Writer::with_capacity(HEADER_BYTES);
        head.bytes(&MAGIC)
            .u16(VERSION)
            .u8(kind)
            .u8(0)
            .u64(a)
            .u64(b)
            .u64(c)
            .u32(len.unwrap_or(0));
        let crc = crc32c::crc32c_append(crc32c::crc32c(head.as_slice()), batch);
        head.u32(crc).bytes(batch);
        head.finish()
    }

    /// Decodes and verifies an intent file.
    ///
    /// # Errors
    /// The [`CorruptionKind`] found.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Intent, CorruptionKind> {
        let mut r = Reader::new(bytes);
        let magic = r.array::<4>()?;
        if magic != MAGIC {
            return Err(CorruptionKind::BadMagic {
                expected: MAGIC,
                found: magic,
            });
        }
        let version = r.u16()?;
        let kind = r.u8()?;
        let reserved = r.u8()?;
        let (a, b, c) = (r.u64()?, r.u64()?, r.u64()?);
        let len = r.u32()? as usize;
        let stored = r.u32()?;
        let carried = r.rest();
        if len as u64 > MAX_BYTES {
            return Err(CorruptionKind::Malformed(
                "intent carries more than a page and a batch",
            ));
        }
        if carried.len() != len {
            return Err(truncated(carried.len(), len));
        }
        let head = bytes.get(..36).ok_or(truncated(bytes.len(), 36))?;
        let computed = crc32c::crc32c_append(crc32c::crc32c(head), carried);
        if computed != stored {
            return Err(CorruptionKind::ChecksumMismatch { stored, computed });
        }
        if reserved != 0 {
            return Err(CorruptionKind::Malformed("reserved intent byte"));
        }
        if version != VERSION {
            return Err(CorruptionKind::UnsupportedVersion {
                found: version,
                supported: VERSION,
            });
        }
        match kind {
            1 => Ok(Intent::Cut {
                segment: Offset(a),
                position: b,
                bytes: carried.to_vec(),
                offset: Offset(c),
            }),
            2 if len == 0 && (b == 1 || (b == 0 && c == 0)) => Ok(Intent::Full {
                start: Offset(a),
                purged_epoch: (b == 1).then_some(Epoch(c)),
            }),
            3 if (len as u64) < PAGE_BYTES
                && b % PAGE_BYTES == 0
                && b.checked_add(len as u64).is_some_and(|e| e <= c) =>
            {
                Ok(Intent::Zero {
                    segment: Offset(a),
                    position: b,
                    bytes: carried.to_vec(),
                    until: c,
                })
            }
            _ => Err(CorruptionKind::Malformed("unknown intent kind")),
        }
    }
}

fn paths(dir: &Path) -> (PathBuf, PathBuf) {
    (
        dir.join(INTENT_FILE),
        dir.join(format!("{INTENT_FILE}.tmp")),
    )
}

/// Durably records `intent` in `dir`.
///
/// # Errors
/// `Io` on failure.
pub(crate) fn write(fs: &dyn FileSystem, dir: &Path, intent: &Intent) -> Result<()> {
    let (path, tmp) = paths(dir);
    let f = fs.open(&tmp, OpenMode::CreateOrTruncate)?;
    f.write_all_and_sync_at(&intent.encode(), 0)?;
    drop(f);
    fs.rename(&tmp, &path)?;
    fs.sync_dir(dir)?;
    Ok(())
}

/// Reads the intent in `dir`, if any.
///
/// # Errors
/// `Io`; the inner `Err` if the file exists but fails verification.
pub(crate) fn read(
    fs: &dyn FileSystem,
    dir: &Path,
) -> Result<Option<Result<Intent, CorruptionKind>>> {
    let (path, _) = paths(dir);
    let f = match fs.open(&path, OpenMode::Read) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if f.len()? > MAX_BYTES + HEADER_BYTES as u64 {
        return Ok(Some(Err(CorruptionKind::Malformed(
            "intent file too large",
        ))));
    }
    Ok(Some(Intent::decode(&f.read_to_end()?)))
}

/// Durably removes the intent in `dir` (done when its truncation is).
///
/// # Errors
/// `Io` on failure.
pub(crate) fn remove(fs: &dyn FileSystem, dir: &Path) -> Result<()> {
    let (path, _) = paths(dir);
    fs.remove_file(&path)?;
    fs.sync_dir(dir)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchEncoder;
    use crate::options::Compression;
    use quorumlog_checkpoint::Epoch;

    fn split() -> Intent {
        let mut batch = Vec::new();
        BatchEncoder {
            compression: Compression::None,
            threshold_bytes: 0,
            max_bytes: 1 << 20,
            control: false,
        }
        .encode(&mut batch, Offset(5), Epoch(2), &[b"kept"])
        .unwrap();
        Intent::Cut {
            segment: Offset(0),
            position: 32,
            bytes: batch,
            offset: Offset(6),
        }
    }

    fn zero() -> Intent {
        Intent::Zero {
            segment: Offset(9),
            position: 8192,
            bytes: vec![7; 100],
            until: 9000,
        }
    }

    #[test]
    fn round_trip() {
        for i in [
            split(),
            Intent::Full {
                start: Offset(77),
                purged_epoch: Some(Epoch(5)),
            },
            zero(),
        ] {
            assert_eq!(Intent::decode(&i.encode()).unwrap(), i);
        }
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        for i in [
            split(),
            Intent::Full {
                start: Offset(77),
                purged_epoch: Some(Epoch(5)),
            },
            zero(),
        ] {
            let bytes = i.encode();
            for bit in 0..bytes.len() * 8 {
                let mut bad = bytes.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                assert!(Intent::decode(&bad).is_err(), "bit {bit}");
            }
        }
    }
}
