//! Helpers shared by the checkpoint scenario tests.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "helpers shared by the scenario tests; each test binary uses some"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quorumlog_checkpoint::SharedFs;
use quorumlog_io::{FileSystem, OpenMode, RealFs, SimFs};

/// Runs `check` against the real file system (in a temp dir) and the
/// simulated disk.
pub(crate) fn both(check: impl Fn(SharedFs, &Path)) {
    let tmp = tempfile::tempdir().unwrap();
    check(Arc::new(RealFs::new()), &tmp.path().join("data"));
    check(Arc::new(SimFs::new(1)), Path::new("/data"));
}

/// Replaces the whole content of the file at `path`.
pub(crate) fn overwrite(fs: &dyn FileSystem, path: &Path, bytes: &[u8]) {
    let f = fs.open(path, OpenMode::CreateOrTruncate).unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f.sync_data().unwrap();
}

pub(crate) fn read_all(fs: &dyn FileSystem, path: &Path) -> Vec<u8> {
    fs.open(path, OpenMode::Read)
        .unwrap()
        .read_to_end()
        .unwrap()
}

pub(crate) fn join(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}
