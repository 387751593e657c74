//! The engine's value types: what a read returns, which entries it may
//! return, what an open expects, a durability completion.

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, OpenOptions};

use crate::error::Result;

/// A durability completion ([`crate::Group::on_durable`]): called once with the
/// flushed offset, or with the failure that means it can no longer be.
pub type OnDurable = Box<dyn FnOnce(Result<Offset>) + Send>;

/// Which entries a read may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Only committed entries (below the high watermark).
    Committed,
    /// Everything in the log.
    Uncommitted,
}

/// One entry read from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its offset.
    pub offset: Offset,
    /// The epoch it was written in.
    pub epoch: Epoch,
    /// A control record (leader change, voter set, snapshot marker), not a
    /// user record: readers of user data filter these out.
    pub control: bool,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// The identity a caller expects of the directory it opens
/// ([`crate::Node::open`]): a mismatch is refused before anything on disk
/// changes, with both values in the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The cluster the directory must belong to.
    pub cluster_id: ClusterId,
    /// The node that must own it.
    pub node_id: NodeId,
    /// The directory id minted at format, where the caller knows it (a
    /// replaced disk has another).
    pub directory_id: Option<DirectoryId>,
}

impl Identity {
    /// Cluster and node, any directory id.
    pub fn node(cluster_id: ClusterId, node_id: NodeId) -> Identity {
        Identity {
            cluster_id,
            node_id,
            directory_id: None,
        }
    }

    /// Exactly the directory `meta` describes.
    pub fn of(meta: &Meta) -> Identity {
        Identity {
            cluster_id: meta.cluster_id,
            node_id: meta.node_id,
            directory_id: Some(meta.directory_id),
        }
    }

    pub(crate) fn open_options(self) -> OpenOptions {
        OpenOptions {
            expected_cluster_id: Some(self.cluster_id),
            expected_node_id: Some(self.node_id),
            expected_directory_id: self.directory_id,
        }
    }
}
