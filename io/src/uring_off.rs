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

/// Never built here.
#[derive(Debug)]
pub(crate) struct Flight(());

/// Always refuses.
///
/// # Safety
/// Nothing to uphold (it never submits).
///
/// # Errors
/// `Unsupported`.
#[expect(unsafe_code, reason = "the same signature as the io_uring backend's")]
pub(crate) unsafe fn start_write(_fd: RawFd, _buf: &[u8], _pos: u64) -> io::Result<Flight> {
    Err(unsupported())
}

impl Flight {
    /// Unreachable (no flight is ever built).
    ///
    /// # Errors
    /// `Unsupported`.
    pub(crate) fn wait(self) -> io::Result<usize> {
        let Flight(()) = self;
        Err(unsupported())
    }
}
