//! The `KRaft` wing: [`KraftReplica`], a replica of a `KRaft`-style
//! quorum (KIP-595 elections, KIP-853 voter records, KIP-455
//! reassignment) over one [`Group`] of a node, which it owns. It holds
//! what only that protocol needs: the election state with its transitions
//! and restart rules, leader appends refused outside the epoch this node
//! leads, followers' appends of the leader's entries with their epochs
//! checked, fetch validation, the voter history and reassignment. A group
//! no wing owns (openraft, raft-rs) pays nothing for any of it.
//!
//! It is in this crate, not behind a feature: it adds no dependency (its
//! code is ~1,900 lines of this crate's 12,000) and the node keeps its
//! control entries for it ([`crate::Entry::control`]), which the node's
//! format must know whether or not a wing is built.
//!
//! Its parts:
//! - [`election`]: typed transitions, each durable before it returns (the
//!   group's quorum state: one writer);
//! - [`commit`]: the leader's progress tracker over the voters' durable
//!   offsets;
//! - [`fetch`]: a follower's fetch position validated with `KRaft`'s
//!   semantics;
//! - [`compaction`]: leader-coordinated cleaning with retention caps;
//! - [`voters`]: voter sets and reassignments as control entries and the
//!   leader's reassignment state machine; `control` keeps their history.
//!
//! The wing offers no `Deref` to its group: each method changing the log
//! goes through the wing, so the election check and the voter history
//! see every change. Do not keep another handle of its group.
//!
//! What blocks, and for how long: election transitions one record of the
//! shared log, durable before they return; leader and follower appends
//! one buffered write (readable at once: a leader serves followers before
//! its own sync, as `KRaft` does), durable with the next round;
//! `append_durable` waits for it; reads and `validate_offset_and_epoch`
//! never sync.

mod api;
pub mod commit;
pub mod compaction;
mod control;
pub mod election;
pub mod fetch;
mod recover;
pub use crate::voters;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

pub use api::KraftInstall;
pub use commit::{CommitTracker, Progress};
pub use control::snapshot_user_metadata;
pub use control::StateAt;
pub use election::{Election, LogPosition, Role, VoteDecision};
pub use fetch::{validate_offset_and_epoch, FetchPosition, LogView};
pub use recover::{recover_quorum, QuorumRecovery};

use crate::error::Result;
use crate::{Group, Identity, Node, NodeOpenReport, NodeOptions};

/// The group a one-group `KRaft` directory keeps its log in
/// ([`KraftReplica::open`]); its log starts at offset 0.
pub const KRAFT_GROUP: u64 = 1;

/// A replica of a `KRaft`-style quorum over one group (see the module
/// documentation).
#[derive(Debug)]
pub struct KraftReplica {
    group: Arc<Group>,
    /// The node, when the replica opened it (one group per directory).
    node: Option<Node>,
    /// The election state; held across a leader append, so no transition
    /// comes between the check and the append.
    election: Mutex<Election>,
    control: control::Shared,
}

const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<KraftReplica>();
};

impl KraftReplica {
    /// Opens the node of `dir` ([`Node::open`]: identity first, refusals
    /// before any change) and the wing over its group [`KRAFT_GROUP`],
    /// created empty at offset 0 the first time.
    ///
    /// # Errors
    /// As [`Node::open`]; as [`KraftReplica::over`].
    pub fn open(
        fs: &quorumlog_checkpoint::SharedFs,
        dir: &std::path::Path,
        expect: &Identity,
        options: &NodeOptions,
    ) -> Result<(KraftReplica, NodeOpenReport)> {
        let (node, report) = Node::open(fs, dir, expect, options)?;
        if !node.groups().contains(&KRAFT_GROUP) {
            node.create_group(KRAFT_GROUP, quorumlog_checkpoint::Offset(0))?;
        }
        let group = Arc::new(node.group(KRAFT_GROUP)?);
        let mut replica = KraftReplica::over(group)?;
        replica.node = Some(node);
        Ok((replica, report))
    }

    /// The wing over `group`: the election state under `KRaft`'s restart
    /// rules (moved up to the log's last epoch, durably), the voter
    /// history rebuilt from the control entries of the log (only their
    /// batches are read) over the state at its start.
    ///
    /// # Errors
    /// The election write-back's; the control entries' reads.
    pub fn over(group: Arc<Group>) -> Result<KraftReplica> {
        let last = group.last_epoch();
        let election = Election::open(
            Arc::clone(&group) as Arc<dyn election::QuorumStateFile>,
            last,
        )?;
        let control = control::Shared::new(control::rebuild(&group)?);
        Ok(KraftReplica {
            group,
            node: None,
            election: Mutex::new(election),
            control,
        })
    }

    /// Closes: the group's handle, then the node when the replica opened
    /// it ([`Node::close`]: a checkpoint, the clean marker).
    ///
    /// # Errors
    /// As [`Node::close`].
    pub fn close(self) -> Result<()> {
        // Every holder of the group's handle goes first (the election
        // keeps one as its state file): the node closes only without them.
        let KraftReplica {
            group,
            node,
            election,
            control,
        } = self;
        drop((group, election, control));
        node.map_or(Ok(()), Node::close)
    }

    /// The election state (transitions are durable before they return).
    pub fn election(&self) -> MutexGuard<'_, Election> {
        self.election.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where this replica's log ends, for votes (Raft §5.4.1): the epoch
    /// of its last entry (of an empty log, the entry's before it) and its
    /// end.
    pub fn log_position(&self) -> election::LogPosition {
        election::LogPosition {
            last_epoch: self.group.last_epoch(),
            end_offset: self.group.extent().queued_end,
        }
    }

    /// This replica as a voter: its node and directory id.
    pub fn me(&self) -> quorumlog_checkpoint::Voter {
        let meta = self.group.meta();
        quorumlog_checkpoint::Voter {
            node_id: meta.node_id,
            directory_id: meta.directory_id,
        }
    }
}
