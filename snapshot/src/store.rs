//! The snapshot store: the `snapshots/` directory, what is published, what
//! is being installed, retention, and startup hygiene.
//!
//! Files:
//! - `<end:20>-<epoch:20>.snapshot`: published (footer valid, synced,
//!   renamed, directory synced);
//! - `<end:20>-<epoch:20>.part`: a local writer's file before `freeze`;
//! - `<end:20>-<epoch:20>-<total:20>.install`: a download in progress.
//!
//! Startup decision table:
//!
//! | found                                              | outcome |
//! |----------------------------------------------------|---------|
//! | `.snapshot` with a valid footer and length          | listed |
//! | `.snapshot` without (cut, damaged)                  | not listed, reported, left alone |
//! | `.part`                                             | removed (its writer is gone; the state machine writes a new one) |
//! | `.install` newer than the latest published snapshot | kept: the install resumes from its last verified chunk |
//! | `.install` not newer                                | removed (obsolete) |
//! | anything else                                       | reported, left alone |
//!
//! Invariants: a snapshot is listed only once durable (file synced, renamed,
//! directory synced); deletions are durable before `retain` returns; the
//! latest snapshot is never deleted by retention.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{Offset, SharedFs};
use quorumlog_io::OpenMode;

use crate::dir::SnapshotDir;
use crate::error::{Error, Result};
use crate::format::{Footer, SnapshotId, FOOTER_BYTES};
use crate::id::SnapshotInfo;
use crate::install::Install;
use crate::reader::SnapshotReader;
use crate::writer::{SnapshotWriter, WriterOptions};

/// Which snapshots retention keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Keep at most this many (the newest). At least 1 is always kept.
    /// Default: 2.
    pub keep_latest: usize,
    /// Also delete the oldest while the total exceeds this. Default: none.
    pub max_total_bytes: Option<u64>,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            keep_latest: 2,
            max_total_bytes: None,
        }
    }
}

/// What opening the store found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreReport {
    /// `.part` files removed.
    pub partials_removed: Vec<String>,
    /// Obsolete `.install` files removed.
    pub obsolete_installs_removed: Vec<String>,
    /// `.snapshot` files not listed because they fail the footer check.
    pub invalid_snapshots: Vec<String>,
    /// Files that are not the store's.
    pub unknown_files: Vec<String>,
}

/// The snapshots of one data directory.
#[derive(Debug, Clone)]
pub struct SnapshotStore {
    pub(crate) inner: Arc<SnapshotDir>,
    report: StoreReport,
}

fn parse_install(name: &str) -> Option<(SnapshotId, u64)> {
    let stem = name.strip_suffix(".install")?;
    let (id, total) = stem.rsplit_once('-')?;
    if total.len() != 20 {
        return None;
    }
    Some((SnapshotId::parse_stem(id)?, total.parse().ok()?))
}

/// Whether the file at `path` ends with a valid footer matching its length.
fn footer_ok(fs: &SharedFs, path: &Path) -> Result<Option<u64>> {
    let f = fs.open(path, OpenMode::Read)?;
    let len = f.len()?;
    if len < FOOTER_BYTES as u64 {
        return Ok(None);
    }
    let mut buf = [0u8; FOOTER_BYTES];
    f.read_exact_at(&mut buf, len - FOOTER_BYTES as u64)?;
    Ok(match Footer::decode(&buf) {
        Ok(footer) if footer.total_len == len => Some(len),
        _ => None,
    })
}

impl SnapshotStore {
    /// Opens the store in `dir` (created if missing), applying the startup
    /// decision table.
    ///
    /// # Errors
    /// `Io` on failure.
    pub fn open(fs: SharedFs, dir: &Path) -> Result<SnapshotStore> {
        if !fs.exists(dir)? {
            fs.create_dir_all(dir)?;
            fs.sync_dir(quorumlog_io::parent_dir(dir))?;
        }
        let mut report = StoreReport::default();
        let mut published = BTreeMap::new();
        let mut installs = Vec::new();
        for e in fs.list(dir)? {
            let path = dir.join(&e.name);
            if let Some(stem) = e.name.strip_suffix(".snapshot") {
                match SnapshotId::parse_stem(stem) {
                    Some(id) => match footer_ok(&fs, &path)? {
                        Some(len) => {
                            published.insert(id, len);
                        }
                        None => report.invalid_snapshots.push(e.name.clone()),
                    },
                    None => report.unknown_files.push(e.name.clone()),
                }
            } else if e
                .name
                .strip_suffix(".part")
                .and_then(SnapshotId::parse_stem)
                .is_some()
            {
                fs.remove_file(&path)?;
                report.partials_removed.push(e.name.clone());
            } else if let Some((id, _)) = parse_install(&e.name) {
                installs.push((id, e.name.clone()));
            } else {
                report.unknown_files.push(e.name.clone());
            }
        }
        let latest = published.keys().next_back().copied();
        for (id, name) in installs {
            if latest.is_some_and(|l| id <= l) {
                fs.remove_file(&dir.join(&name))?;
                report.obsolete_installs_removed.push(name);
            }
        }
        if !report.partials_removed.is_empty() || !report.obsolete_installs_removed.is_empty() {
            fs.sync_dir(dir)?;
        }
        Ok(SnapshotStore {
            inner: Arc::new(SnapshotDir::new(fs, dir.to_path_buf(), published)),
            report,
        })
    }

    /// What open found.
    pub fn report(&self) -> &StoreReport {
        &self.report
    }

