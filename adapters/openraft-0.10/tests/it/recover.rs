//! The offline voter-set rewrite (`recover::recover_quorum`) on a group
//! that lost its majority, driven by openraft's own engine afterwards.
//! Invariants:
//! - a rewrite that does not name the survivor is refused and changes
//!   nothing (the vote and the log are as before);
//! - the survey reports the membership in force (the last one in the log)
//!   and the vote and log end on file;
//! - after the rewrite the survivor, started alone, leads the new voter set
//!   with every entry it held (each acknowledged write is applied), takes
//!   new writes, and takes a new member back through openraft's own
//!   `add_learner` and `change_membership`, which then holds every write;
//! - the rewrite's vote is above every term the group had, and its entry
//!   follows the log's last (fails if the vote is not raised: openraft
//!   then refuses the log as ahead of the vote).
#![allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use common::member::{self, Member};
use common::{Adv, Get};
use openraft10::type_config::async_runtime::watch::WatchReceiver;
use openraft10::BasicNode;
use quorumlog_io::RealFs;
use quorumlog_openraft10::recover::{recover_quorum, survey, MembershipSource};
use quorumlog_raft::SharedFs;

type R = member::GroupRaft;

/// The Raft group (group 7 of each node's shared log).
const GROUP: u64 = 7;

/// Elections after 0.5–1 s of silence.
const ELECTION: (u64, u64) = (500, 1000);

async fn leader_of(raft: &R) -> u64 {
    raft.wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .unwrap()
        .current_leader
        .unwrap()
}

async fn last_index(raft: &R) -> u64 {
    raft.wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.last_log_index.is_some(), "an entry")
        .await
        .unwrap()
        .last_log_index
        .unwrap()
}

async fn applied(m: &Member, index: u64) {
    m.raft
        .wait(Some(Duration::from_secs(30)))
        .applied_index_at_least(Some(index), "applied")
        .await
        .unwrap();
}

/// `m`'s machine holds the write of each key number in `keys`.
fn holds(m: &Member, keys: &[u64]) {
    for i in keys {
        assert_eq!(
            m.machine.get(&format!("k{i}")),
            Some(format!("v{i}")),
            "k{i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_rewritten_alone_leads_with_every_entry_and_takes_members_back() {
    let tmp = tempfile::tempdir().unwrap();
    let fs: SharedFs = Arc::new(RealFs::new());
    let router = member::GroupRouter::default();
    let mut members = BTreeMap::new();
    for id in 1..=3 {
        members.insert(
            id,
            member::start(&router, &fs, tmp.path(), (id, GROUP), true, ELECTION).await,
        );
    }
    let voters: BTreeMap<u64, BasicNode> = (1..=3).map(|i| (i, BasicNode::default())).collect();
    members[&1].raft.initialize(voters).await.unwrap();
    let leader = leader_of(&members[&1].raft).await;
    // Its first entry applied everywhere: a quorum acknowledged it, so
    // its lease holds and it takes writes.
    let first = last_index(&members[&leader].raft).await;
    for m in members.values() {
        applied(m, first).await;
    }
    member::write(&members[&leader].raft, 0, 150).await;
    // The survivor: a follower, holding every acknowledged write.
    let survivor = (1..=3).find(|i| *i != leader).unwrap();
    let last = members[&leader]
        .raft
        .metrics()
        .borrow_watched()
        .last_log_index
        .unwrap();
    applied(&members[&survivor], last).await;
    let old_term = members[&leader]
        .raft
        .metrics()
        .borrow_watched()
        .current_term;
    for (id, m) in std::mem::take(&mut members) {
        member::stop(&router, m, id, GROUP).await;
    }
    // The other two directories are lost.
    for id in (1..=3).filter(|i| *i != survivor) {
        std::fs::remove_dir_all(tmp.path().join(format!("n{id}"))).unwrap();
    }

    {
        let node = member::open_node(&fs, tmp.path(), survivor, GROUP, false);
        let group = Arc::new(node.group(GROUP).unwrap());
        let found = survey::<Adv>(Arc::clone(&group), survivor).await.unwrap();
        assert_eq!(found.voters(), vec![BTreeSet::from([1, 2, 3])]);
        assert_eq!(
            found.membership.as_ref().unwrap().source,
            MembershipSource::Log
        );
        assert_eq!(found.last_log_id.as_ref().unwrap().index, last);
        assert_eq!(found.vote.as_ref().unwrap().leader_id.term, old_term);

        // Refused: the survivor is not in the set. Nothing changes.
        let others: BTreeMap<u64, BasicNode> = (1..=3)
            .filter(|i| *i != survivor)
            .map(|i| (i, BasicNode::default()))
            .collect();
        let e = recover_quorum::<Adv>(Arc::clone(&group), survivor, others)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        let again = survey::<Adv>(Arc::clone(&group), survivor).await.unwrap();
        assert_eq!(again.vote, found.vote);
        assert_eq!(again.last_log_id, found.last_log_id);

        let alone = BTreeMap::from([(survivor, BasicNode::default())]);
        let r = recover_quorum::<Adv>(Arc::clone(&group), survivor, alone)
            .await
            .unwrap();
        assert!(r.vote.leader_id.term > old_term);
        assert_eq!(r.log_id.index, last + 1);
        assert_eq!(r.voters, BTreeSet::from([survivor]));
        drop(group);
        node.close().unwrap();
    }

    // Started alone, it leads the new set, with every write.
    let one = member::start(&router, &fs, tmp.path(), (survivor, GROUP), false, ELECTION).await;
    assert_eq!(leader_of(&one.raft).await, survivor);
    let first = last_index(&one.raft).await;
    applied(&one, first).await;
    member::write(&one.raft, 150, 200).await;
    let last = one.raft.metrics().borrow_watched().last_log_index.unwrap();
    applied(&one, last).await;
    holds(&one, &[0, 77, 149, 199]);
    let m = one.raft.metrics().borrow_watched().clone();
    assert_eq!(
        m.membership_config
            .membership()
            .voter_ids()
            .collect::<Vec<_>>(),
        vec![survivor]
    );

    // A new member joins through openraft's own membership change.
    let four = member::start(&router, &fs, tmp.path(), (4, GROUP), true, ELECTION).await;
    one.raft
        .add_learner(4, BasicNode::default(), true)
        .await
        .unwrap();
    one.raft
        .change_membership(BTreeSet::from([survivor, 4]), false)
        .await
        .unwrap();
    member::write(&one.raft, 200, 210).await;
    let last = one.raft.metrics().borrow_watched().last_log_index.unwrap();
    applied(&four, last).await;
    holds(&four, &[0, 149, 199, 209]);
    member::stop(&router, four, 4, GROUP).await;
    member::stop(&router, one, survivor, GROUP).await;
}
