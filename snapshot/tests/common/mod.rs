//! Helpers shared by the snapshot scenario tests.
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

use quorumlog_checkpoint::{Epoch, Offset, SharedFs};
use quorumlog_io::{RealFs, SimFs};
use quorumlog_snapshot::{SnapshotId, SnapshotInfo, SnapshotStore, WriterOptions};

pub(crate) const DIR: &str = "/snapshots";

pub(crate) fn id(end: u64, epoch: u64) -> SnapshotId {
    SnapshotId {
        end_offset: Offset(end),
        epoch: Epoch(epoch),
    }
}

/// Deterministic state bytes.
pub(crate) fn state(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Compressible: few distinct values.
            u8::try_from(x % 7).unwrap()
        })
        .collect()
}

pub(crate) fn write(
    store: &SnapshotStore,
    id: SnapshotId,
    data: &[u8],
    options: WriterOptions,
) -> SnapshotInfo {
    let mut w = store.create(id, b"meta", options).unwrap();
    for part in data.chunks(777) {
        w.write(part).unwrap();
    }
    w.freeze().unwrap()
}

pub(crate) fn small_chunks() -> WriterOptions {
    WriterOptions {
        chunk_bytes: 1000,
        zstd_level: None,
    }
}

/// Runs `check` on the real file system and on the simulated disk.
pub(crate) fn both(check: impl Fn(SharedFs, &Path)) {
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().join("snapshots");
    check(Arc::new(RealFs::new()), &dir);
    check(Arc::new(SimFs::new(3)), Path::new(DIR));
}
