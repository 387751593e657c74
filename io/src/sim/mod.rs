//! The simulated disk: a deterministic, seedable [`FileSystem`] that knows
//! exactly what is durable.
//!
//! Per file it keeps a durable image and the writes not yet synced; per
//! directory the durable entries and the creates, renames and removes not yet
//! made durable by [`FileSystem::sync_dir`]. [`SimFs::crash`] returns the disk
//! a rebooted machine would see (see [`CrashPlan`]). Faults can be injected on
//! a chosen call ([`SimFs::inject_fault`]), the power can be cut at a chosen
//! call ([`SimFs::crash_after`]), and durable bits can be flipped
//! ([`SimFs::flip_bit`]).
//!
//! Invariants:
//! - `current` of every file equals `durable` with its `pending` operations
//!   applied in order, except after a failed sync, which drops `pending`
//!   without applying it (the Linux behaviour being modelled); a successful
//!   sync empties `pending` into `durable`.
//! - The current namespace equals the durable one with `dir_ops` applied.
//! - After the power is cut (crash point reached, or [`SimFs::crash`] called)
//!   every call on this instance fails: a dead machine does no more I/O.

#![expect(
    clippy::indexing_slicing,
    reason = "test machinery: the simulator indexes buffers it sized itself, and a panic \
              in it fails the test that drives it"
)]

mod crash;
mod file;
mod fs;
mod rng;

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub use crash::{CrashPlan, Tear};
pub use rng::SimRng;

use crate::fs::{parent_dir, path_error, DirEntry, File, FileSystem, LockGuard, OpenMode};

/// The kinds of call a fault can be injected on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultOp {
    /// Creating a file or directory.
    Create,
    /// [`File::write_all_at`].
    Write,
    /// [`File::set_len`].
    SetLen,
    /// [`File::allocate`].
    Allocate,
    /// [`File::sync_data`] and [`File::sync_all`].
    Sync,
    /// [`FileSystem::sync_dir`].
    SyncDir,
    /// [`FileSystem::rename`].
    Rename,
    /// [`FileSystem::remove_file`].
    Remove,
}

/// The error an injected fault returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// An I/O error (`EIO`).
    Eio,
    /// A full disk (`ENOSPC`).
    Enospc,
}

