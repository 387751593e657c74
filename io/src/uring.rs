//! The `io_uring` backend: positional writes and data syncs submitted through
//! `io_uring`, with a write and its `fdatasync` linked in one submission where
//! both are wanted.
//!
//! Each thread owns one small ring (thread-local), so a writer never waits
//! for another thread's completion and the flusher's sync never blocks
//! writers' submissions. Every call submits and waits for its own
//! completions before returning, so the buffers it passes outlive the
//! kernel's use of them.

use std::cell::RefCell;
use std::io;
use std::os::unix::io::RawFd;

use io_uring::{opcode, squeue, types, IoUring};

const RING_ENTRIES: u32 = 8;

thread_local! {
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's ring, creating it on first use.
fn with_ring<T>(f: impl FnOnce(&mut IoUring) -> io::Result<T>) -> io::Result<T> {
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(IoUring::new(RING_ENTRIES)?);
        }
        match slot.as_mut() {
            Some(ring) => f(ring),
            None => Err(io::Error::other("io_uring ring missing")),
        }
    })
}

/// Checks that this process may use `io_uring`: sets up a ring and runs a
/// no-op through it.
///
/// # Errors
/// Whatever the kernel (or a seccomp filter) answers.
pub fn probe() -> io::Result<()> {
    let results = submit(&[opcode::Nop::new().build()])?;
    match results.first() {
        Some(&r) if r >= 0 => Ok(()),
        Some(&r) => Err(io::Error::from_raw_os_error(-r)),
        None => Err(io::Error::other("io_uring returned no completion")),
    }
}

/// Submits `entries` and waits for all their completions; returns their
/// results in submission order (negative: `-errno`).
fn submit(entries: &[squeue::Entry]) -> io::Result<Vec<i32>> {
    with_ring(|ring| {
        for (i, e) in entries.iter().enumerate() {
            let e = e.clone().user_data(i as u64);
            // SAFETY: every buffer an entry points to is borrowed by our
            // caller for the whole call, and we wait below for every
            // completion before returning.
            #[expect(
                unsafe_code,
                reason = "io_uring submission entries hold raw buffer pointers"
            )]
            unsafe { ring.submission().push(&e) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        }
        let mut results = vec![0i32; entries.len()];
        let mut seen = 0;
        while seen < entries.len() {
            match ring.submit_and_wait(entries.len() - seen) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for cqe in ring.completion() {
                let i = usize::try_from(cqe.user_data()).unwrap_or(usize::MAX);
                if let Some(slot) = results.get_mut(i) {
                    *slot = cqe.result();
                    seen += 1;
                }
            }
        }
        Ok(results)
    })
}

fn check(result: i32) -> io::Result<usize> {
    if result < 0 {
        Err(io::Error::from_raw_os_error(-result))
    } else {
        Ok(usize::try_from(result).unwrap_or(0))
    }
}

fn write_entry(fd: RawFd, buf: &[u8], pos: u64) -> squeue::Entry {
    // A single write carries at most u32::MAX bytes; callers loop.
    let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
    opcode::Write::new(types::Fd(fd), buf.as_ptr(), len)
        .offset(pos)
        .build()
}

fn fsync_entry(fd: RawFd) -> squeue::Entry {
    opcode::Fsync::new(types::Fd(fd))
        .flags(types::FsyncFlags::DATASYNC)
        .build()
}

fn no_completion() -> io::Error {
    io::Error::other("io_uring returned fewer completions than submissions")
}

/// The first completion's result.
fn first(results: &[i32]) -> io::Result<i32> {
    results.first().copied().ok_or_else(no_completion)
}

/// Writes all of `buf` at `pos`.
///
/// # Errors
/// The write's error; `WriteZero` if the kernel writes nothing.
pub(crate) fn write_all_at(fd: RawFd, buf: &[u8], pos: u64) -> io::Result<()> {
    let mut done = 0usize;
    while done < buf.len() {
        let rest = buf.get(done..).unwrap_or_default();
        let n = check(first(&submit(&[write_entry(
            fd,
            rest,
            pos + done as u64,
        )])?)?)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "io_uring wrote nothing",
            ));
        }
        done += n;
    }
    Ok(())
}

