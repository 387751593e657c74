//! Typed numbers shared by every crate above `io`.

use std::fmt;

macro_rules! typed_u64 {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

typed_u64!(
    /// Position of a record in the log: dense, starting at 0.
    Offset
);
typed_u64!(
    /// A leader epoch (Raft term). 64 bits: an epoch never wraps.
    Epoch
);
typed_u64!(
    /// The id of a node (replica) in the quorum.
    NodeId
);

/// The id of a cluster, fixed when its first data directory is formatted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterId(pub u128);

/// A random id minted when a data directory is formatted. A node that lost its
/// disk comes back with a new one, so it cannot pass for the voter it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DirectoryId(pub u128);

impl DirectoryId {
    /// A fresh random id (never zero, which would look unset).
    pub fn random() -> Self {
        loop {
            let id: u128 = rand::random();
            if id != 0 {
                return DirectoryId(id);
            }
        }
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Display for DirectoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A vote: the candidate voted for, a [`Voter`] (its node and the
/// directory id it campaigned with). One type, two names: a vote is cast
/// for a voter.
pub type Vote = Voter;

/// A voter of the quorum: a node and the directory it votes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Voter {
    /// The voter's node id.
    pub node_id: NodeId,
    /// The voter's directory id.
    pub directory_id: DirectoryId,
}
