//! [`SimFs`] as a [`FileSystem`]: every operation against the simulated
//! disk's state, with its faults and its crash point.

#[allow(
    clippy::wildcard_imports,
    reason = "the parent's private items, as a child module sees them"
)]
use super::*;

impl FileSystem for SimFs {
    fn backend_description(&self) -> String {
        "simulated disk".to_string()
    }

    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn File>> {
        let mut st = self.lock_state();
        st.check_alive().map_err(|e| path_error("open", path, e))?;
        let existing = match st.ns.get(path) {
            Some(Node::File(id)) => Some(*id),
            Some(Node::Dir) => {
                return Err(path_error(
                    "open",
                    path,
                    io::Error::new(io::ErrorKind::IsADirectory, "is a directory"),
                ))
            }
            None => None,
        };
        let id = match (mode, existing) {
            (OpenMode::Read | OpenMode::ReadWrite | OpenMode::DirectWrite, Some(id)) => id,
            (OpenMode::Read | OpenMode::ReadWrite | OpenMode::DirectWrite, None) => {
                return Err(path_error(
                    "open",
                    path,
                    io::Error::new(io::ErrorKind::NotFound, "no such file"),
                ))
            }
            (OpenMode::CreateNew, Some(_)) => {
                return Err(path_error(
                    "open",
                    path,
                    io::Error::new(io::ErrorKind::AlreadyExists, "file exists"),
                ))
            }
            (OpenMode::CreateOrTruncate, Some(id)) => {
                st.begin(FaultOp::SetLen)
                    .map_err(|e| path_error("open", path, e))?;
                let inode = st.inode_mut(id);
                inode.current.clear();
                inode.pending.push(Pending::SetLen(0));
                id
            }
            (OpenMode::CreateNew | OpenMode::CreateOrTruncate, None) => {
                st.require_dir(parent_dir(path))
                    .map_err(|e| path_error("open", path, e))?;
                st.begin(FaultOp::Create)
                    .and_then(|()| st.need_space())
                    .map_err(|e| path_error("open", path, e))?;
                let id = st.next_inode;
                st.next_inode += 1;
                st.inodes.insert(id, Inode::default());
                st.create_node(path, Node::File(id));
                id
            }
        };
        Ok(Box::new(SimFile {
            state: Arc::clone(&self.state),
            inode: id,
            path: path.to_path_buf(),
            writable: mode != OpenMode::Read,
            direct: mode == OpenMode::DirectWrite,
        }))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock_state();
        st.check_alive()
            .map_err(|e| path_error("create_dir_all", path, e))?;
        let mut missing = Vec::new();
        for ancestor in path.ancestors() {
            if ancestor.as_os_str().is_empty() {
                break;
            }
            match st.ns.get(ancestor) {
                Some(Node::Dir) => break,
                Some(Node::File(_)) => {
                    return Err(path_error(
                        "create_dir_all",
                        path,
                        io::Error::new(io::ErrorKind::NotADirectory, "a file is in the way"),
                    ))
                }
                None => missing.push(ancestor.to_path_buf()),
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        st.begin(FaultOp::Create)
            .map_err(|e| path_error("create_dir_all", path, e))?;
        for dir in missing.iter().rev() {
            st.create_node(dir, Node::Dir);
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.lock_state();
        st.check_alive()
            .map_err(|e| path_error("rename", from, e))?;
        let id = st
            .lookup_file(from)
            .map_err(|e| path_error("rename", from, e))?;
        st.require_dir(parent_dir(to))
            .map_err(|e| path_error("rename", to, e))?;
        if matches!(st.ns.get(to), Some(Node::Dir)) {
            return Err(path_error(
                "rename",
                to,
                io::Error::new(io::ErrorKind::IsADirectory, "target is a directory"),
            ));
        }
        st.begin(FaultOp::Rename)
            .map_err(|e| path_error("rename", from, e))?;
        let node = Node::File(id);
        st.ns.remove(from);
        st.ns.insert(to.to_path_buf(), node);
        st.dir_ops.push(DirOp::Rename {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            node,
        });
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.lock_state();
        st.check_alive()
            .map_err(|e| path_error("remove", path, e))?;
        st.lookup_file(path)
            .map_err(|e| path_error("remove", path, e))?;
        st.begin(FaultOp::Remove)
            .map_err(|e| path_error("remove", path, e))?;
        st.ns.remove(path);
        st.dir_ops.push(DirOp::Remove {
            path: path.to_path_buf(),
        });
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let st = self.lock_state();
        st.check_alive().map_err(|e| path_error("list", dir, e))?;
        st.require_dir(dir)
            .map_err(|e| path_error("list", dir, e))?;
        let mut out: Vec<DirEntry> = st
            .ns
            .iter()
            .filter(|(p, _)| p.as_path() != dir && parent_dir(p) == dir)
            .filter_map(|(p, node)| {
                Some(DirEntry {
                    name: p.file_name()?.to_string_lossy().into_owned(),
                    is_dir: matches!(node, Node::Dir),
                })
            })
            .collect();
        out.sort();
        Ok(out)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let st = self.lock_state();
        st.check_alive()
            .map_err(|e| path_error("exists", path, e))?;
        Ok(st.ns.contains_key(path))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock_state();
        st.check_alive()
            .map_err(|e| path_error("sync_dir", dir, e))?;
        st.require_dir(dir)
            .map_err(|e| path_error("sync_dir", dir, e))?;
        st.begin(FaultOp::SyncDir)
            .map_err(|e| path_error("sync_dir", dir, e))?;
        let ops = std::mem::take(&mut st.dir_ops);
        let (now, later): (Vec<DirOp>, Vec<DirOp>) =
            ops.into_iter().partition(|op| op.touches(dir));
        for op in &now {
            op.apply(&mut st.durable_ns);
        }
        st.dir_ops = later;
        Ok(())
    }

    fn lock_holder(&self, path: &Path) -> io::Result<Option<u32>> {
        let st = self.lock_state();
        Ok(st.locks.contains(path).then(std::process::id))
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn LockGuard>> {
        {
            let mut st = self.lock_state();
            st.check_alive().map_err(|e| path_error("lock", path, e))?;
            if st.locks.contains(path) {
                return Err(path_error(
                    "lock",
                    path,
                    io::Error::new(io::ErrorKind::WouldBlock, "lock held"),
                ));
            }
            if !st.ns.contains_key(path) {
                st.require_dir(parent_dir(path))
                    .map_err(|e| path_error("lock", path, e))?;
                st.begin(FaultOp::Create)
                    .map_err(|e| path_error("lock", path, e))?;
                let id = st.next_inode;
                st.next_inode += 1;
                st.inodes.insert(id, Inode::default());
                st.create_node(path, Node::File(id));
            }
            st.locks.insert(path.to_path_buf());
        }
        Ok(Box::new(SimLock {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
        }))
    }
}
