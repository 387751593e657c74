//! `quorumlog-log`: the segmented append log.
//!
//! Guarantees (docs/design.md section 4):
//! - **Never returns corrupt data.** Every batch read is verified (CRC32C
//!   over everything that identifies it, and its place in the log); a
//!   mismatch is a typed `Corruption` naming segment, position, offset and
//!   epoch.
//! - **Torn tail vs corruption.** Open verifies what follows the recovery
//!   point and truncates only a torn tail; corruption of durable data, or an
//!   invalid batch followed by valid data, fails open in
//!   [`RecoveryMode::Strict`] (the decision table is in `docs/format.md`).
//! - **Truncations are final.** Once `truncate_to` returns, the removed
//!   records never come back after a crash; a cut batch is rewritten safely.
//! - **Open is O(1) after a clean close**: nothing is scanned.
//! - **A failed write or sync poisons** the log until it is reopened.
//!
//! Appends return before the data is durable; [`Log::flush`] makes it
//! durable. [`DurableLog`] is the type to embed: the log shared by many
//! threads, with group commit (waits, completions, a watermark). `Log` is
//! the single-owner core it wraps.
//!
//! Both are `Send + Sync` (checked at compile time below).
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//! use quorumlog_checkpoint::{format, ClusterId, DataDir, Epoch, NodeId, OpenOptions, SharedFs};
//! use quorumlog_io::SimFs;
//! use quorumlog_log::{Log, LogOptions};
//!
//! let fs: SharedFs = Arc::new(SimFs::new(1));
//! format(&fs, Path::new("/d"), ClusterId(1), NodeId(1)).unwrap();
//! let dd = Arc::new(DataDir::open(fs, Path::new("/d"), &OpenOptions::default()).unwrap());
//! let mut log = Log::open(dd, LogOptions::default()).unwrap();
//! let at = log.append_as_leader(Epoch(1), &[b"hello", b"world"]).unwrap();
//! log.flush().unwrap();
//! let batches = log.read(at.base_offset, 1 << 20).unwrap();
//! let first = batches.iter().next().unwrap();
//! assert_eq!(first.to_vecs().unwrap(), vec![b"hello".to_vec(), b"world".to_vec()]);
//! log.close().unwrap();
//! ```
#![forbid(unsafe_code)]

// The types an embedder shares between threads are Send + Sync.
const _: fn() = || {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<DurableLog>();
    shared::<Log>();
    shared::<quorumlog_checkpoint::DataDir>();
};

mod batch;
mod dir;
mod durable;
mod error;
mod format;
#[cfg(any(test, feature = "__fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod inspect;
mod intent;
mod log;
mod meters;
mod options;
mod recovery;
mod segment;
mod walk;

pub use batch::{BatchRef, Records};
pub use durable::{Completion, DurableLog, EncodedBatch, SyncPolicy};
pub use error::{CorruptionKind, Error, Location, Result};
pub use log::{AppendInfo, FollowerBatch, Log, ReadBatches};
pub use meters::{LatencyHistogram, LogStats, LATENCY_BUCKETS_SECONDS};
pub use options::{
    Compression, LogOptions, Preallocation, RecoveryMode, SegmentPreparation, TailWrites,
    WriteAlignment,
};
pub use recovery::{
    DroppedCorruption, PlanCheck, RecoveryPlan, RecoveryReport, ScanStart, TornTail,
};
pub use segment::index::IndexProblem;
pub use walk::{walk_records, LogRecord, ReadRange, WalkBatches, Walked};
