//! What this process has used so far: CPU time and context switches of all
//! its threads, the ended ones included (`getrusage(RUSAGE_SELF)`). The
//! benchmarks divide the difference of two readings by the entries made
//! durable between them.

use std::io;
use std::time::Duration;

/// CPU time (user and system) and context switches (voluntary and not) of
/// every thread of this process so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// User plus system CPU time.
    pub cpu: Duration,
    /// Voluntary plus involuntary context switches.
    pub switches: u64,
}

impl Usage {
    /// What was used between `earlier` and `self`.
    #[must_use]
    pub fn since(self, earlier: Usage) -> Usage {
        Usage {
            cpu: self.cpu.saturating_sub(earlier.cpu),
            switches: self.switches.saturating_sub(earlier.switches),
        }
    }
}

/// This process's [`Usage`] so far.
///
/// # Errors
/// The system call's (it has none on Linux for `RUSAGE_SELF`).
pub fn process_usage() -> io::Result<Usage> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` is a valid, writable `rusage` the call fills in.
    #[expect(unsafe_code, reason = "getrusage has no safe wrapper in std")]
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zero-initialised and filled by a successful getrusage.
    #[expect(unsafe_code, reason = "the call above initialised it")]
    let ru = unsafe { ru.assume_init() };
    let time = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    Ok(Usage {
        cpu: time(ru.ru_utime) + time(ru.ru_stime),
        switches: u64::try_from(ru.ru_nvcsw).unwrap_or(0)
            + u64::try_from(ru.ru_nivcsw).unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]

    use super::process_usage;

    /// Work shows as CPU time and a sleeping thread as a context switch:
    /// a reading taken after both is above one taken before (a zeroed or
    /// swapped field would not grow).
    #[test]
    fn usage_grows_with_work_and_sleeps() {
        let a = process_usage().unwrap();
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(5)))
            .join()
            .unwrap();
        let d = process_usage().unwrap().since(a);
        assert!(d.cpu > std::time::Duration::ZERO, "{d:?}");
        assert!(d.switches >= 1, "{d:?}");
    }
}
