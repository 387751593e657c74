#![doc = include_str!("../README.md")]
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
