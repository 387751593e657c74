//! `quorumlog-testkit`: the test machinery of quorumlog, kept out of the
//! crates embedders depend on (not published).
//!
//! - [`harness`]: the model-checked crash tester that drives a whole data
//!   directory (log through `Log` or `DurableLog`, quorum state,
//!   checkpoints, snapshots) on the simulated disk;
//! - [`payload`], [`small_log_options`], [`CRASH_PLANS`]: what the scenario
//!   tests share;
//! - [`read_records`]: every record of a log in an offset range, with the
//!   batch skipping in one place;
//! - [`dir_image`]: a directory's files and bytes, to check that a refused
//!   open changed nothing;
//! - [`fresh_seed`]: a seed that differs from run to run;
//! - [`AppendDurable`]: a group's append followed by its wait.
#![forbid(unsafe_code)]

mod append;
pub mod engine_model;
pub mod harness;
pub mod hooked;
pub mod kraft_crash;
pub mod read_model;
pub mod shape;
mod wing;

pub use append::AppendDurable;
pub use wing::WingTest;

/// The README's embedding example, compiled and run by `cargo test`.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExample;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::{CrashPlan, FileSystem, OpenMode, Tear};
use quorumlog_log::{
    walk_records, DurableLog, Log, LogOptions, ReadBatches, ReadRange, SegmentPreparation,
    WalkBatches,
};

/// The deterministic payload of record `offset` in generation `gen`.
pub fn payload(offset: u64, gen: u64, len: usize) -> Vec<u8> {
    let mut x =
        offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ gen.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Small segments so that tests roll often (8 KiB: a header page and one
/// page of data), deterministic I/O order (inline segment preparation).
pub fn small_log_options() -> LogOptions {
    LogOptions {
        segment_size_bytes: 8192,
        max_batch_bytes: 2048,
        index_interval_bytes: 256,
        prepare_next_segment_percent: 50,
        segment_preparation: SegmentPreparation::Inline,
        ..LogOptions::default()
    }
}

/// What a crash keeps, every variant the exhaustive tests try.
pub const CRASH_PLANS: [CrashPlan; 5] = [
    CrashPlan::LoseUnsynced,
    CrashPlan::KeepAll,
    CrashPlan::Torn(Tear::Zeros),
    CrashPlan::Torn(Tear::Garbage),
    CrashPlan::Torn(Tear::Old),
];

/// A log that can be read: `Log` and `DurableLog`.
pub trait ReadLog {
    /// Whole batches from the one holding `from`.
    ///
    /// # Errors
    /// The log's.
    fn read_batches(&self, from: Offset, max_bytes: u64) -> quorumlog_log::Result<ReadBatches>;
    /// The next offset to be written.
    fn end(&self) -> Offset;
}

impl ReadLog for Log {
    fn read_batches(&self, from: Offset, max_bytes: u64) -> quorumlog_log::Result<ReadBatches> {
        self.read(from, max_bytes)
    }
    fn end(&self) -> Offset {
        self.log_end_offset()
    }
}

impl ReadLog for DurableLog {
    fn read_batches(&self, from: Offset, max_bytes: u64) -> quorumlog_log::Result<ReadBatches> {
        self.read(from, max_bytes)
    }
    fn end(&self) -> Offset {
        self.log_end_offset()
    }
}

/// Why [`read_records`] stopped.
#[derive(Debug)]
pub enum ReadError {
    /// A read failed at this offset.
    Read(Offset, quorumlog_log::Error),
    /// A verified batch's records did not decode.
    Decode(Offset, quorumlog_log::CorruptionKind),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Read(at, e) => write!(f, "read at {at}: {e}"),
            ReadError::Decode(at, k) => write!(f, "records of the batch at {at}: {k}"),
        }
    }
}

