#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod codec;
mod fs;
#[cfg(any(test, feature = "sim"))]
mod overlay;
mod real;
#[cfg(any(test, feature = "sim"))]
mod sim;
#[cfg(all(target_os = "linux", feature = "io-uring"))]
mod uring;
#[cfg(not(all(target_os = "linux", feature = "io-uring")))]
#[path = "uring_off.rs"]
mod uring;
mod usage;

pub use fs::{
    parent_dir, path_error, DirEntry, Failure, File, FileSystem, LockGuard, OpenMode, PathError,
    WriteTicket, DIRECT_ALIGN,
};
#[cfg(any(test, feature = "sim"))]
#[cfg_attr(docsrs, doc(cfg(feature = "sim")))]
pub use overlay::{Changes, Overlay};
pub use real::{BackendInUse, IoBackend, RealFile, RealFs};
#[cfg(any(test, feature = "sim"))]
#[cfg_attr(docsrs, doc(cfg(feature = "sim")))]
pub use sim::{CrashPlan, FaultKind, FaultOp, SimFs, SimRng, Tear};
pub use uring::probe as probe_io_uring;
pub use usage::{process_usage, Usage};
