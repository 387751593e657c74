//! The election state: typed transitions over a durable quorum state (a
//! group's, [`crate::Group::persist_quorum_state`], or a data directory's
//! `quorum-state` file), each durable before it returns (docs/design.md
//! invariant 5).
//!
//! Roles, as `KRaft` names them (KIP-595): *unattached* (an epoch, no leader,
//! no vote), *voted* (a vote cast for another candidate), *candidate* (a
//! vote cast for itself), *leader*, *follower* (of a known leader) and
//! *resigned* (a leader that gave up its epoch; memory only: it neither
//! leads nor votes again in that epoch).
//!
//! Rules the transitions enforce, on top of the file's own (no epoch
//! regression, one vote and one leader per epoch):
//! - a vote is granted only to a candidate whose log is at least as
//!   up-to-date as ours (Raft §5.4.1: the last epoch, then the end offset),
//!   and only once per epoch (the same candidate again is granted again);
//! - a leader appends only in the epoch it durably leads, not once resigned;
//! - a node that was leader comes back **resigned** in that epoch; an epoch
//!   on file older than the log's last epoch comes back as that epoch,
//!   unattached, written back before `open` returns.
//!
//! The vote and the epoch are one record replaced atomically, so no crash
//! can pair an epoch with another epoch's vote; a transition that fails to
//! persist changes nothing in memory.

use std::sync::Arc;

use quorumlog_checkpoint::{DataDir, DirectoryId, Epoch, NodeId, Offset, QuorumState, Vote};

use crate::error::{Error, Result};

/// Where an [`Election`] keeps its state durably: a node's group (the
/// `KRaft` wing's) or a data directory's `quorum-state` file. Both check a
/// transition by the same rules ([`QuorumState::check_transition`]).
pub trait QuorumStateFile: Send + Sync + std::fmt::Debug {
    /// The durable state.
    fn load(&self) -> QuorumState;
    /// Replaces it, durable on return.
    ///
    /// # Errors
    /// A refused transition (nothing changes); I/O.
    fn store(&self, next: &QuorumState) -> Result<()>;
    /// This node and its directory id (its vote for itself names both).
    fn me(&self) -> (NodeId, DirectoryId);
}

impl QuorumStateFile for DataDir {
    fn load(&self) -> QuorumState {
        self.quorum_state()
    }
    fn store(&self, next: &QuorumState) -> Result<()> {
        Ok(self.persist_quorum_state(next)?)
    }
    fn me(&self) -> (NodeId, DirectoryId) {
        let m = self.meta();
        (m.node_id, m.directory_id)
    }
}

impl QuorumStateFile for crate::Group {
    fn load(&self) -> QuorumState {
        self.quorum_state()
    }
    fn store(&self, next: &QuorumState) -> Result<()> {
        self.persist_quorum_state(next)
    }
    fn me(&self) -> (NodeId, DirectoryId) {
        let m = self.meta();
        (m.node_id, m.directory_id)
    }
}

/// Where a log ends, for comparing candidates (Raft §5.4.1): the epoch of
/// its last record (`None`: empty) and its end offset. Ordered by epoch,
/// then offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LogPosition {
    /// The epoch of the last record, `None` for an empty log.
    pub last_epoch: Option<Epoch>,
    /// The offset after the last record.
    pub end_offset: Offset,
}

/// This node's role in the current epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// No leader known, no vote cast.
    Unattached,
    /// Voted for another candidate.
    Voted {
        /// The candidate.
        candidate: NodeId,
    },
    /// Voted for itself.
    Candidate,
    /// Leads the epoch.
    Leader,
    /// Follows a known leader.
    Follower {
        /// The leader.
        leader: NodeId,
    },
    /// Gave up (or came back from) leading this epoch: neither leads nor
    /// votes again in it.
    Resigned,
}

impl Role {
    /// The role as a word (for errors and logs).
    pub fn name(self) -> &'static str {
        match self {
            Role::Unattached => "unattached",
            Role::Voted { .. } => "voted",
            Role::Candidate => "candidate",
            Role::Leader => "leader",
            Role::Follower { .. } => "follower",
            Role::Resigned => "resigned",
        }
    }
}

