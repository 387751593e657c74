//! D1, D8, D64: one Raft group through the door, on the engine that will
//! remain (a group of a [`Node`]) against the one that goes (a [`Store`]),
//! with the same log options: 1, 8 or 64 writers proposing entries to the
//! one group, each placing its entry under the group's lock (a Raft log has
//! one order) and waiting for durability outside it, so the writers share
//! sync rounds. Issue 38's "measure first".

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset};
use quorumlog_io::RealFs;
use quorumlog_log::LogOptions;
use quorumlog_raft::{
    Group, Identity, Node, NodeOptions, RaftStorage, SharedFs, Store, StoreOptions, SyncPolicy,
};

use crate::multi::{MultiSystem, MultiWorkload};
use crate::systems::BenchError;

/// D1, D8, D64: one group, 1, 8 and 64 writers, 256 B entries.
pub const DOOR_WORKLOADS: [MultiWorkload; 3] = [
    MultiWorkload {
        name: "D1",
        groups: 1,
        writers: 1,
        per_call: 1,
        entry_bytes: 256,
    },
    MultiWorkload {
        name: "D8",
        groups: 1,
        writers: 8,
        per_call: 1,
        entry_bytes: 256,
    },
    MultiWorkload {
        name: "D64",
        groups: 1,
        writers: 64,
        per_call: 1,
        entry_bytes: 256,
    },
];

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(9))
}

/// Each door's default log options, with 64 MiB segments and 2
/// prefilled (appends overwrite written blocks; a round's setup stays
/// short).
fn log_options(defaults: &LogOptions) -> LogOptions {
    LogOptions {
        segment_size_bytes: 64 << 20,
        prefill_segments: 2,
        ..defaults.clone()
    }
}

/// One group behind the door `S`, and where its next entry goes.
pub struct Door<S: RaftStorage> {
    name: &'static str,
    handle: Arc<S>,
    next: Mutex<u64>,
    // Keeps the node of a group open (dropped after the group).
    _node: Option<Node>,
}

impl Door<Store> {
    /// A one-group store in `dir`.
    ///
    /// # Errors
    /// Any open error.
    pub fn store(dir: &Path) -> Result<Self, BenchError> {
        let fs: SharedFs = Arc::new(RealFs::new());
        let defaults = StoreOptions::default();
        let options = StoreOptions {
            log: log_options(&defaults.log),
            sync: SyncPolicy::GroupCommit,
        };
        Store::format(&fs, dir, meta(), Some(Offset(1)), &options)?;
        let (s, _) = Store::open(&fs, dir, &Identity::of(&meta()), &options)?;
        Ok(Door {
            name: "door-store",
            handle: Arc::new(s),
            next: Mutex::new(1),
            _node: None,
        })
    }
}

impl Door<Group> {
    /// A node in `dir` with one group.
    ///
    /// # Errors
    /// Any open error.
    pub fn group(dir: &Path) -> Result<Self, BenchError> {
        let fs: SharedFs = Arc::new(RealFs::new());
        let defaults = NodeOptions::default();
        let options = NodeOptions {
            log: log_options(&defaults.log),
            sync: SyncPolicy::GroupCommit,
            ..defaults
        };
        Node::format(&fs, dir, meta(), &options)?;
        let (node, _) = Node::open(&fs, dir, &Identity::of(&meta()), &options)?;
        node.create_group(1, Offset(1))?;
        let g = node.group(1)?;
        Ok(Door {
            name: "door-group",
            handle: Arc::new(g),
            next: Mutex::new(1),
            _node: Some(node),
        })
    }
}

impl<S: RaftStorage + Send + Sync> MultiSystem for Door<S> {
    fn name(&self) -> String {
        self.name.into()
    }

    fn append_durable(&self, _groups: &[usize], data: &[u8]) -> Result<(), BenchError> {
        let end = {
            let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
            let at = *next;
            self.handle.append_replicated_queued_with(
                Offset(at),
                Epoch(1),
                1,
                data.len() as u64,
                |_, buf| {
                    buf.extend_from_slice(data);
                    Ok(())
                },
            )?;
            *next += 1;
            at + 1
        };
        self.handle.wait_durable(Offset(end))?;
        Ok(())
    }

    fn syncs(&self) -> Option<u64> {
        Some(self.handle.log_stats().syncs)
    }
}