/// `fdatasync` through `io_uring`.
///
/// # Errors
/// The sync's error.
pub(crate) fn sync_data(fd: RawFd) -> io::Result<()> {
    check(first(&submit(&[fsync_entry(fd)])?)?).map(|_| ())
}

/// Writes `buf` at `pos` and syncs, as one linked submission (the sync
/// starts only after the write completed in full).
///
/// # Errors
/// The write's or the sync's error.
pub(crate) fn write_all_and_sync_at(fd: RawFd, buf: &[u8], pos: u64) -> io::Result<()> {
    if buf.len() > u32::MAX as usize {
        write_all_at(fd, buf, pos)?;
        return sync_data(fd);
    }
    let write = write_entry(fd, buf, pos).flags(squeue::Flags::IO_LINK);
    let results = submit(&[write, fsync_entry(fd)])?;
    let written = check(first(&results)?)?;
    if written < buf.len() {
        // A short write cancels the linked sync: finish, then sync.
        let rest = buf.get(written..).unwrap_or_default();
        write_all_at(fd, rest, pos + written as u64)?;
        return sync_data(fd);
    }
    let sync = results.get(1).copied().ok_or_else(no_completion)?;
    check(sync).map(|_| ())
}

/// Rings kept between writes that outlive their call ([`start_write`]):
/// one thread starts the write, another may finish it, so these rings
/// belong to no thread. A log keeps at most one such write in flight, so
/// the pool stays as small as the number of logs writing at once.
static SPARE_RINGS: std::sync::Mutex<Vec<IoUring>> = std::sync::Mutex::new(Vec::new());

fn spare_rings() -> std::sync::MutexGuard<'static, Vec<IoUring>> {
    SPARE_RINGS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A write submitted by [`start_write`] and not yet reaped. Dropping it
/// waits for the kernel to be done with the buffer.
pub(crate) struct Flight {
    /// `None` once reaped.
    ring: Option<IoUring>,
}

impl std::fmt::Debug for Flight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flight")
            .field("in_flight", &self.ring.is_some())
            .finish()
    }
}

/// Submits one write of `buf` at `pos` and returns without waiting for it.
///
/// # Safety
/// `buf` must stay allocated and unchanged until the returned flight is
/// reaped ([`Flight::wait`]) or dropped (which waits).
#[expect(
    unsafe_code,
    reason = "the kernel reads the buffer after this call returns"
)]
pub(crate) unsafe fn start_write(fd: RawFd, buf: &[u8], pos: u64) -> io::Result<Flight> {
    let popped = spare_rings().pop();
    let mut ring = match popped {
        Some(r) => r,
        None => IoUring::new(2)?,
    };
    let entry = write_entry(fd, buf, pos).user_data(0);
    // SAFETY: our caller keeps `buf` alive until the flight is reaped.
    unsafe { ring.submission().push(&entry) }
        .map_err(|_| io::Error::other("io_uring submission queue full"))?;
    loop {
        match ring.submit() {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Nothing was taken; the ring (with its queued entry) is dropped.
            Err(e) => return Err(e),
        }
    }
    Ok(Flight { ring: Some(ring) })
}

impl Flight {
    /// Waits for the write; the bytes it wrote.
    ///
    /// # Errors
    /// The write's error.
    pub(crate) fn wait(mut self) -> io::Result<usize> {
        self.reap()
    }

    fn reap(&mut self) -> io::Result<usize> {
        let Some(mut ring) = self.ring.take() else {
            return Err(no_completion());
        };
        let result = loop {
            if let Some(cqe) = ring.completion().next() {
                break cqe.result();
            }
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The ring's state is unknown: keep it out of the pool (its
                // drop tears it down once the kernel is done with it).
                Err(e) => return Err(e),
            }
        };
        spare_rings().push(ring);
        check(result)
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        if self.ring.is_some() {
            let _ = self.reap();
        }
    }
}