/// The answer to a vote request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoteDecision {
    /// Granted (durable before this returns).
    Granted,
    /// Refused: the candidate's log is behind ours.
    LogBehind {
        /// Where our log ends.
        ours: LogPosition,
    },
    /// Refused: this epoch's vote went to another node.
    AlreadyVoted {
        /// Who got it.
        for_node: NodeId,
    },
    /// Refused: this epoch has a known leader (or this node led it).
    LeaderKnown,
}

/// The election state of one node: its durable state (read from its
/// keeper on every call, so a state persisted through the group by
/// anyone is the one seen here) and one bit in memory, *resigned*.
#[derive(Debug)]
pub struct Election {
    dd: Arc<dyn QuorumStateFile>,
    me: NodeId,
    resigned: bool,
}

impl Election {
    /// Loads the election state kept by `dd` (whose identity is this node),
    /// applying the restart rules against `log_last_epoch`, the epoch of
    /// the log's last record; writes the state back when a rule changed it.
    ///
    /// # Errors
    /// `Checkpoint` if the write-back fails.
    pub fn open(dd: Arc<dyn QuorumStateFile>, log_last_epoch: Option<Epoch>) -> Result<Election> {
        let me = dd.me().0;
        let state = dd.load();
        let mut election = Election {
            resigned: state.leader == Some(me),
            dd,
            me,
        };
        if let Some(log_epoch) = log_last_epoch {
            if log_epoch > state.epoch {
                let next = Election::at_epoch(log_epoch);
                election.persist(&next, false)?;
            }
        }
        Ok(election)
    }

    /// The current epoch.
    pub fn epoch(&self) -> Epoch {
        self.state().epoch
    }

    /// The durable state (a copy).
    pub fn state(&self) -> QuorumState {
        self.dd.load()
    }

    /// This node's role in the current epoch.
    pub fn role(&self) -> Role {
        if self.resigned {
            return Role::Resigned;
        }
        match (self.state().leader, self.state().voted) {
            (Some(l), _) if l == self.me => Role::Leader,
            (Some(leader), _) => Role::Follower { leader },
            (None, Some(v)) if v.node_id == self.me => Role::Candidate,
            (None, Some(v)) => Role::Voted {
                candidate: v.node_id,
            },
            (None, None) => Role::Unattached,
        }
    }

    /// The leader of the current epoch, if known (this node included).
    pub fn leader(&self) -> Option<NodeId> {
        self.state().leader
    }

    /// Starts an election: the next epoch, a vote for itself, durable.
    /// Returns the new epoch.
    ///
    /// # Errors
    /// `Checkpoint` if it cannot be persisted (nothing changed).
    pub fn become_candidate(&mut self) -> Result<Epoch> {
        let epoch = Epoch(self.state().epoch.0 + 1);
        let mut next = Self::at_epoch(epoch);
        next.voted = Some(Vote {
            node_id: self.me,
            directory_id: self.dd.me().1,
        });
        self.persist(&next, false)?;
        Ok(epoch)
    }

    /// Answers a vote request of `candidate` (with its directory id, if the
    /// Raft layer has one) for `epoch`, whose log ends at `candidate_log`;
    /// ours ends at `our_log`. A newer epoch is adopted (durably) whatever
    /// the answer; a granted vote is durable before this returns.
    ///
    /// # Errors
    /// `StaleEpoch` for an epoch older than ours; `Checkpoint` if the new
    /// state cannot be persisted (nothing changed).
    pub fn grant_vote(
        &mut self,
        epoch: Epoch,
        candidate: (NodeId, Option<DirectoryId>),
        candidate_log: LogPosition,
        our_log: LogPosition,
    ) -> Result<VoteDecision> {
        if epoch < self.state().epoch {
            return Err(Error::StaleEpoch {
                current: self.state().epoch,
                proposed: epoch,
            });
        }
        let (node_id, directory_id) = candidate;
        let fresh = epoch > self.state().epoch;
        let mut next = if fresh {
            Self::at_epoch(epoch)
        } else {
            self.state()
        };
        let resigned = self.resigned && !fresh;
        let decision = if resigned || next.leader.is_some() {
            VoteDecision::LeaderKnown
        } else if let Some(v) = next.voted.filter(|v| v.node_id != node_id) {
            VoteDecision::AlreadyVoted {
                for_node: v.node_id,
            }
        } else if candidate_log < our_log {
            VoteDecision::LogBehind { ours: our_log }
        } else {
            next.voted = Some(Vote {
                node_id,
                directory_id: directory_id.unwrap_or(DirectoryId(0)),
            });
            VoteDecision::Granted
        };
        if fresh || decision == VoteDecision::Granted {
            self.persist(&next, resigned)?;
        }
        Ok(decision)
    }

