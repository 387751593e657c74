//! The real file system (Linux): positional I/O, `fdatasync`, `fallocate`,
//! directory `fsync` and `flock`.

use std::fs;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::fs::{path_error, DirEntry, File, FileSystem, LockGuard, OpenMode};

/// Which backend writes and syncs go through, asked for at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoBackend {
    /// `io_uring` when the kernel allows it, else `pwrite` + `fdatasync`.
    /// Default.
    #[default]
    Auto,
    /// `io_uring` only: opening fails where the kernel refuses it.
    Uring,
    /// `pwrite` + `fdatasync`.
    Pwrite,
}

/// The backend actually in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendInUse {
    /// `io_uring` for linked write + sync submissions (small files); lone
    /// writes and data syncs are `pwrite` and `fdatasync` with either
    /// backend.
    Uring,
    /// `pwrite` + `fdatasync`, and why `io_uring` is not used (if `Auto`
    /// fell back).
    Pwrite {
        /// The kernel's refusal, when `Auto` fell back.
        fallback_reason: Option<String>,
    },
}

/// The operating system's file system.
#[derive(Debug, Clone)]
pub struct RealFs {
    backend: BackendInUse,
}

impl Default for RealFs {
    fn default() -> Self {
        RealFs::new()
    }
}

impl RealFs {
    /// The real file system with the `Auto` backend.
    pub fn new() -> Self {
        match RealFs::with_backend(IoBackend::Auto) {
            Ok(fs) => fs,
            Err(e) => RealFs {
                backend: BackendInUse::Pwrite {
                    fallback_reason: Some(e.to_string()),
                },
            },
        }
    }

    /// The real file system with the backend asked for.
    ///
    /// # Errors
    /// With `Uring`, the kernel's refusal to set up `io_uring` (old kernel,
    /// seccomp, `io_uring_disabled`).
    pub fn with_backend(backend: IoBackend) -> io::Result<RealFs> {
        let backend = match backend {
            IoBackend::Pwrite => BackendInUse::Pwrite {
                fallback_reason: None,
            },
            IoBackend::Uring => {
                crate::uring::probe()?;
                BackendInUse::Uring
            }
            IoBackend::Auto => match crate::uring::probe() {
                Ok(()) => BackendInUse::Uring,
                Err(e) => BackendInUse::Pwrite {
                    fallback_reason: Some(e.to_string()),
                },
            },
        };
        Ok(RealFs { backend })
    }

    /// The backend in use.
    pub fn backend(&self) -> &BackendInUse {
        &self.backend
    }

    fn uring(&self) -> bool {
        self.backend == BackendInUse::Uring
    }
}

/// A file of the real file system.
#[derive(Debug)]
pub struct RealFile {
    file: fs::File,
    path: PathBuf,
    uring: bool,
}

impl RealFile {
    /// `posix_fadvise` over `[pos, pos + len)` (a hint).
    fn fadvise(&self, pos: u64, len: u64, advice: libc::c_int) -> io::Result<()> {
        let (Ok(off), Ok(n)) = (libc::off_t::try_from(pos), libc::off_t::try_from(len)) else {
            return Ok(()); // a hint beyond what the OS takes: nothing to do
        };
        #[expect(unsafe_code, reason = "posix_fadvise has no safe wrapper in std")]
        // SAFETY: a plain syscall on a descriptor this file owns.
        let rc = unsafe { libc::posix_fadvise(self.file.as_raw_fd(), off, n, advice) };
        if rc == 0 {
            Ok(())
        } else {
            Err(path_error(
                "fadvise",
                &self.path,
                io::Error::from_raw_os_error(rc),
            ))
        }
    }

    /// The underlying standard-library file, for backends (`io_uring`, mmap)
    /// that need its descriptor.
    pub fn std_file(&self) -> &fs::File {
        &self.file
    }
}

