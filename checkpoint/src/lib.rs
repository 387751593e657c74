#![doc = include_str!("../README.md")]
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
