//! A copy-on-write file system over another: reads see the lower file
//! system, every change goes to memory, and nothing below is ever written.
//! An operator's tool runs the very code that would change a directory on
//! an overlay of it to learn, before changing a byte, what that code does
//! (`quorumlog repair` prints the cut it then performs) and which files it
//! touches (so that exactly those are copied aside first).
//!
//! A file is copied up whole into memory the first time it is opened for
//! writing, renamed or removed; directories made are remembered. Locks are
//! taken in memory (the lower directory is not locked, as nothing is
//! written to it). Direct I/O is refused, as a file system without it
//! refuses it, and callers fall back to buffered writes.

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::fs::{parent_dir, path_error, DirEntry, File, FileSystem, LockGuard, OpenMode};
use crate::sim::SimFs;

/// What an [`Overlay`] was asked to change, by path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Files written, created, renamed, removed or locked, with whether the
    /// lower file system holds them (a copy of those restores them; the
    /// others did not exist before).
    pub files: Vec<(PathBuf, bool)>,
    /// Directories made that the lower file system lacks.
    pub dirs: Vec<PathBuf>,
}

#[derive(Debug, Default)]
struct State {
    /// Paths whose lower file is hidden (removed, or renamed away).
    hidden: BTreeSet<PathBuf>,
    touched: BTreeSet<PathBuf>,
    dirs: BTreeSet<PathBuf>,
}

/// A copy-on-write view of `lower` (see the module doc).
#[derive(Clone)]
pub struct Overlay {
    lower: Arc<dyn FileSystem>,
    upper: SimFs,
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for Overlay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Overlay")
            .field("lower", &self.lower)
            .finish_non_exhaustive()
    }
}

