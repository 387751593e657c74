//! A Raft library's vote and leader id as the group's quorum state and
//! epochs, written once for every adapter: [`library_vote`],
//! [`pack_leader`]. A library without directory ids names
//! a node only; the voter it records is that node with directory id
//! `node + 1` (never zero), the same in every adapter, so a state written
//! by one reads the same in another.

use quorumlog_checkpoint::{DirectoryId, Epoch, NodeId, QuorumState, Vote};

/// The voter a library's vote for `node` records.
pub fn library_voter(node: NodeId) -> Vote {
    Vote {
        node_id: node,
        directory_id: DirectoryId(u128::from(node.0) + 1),
    }
}

/// The quorum state that records a library's vote, from the durable state
/// `prev`: in `epoch`, for `node` (`None`: no vote), `committed` when the
/// library names `node` the epoch's leader. A committed vote keeps the
/// vote cast in the same epoch; an uncommitted one keeps the epoch's
/// known leader. The library's own order of votes is the adapter's to
/// check first; the group checks the state's rules (no epoch regression,
/// one vote and one leader per epoch) when it is persisted.
pub fn library_vote(
    prev: &QuorumState,
    epoch: Epoch,
    node: Option<NodeId>,
    committed: bool,
) -> QuorumState {
    let same_epoch = prev.epoch == epoch;
    let (voted, leader) = match node {
        Some(n) if committed => (prev.voted.filter(|_| same_epoch), Some(n)),
        Some(n) => (Some(library_voter(n)), prev.leader.filter(|_| same_epoch)),
        None => (None, prev.leader.filter(|_| same_epoch)),
    };
    QuorumState {
        epoch,
        leader,
        voted,
    }
}

/// A leader id `(term, node)` as one epoch, `term << 32 | node`, for a
/// library whose leader ids order by term and then node (openraft's
/// advanced leader ids): epochs then order as its leader ids do, and the
/// leader of each entry comes back from the log's epochs
/// ([`unpack_leader`]). `None` when the term or the node needs more than
/// 32 bits.
pub fn pack_leader(term: u64, node: u64) -> Option<Epoch> {
    let t = u32::try_from(term).ok()?;
    let n = u32::try_from(node).ok()?;
    Some(Epoch((u64::from(t) << 32) | u64::from(n)))
}

/// The `(term, node)` an epoch of [`pack_leader`] holds.
pub fn unpack_leader(epoch: Epoch) -> (u64, u64) {
    (epoch.0 >> 32, epoch.0 & u64::from(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_leader_ids_order_as_term_then_node_and_unpack() {
        let ids = [
            (0, 0),
            (0, 7),
            (1, 0),
            (1, 3),
            (2, 1),
            (u64::from(u32::MAX), u64::from(u32::MAX)),
        ];
        let epochs: Vec<Epoch> = ids
            .iter()
            .map(|&(t, n)| pack_leader(t, n).unwrap())
            .collect();
        assert!(epochs.windows(2).all(|w| w[0] < w[1]), "{epochs:?}");
        for (&(t, n), &e) in ids.iter().zip(&epochs) {
            assert_eq!(unpack_leader(e), (t, n));
        }
        assert_eq!(pack_leader(1 << 32, 0), None);
        assert_eq!(pack_leader(0, 1 << 32), None);
    }

    #[test]
    fn a_committed_vote_keeps_the_epochs_vote_and_a_cast_one_its_leader() {
        let prev = library_vote(&QuorumState::default(), Epoch(3), Some(NodeId(2)), false);
        assert_eq!(prev.voted, Some(library_voter(NodeId(2))));
        let led = library_vote(&prev, Epoch(3), Some(NodeId(2)), true);
        assert_eq!((led.leader, led.voted), (Some(NodeId(2)), prev.voted));
        // A new epoch forgets the old one's vote and leader.
        let next = library_vote(&led, Epoch(4), Some(NodeId(1)), false);
        assert_eq!(
            (next.leader, next.voted),
            (None, Some(library_voter(NodeId(1))))
        );
        let none = library_vote(&led, Epoch(3), None, false);
        assert_eq!((none.leader, none.voted), (Some(NodeId(2)), None));
        // Every such state passes the group's own transition rules.
        assert!(prev.check_transition(&led).is_ok());
        assert!(led.check_transition(&next).is_ok());
    }
}