impl FileSystem for RealFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn File>> {
        let mut opts = fs::OpenOptions::new();
        opts.read(true);
        match mode {
            OpenMode::Read => {}
            OpenMode::ReadWrite => {
                opts.write(true);
            }
            OpenMode::CreateNew => {
                opts.write(true).create_new(true);
            }
            OpenMode::CreateOrTruncate => {
                opts.write(true).create(true).truncate(true);
            }
            OpenMode::DirectWrite => {
                opts.read(false).write(true);
            }
        }
        let direct = if mode == OpenMode::DirectWrite {
            libc::O_DIRECT | libc::O_DSYNC
        } else {
            0
        };
        opts.custom_flags(libc::O_CLOEXEC | direct);
        let file = opts.open(path).map_err(|e| path_error("open", path, e))?;
        Ok(Box::new(RealFile {
            file,
            path: path.to_path_buf(),
            uring: self.uring(),
        }))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path).map_err(|e| path_error("create_dir_all", path, e))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to).map_err(|e| path_error("rename", from, e))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path).map_err(|e| path_error("remove", path, e))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| path_error("list", dir, e))? {
            let entry = entry.map_err(|e| path_error("list", dir, e))?;
            let is_dir = entry
                .file_type()
                .map_err(|e| path_error("list", dir, e))?
                .is_dir();
            out.push(DirEntry {
                name: entry.file_name().to_string_lossy().into_owned(),
                is_dir,
            });
        }
        out.sort();
        Ok(out)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists().map_err(|e| path_error("exists", path, e))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let d = fs::File::open(dir).map_err(|e| path_error("sync_dir", dir, e))?;
        d.sync_all().map_err(|e| path_error("sync_dir", dir, e))
    }

    fn backend_description(&self) -> String {
        match &self.backend {
            BackendInUse::Uring => "io_uring".to_string(),
            BackendInUse::Pwrite {
                fallback_reason: None,
            } => "pwrite + fdatasync".to_string(),
            BackendInUse::Pwrite {
                fallback_reason: Some(r),
            } => format!("pwrite + fdatasync (io_uring refused: {r})"),
        }
    }

    fn lock_holder(&self, path: &Path) -> io::Result<Option<u32>> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = match fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(path_error("stat", path, e)),
        };
        let dev = meta.dev();
        let want = format!(
            "{:02x}:{:02x}:{}",
            libc::major(dev),
            libc::minor(dev),
            meta.ino()
        );
        // The kernel's table of locks: `N: FLOCK ADVISORY WRITE PID
        // MAJ:MIN:INODE START END`, device numbers in hex. It is read a
        // page at a time, and a read while other locks come and go can
        // skip a line (seen: 3 reads in 100 beside another test's locks),
        // so a lock not found is looked for twice more. Without the table
        // (no procfs), a shared lock tried and let go at once tells.
        for _ in 0..LOCK_TABLE_READS {
            let table = match fs::read_to_string("/proc/locks") {
                Ok(t) => t,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return probe_lock(path),
                Err(e) => return Err(path_error("read", Path::new("/proc/locks"), e)),
            };
            let found = table.lines().find_map(|line| {
                let mut f = line.split_whitespace().skip(1);
                let kind = f.next()?;
                let pid = f.nth(2)?.parse().ok()?;
                let id = f.next()?;
                (kind == "FLOCK" && id == want).then_some(pid)
            });
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn LockGuard>> {
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| path_error("lock", path, e))?;
        // SAFETY: flock on a descriptor we own; no memory is passed.
        #[expect(unsafe_code, reason = "flock has no safe wrapper in std")]
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(path_error("lock", path, io::Error::last_os_error()));
        }
        // The holder's pid, for whoever finds the directory locked. It is
        // only informative: not synced, and a failure to write it (a full
        // disk) does not stop the open.
        let pid = format!("{}\n", std::process::id());
        let _informative = file
            .set_len(0)
            .and_then(|()| std::os::unix::fs::FileExt::write_all_at(&file, pid.as_bytes(), 0));
        // The lock is released when the descriptor is closed (guard dropped).
        Ok(Box::new(RealLock {
            _file: file,
            path: path.to_path_buf(),
        }))
    }
}