impl Overlay {
    /// A view of `lower` that writes nothing to it.
    #[must_use]
    pub fn new(lower: Arc<dyn FileSystem>) -> Self {
        Overlay {
            lower,
            upper: SimFs::new(0),
            state: Arc::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every path changed so far (see [`Changes`]).
    ///
    /// # Errors
    /// What the lower file system reports looking the paths up.
    pub fn changes(&self) -> io::Result<Changes> {
        let (touched, dirs) = {
            let st = self.state();
            (st.touched.clone(), st.dirs.clone())
        };
        let mut files = Vec::new();
        for p in touched {
            let below = self.lower.exists(&p)?;
            files.push((p, below));
        }
        Ok(Changes {
            files,
            dirs: dirs.into_iter().collect(),
        })
    }

    fn in_upper(&self, path: &Path) -> bool {
        self.upper.exists(path).unwrap_or(false)
    }

    fn in_lower(&self, path: &Path) -> io::Result<bool> {
        Ok(!self.state().hidden.contains(path) && self.lower.exists(path)?)
    }

    /// Makes `path`'s parent in memory.
    fn parent_up(&self, path: &Path) -> io::Result<()> {
        self.upper.create_dir_all(parent_dir(path))
    }

    /// Copies the lower file at `path` into memory, unless it is there.
    fn copy_up(&self, path: &Path) -> io::Result<()> {
        if self.in_upper(path) {
            return Ok(());
        }
        if !self.in_lower(path)? {
            return Err(not_found("open", path));
        }
        let bytes = self.lower.open(path, OpenMode::Read)?.read_to_end()?;
        self.parent_up(path)?;
        self.upper
            .open(path, OpenMode::CreateNew)?
            .write_all_at(&bytes, 0)?;
        self.state().hidden.insert(path.to_path_buf());
        Ok(())
    }

    fn touch(&self, path: &Path) {
        self.state().touched.insert(path.to_path_buf());
    }
}

fn not_found(op: &'static str, path: &Path) -> io::Error {
    path_error(op, path, io::Error::from(io::ErrorKind::NotFound))
}

impl FileSystem for Overlay {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn File>> {
        match mode {
            OpenMode::Read if self.in_upper(path) => self.upper.open(path, mode),
            OpenMode::Read if self.in_lower(path)? => self.lower.open(path, mode),
            OpenMode::Read => Err(not_found("open", path)),
            OpenMode::ReadWrite => {
                self.copy_up(path)?;
                self.touch(path);
                self.upper.open(path, mode)
            }
            OpenMode::CreateNew | OpenMode::CreateOrTruncate => {
                if mode == OpenMode::CreateNew && self.exists(path)? {
                    return Err(path_error(
                        "open",
                        path,
                        io::Error::from(io::ErrorKind::AlreadyExists),
                    ));
                }
                self.parent_up(path)?;
                self.touch(path);
                self.state().hidden.insert(path.to_path_buf());
                self.upper.open(path, OpenMode::CreateOrTruncate)
            }
            OpenMode::DirectWrite => Err(path_error(
                "open",
                path,
                io::Error::new(io::ErrorKind::Unsupported, "no direct I/O on an overlay"),
            )),
        }
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        if !self.lower.exists(path)? {
            self.state().dirs.insert(path.to_path_buf());
        }
        self.upper.create_dir_all(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.copy_up(from)?;
        self.parent_up(to)?;
        self.touch(from);
        self.touch(to);
        self.state().hidden.insert(to.to_path_buf());
        self.upper.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.copy_up(path)?;
        self.touch(path);
        self.upper.remove_file(path)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let mut out: Vec<DirEntry> = Vec::new();
        let mut found = false;
        if self.lower.exists(dir)? {
            found = true;
            let hidden = self.state().hidden.clone();
            out.extend(
                self.lower
                    .list(dir)?
                    .into_iter()
                    .filter(|e| !hidden.contains(&dir.join(&e.name))),
            );
        }
        if self.in_upper(dir) {
            found = true;
            for e in self.upper.list(dir)? {
                if !out.iter().any(|o| o.name == e.name) {
                    out.push(e);
                }
            }
        }
        if !found {
            return Err(not_found("list", dir));
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(self.in_upper(path) || self.in_lower(path)?)
    }

    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }

    fn lock_holder(&self, path: &Path) -> io::Result<Option<u32>> {
        // A holder of the lower directory's lock is running on the files
        // this overlay reads.
        match self.upper.lock_holder(path)? {
            Some(pid) => Ok(Some(pid)),
            None => self.lower.lock_holder(path),
        }
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn LockGuard>> {
        // The real lock writes its holder's pid into the file.
        if self.in_lower(path)? {
            self.copy_up(path)?;
        }
        self.parent_up(path)?;
        self.touch(path);
        self.upper.lock(path)
    }

    fn backend_description(&self) -> String {
        format!(
            "overlay (in memory) over {}",
            self.lower.backend_description()
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a panic is a failed assertion"
    )]

    use super::*;

    /// Invariant: nothing below changes, whatever is done above; reads see
    /// the changes; `changes` names every path changed.
    #[test]
    fn changes_stay_above_and_are_named() {
        let lower = SimFs::new(1);
        lower.create_dir_all(Path::new("/d/sub")).unwrap();
        for (name, body) in [("/d/a", b"aaaa"), ("/d/b", b"bbbb"), ("/d/c", b"cccc")] {
            let f = lower.open(Path::new(name), OpenMode::CreateNew).unwrap();
            f.write_all_at(body, 0).unwrap();
        }
        let o = Overlay::new(Arc::new(lower.clone()));
        let a = o.open(Path::new("/d/a"), OpenMode::ReadWrite).unwrap();
        a.write_all_at(b"AA", 0).unwrap();
        o.remove_file(Path::new("/d/b")).unwrap();
        o.rename(Path::new("/d/c"), Path::new("/d/sub/c2")).unwrap();
        o.open(Path::new("/d/new"), OpenMode::CreateNew)
            .unwrap()
            .write_all_at(b"n", 0)
            .unwrap();
        o.create_dir_all(Path::new("/d/made")).unwrap();
        let names: Vec<String> = o
            .list(Path::new("/d"))
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["a", "made", "new", "sub"]);
        let read = |fs: &dyn FileSystem, p: &str| {
            fs.open(Path::new(p), OpenMode::Read)
                .unwrap()
                .read_to_end()
                .unwrap()
        };
        assert_eq!(read(&o, "/d/a"), b"AAaa");
        assert_eq!(read(&o, "/d/sub/c2"), b"cccc");
        assert!(!o.exists(Path::new("/d/b")).unwrap());
        assert_eq!(read(&lower, "/d/a"), b"aaaa");
        assert_eq!(read(&lower, "/d/b"), b"bbbb");
        assert_eq!(read(&lower, "/d/c"), b"cccc");
        assert!(!lower.exists(Path::new("/d/new")).unwrap());
        assert!(!lower.exists(Path::new("/d/made")).unwrap());
        let c = o.changes().unwrap();
        let files: Vec<(&str, bool)> = c
            .files
            .iter()
            .map(|(p, b)| (p.to_str().unwrap(), *b))
            .collect();
        assert_eq!(
            files,
            [
                ("/d/a", true),
                ("/d/b", true),
                ("/d/c", true),
                ("/d/new", false),
                ("/d/sub/c2", false)
            ]
        );
        assert_eq!(c.dirs, [PathBuf::from("/d/made")]);
    }
}
