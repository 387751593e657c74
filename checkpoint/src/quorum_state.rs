//! `quorum-state`: the election state, one atomic record.
//!
//! Body:
//! ```text
//! epoch            u64
//! leader flag      u8 (0 none, 1 some)   leader id u64 (0 when none)
//! vote flag        u8 (0 none, 1 some)   voted id u64, voted directory id u128
//!                                         (both 0 when none)
//! voter count      u32 (written 0)
//! voters           count × (node id u64, directory id u128)
//! ```
//! The voter section is a vestige: voter sets live in the log as control
//! records (the `KRaft` wing's history). It is written empty and, in a
//! file from before, read and ignored (the layout is unchanged, so no
//! version bump: every file this format ever wrote still opens).
//! Epoch and vote live in one record written by one atomic replace, so no
//! crash can pair an epoch with another epoch's vote (docs/design.md invariant 5).
//!
//! Transition rules, checked by [`QuorumState::check_transition`] before
//! anything is written: the epoch never decreases; within an epoch a cast
//! vote never changes or disappears, and a known leader never changes.

use crate::error::{CorruptionKind, Error, Result};
use crate::format::{magic, Reader, Writer};
use crate::small_file::SmallFile;
use crate::types::{DirectoryId, Epoch, NodeId, Vote};

/// The durable election state.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuorumState {
    /// The current epoch.
    pub epoch: Epoch,
    /// The leader of `epoch`, once known.
    pub leader: Option<NodeId>,
    /// The vote cast in `epoch`, if any.
    pub voted: Option<Vote>,
}

const VOTER_BYTES: usize = 8 + 16;

impl QuorumState {
    /// Checks that moving from `self` (durable) to `next` keeps the election
    /// rules: no epoch regression, no second vote or leader in one epoch.
    ///
    /// # Errors
    /// `EpochRegression`, `VoteConflict` or `LeaderConflict`.
    pub fn check_transition(&self, next: &QuorumState) -> Result<()> {
        if next.epoch < self.epoch {
            return Err(Error::EpochRegression {
                current: self.epoch,
                proposed: next.epoch,
            });
        }
        if next.epoch == self.epoch {
            if let Some(existing) = self.voted {
                if next.voted != Some(existing) {
                    return Err(Error::VoteConflict {
                        epoch: self.epoch,
                        existing,
                        proposed: next.voted,
                    });
                }
            }
            if let Some(existing) = self.leader {
                if next.leader != Some(existing) {
                    return Err(Error::LeaderConflict {
                        epoch: self.epoch,
                        existing,
                        proposed: next.leader,
                    });
                }
            }
        }
        Ok(())
    }
}

impl SmallFile for QuorumState {
    const MAGIC: [u8; 4] = magic::QUORUM_STATE;
    const NAME: &'static str = "quorum-state";

    fn encode_body(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(self.epoch.0);
        match self.leader {
            Some(id) => w.u8(1).u64(id.0),
            None => w.u8(0).u64(0),
        };
        match self.voted {
            Some(v) => w.u8(1).u64(v.node_id.0).u128(v.directory_id.0),
            None => w.u8(0).u64(0).u128(0),
        };
        // The vestigial voter section, empty.
        w.u32(0);
        w.finish()
    }

    fn decode_body(body: &[u8]) -> Result<Self, CorruptionKind> {
        let mut r = Reader::new(body);
        let epoch = Epoch(r.u64()?);
        let leader_present = r.flag()?;
        let leader_id = r.u64()?;
        let leader = match (leader_present, leader_id) {
            (true, id) => Some(NodeId(id)),
            (false, 0) => None,
            (false, _) => return Err(CorruptionKind::Malformed("absent leader with an id")),
        };
        let vote_present = r.flag()?;
        let node = r.u64()?;
        let dir = r.u128()?;
        let voted = match (vote_present, node, dir) {
            (true, n, d) => Some(Vote {
                node_id: NodeId(n),
                directory_id: DirectoryId(d),
            }),
            (false, 0, 0) => None,
            (false, _, _) => return Err(CorruptionKind::Malformed("absent vote with an id")),
        };
        let count = usize::try_from(r.u32()?).unwrap_or(usize::MAX);
        // The count must match the bytes present: never allocate on a claim.
        if count.checked_mul(VOTER_BYTES) != Some(r.remaining()) {
            return Err(CorruptionKind::Malformed(
                "voter count does not match the body",
            ));
        }
        // An older file's voters: read past, ignored.
        for _ in 0..count {
            r.u64()?;
            r.u128()?;
        }
        r.finish()?;
        Ok(QuorumState {
            epoch,
            leader,
            voted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(n: u64) -> Vote {
        Vote {
            node_id: NodeId(n),
            directory_id: DirectoryId(u128::from(n) << 64 | 7),
        }
    }

    fn sample() -> QuorumState {
        QuorumState {
            epoch: Epoch(9),
            leader: Some(NodeId(2)),
            voted: Some(vote(2)),
        }
    }

    #[test]
    fn an_older_file_with_voters_reads_with_them_ignored() {
        // The layout of every version: the voter section of an older file
        // is read past, never refused.
        let mut body = sample().encode_body();
        let n = body.len();
        body[n - 4..].copy_from_slice(&2u32.to_le_bytes());
        for (node, dir) in [(1u64, 11u128), (2, 22)] {
            body.extend_from_slice(&node.to_le_bytes());
            body.extend_from_slice(&dir.to_le_bytes());
        }
        assert_eq!(QuorumState::decode_body(&body).unwrap(), sample());
    }

    #[test]
    fn round_trip() {
        for qs in [sample(), QuorumState::default()] {
            assert_eq!(QuorumState::decode(&qs.encode()).unwrap(), qs);
        }
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let bytes = sample().encode();
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(QuorumState::decode(&bad).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn non_canonical_bodies_are_malformed() {
        let mut body = QuorumState::default().encode_body();
        body[9] = 5; // leader id without the leader flag
        assert!(QuorumState::decode_body(&body).is_err());
        let mut body = QuorumState::default().encode_body();
        let n = body.len();
        body[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes()); // huge voter count
        assert!(QuorumState::decode_body(&body).is_err());
    }

    #[test]
    fn transitions_follow_the_election_rules() {
        let cur = QuorumState {
            epoch: Epoch(5),
            leader: None,
            voted: Some(vote(1)),
        };
        let mut next = cur.clone();
        next.epoch = Epoch(4);
        assert!(matches!(
            cur.check_transition(&next),
            Err(Error::EpochRegression { .. })
        ));
        next.epoch = Epoch(5);
        next.voted = Some(vote(2));
        assert!(matches!(
            cur.check_transition(&next),
            Err(Error::VoteConflict { .. })
        ));
        next.voted = None;
        assert!(matches!(
            cur.check_transition(&next),
            Err(Error::VoteConflict { .. })
        ));
        next.voted = Some(vote(1));
        next.leader = Some(NodeId(1));
        cur.check_transition(&next).unwrap();
        let mut other_leader = next.clone();
        other_leader.leader = Some(NodeId(3));
        assert!(matches!(
            next.check_transition(&other_leader),
            Err(Error::LeaderConflict { .. })
        ));
        let new_epoch = QuorumState {
            epoch: Epoch(6),
            leader: None,
            voted: Some(vote(3)),
        };
        next.check_transition(&new_epoch).unwrap();
    }
}