impl FaultKind {
    fn to_error(self) -> io::Error {
        match self {
            FaultKind::Eio => io::Error::other("injected EIO"),
            FaultKind::Enospc => io::Error::new(io::ErrorKind::StorageFull, "injected ENOSPC"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Node {
    File(u64),
    Dir,
}

#[derive(Debug, Clone)]
enum Pending {
    Write { pos: u64, data: Vec<u8> },
    SetLen(u64),
}

impl Pending {
    fn apply(&self, bytes: &mut Vec<u8>) {
        match self {
            Pending::Write { pos, data } => write_into(bytes, *pos, data),
            Pending::SetLen(len) => bytes.resize(to_usize(*len), 0),
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Inode {
    durable: Vec<u8>,
    current: Vec<u8>,
    pending: Vec<Pending>,
}

#[derive(Debug, Clone)]
enum DirOp {
    Create {
        path: PathBuf,
        node: Node,
    },
    Remove {
        path: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
        node: Node,
    },
}

impl DirOp {
    fn touches(&self, dir: &Path) -> bool {
        match self {
            DirOp::Create { path, .. } | DirOp::Remove { path } => parent_dir(path) == dir,
            DirOp::Rename { from, to, .. } => parent_dir(from) == dir || parent_dir(to) == dir,
        }
    }

    fn apply(&self, ns: &mut BTreeMap<PathBuf, Node>) {
        match self {
            DirOp::Create { path, node } => {
                ns.insert(path.clone(), *node);
            }
            DirOp::Remove { path } => {
                ns.remove(path);
            }
            DirOp::Rename { from, to, node } => {
                ns.remove(from);
                ns.insert(to.clone(), *node);
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Fault {
    op: FaultOp,
    at: u64,
    kind: FaultKind,
}

#[derive(Debug)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent switches of the simulated disk (power, tearing, a held queue, a full disk)"
)]
struct State {
    alive: bool,
    rng: SimRng,
    next_inode: u64,
    inodes: BTreeMap<u64, Inode>,
    durable_ns: BTreeMap<PathBuf, Node>,
    ns: BTreeMap<PathBuf, Node>,
    dir_ops: Vec<DirOp>,
    locks: BTreeSet<PathBuf>,
    faults: Vec<Fault>,
    op_counts: BTreeMap<FaultOp, u64>,
    calls: u64,
    crash_at: Option<u64>,
    page_tearing: bool,
    /// How long each file sync takes (a slow disk); none by default.
    sync_delay: std::time::Duration,
    /// While set, every file write and sync waits before it takes effect
    /// (a disk whose queue has stalled), so a test can hold a round in
    /// flight for as long as it needs without guessing a duration.
    io_held: bool,
    /// A full disk: every call that needs new space fails with `ENOSPC`
    /// (a create, a write or length change past a file's end, an
    /// allocation past it); writes within a file's length still succeed,
    /// as in preallocated space.
    full: bool,
}

fn power_lost() -> io::Error {
    io::Error::other("simulated power loss: this machine is down")
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn write_into(bytes: &mut Vec<u8>, pos: u64, data: &[u8]) {
    let start = to_usize(pos);
    let end = start + data.len();
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    bytes[start..end].copy_from_slice(data);
}

impl State {
    fn new(seed: u64) -> Self {
        let mut ns = BTreeMap::new();
        ns.insert(PathBuf::from("/"), Node::Dir);
        State {
            alive: true,
            rng: SimRng::new(seed),
            next_inode: 1,
            inodes: BTreeMap::new(),
            durable_ns: ns.clone(),
            ns,
            dir_ops: Vec::new(),
            locks: BTreeSet::new(),
            faults: Vec::new(),
            op_counts: BTreeMap::new(),
            calls: 0,
            crash_at: None,
            page_tearing: false,
            sync_delay: std::time::Duration::ZERO,
            io_held: false,
            full: false,
        }
    }

    /// Refuses a call that needs new space on a full disk.
    fn need_space(&self) -> io::Result<()> {
        if self.full {
            return Err(FaultKind::Enospc.to_error());
        }
        Ok(())
    }

    fn check_alive(&self) -> io::Result<()> {
        if self.alive {
            Ok(())
        } else {
            Err(power_lost())
        }
    }

    /// Accounts for one mutating call: cuts the power at the crash point and
    /// fires an injected fault aimed at this call.
    fn begin(&mut self, op: FaultOp) -> io::Result<()> {
        self.check_alive()?;
        if self.crash_at.is_some_and(|at| self.calls >= at) {
            self.alive = false;
            return Err(power_lost());
        }
        self.calls += 1;
        let count = self.op_counts.entry(op).or_insert(0);
        *count += 1;
        let count = *count;
        if let Some(i) = self.faults.iter().position(|f| f.op == op && f.at == count) {
            let fault = self.faults.remove(i);
            return Err(fault.kind.to_error());
        }
        Ok(())
    }

    fn inode_mut(&mut self, id: u64) -> &mut Inode {
        self.inodes.entry(id).or_default()
    }

    fn lookup_file(&self, path: &Path) -> io::Result<u64> {
        match self.ns.get(path) {
            Some(Node::File(id)) => Ok(*id),
            Some(Node::Dir) => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "is a directory",
            )),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no such file")),
        }
    }

    fn require_dir(&self, dir: &Path) -> io::Result<()> {
        match self.ns.get(dir) {
            Some(Node::Dir) => Ok(()),
            Some(Node::File(_)) => Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory",
            )),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no such directory")),
        }
    }

    fn create_node(&mut self, path: &Path, node: Node) {
        self.ns.insert(path.to_path_buf(), node);
        self.dir_ops.push(DirOp::Create {
            path: path.to_path_buf(),
            node,
        });
    }
}

/// The simulated disk. Cloning shares the same disk (like two handles on one
/// machine); [`SimFs::crash`] makes a new machine.
#[derive(Debug, Clone)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
}

impl SimFs {
    /// An empty disk (only `/` exists) whose random choices follow `seed`.
    pub fn new(seed: u64) -> Self {
        SimFs {
            state: Arc::new(Mutex::new(State::new(seed))),
        }
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many mutating calls (creates, writes, syncs, renames, ...) this
    /// disk has served. Crash tests count a workload's calls with this, then
    /// cut the power at each of them with [`SimFs::crash_after`].
    pub fn calls(&self) -> u64 {
        self.lock_state().calls
    }

    /// Cuts the power once `n` more mutating calls have been served: call
    /// number `n + 1` and everything after it fails and does nothing.
    pub fn crash_after(&self, n: u64) {
        let mut st = self.lock_state();
        st.crash_at = Some(st.calls + n);
    }

    /// Models a device that writes whole 4 KiB pages and can tear them: a
    /// torn write then also damages, from the tear on, the bytes of the
    /// pages it touches that it did not itself write (already durable
    /// bytes sharing a page with it). Used to show why acknowledged data
    /// must not share a page with later writes (docs/design.md invariant 4).
    pub fn set_page_tearing(&self, on: bool) {
        self.lock_state().page_tearing = on;
    }

    /// Makes every file sync take `delay` (a slow disk: the calling thread
    /// sleeps after the sync's effect, holding no lock of the disk's).
    pub fn set_sync_delay(&self, delay: std::time::Duration) {
        self.lock_state().sync_delay = delay;
    }

    /// Holds every file write and sync before it takes effect until called
    /// again with `false`: the calling thread waits, and nothing it writes
    /// becomes visible or durable meanwhile. A power cut while held ends
    /// the wait with the power-loss error.
    pub fn hold_io(&self, held: bool) {
        self.lock_state().io_held = held;
    }

    /// Makes the disk full (or no longer): while full, every create, every
    /// write or length change past a file's end and every allocation past
    /// it fails with `ENOSPC`; writes within a file's length succeed (the
    /// space is already the file's).
    pub fn set_full(&self, full: bool) {
        self.lock_state().full = full;
    }

    /// Whether the power is still on.
    pub fn is_alive(&self) -> bool {
        self.lock_state().alive
    }

    /// Makes the `nth` next call of kind `op` (1 = the very next) fail with
    /// `kind` and do nothing. A failed sync additionally forgets the file's
    /// unsynced writes without making them durable, as Linux does: the data
    /// stays readable, a later sync succeeds, and a crash loses it.
    pub fn inject_fault(&self, op: FaultOp, nth: u64, kind: FaultKind) {
        let mut st = self.lock_state();
        let at = st.op_counts.get(&op).copied().unwrap_or(0) + nth;
        st.faults.push(Fault { op, at, kind });
    }

    /// Flips bit `bit` (counted from the start of the file) in the durable
    /// and current contents of the file at `path`.
    ///
    /// # Errors
    /// `NotFound` if there is no such file, `InvalidInput` if the bit lies past
    /// its durable end.
    pub fn flip_bit(&self, path: &Path, bit: u64) -> io::Result<()> {
        let mut st = self.lock_state();
        let id = st
            .lookup_file(path)
            .map_err(|e| path_error("flip_bit", path, e))?;
        let inode = st.inode_mut(id);
        let byte = to_usize(bit / 8);
        let mask = 1u8 << (bit % 8);
        if byte >= inode.durable.len() {
            return Err(path_error(
                "flip_bit",
                path,
                io::Error::new(io::ErrorKind::InvalidInput, "bit past the durable end"),
            ));
        }
        inode.durable[byte] ^= mask;
        if let Some(b) = inode.current.get_mut(byte) {
            *b ^= mask;
        }
        Ok(())
    }

    /// Overwrites durable bytes at `pos` of the file at `path` (and its
    /// current view), as a misdirected or stray write would.
    ///
    /// # Errors
    /// `NotFound` if there is no such file.
    pub fn corrupt_durable(&self, path: &Path, pos: u64, data: &[u8]) -> io::Result<()> {
        let mut st = self.lock_state();
        let id = st
            .lookup_file(path)
            .map_err(|e| path_error("corrupt", path, e))?;
        let inode = st.inode_mut(id);
        write_into(&mut inode.durable, pos, data);
        write_into(&mut inode.current, pos, data);
        Ok(())
    }

    /// The durable contents of the file at `path` in the durable namespace,
    /// or `None` if a crash now would leave no such file.
    pub fn durable_contents(&self, path: &Path) -> Option<Vec<u8>> {
        let st = self.lock_state();
        match st.durable_ns.get(path) {
            Some(Node::File(id)) => st.inodes.get(id).map(|i| i.durable.clone()),
            _ => None,
        }
    }

    /// Whether any write or directory operation is not yet durable.
    pub fn has_unsynced(&self) -> bool {
        let st = self.lock_state();
        !st.dir_ops.is_empty() || st.inodes.values().any(|i| !i.pending.is_empty())
    }

    /// Cuts the power with a random [`CrashPlan`] and returns the disk as the
    /// rebooted machine sees it. This instance is dead afterwards.
    #[must_use = "the rebooted disk is the only live one"]
    pub fn crash(&self) -> SimFs {
        self.crash_with(CrashPlan::Random)
    }

    /// Cuts the power, keeping what `plan` says of the unsynced state, and
    /// returns the rebooted machine's disk. This instance (and every file
    /// opened on it) is dead afterwards. The new disk's random choices follow
    /// from this disk's seed, so a crash test replays from its seed.
    #[must_use = "the rebooted disk is the only live one"]
    pub fn crash_with(&self, plan: CrashPlan) -> SimFs {
        let mut st = self.lock_state();
        st.alive = false;
        let next_seed = st.rng.next_u64();
        let survivors = crash::survivors(&mut st, plan);
        let mut fresh = State::new(next_seed);
        fresh.next_inode = st.next_inode;
        fresh.page_tearing = st.page_tearing;
        for (path, node) in &survivors.ns {
            fresh.ns.insert(path.clone(), *node);
            fresh.durable_ns.insert(path.clone(), *node);
        }
        for (id, bytes) in survivors.contents {
            fresh.inodes.insert(
                id,
                Inode {
                    durable: bytes.clone(),
                    current: bytes,
                    pending: Vec::new(),
                },
            );
        }
        SimFs {
            state: Arc::new(Mutex::new(fresh)),
        }
    }
}

/// A file on the simulated disk.
#[derive(Debug)]
struct SimFile {
    state: Arc<Mutex<State>>,
    inode: u64,
    path: PathBuf,
    writable: bool,
    /// `OpenMode::DirectWrite`: aligned writes only, each durable on
    /// return.
    direct: bool,
}

#[derive(Debug)]
struct SimLock {
    state: Arc<Mutex<State>>,
    path: PathBuf,
}
