//! `log/truncation.intent`: the redo record of a truncation that cannot be
//! done in idempotent steps.
//!
//! Two truncations need it: a suffix truncation that cuts a batch in two
//! (the kept records are rewritten as a new, shorter batch in place of the
//! old one, and a crash in between must not lose them), and
//! `truncate_fully_and_start_at` (old segments must never outlive the new
//! start). The intent is written atomically (temp, sync, rename, directory
//! sync) before the truncation touches anything; recovery redoes a truncation
//! whose intent it finds, then removes the intent.
//!
//! ```text
//!  0       4         6      7          8          16          24          28       32
//!  +-------+---------+------+----------+----------+-----------+-----------+--------+---------
//!  | magic | version | kind | reserved | a        | b         | batch_len | crc32c | batch…
//!  |"QLTI" | u16     | u8   | u8 = 0   | u64      | u64       | u32       | u32    |
//!  +-------+---------+------+----------+----------+-----------+-----------+--------+---------
//!  kind 1 (split):  a = segment base, b = byte position of the cut batch,
//!                   batch = the replacement batch (kept records).
//!  kind 2 (full):   a = new log start offset, b = 0, batch_len = 0.
//!  crc32c covers bytes [0, 28) and the batch.
//! ```

use std::io;
use std::path::{Path, PathBuf};

use quorumlog_checkpoint::Offset;
use quorumlog_io::{FileSystem, OpenMode};

use crate::batch::{verify_batch, MAX_BATCH_BYTES};
use crate::error::{CorruptionKind, Result};

/// The intent file's name in the log directory.
pub const INTENT_FILE: &str = "truncation.intent";
const MAGIC: [u8; 4] = *b"QLTI";
const VERSION: u16 = 1;
const HEADER_BYTES: usize = 32;

/// A truncation to redo after a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// Cut segment `segment` at `position` and write `batch` there.
    Split {
        /// The segment's base offset.
        segment: Offset,
        /// Where the cut batch starts.
        position: u64,
        /// The replacement batch (the records kept).
        batch: Vec<u8>,
    },
    /// Remove every segment and restart the log at `start`.
    Full {
        /// The new log start offset.
        start: Offset,
    },
}

impl Intent {
    /// Encodes the intent file.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, a, b, batch): (u8, u64, u64, &[u8]) = match self {
            Intent::Split {
                segment,
                position,
                batch,
            } => (1, segment.0, *position, batch),
            Intent::Full { start } => (2, start.0, 0, &[]),
        };
        let mut out = Vec::with_capacity(HEADER_BYTES + batch.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.push(kind);
        out.push(0);
        out.extend_from_slice(&a.to_le_bytes());
        out.extend_from_slice(&b.to_le_bytes());
        // Lossless: batches are below MAX_BATCH_BYTES.
        out.extend_from_slice(&u32::try_from(batch.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(batch);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&out[..28]), &out[HEADER_BYTES..]);
        out[28..32].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and verifies an intent file.
    ///
    /// # Errors
    /// The [`CorruptionKind`] found.
    pub fn decode(bytes: &[u8]) -> Result<Intent, CorruptionKind> {
        if bytes.len() < HEADER_BYTES {
            return Err(CorruptionKind::Truncated);
        }
        if bytes[..4] != MAGIC {
            return Err(CorruptionKind::BadMagic);
        }
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&bytes[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let len = u32_at(24) as usize;
        if bytes.len() != HEADER_BYTES + len || len as u64 > MAX_BATCH_BYTES {
            return Err(CorruptionKind::Truncated);
        }
        let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[..28]), &bytes[HEADER_BYTES..]);
        if crc != u32_at(28) {
            return Err(CorruptionKind::ChecksumMismatch {
                expected: u32_at(28),
                actual: crc,
            });
        }
        if u16::from_le_bytes([bytes[4], bytes[5]]) != VERSION {
            return Err(CorruptionKind::UnsupportedVersion);
        }
        match bytes[6] {
            1 => {
                let batch = bytes[HEADER_BYTES..].to_vec();
                verify_batch(&batch)?;
                Ok(Intent::Split {
                    segment: Offset(u64_at(8)),
                    position: u64_at(16),
                    batch,
                })
            }
            2 if len == 0 => Ok(Intent::Full {
                start: Offset(u64_at(8)),
            }),
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
pub fn write(fs: &dyn FileSystem, dir: &Path, intent: &Intent) -> Result<()> {
    let (path, tmp) = paths(dir);
    let f = fs.open(&tmp, OpenMode::CreateOrTruncate)?;
    f.write_all_at(&intent.encode(), 0)?;
    f.sync_data()?;
    drop(f);
    fs.rename(&tmp, &path)?;
    fs.sync_dir(dir)?;
    Ok(())
}

/// Reads the intent in `dir`, if any.
///
/// # Errors
/// `Io`; the inner `Err` if the file exists but fails verification.
pub fn read(fs: &dyn FileSystem, dir: &Path) -> Result<Option<Result<Intent, CorruptionKind>>> {
    let (path, _) = paths(dir);
    let f = match fs.open(&path, OpenMode::Read) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if f.len()? > MAX_BATCH_BYTES + HEADER_BYTES as u64 {
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
pub fn remove(fs: &dyn FileSystem, dir: &Path) -> Result<()> {
    let (path, _) = paths(dir);
    fs.remove_file(&path)?;
    fs.sync_dir(dir)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::encode_into;
    use crate::options::Compression;
    use quorumlog_checkpoint::Epoch;

    fn split() -> Intent {
        let mut batch = Vec::new();
        encode_into(
            &mut batch,
            Offset(5),
            Epoch(2),
            &[b"kept"],
            Compression::None,
            0,
            1 << 20,
        )
        .unwrap();
        Intent::Split {
            segment: Offset(0),
            position: 32,
            batch,
        }
    }

    #[test]
    fn round_trip() {
        for i in [split(), Intent::Full { start: Offset(77) }] {
            assert_eq!(Intent::decode(&i.encode()).unwrap(), i);
        }
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        for i in [split(), Intent::Full { start: Offset(77) }] {
            let bytes = i.encode();
            for bit in 0..bytes.len() * 8 {
                let mut bad = bytes.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                assert!(Intent::decode(&bad).is_err(), "bit {bit}");
            }
        }
    }
}
