//! The codec trait every small file implements, and its atomic replace.
//!
//! Atomic replace: write `<name>.tmp`, `fdatasync` it, rename it over
//! `<name>`, `fsync` the directory. A crash at any point leaves the old or the
//! new file under `<name>`, never a mix; a stale `.tmp` is removed at open.

use std::io;
use std::path::{Path, PathBuf};

use quorumlog_io::{parent_dir, FileSystem, OpenMode};

use crate::error::{CorruptionKind, Error, Location, Result};
use crate::format::{self, MAX_FILE_BYTES};

/// The suffix of a file being replaced.
pub(crate) const TEMP_SUFFIX: &str = ".tmp";

/// A small file of the data directory: its magic, its place, its body codec.
pub trait SmallFile: Sized {
    /// The file's magic.
    const MAGIC: [u8; 4];
    /// The file's path relative to the data directory.
    const NAME: &'static str;

    /// Encodes the body (little-endian, explicit widths, canonical).
    fn encode_body(&self) -> Vec<u8>;

    /// Decodes a body that passed the envelope's checks.
    ///
    /// # Errors
    /// `Malformed` if the body breaks a rule of the format.
    fn decode_body(body: &[u8]) -> Result<Self, CorruptionKind>;

    /// The whole file: envelope and body.
    fn encode(&self) -> Vec<u8> {
        format::encode(Self::MAGIC, &self.encode_body())
    }

    /// Decodes a whole file.
    ///
    /// # Errors
    /// The first [`CorruptionKind`] found.
    fn decode(bytes: &[u8]) -> Result<Self, CorruptionKind> {
        Self::decode_body(format::decode(Self::MAGIC, bytes)?)
    }
}

/// The path of `F` in data directory `dir`.
pub fn path_of<F: SmallFile>(dir: &Path) -> PathBuf {
    dir.join(F::NAME)
}

fn temp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(TEMP_SUFFIX);
    PathBuf::from(s)
}

/// Atomically replaces `F` in `dir` with `value` ([`replace_file`]).
///
/// # Errors
/// As [`replace_file`].
pub(crate) fn write<F: SmallFile>(fs: &dyn FileSystem, dir: &Path, value: &F) -> Result<()> {
    replace_file(fs, &path_of::<F>(dir), &value.encode())
}

/// Atomically replaces the file at `path` with `bytes`: a temporary file
/// written and synced, renamed over it, the directory synced. The one
/// replace of every small file and of a node's checkpoint.
///
/// # Errors
/// `NoSpace` on a full disk before the rename took effect (the old file in
/// place, the temporary file removed: a refusal, nothing to poison). `Io`
/// if any step fails. The old file is then still in place unless the
/// rename happened and only the directory sync failed, in which case either
/// may be found after a crash: callers must treat the outcome as unknown.
pub fn replace_file(fs: &dyn FileSystem, path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_path(path);
    let done = fs
        .open(&tmp, OpenMode::CreateOrTruncate)
        .and_then(|file| file.write_all_and_sync_at(bytes, 0))
        .and_then(|()| fs.rename(&tmp, path));
    if let Err(e) = done {
        // Before the rename took effect (a failed rename did not happen)
        // the old file is untouched.
        if e.kind() == io::ErrorKind::StorageFull {
            let _ = fs.remove_file(&tmp);
            return Err(Error::NoSpace {
                path: path.to_path_buf(),
                bytes: bytes.len() as u64,
            });
        }
        return Err(e.into());
    }
    fs.sync_dir(parent_dir(path))?;
    Ok(())
}

/// Reads and verifies `F` from `dir`; `Ok(None)` if the file does not exist.
///
/// # Errors
/// `Corruption` naming the file if it fails verification, `Io` if reading
/// fails.
pub(crate) fn read<F: SmallFile>(fs: &dyn FileSystem, dir: &Path) -> Result<Option<F>> {
    let path = path_of::<F>(dir);
    let file = match fs.open(&path, OpenMode::Read) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let len = file.len()?;
    if len > MAX_FILE_BYTES as u64 {
        // Never allocate what a damaged length claims.
        return Err(Error::Corruption {
            at: Location::file(path),
            kind: CorruptionKind::Malformed("file larger than any valid small file"),
        });
    }
    let bytes = file.read_to_end()?;
    F::decode(&bytes)
        .map(Some)
        .map_err(|kind| Error::Corruption {
            at: Location::file(path),
            kind,
        })
}

/// Removes every `*.tmp` left in `dir` by an interrupted replace, and makes
/// the removal durable. Returns the names removed.
///
/// # Errors
/// `Io` if listing, removing or syncing fails.
pub(crate) fn remove_stale_temps(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for entry in fs.list(dir)? {
        if !entry.is_dir && entry.name.ends_with(TEMP_SUFFIX) {
            fs.remove_file(&dir.join(&entry.name))?;
            removed.push(entry.name);
        }
    }
    if !removed.is_empty() {
        fs.sync_dir(dir)?;
    }
    Ok(removed)
}