impl File for RealFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        self.file
            .read_at(buf, pos)
            .map_err(|e| path_error("read", &self.path, e))
    }

    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        // A lone write is cheaper as one pwrite than as an io_uring
        // submission and wait (measured); io_uring
        // serves data syncs and linked write + sync.
        self.file
            .write_all_at(buf, pos)
            .map_err(|e| path_error("write", &self.path, e))
    }

    fn start_write_at(
        &self,
        buf: Vec<u8>,
        range: std::ops::Range<usize>,
        pos: u64,
    ) -> crate::WriteTicket {
        if !self.uring {
            let result = self.write_all_at(buf.get(range.clone()).unwrap_or_default(), pos);
            return crate::WriteTicket::done(buf, range, pos, result);
        }
        crate::WriteTicket::submit(self.file.as_raw_fd(), buf, range, pos, |b, at| {
            self.write_all_at(b, at)
        })
    }

    fn finish_write(&self, ticket: crate::WriteTicket) -> (Vec<u8>, io::Result<()>) {
        let (buf, result) = ticket.finish(|rest, at| self.write_all_at(rest, at));
        let result = result.map_err(|e| {
            if matches!(e.get_ref(), Some(r) if r.is::<crate::PathError>()) {
                e
            } else {
                path_error("write", &self.path, e)
            }
        });
        (buf, result)
    }

    fn write_all_and_sync_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        if !self.uring {
            self.write_all_at(buf, pos)?;
            return self.sync_data();
        }
        crate::uring::write_all_and_sync_at(self.file.as_raw_fd(), buf, pos)
            .map_err(|e| path_error("write_sync", &self.path, e))
    }

    fn len(&self) -> io::Result<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| path_error("stat", &self.path, e))
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file
            .set_len(len)
            .map_err(|e| path_error("set_len", &self.path, e))
    }

    fn drop_cache(&self, pos: u64, len: u64) -> io::Result<()> {
        self.fadvise(pos, len, libc::POSIX_FADV_DONTNEED)
    }

    fn will_need(&self, pos: u64, len: u64) -> io::Result<()> {
        self.fadvise(pos, len, libc::POSIX_FADV_WILLNEED)
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        if self.len()? >= len {
            return Ok(());
        }
        let Ok(off_len) = libc::off_t::try_from(len) else {
            return Err(path_error(
                "allocate",
                &self.path,
                io::Error::new(io::ErrorKind::InvalidInput, "length too large"),
            ));
        };
        fallocate(&self.file, off_len)
            .or_else(|err| {
                if err.kind() == io::ErrorKind::Unsupported {
                    // No fallocate here (another OS, or a file system
                    // without it): extend the file instead.
                    return self.set_len(len);
                }
                Err(err)
            })
            .map_err(|e| path_error("allocate", &self.path, e))
    }

    fn sync_data(&self) -> io::Result<()> {
        // A plain `fdatasync` on the calling thread with either backend: an
        // io_uring fsync always runs on a kernel worker thread, a hand-off
        // and a wake-up per sync (2 more context switches per durable
        // append; measured).
        self.file
            .sync_data()
            .map_err(|e| path_error("sync_data", &self.path, e))
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file
            .sync_all()
            .map_err(|e| path_error("sync_all", &self.path, e))
    }
}

/// Reserves `len` bytes of blocks for `file`.
#[cfg(target_os = "linux")]
fn fallocate(file: &fs::File, len: libc::off_t) -> io::Result<()> {
    // SAFETY: fallocate on a descriptor we own; no memory is passed.
    #[expect(unsafe_code, reason = "fallocate has no safe wrapper in std")]
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EOPNOTSUPP) {
        return Err(io::Error::new(io::ErrorKind::Unsupported, err));
    }
    Err(err)
}

/// Elsewhere there is no portable `fallocate`: the caller extends the file.
#[cfg(not(target_os = "linux"))]
fn fallocate(_file: &fs::File, _len: libc::off_t) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "no fallocate"))
}

#[derive(Debug)]
struct RealLock {
    _file: fs::File,
    path: PathBuf,
}

impl LockGuard for RealLock {
    fn path(&self) -> &Path {
        &self.path
    }
}

/// Whether the lock on `path` is held, without `/proc/locks`: a shared
/// lock is tried and, if taken, let go at once; if refused, the holder's
/// pid is read from the file (the lock's holder writes it).
/// How many reads of `/proc/locks` find a lock before it counts as not
/// held ([`RealFs::lock_holder`]).
const LOCK_TABLE_READS: usize = 3;

fn probe_lock(path: &Path) -> io::Result<Option<u32>> {
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(path_error("open", path, e)),
    };
    // SAFETY: flock on a descriptor we own; no memory is passed.
    #[expect(unsafe_code, reason = "flock has no safe wrapper in std")]
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(None); // Taken shared, released as the file closes.
    }
    let pid = fs::read_to_string(path)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    Ok(Some(pid))
}
