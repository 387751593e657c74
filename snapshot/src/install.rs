//! Installing a snapshot received from the leader in chunks, resumable
//! after a restart.
//!
//! Each chunk is written at the next expected position and synced, so the
//! received prefix is durable. After a restart, `begin_install` with the
//! same id and size reopens the partial file and resumes after its last
//! complete, verified unit (the header, then each chunk), cutting anything
//! torn after it. `finish` verifies the whole file before publishing.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use quorumlog_io::{File, OpenMode};

use crate::dir::SnapshotDir;
use crate::error::{Error, Result};
use crate::format::{Footer, Header, SnapshotId, CHUNK_HEADER_BYTES, FOOTER_BYTES, HEADER_BYTES};
use crate::id::SnapshotInfo;
use crate::reader::{read_chunk_at, verify};

/// An install in progress.
#[derive(Debug)]
pub struct Install {
    inner: Arc<SnapshotDir>,
    id: SnapshotId,
    total: u64,
    path: PathBuf,
    file: Box<dyn File>,
    pos: u64,
    /// Set by a failed write: every later call fails.
    poisoned: Option<quorumlog_io::Failure>,
}

/// The end of the longest prefix of `file` made of a valid header and valid
/// chunks (0 if even the header is not complete).
fn verified_prefix(file: &dyn File, path: &std::path::Path, len: u64) -> Result<u64> {
    if len < HEADER_BYTES as u64 {
        return Ok(0);
    }
    let mut fixed = [0u8; HEADER_BYTES];
    file.read_exact_at(&mut fixed, 0)?;
    let Ok(meta_len) = Header::metadata_len(&fixed) else {
        return Ok(0);
    };
    let data_start = (HEADER_BYTES + meta_len) as u64;
    if data_start > len {
        return Ok(0);
    }
    let mut hbuf = vec![0u8; HEADER_BYTES + meta_len];
    file.read_exact_at(&mut hbuf, 0)?;
    if Header::decode(&hbuf).is_err() {
        return Ok(0);
    }
    let mut pos = data_start;
    let mut buf = Vec::new();
    // A footer may follow the last chunk: the whole file is then complete,
    // which `finish` checks; chunks stop where one fails to verify.
    while let Ok((ch, _)) = read_chunk_at(file, path, pos, len, &mut buf) {
        pos += CHUNK_HEADER_BYTES as u64 + u64::from(ch.stored_len);
    }
    if len - pos == FOOTER_BYTES as u64 {
        // Complete only if the footer itself arrived (the file is
        // preallocated: unwritten bytes read as zeros).
        let mut f = [0u8; FOOTER_BYTES];
        file.read_exact_at(&mut f, pos)?;
        if Footer::decode(&f).is_ok_and(|footer| footer.total_len == len) {
            return Ok(len);
        }
    }
    Ok(pos)
}

impl Install {
    pub(crate) fn begin(inner: Arc<SnapshotDir>, id: SnapshotId, total: u64) -> Result<Install> {
        if total < (HEADER_BYTES + FOOTER_BYTES) as u64 {
            return Err(Error::InvalidArgument {
                what: "total size below a header and a footer",
            });
        }
        // Other partial downloads of this id (another size) are abandoned.
        for e in inner.fs().list(inner.dir())? {
            if e.name.starts_with(&id.stem()) && e.name.ends_with(".install") {
                let path = inner.dir().join(&e.name);
                if path != inner.install_path(id, total) {
                    inner.fs().remove_file(&path)?;
                }
            }
        }
        let path = inner.install_path(id, total);
        let (file, pos) = match inner.fs().open(&path, OpenMode::ReadWrite) {
            Ok(file) => {
                let len = file.len()?;
                let pos = verified_prefix(file.as_ref(), &path, len)?;
                if pos < len {
                    file.set_len(pos)?;
                    file.sync_data()?;
                }
                (file, pos)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let file = inner.fs().open(&path, OpenMode::CreateNew)?;
                // Blocks reserved up front: chunks then overwrite allocated
                // space (several times faster than allocating as they come).
                file.allocate(total)?;
                inner.fs().sync_dir(inner.dir())?;
                (file, 0)
            }
            Err(e) => return Err(e.into()),
        };
        Ok(Install {
            inner,
            id,
            total,
            path,
            file,
            pos,
            poisoned: None,
        })
    }

