//! `quorumlog-io`: the only code of quorumlog that touches the operating
//! system.
//!
//! Every other crate does its file I/O through the [`FileSystem`] and
//! [`File`] traits, with one of two implementations behind them:
//!
//! - [`RealFs`]: Linux files, `fallocate`, directory `fsync` and `flock`;
//!   writes and data syncs through `io_uring` (linked write + `fdatasync`
//!   where both are wanted) or `pwrite` + `fdatasync`, chosen at open
//!   ([`IoBackend`]; `Auto` falls back when the kernel refuses `io_uring`);
//! - `SimFs` (feature `sim`): a deterministic, seedable simulated disk that keeps durable
//!   and unsynced state apart, loses, keeps or tears unsynced writes at a
//!   crash, and injects `EIO`/`ENOSPC` and bit flips. Crash tests and fuzz
//!   targets run the production code paths on it.
//!
//! Guarantees of the trait (both implementations honour them; the
//! conformance tests in `tests/` check it):
//! - written bytes are durable only after [`File::sync_data`] /
//!   [`File::sync_all`] returns `Ok`;
//! - creates, renames and removes are durable only after
//!   [`FileSystem::sync_dir`] of their directory returns `Ok`;
//! - a rename replaces its target atomically;
//! - every error keeps its [`std::io::ErrorKind`] and names the path
//!   ([`PathError`]).
//!
//! Features: `io-uring` (default; Linux only) builds the `io_uring` backend;
//! `sim` builds the simulated disk.
//!
//! ```
//! # #[cfg(feature = "sim")] {
//! use std::path::Path;
//! use quorumlog_io::{CrashPlan, FileSystem, OpenMode, SimFs};
//!
//! let fs = SimFs::new(42);
//! fs.create_dir_all(Path::new("/data")).unwrap();
//! fs.sync_dir(Path::new("/")).unwrap();
//! let f = fs.open(Path::new("/data/a"), OpenMode::CreateNew).unwrap();
//! f.write_all_at(b"durable", 0).unwrap();
//! f.sync_data().unwrap();
//! fs.sync_dir(Path::new("/data")).unwrap();
//! f.write_all_at(b"lost", 7).unwrap(); // never synced
//!
//! let rebooted = fs.crash_with(CrashPlan::LoseUnsynced);
//! let f = rebooted.open(Path::new("/data/a"), OpenMode::Read).unwrap();
//! assert_eq!(f.read_to_end().unwrap(), b"durable");
//! # }
//! ```

//! Unsafe code policy: this crate is the only one with `unsafe`, denied by
//! default and allowed, each with `#[expect(unsafe_code, reason)]` and a
//! `// SAFETY:` note, at five system-call sites: `flock`, `posix_fadvise`,
//! `fallocate`, `getrusage`, and pushing a submission to the `io_uring` queue. Every
//! other crate is `#![forbid(unsafe_code)]`.
#![deny(unsafe_code)]

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
pub use overlay::{Changes, Overlay};
pub use real::{BackendInUse, IoBackend, RealFile, RealFs};
#[cfg(any(test, feature = "sim"))]
pub use sim::{CrashPlan, FaultKind, FaultOp, SimFs, SimRng, Tear};
pub use uring::probe as probe_io_uring;
pub use usage::{process_usage, Usage};
