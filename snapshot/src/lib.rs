#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

// The store is shared between threads.
const _: fn() = || {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<SnapshotStore>();
};

mod describe;
mod dir;
mod error;
mod format;
#[cfg(any(test, feature = "__fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod id;
mod install;
mod reader;
mod store;
mod writer;

pub use describe::{describe_snapshot, ChunkInfo, SnapshotDescription};
pub use error::{CorruptionKind, Error, Location, Result};
pub use id::{SnapshotId, SnapshotInfo};
pub use install::Install;
pub use reader::SnapshotReader;
pub use store::{Retention, SnapshotStore, StoreReport};
pub use writer::{SnapshotWriter, WriterOptions};