    /// The snapshot being installed.
    pub fn id(&self) -> SnapshotId {
        self.id
    }

    /// The next byte expected (where a resumed download continues).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The announced total size.
    pub fn total_size(&self) -> u64 {
        self.total
    }

    /// Writes `bytes` at `position`, which must be the next expected one;
    /// durable when it returns.
    ///
    /// # Errors
    /// `WrongPosition` naming the expected position; `Oversize` past the
    /// announced total; `Io`, after which the install is poisoned (every
    /// later call returns `Poisoned`; drop it and resume with a new one).
    pub fn write_chunk(&mut self, position: u64, bytes: &[u8]) -> Result<()> {
        Error::guard(&mut self.poisoned, || Ok(()))?;
        if position != self.pos {
            return Err(Error::WrongPosition {
                position,
                expected: self.pos,
            });
        }
        let len = bytes.len() as u64;
        if position + len > self.total {
            return Err(Error::Oversize {
                position,
                len,
                total: self.total,
            });
        }
        let file = &self.file;
        Error::guard(&mut self.poisoned, || {
            Ok(file.write_all_and_sync_at(bytes, position)?)
        })?;
        self.pos += len;
        Ok(())
    }

    /// Verifies the whole file as [`Install::finish`] does, without
    /// publishing it or removing it: a receiver checks a download before
    /// it hands it on, and publishes it later with `finish` (which
    /// verifies again: the file may have changed on disk meanwhile).
    ///
    /// # Errors
    /// `Incomplete` before all bytes arrived; `Corruption` if it does not
    /// verify (the file stays: `finish` then removes it); `Io`.
    pub fn verify(&self) -> Result<()> {
        if let Some(p) = self.poisoned {
            return Err(Error::Poisoned {
                op: p.op,
                kind: p.kind,
            });
        }
        if self.pos != self.total {
            return Err(Error::Incomplete {
                received: self.pos,
                total: self.total,
            });
        }
        let v = verify(self.file.as_ref(), &self.path, self.total)?;
        if v.header.id != self.id {
            return Err(Error::Corruption {
                at: crate::error::Location::file(&self.path),
                kind: crate::error::CorruptionKind::Malformed("another snapshot's id"),
            });
        }
        Ok(())
    }

    /// Verifies the whole file (footer, header, every chunk, the whole-file
    /// checksum, and that it is snapshot `id`), then publishes it; counted
    /// in `quorumlog_snapshot_bytes_installed_total`.
    ///
    /// # Errors
    /// `Incomplete` before all bytes arrived; `Corruption` if it does not
    /// verify (the partial file is removed: the install must start over);
    /// `Io`.
    pub fn finish(self) -> Result<SnapshotInfo> {
        let info = self.finish_inner()?;
        metrics::counter!("quorumlog_snapshot_bytes_installed_total").increment(info.size_bytes);
        tracing::info!(target: "quorumlog::snapshot", id = %info.id, bytes = info.size_bytes, "snapshot installed");
        Ok(info)
    }

    /// Verifies the whole file (footer, header, every chunk, the whole-file
    /// checksum, and that it is snapshot `id`), then publishes it.
    ///
    /// # Errors
    /// `Incomplete` before all bytes arrived; `Corruption` if it does not
    /// verify (the partial file is removed: the install must start over);
    /// `Io`.
    fn finish_inner(mut self) -> Result<SnapshotInfo> {
        Error::guard(&mut self.poisoned, || Ok(()))?;
        if self.pos != self.total {
            return Err(Error::Incomplete {
                received: self.pos,
                total: self.total,
            });
        }
        let verified = verify(self.file.as_ref(), &self.path, self.total);
        let verified = match verified {
            Ok(v) if v.header.id == self.id => v,
            Ok(_) => {
                self.abandon()?;
                return Err(Error::Corruption {
                    at: crate::error::Location::file(&self.path),
                    kind: crate::error::CorruptionKind::Malformed("another snapshot's id"),
                });
            }
            Err(e) => {
                self.abandon()?;
                return Err(e);
            }
        };
        debug_assert_eq!(verified.footer.total_len, self.total);
        self.file.sync_data()?;
        self.inner.publish(&self.path, self.id, self.total)
    }

    fn abandon(&self) -> Result<()> {
        self.inner.fs().remove_file(&self.path)?;
        self.inner.fs().sync_dir(self.inner.dir())?;
        Ok(())
    }
}