    /// Becomes leader of the current epoch (after winning its election),
    /// durably.
    ///
    /// # Errors
    /// `WrongRole` unless a candidate; `Checkpoint` on a failed write.
    pub fn become_leader(&mut self) -> Result<()> {
        if self.role() != Role::Candidate {
            return Err(self.wrong_role("become leader"));
        }
        let mut next = self.state();
        next.leader = Some(self.me);
        self.persist(&next, false)
    }

    /// Follows `leader` in `epoch` (a newer epoch is adopted), durably.
    ///
    /// # Errors
    /// `StaleEpoch`; `LeaderKnown` if the epoch has another leader;
    /// `WrongRole` for this node itself (use [`Election::become_leader`]);
    /// `Checkpoint` on a failed write.
    pub fn become_follower(&mut self, epoch: Epoch, leader: NodeId) -> Result<()> {
        if epoch < self.state().epoch {
            return Err(Error::StaleEpoch {
                current: self.state().epoch,
                proposed: epoch,
            });
        }
        if leader == self.me {
            return Err(self.wrong_role("follow itself"));
        }
        let mut next = if epoch > self.state().epoch {
            Self::at_epoch(epoch)
        } else {
            self.state()
        };
        match next.leader {
            Some(existing) if existing == leader => return Ok(()),
            Some(existing) => {
                return Err(Error::LeaderKnown {
                    epoch,
                    existing,
                    proposed: leader,
                })
            }
            None => {}
        }
        next.leader = Some(leader);
        let resigned = self.resigned && epoch == self.state().epoch;
        self.persist(&next, resigned)
    }

    /// Moves to a newer epoch with no leader and no vote, durably.
    ///
    /// # Errors
    /// `StaleEpoch` unless `epoch` is newer; `Checkpoint` on a failed write.
    pub fn become_unattached(&mut self, epoch: Epoch) -> Result<()> {
        if epoch <= self.state().epoch {
            return Err(Error::StaleEpoch {
                current: self.state().epoch,
                proposed: epoch,
            });
        }
        let next = Self::at_epoch(epoch);
        self.persist(&next, false)
    }

    /// Gives up the current epoch (memory only): no more leading or voting
    /// in it. A leader resigns before it steps down or shuts down.
    pub fn resign(&mut self) {
        self.resigned = true;
    }

    /// Refuses a leader append unless this node durably leads `epoch` and
    /// has not resigned it.
    ///
    /// # Errors
    /// `WrongRole` (with the epoch and role).
    pub fn check_leader_append(&self, epoch: Epoch) -> Result<()> {
        if epoch == self.state().epoch && self.role() == Role::Leader {
            Ok(())
        } else {
            Err(self.wrong_role("append as leader"))
        }
    }

    /// The state in a newer `epoch`: no leader, no vote.
    fn at_epoch(epoch: Epoch) -> QuorumState {
        QuorumState {
            epoch,
            leader: None,
            voted: None,
        }
    }

    /// Persists `next` (checked by the file's rules), then adopts it.
    fn persist(&mut self, next: &QuorumState, resigned: bool) -> Result<()> {
        self.dd.store(next)?;
        self.resigned = resigned;
        Ok(())
    }

    fn wrong_role(&self, what: &'static str) -> Error {
        Error::WrongRole {
            epoch: self.state().epoch,
            role: self.role().name(),
            what,
        }
    }
}
