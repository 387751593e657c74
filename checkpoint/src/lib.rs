//! `quorumlog-checkpoint`: the small durable files of a quorumlog data
//! directory, and the directory itself.
//!
//! Guarantees:
//! - **Explicit formatting.** [`format()`] creates a data directory;
//!   [`DataDir::open`] of a directory without a valid meta file fails with
//!   [`Error::NotFormatted`] and never initialises anything (an empty
//!   directory may be a disk that failed to mount). A second open fails with
//!   [`Error::Locked`]; a directory of another cluster or node fails with
//!   [`Error::IdentityMismatch`].
//! - **Atomic, verified small files.** Every file is replaced atomically
//!   (temp, sync, rename, directory sync) and carries a magic, a version and
//!   a CRC32C; a truncated, bit-flipped, foreign or future-version file is a
//!   typed [`Error::Corruption`] naming the file.
//! - **Election state never regresses** (docs/design.md invariant 5): once
//!   [`DataDir::persist_quorum_state`] returns, every reopen sees that epoch
//!   (with the same vote) or a later one; epoch and vote are one record, and
//!   an unreadable quorum state fails open instead of defaulting to epoch 0.
//! - **Untrusted checkpoints degrade safely.** A missing or corrupt recovery
//!   point, high watermark, log start offset or epoch map is reported in
//!   [`DataDir::report`] and replaced by `None` (full scan, unknown
//!   watermark, rebuild from segments), never trusted.
//! - **Failed writes poison** (invariant 6): after one, every write returns
//!   [`Error::Poisoned`] until the directory is reopened.
//!
//! ```
//! use std::path::Path;
//! use std::sync::Arc;
//! use quorumlog_checkpoint::{
//!     format, ClusterId, DataDir, Epoch, NodeId, OpenOptions, QuorumState, SharedFs,
//! };
//! use quorumlog_io::SimFs;
//!
//! let fs: SharedFs = Arc::new(SimFs::new(1));
//! let dir = Path::new("/data");
//! format(&fs, dir, ClusterId(7), NodeId(1)).unwrap();
//! let dd = DataDir::open(fs, dir, &OpenOptions::default()).unwrap();
//! let mut qs = dd.quorum_state();
//! qs.epoch = Epoch(1);
//! qs.leader = Some(NodeId(1));
//! dd.persist_quorum_state(&qs).unwrap();
//! assert_eq!(dd.quorum_state().epoch, Epoch(1));
//! ```
#![forbid(unsafe_code)]

mod app_metadata;
mod data_dir;
mod epoch_map;
mod error;
mod format;
#[cfg(any(test, feature = "__fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod meta;
mod points;
mod quorum_state;
mod small_file;
mod types;

pub use app_metadata::{AppMetadata, VoterHistoryFile};
pub use data_dir::{
    format, format_with, read_meta, read_small_file, verify_small_files, Checkpoints, DataDir,
    Degraded, LogClaim, OpenOptions, OpenReport, SharedFs, SmallFileCheck, CHECKPOINTS_DIR,
    LOCK_FILE, LOG_DIR, SNAPSHOTS_DIR,
};
pub use epoch_map::{EpochEntry, EpochMap};
/// The largest body a small file (meta, quorum state, app metadata, voter
/// history…) holds; a larger write is refused before anything is written.
pub const MAX_SMALL_FILE_BYTES: usize = format::MAX_BODY_BYTES;
pub use error::{CorruptionKind, Error, Location, NotFormattedReason, Result};
pub use meta::Meta;
pub use points::{HighWatermark, LogStartOffset, RecoveryPoint};
pub use quorum_state::QuorumState;
pub use small_file::{path_of, replace_file, SmallFile};
pub use types::{ClusterId, DirectoryId, Epoch, NodeId, Offset, Vote, Voter};
