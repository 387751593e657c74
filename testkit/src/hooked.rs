//! A file system that forwards everything to another and lets a test see
//! or stop reads and writes on the way ([`Hooks`]): the one wrapper the
//! tests that need to watch I/O share (a direct write held until the test
//! lets it go, every byte a read hands out recorded).

use std::fmt::Debug;
use std::io;
use std::path::Path;
use std::sync::Arc;

use quorumlog_io::{DirEntry, File, FileSystem, LockGuard, OpenMode};

/// What a test does on the way of the I/O. Every method defaults to
/// nothing.
pub trait Hooks: Send + Sync + Debug + 'static {
    /// Before a write of `len` bytes at `pos` to a file opened with `mode`.
    fn before_write(&self, _mode: OpenMode, _len: usize, _pos: u64) {}
    /// After a read handed out `bytes`.
    fn after_read(&self, _bytes: &[u8]) {}
}

/// `inner` with `hooks` on its files' reads and writes.
#[derive(Debug)]
pub struct HookedFs<F, H> {
    inner: F,
    hooks: Arc<H>,
}

impl<F: FileSystem, H: Hooks> HookedFs<F, H> {
    /// `inner`, watched by `hooks`.
    pub fn new(inner: F, hooks: Arc<H>) -> Self {
        HookedFs { inner, hooks }
    }
}

#[derive(Debug)]
struct HookedFile<H> {
    inner: Box<dyn File>,
    mode: OpenMode,
    hooks: Arc<H>,
}

impl<F: FileSystem, H: Hooks> FileSystem for HookedFs<F, H> {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn File>> {
        Ok(Box::new(HookedFile {
            inner: self.inner.open(path, mode)?,
            mode,
            hooks: Arc::clone(&self.hooks),
        }))
    }
    fn create_dir_all(&self, p: &Path) -> io::Result<()> {
        self.inner.create_dir_all(p)
    }
    fn rename(&self, a: &Path, b: &Path) -> io::Result<()> {
        self.inner.rename(a, b)
    }
    fn remove_file(&self, p: &Path) -> io::Result<()> {
        self.inner.remove_file(p)
    }
    fn list(&self, p: &Path) -> io::Result<Vec<DirEntry>> {
        self.inner.list(p)
    }
    fn exists(&self, p: &Path) -> io::Result<bool> {
        self.inner.exists(p)
    }
    fn sync_dir(&self, p: &Path) -> io::Result<()> {
        self.inner.sync_dir(p)
    }
    fn lock(&self, p: &Path) -> io::Result<Box<dyn LockGuard>> {
        self.inner.lock(p)
    }
    fn lock_holder(&self, p: &Path) -> io::Result<Option<u32>> {
        self.inner.lock_holder(p)
    }
    fn backend_description(&self) -> String {
        format!("hooked {}", self.inner.backend_description())
    }
}

impl<H: Hooks> File for HookedFile<H> {
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let n = self.inner.read_at(buf, pos)?;
        self.hooks.after_read(buf.get(..n).unwrap_or_default());
        Ok(n)
    }
    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        self.hooks.before_write(self.mode, buf.len(), pos);
        self.inner.write_all_at(buf, pos)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn allocate(&self, len: u64) -> io::Result<()> {
        self.inner.allocate(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
}