    /// Every published snapshot, oldest first.
    pub fn list(&self) -> Vec<SnapshotInfo> {
        self.inner
            .published()
            .iter()
            .map(|(&id, &size_bytes)| SnapshotInfo { id, size_bytes })
            .collect()
    }

    /// The newest published snapshot.
    pub fn latest(&self) -> Option<SnapshotInfo> {
        self.list().pop()
    }

    /// The oldest published snapshot.
    pub fn earliest(&self) -> Option<SnapshotInfo> {
        self.list().into_iter().next()
    }

    /// The published snapshot `id`.
    pub fn get(&self, id: SnapshotId) -> Option<SnapshotInfo> {
        self.inner
            .published()
            .get(&id)
            .map(|&size_bytes| SnapshotInfo { id, size_bytes })
    }

    /// The latest durable snapshot covering every record below `offset`
    /// (its end offset is at least `offset`): what makes deleting the log
    /// below `offset` safe (docs/design.md invariant 7).
    pub fn latest_covering(&self, offset: Offset) -> Option<SnapshotInfo> {
        self.latest().filter(|s| s.id.end_offset >= offset)
    }

    /// Starts writing snapshot `id` with `metadata` (such as the voter set).
    ///
    /// # Errors
    /// `AlreadyExists` if it is published; `Io`.
    pub fn create(
        &self,
        id: SnapshotId,
        metadata: &[u8],
        options: WriterOptions,
    ) -> Result<SnapshotWriter> {
        if self.get(id).is_some() {
            return Err(Error::AlreadyExists(id));
        }
        SnapshotWriter::new(Arc::clone(&self.inner), id, metadata, options)
    }

    /// Opens published snapshot `id` for reading, verifying it whole first.
    ///
    /// # Errors
    /// `NotFound`; `Corruption` (no byte of it is returned); `Io`.
    pub fn reader(&self, id: SnapshotId) -> Result<SnapshotReader> {
        if self.get(id).is_none() {
            return Err(Error::NotFound(id));
        }
        SnapshotReader::open(self.inner.fs().as_ref(), &self.inner.path(id))
    }

    /// Raw bytes `[position, position + max_bytes)` of published snapshot
    /// `id`, for transfer to a follower (the leader side of `FetchSnapshot`).
    ///
    /// # Errors
    /// `NotFound`; `Invalid` for a position past the end; `Io`.
    pub fn read_chunk(&self, id: SnapshotId, position: u64, max_bytes: usize) -> Result<Vec<u8>> {
        let size = self.get(id).ok_or(Error::NotFound(id))?.size_bytes;
        if position > size {
            return Err(Error::InvalidArgument {
                what: "position past the end of the snapshot",
            });
        }
        let len = usize::try_from((size - position).min(max_bytes as u64)).unwrap_or(0);
        let f = self.inner.fs().open(&self.inner.path(id), OpenMode::Read)?;
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, position)?;
        Ok(buf)
    }

    /// Starts (or resumes, after a restart) the install of snapshot `id`,
    /// `total_size` bytes long, received from the leader in chunks.
    ///
    /// # Errors
    /// `NotNewer` if `id` is not newer than the latest published snapshot;
    /// `Io`.
    pub fn begin_install(&self, id: SnapshotId, total_size: u64) -> Result<Install> {
        if let Some(latest) = self.latest() {
            if id <= latest.id {
                return Err(Error::NotNewer {
                    offered: id,
                    latest: latest.id,
                });
            }
        }
        Install::begin(Arc::clone(&self.inner), id, total_size)
    }

    /// Discards the unfinished install of `id` (every partial download of
    /// it), durably; nothing happens if there is none.
    ///
    /// # Errors
    /// `Io`.
    pub fn discard_install(&self, id: SnapshotId) -> Result<()> {
        let mut removed = false;
        for (found, total) in self.installs()? {
            if found == id {
                self.inner
                    .fs()
                    .remove_file(&self.inner.install_path(id, total))?;
                removed = true;
            }
        }
        if removed {
            self.inner.fs().sync_dir(self.inner.dir())?;
        }
        Ok(())
    }

    /// Installs in progress: (id, total size).
    ///
    /// # Errors
    /// `Io`.
    pub fn installs(&self) -> Result<Vec<(SnapshotId, u64)>> {
        Ok(self
            .inner
            .fs()
            .list(self.inner.dir())?
            .iter()
            .filter_map(|e| parse_install(&e.name))
            .collect())
    }

    /// Deletes snapshots beyond `retention`, oldest first, always keeping
    /// the latest; durable when it returns. Returns the ids deleted.
    ///
    /// # Errors
    /// `Io` (some deletions may have happened; a crash leaves the old or the
    /// new set of files, never a partial snapshot).
    pub fn retain(&self, retention: Retention) -> Result<Vec<SnapshotId>> {
        let list = self.list();
        let keep = retention.keep_latest.max(1);
        let mut total: u64 = list.iter().map(|s| s.size_bytes).sum();
        let mut doomed = Vec::new();
        for (i, s) in list.iter().enumerate() {
            let remaining = list.len() - i;
            if remaining <= 1 {
                break;
            }
            let over_count = remaining > keep;
            let over_bytes = retention.max_total_bytes.is_some_and(|m| total > m);
            if !(over_count || over_bytes) {
                break;
            }
            doomed.push(s.id);
            total -= s.size_bytes;
        }
        for id in &doomed {
            match self.inner.fs().remove_file(&self.inner.path(*id)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
            self.inner.published().remove(id);
        }
        if !doomed.is_empty() {
            self.inner.fs().sync_dir(self.inner.dir())?;
        }
        Ok(doomed)
    }
}
