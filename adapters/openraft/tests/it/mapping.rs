//! The vote mapping keeps openraft's order and the store's rules at once.
//! Invariant: for every pair of votes `a` then `b` (terms and node ids
//! 0–3, committed or not), the store accepts `b` after `a` exactly when
//! openraft's vote order says `b >= a`, and reads back `b`; and an entry's
//! epoch orders as its leader id does.

use openraft::{LeaderId, Vote};
use quorumlog_openraft::mapping::{epoch_of, leader_of, state_to_vote, vote_to_state};
use quorumlog_raft::QuorumState;

fn votes() -> Vec<Vote<u64>> {
    let mut out = Vec::new();
    for term in 0..4 {
        for node in 0..4 {
            out.push(Vote::new(term, node));
            out.push(Vote::new_committed(term, node));
        }
    }
    out
}

#[test]
fn the_store_accepts_a_vote_exactly_when_openraft_orders_it_after() {
    let initial = QuorumState::default();
    let mut checked = 0;
    for a in votes() {
        let sa = vote_to_state(&initial, &a).unwrap();
        assert_eq!(state_to_vote(&sa), Some(a));
        for b in votes() {
            let sb = vote_to_state(&sa, &b);
            let accepted = sb.as_ref().is_ok_and(|sb| sa.check_transition(sb).is_ok());
            assert_eq!(accepted, b >= a, "{a} then {b}");
            if let (true, Ok(sb)) = (accepted, &sb) {
                assert_eq!(state_to_vote(sb), Some(b), "{a} then {b}");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 32 * 32);
}

#[test]
fn epochs_order_as_leader_ids_and_refuse_what_does_not_fit() {
    let mut ids = Vec::new();
    for term in [0u64, 1, 7, u64::from(u32::MAX)] {
        for node in [0u64, 1, 9, u64::from(u32::MAX)] {
            ids.push(LeaderId::new(term, node));
        }
    }
    for a in &ids {
        let ea = epoch_of(a).unwrap();
        assert_eq!(leader_of(ea), (a.term, a.node_id));
        for b in &ids {
            assert_eq!(
                a.partial_cmp(b),
                epoch_of(a).unwrap().partial_cmp(&epoch_of(b).unwrap())
            );
        }
    }
    assert!(epoch_of(&LeaderId::new(1u64 << 32, 0)).is_err());
    assert!(epoch_of(&LeaderId::new(1, 1u64 << 32)).is_err());
}
