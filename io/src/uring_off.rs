//! Stand-in for the `io_uring` backend where it is not built (the
//! `io-uring` feature is off, or the target is not Linux): every call says
//! "unsupported", so `IoBackend::Auto` falls back to pwrite + fdatasync and
//! `IoBackend::Uring` refuses at open. Nothing here is ever reached for
//! I/O: `RealFile` only calls into it after a successful probe.

use std::io;
use std::os::fd::RawFd;

fn unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "io_uring is not built into this quorumlog-io (feature `io-uring`, Linux only)",
    )
}

/// Always refuses.
///
/// # Errors
/// `Unsupported`.
pub fn probe() -> io::Result<()> {
    Err(unsupported())
}

/// Always refuses.
///
/// # Errors
/// `Unsupported`.
pub(crate) fn write_all_and_sync_at(_fd: RawFd, _buf: &[u8], _pos: u64) -> io::Result<()> {
    Err(unsupported())
}
