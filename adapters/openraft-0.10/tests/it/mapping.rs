//! The vote and log-id mapping keeps openraft 0.10's order and the store's
//! rules at once, for both kinds of leader id. Invariants: for every pair
//! of votes `a` then `b` (terms and node ids 0–3, committed or not), the
//! store accepts `b` after `a` exactly when openraft's vote order says
//! `b >= a` (a second standard vote in one term is incomparable: refused),
//! and reads back `b`; an entry's epoch orders as its committed leader id
//! does, and the leader's node id comes back from the epoch where the
//! log id holds it (advanced leader ids).

use openraft10::impls::{leader_id_adv, leader_id_std, Vote};
use openraft10::vote::RaftLeaderId;
use quorumlog_openraft10::mapping::{state_to_vote, vote_to_state};
use quorumlog_openraft10::EpochLeaderId;
use quorumlog_raft::QuorumState;

fn votes<L: EpochLeaderId>() -> Vec<Vote<L>> {
    let mut out = Vec::new();
    for term in 0..4 {
        for node in 0..4 {
            out.push(Vote {
                leader_id: L::new(term, node),
                committed: false,
            });
            out.push(Vote {
                leader_id: L::new(term, node),
                committed: true,
            });
        }
    }
    out
}

fn accepts_exactly_the_votes_openraft_orders_after<L: EpochLeaderId>() -> usize {
    let initial = QuorumState::default();
    let mut checked = 0;
    for a in votes::<L>() {
        let sa = vote_to_state(&initial, &a, 0).unwrap();
        assert_eq!(state_to_vote::<L>(&sa, 0), Some(a), "{a}");
        for b in votes::<L>() {
            let sb = vote_to_state(&sa, &b, 0);
            let accepted = sb.as_ref().is_ok_and(|sb| sa.check_transition(sb).is_ok());
            assert_eq!(accepted, b >= a, "{a} then {b}");
            if let (true, Ok(sb)) = (accepted, &sb) {
                assert_eq!(state_to_vote::<L>(sb, 0), Some(b), "{a} then {b}");
            }
            checked += 1;
        }
    }
    checked
}

#[test]
fn advanced_leader_ids_the_store_accepts_a_vote_exactly_when_openraft_orders_it_after() {
    let n = accepts_exactly_the_votes_openraft_orders_after::<leader_id_adv::LeaderId<u64, u64>>();
    assert_eq!(n, 32 * 32);
}

#[test]
fn standard_leader_ids_the_store_accepts_a_vote_exactly_when_openraft_orders_it_after() {
    let n = accepts_exactly_the_votes_openraft_orders_after::<leader_id_std::LeaderId<u64, u64>>();
    assert_eq!(n, 32 * 32);
}

#[test]
fn epochs_order_as_committed_leader_ids_and_hold_the_leader_where_it_is_needed() {
    type A = leader_id_adv::LeaderId<u64, u64>;
    type S = leader_id_std::LeaderId<u64, u64>;
    let mut ids = Vec::new();
    for term in [0u64, 1, 7, u64::from(u32::MAX)] {
        for node in [0u64, 1, 9, u64::from(u32::MAX)] {
            ids.push((term, node));
        }
    }
    for &(ta, na) in &ids {
        let a = A::new(ta, na).to_committed();
        let ea = A::committed_epoch(&a).unwrap();
        assert_eq!(A::committed_of(ea), a, "the node comes back");
        let sa = S::new(ta, na).to_committed();
        let esa = S::committed_epoch(&sa).unwrap();
        assert_eq!(S::committed_of(esa), sa);
        for &(tb, nb) in &ids {
            let b = A::new(tb, nb).to_committed();
            assert_eq!(
                a.partial_cmp(&b),
                ea.partial_cmp(&A::committed_epoch(&b).unwrap())
            );
            let sb = S::new(tb, nb).to_committed();
            assert_eq!(
                sa.partial_cmp(&sb),
                esa.partial_cmp(&S::committed_epoch(&sb).unwrap())
            );
        }
    }
    assert!(A::new(1u64 << 32, 0).epoch().is_err());
    assert!(A::new(1, 1u64 << 32).epoch().is_err());
    assert!(
        S::new(1u64 << 40, 3).epoch().is_ok(),
        "a standard term is the epoch"
    );
}
