//! The snapshot directory: its files' names, the list of published
//! snapshots, and publishing. The only state the writer, the install and the
//! store share.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use quorumlog_checkpoint::SharedFs;

use crate::error::Result;
use crate::id::{SnapshotId, SnapshotInfo};

#[derive(Debug)]
pub(crate) struct SnapshotDir {
    fs: SharedFs,
    dir: PathBuf,
    published: Mutex<BTreeMap<SnapshotId, u64>>,
}

impl SnapshotDir {
    /// A handle on `dir`, with the snapshots already published there.
    pub(crate) fn new(fs: SharedFs, dir: PathBuf, published: BTreeMap<SnapshotId, u64>) -> Self {
        SnapshotDir {
            fs,
            dir,
            published: Mutex::new(published),
        }
    }

    /// The file system.
    pub(crate) fn fs(&self) -> &SharedFs {
        &self.fs
    }

    /// The directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn published(&self) -> MutexGuard<'_, BTreeMap<SnapshotId, u64>> {
        self.published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn path(&self, id: SnapshotId) -> PathBuf {
        self.dir.join(format!("{}.snapshot", id.stem()))
    }

    pub(crate) fn part_path(&self, id: SnapshotId) -> PathBuf {
        self.dir.join(format!("{}.part", id.stem()))
    }

    pub(crate) fn install_path(&self, id: SnapshotId, total: u64) -> PathBuf {
        self.dir.join(format!("{}-{total:020}.install", id.stem()))
    }

    /// Publishes `tmp` as snapshot `id`: rename, directory sync, list.
    pub(crate) fn publish(&self, tmp: &Path, id: SnapshotId, size: u64) -> Result<SnapshotInfo> {
        self.fs.rename(tmp, &self.path(id))?;
        self.fs.sync_dir(&self.dir)?;
        self.published().insert(id, size);
        Ok(SnapshotInfo {
            id,
            size_bytes: size,
        })
    }
}
