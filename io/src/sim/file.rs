//! A file and a lock on the simulated disk: reads, buffered and direct
//! writes, syncs, and their faults.

#[allow(
    clippy::wildcard_imports,
    reason = "the parent's private items, as a child module sees them"
)]
use super::*;

impl SimFile {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits (the disk's lock released) while [`SimFs::hold_io`] holds
    /// writes and syncs; a power cut meanwhile ends the wait with its
    /// error.
    fn wait_while_held<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        op: &'static str,
    ) -> io::Result<MutexGuard<'a, State>> {
        while st.io_held {
            drop(st);
            std::thread::sleep(std::time::Duration::from_millis(1));
            st = self.lock_state();
            st.check_alive()
                .map_err(|e| path_error(op, &self.path, e))?;
        }
        Ok(st)
    }

    fn check_writable(&self, op: &'static str) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(path_error(
                op,
                &self.path,
                io::Error::new(io::ErrorKind::PermissionDenied, "opened read-only"),
            ))
        }
    }

    /// An `O_DIRECT | O_DSYNC` write: checked for alignment, durable on
    /// return. As the kernel does, cached writes overlapping it are written
    /// (made durable) first; others stay pending.
    fn write_direct(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        let align = crate::fs::DIRECT_ALIGN;
        let aligned = pos % align == 0
            && buf.len() as u64 % align == 0
            && (buf.as_ptr() as usize) % to_usize(align) == 0;
        if !aligned {
            return Err(path_error(
                "write",
                &self.path,
                io::Error::new(io::ErrorKind::InvalidInput, "unaligned direct write"),
            ));
        }
        let mut st = self.lock_state();
        st.begin(FaultOp::Write)
            .map_err(|e| path_error("write", &self.path, e))?;
        let end = pos + buf.len() as u64;
        if end > st.inode_mut(self.inode).current.len() as u64 {
            st.need_space()
                .map_err(|e| path_error("write", &self.path, e))?;
        }
        let inode = st.inode_mut(self.inode);
        let resizes = inode
            .pending
            .iter()
            .any(|p| matches!(p, Pending::SetLen(_)));
        let (overlapping, rest): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut inode.pending)
            .into_iter()
            .partition(|p| match p {
                Pending::Write { pos: p, data } => {
                    resizes || (*p < end && p + data.len() as u64 > pos)
                }
                Pending::SetLen(_) => true,
            });
        for p in overlapping {
            p.apply(&mut inode.durable);
        }
        inode.pending = rest;
        write_into(&mut inode.current, pos, buf);
        write_into(&mut inode.durable, pos, buf);
        Ok(())
    }

    fn sync(&self, op: &'static str) -> io::Result<()> {
        let mut st = self.lock_state();
        if let Err(e) = st.begin(FaultOp::Sync) {
            if st.alive {
                // Linux after a failed fsync: the pages are marked clean but
                // were not written, so the data is never made durable.
                st.inode_mut(self.inode).pending.clear();
            }
            return Err(path_error(op, &self.path, e));
        }
        st = self.wait_while_held(st, op)?;
        let inode = st.inode_mut(self.inode);
        for p in std::mem::take(&mut inode.pending) {
            p.apply(&mut inode.durable);
        }
        let delay = st.sync_delay;
        drop(st);
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        Ok(())
    }
}

impl File for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        let mut st = self.lock_state();
        st.check_alive()
            .map_err(|e| path_error("read", &self.path, e))?;
        let data = &st.inode_mut(self.inode).current;
        let start = to_usize(pos);
        if start >= data.len() {
            return Ok(0);
        }
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }

    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        self.check_writable("write")?;
        if self.direct {
            return self.write_direct(buf, pos);
        }
        let mut st = self.lock_state();
        st.begin(FaultOp::Write)
            .map_err(|e| path_error("write", &self.path, e))?;
        if pos + buf.len() as u64 > st.inode_mut(self.inode).current.len() as u64 {
            st.need_space()
                .map_err(|e| path_error("write", &self.path, e))?;
        }
        let mut st = self.wait_while_held(st, "write")?;
        let inode = st.inode_mut(self.inode);
        write_into(&mut inode.current, pos, buf);
        inode.pending.push(Pending::Write {
            pos,
            data: buf.to_vec(),
        });
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let mut st = self.lock_state();
        st.check_alive()
            .map_err(|e| path_error("stat", &self.path, e))?;
        Ok(st.inode_mut(self.inode).current.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable("set_len")?;
        let mut st = self.lock_state();
        st.begin(FaultOp::SetLen)
            .map_err(|e| path_error("set_len", &self.path, e))?;
        if len > st.inode_mut(self.inode).current.len() as u64 {
            st.need_space()
                .map_err(|e| path_error("set_len", &self.path, e))?;
        }
        let inode = st.inode_mut(self.inode);
        inode.current.resize(to_usize(len), 0);
        inode.pending.push(Pending::SetLen(len));
        Ok(())
    }

    fn allocate(&self, len: u64) -> io::Result<()> {
        self.check_writable("allocate")?;
        let mut st = self.lock_state();
        st.begin(FaultOp::Allocate)
            .map_err(|e| path_error("allocate", &self.path, e))?;
        if len > st.inode_mut(self.inode).current.len() as u64 {
            st.need_space()
                .map_err(|e| path_error("allocate", &self.path, e))?;
        }
        let inode = st.inode_mut(self.inode);
        if (inode.current.len() as u64) < len {
            inode.current.resize(to_usize(len), 0);
            inode.pending.push(Pending::SetLen(len));
        }
        Ok(())
    }

    /// Zeros within the file are written; beyond its end the file is
    /// extended (on the simulated disk, reading zeros is all either means).
    fn fill_zeros(&self, from: u64, to: u64) -> io::Result<()> {
        let len = self.len()?;
        if from < len.min(to) {
            let zeros = vec![0u8; to_usize(len.min(to) - from)];
            self.write_all_at(&zeros, from)?;
        }
        if to > len {
            self.allocate(to)?;
        }
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync("sync_data")
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync("sync_all")
    }
}

impl LockGuard for SimLock {
    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.locks.remove(&self.path);
    }
}
