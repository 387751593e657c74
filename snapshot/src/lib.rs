//! `quorumlog-snapshot`: snapshot files.
//!
//! Guarantees:
//! - **Atomic publish.** A snapshot is written to a `.part` file, ends with a
//!   footer carrying the whole-file CRC32C, is synced and renamed, and the
//!   directory synced, before it is listed. A file without a valid footer is
//!   never listed; a crash leaves the old set of snapshots or the new one.
//! - **Verified before used.** A reader checks the whole file (streaming,
//!   one chunk in memory) before handing out any byte.
//! - **Resumable installs.** A snapshot received from the leader in chunks is
//!   durable chunk by chunk and resumes after a restart from its last verified
//!   chunk; `finish` verifies the whole file before publishing. Installing an
//!   id not newer than the latest is refused.
//! - **Retention never deletes the latest** snapshot, and deletions are
//!   durable.
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//! use quorumlog_checkpoint::{Epoch, Offset, SharedFs};
//! use quorumlog_io::SimFs;
//! use quorumlog_snapshot::{SnapshotId, SnapshotStore, WriterOptions};
//!
//! let fs: SharedFs = Arc::new(SimFs::new(1));
//! let store = SnapshotStore::open(fs, Path::new("/snapshots")).unwrap();
//! let id = SnapshotId { end_offset: Offset(100), epoch: Epoch(2) };
//! let mut w = store.create(id, b"voters", WriterOptions::default()).unwrap();
//! w.write(b"state machine bytes").unwrap();
//! w.freeze().unwrap();
//! let mut r = store.reader(id).unwrap();
//! assert_eq!(r.read_to_end().unwrap(), b"state machine bytes");
//! ```
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