/// Every record in `[from, log end)` as (offset, epoch, bytes), skipping
/// the records of the first batch that lie before `from`.
///
/// # Errors
/// The first read or decode error, with the offset it happened at.
pub fn read_records<L: ReadLog + ReadRange>(
    log: &L,
    from: Offset,
) -> Result<Vec<(u64, Epoch, Vec<u8>)>, ReadError> {
    // The log crate's one record walker.
    let walked =
        walk_records(log, from, log.end(), u64::MAX, WalkBatches::All).map_err(|e| match e {
            quorumlog_log::Error::Undecodable { offset, kind, .. } => {
                ReadError::Decode(offset, kind)
            }
            e => ReadError::Read(from, e),
        })?;
    Ok(walked
        .records
        .into_iter()
        .map(|r| (r.offset.0, r.epoch, r.bytes))
        .collect())
}

/// Every file under `dir` (recursively) with its bytes, or the error of a
/// disk that cannot be read (a simulated machine that is down).
///
/// # Errors
/// The first I/O error.
pub fn dir_image(fs: &dyn FileSystem, dir: &Path) -> io::Result<BTreeMap<PathBuf, Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs.list(&d)? {
            let path = d.join(&e.name);
            if e.is_dir {
                todo.push(path);
            } else {
                let bytes = fs.open(&path, OpenMode::Read)?.read_to_end()?;
                out.insert(path, bytes);
            }
        }
    }
    Ok(out)
}

/// A seed that differs from run to run (time and process id), for random
/// tests that print it with their replay command.
pub fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    #[expect(clippy::cast_possible_truncation, reason = "only the low bits matter")]
    let low = t as u64;
    low ^ u64::from(std::process::id()).rotate_left(40)
}

/// Copies every file of the simulated disk's `dir` into `out` on the real
/// file system, as durable (the lock file left out): how the golden
/// directories are exported.
///
/// # Panics
/// On an I/O error (test helper).
#[allow(clippy::unwrap_used, reason = "a test helper: a failure is the test's")]
pub fn export_durable(disk: &quorumlog_io::SimFs, dir: &Path, out: &Path) {
    std::fs::create_dir_all(out).unwrap();
    for entry in disk.list(dir).unwrap() {
        let from = dir.join(&entry.name);
        let to = out.join(&entry.name);
        if entry.is_dir {
            export_durable(disk, &from, &to);
        } else if entry.name != "lock" {
            std::fs::write(&to, disk.durable_contents(&from).unwrap_or_default()).unwrap();
        }
    }
}

/// Copies the real directory `from` into `to`, recursively.
///
/// # Panics
/// On an I/O error (test helper).
#[allow(clippy::unwrap_used, reason = "a test helper: a failure is the test's")]
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// What a refused call may not change of a group: its extent (start,
/// end, high watermark, last purged entry, latest snapshot), its metadata,
/// its election state and every entry it serves.
#[derive(Debug, PartialEq)]
pub struct GroupImage {
    start: Offset,
    end: Offset,
    high_watermark: Option<Offset>,
    last_purged: Option<(Offset, Epoch)>,
    latest_snapshot: Option<quorumlog_snapshot::SnapshotId>,
    metadata: Option<Vec<u8>>,
    vote: quorumlog_checkpoint::QuorumState,
    entries: Vec<quorumlog_raft::Entry>,
}

/// The [`GroupImage`] of `g` now.
///
/// # Panics
/// If the group's entries cannot be read.
pub fn group_image(g: &quorumlog_raft::Group) -> GroupImage {
    let x = g.extent();
    let entries = g
        .read_entries(
            x.start,
            x.end,
            u64::MAX,
            quorumlog_raft::Isolation::Uncommitted,
        )
        .unwrap_or_else(|e| panic!("a group's entries do not read: {e}"));
    GroupImage {
        start: x.start,
        end: x.end,
        high_watermark: x.high_watermark,
        last_purged: x.last_purged,
        latest_snapshot: x.latest_snapshot,
        metadata: g.app_metadata(),
        vote: g.quorum_state(),
        entries,
    }
}
