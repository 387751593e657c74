//! Restart semantics (KRaft): a node that was leader comes back resigned in
//! that epoch (it neither leads nor votes again in it); an epoch on file
//! older than the log's last epoch comes back as the log's epoch,
//! unattached, written back before `open` returns.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{
    format_with, ClusterId, DataDir, DirectoryId, Epoch, Meta, NodeId, Offset, OpenOptions,
    SharedFs,
};
use quorumlog_io::SimFs;
use quorumlog_raft::{
    kraft::Election, kraft::LogPosition, kraft::Role, kraft::VoteDecision, Error,
};

const DIR: &str = "/data";

fn formatted() -> SharedFs {
    let fs: SharedFs = Arc::new(SimFs::new(1));
    format_with(
        &fs,
        Path::new(DIR),
        Meta::new(ClusterId(1), NodeId(1), DirectoryId(11)),
    )
    .unwrap();
    fs
}

fn open(fs: &SharedFs, log_epoch: Option<Epoch>) -> Election {
    let dd = Arc::new(DataDir::open(fs.clone(), Path::new(DIR), &OpenOptions::default()).unwrap());
    Election::open(dd, log_epoch).unwrap()
}

#[test]
fn a_former_leader_comes_back_resigned() {
    let fs = formatted();
    let mut e = open(&fs, None);
    let epoch = e.become_candidate().unwrap();
    e.become_leader().unwrap();
    drop(e);
    let mut e = open(&fs, Some(epoch));
    assert_eq!((e.epoch(), e.role()), (epoch, Role::Resigned));
    assert!(matches!(
        e.check_leader_append(epoch),
        Err(Error::WrongRole { .. })
    ));
    let any = LogPosition {
        last_epoch: Some(Epoch(99)),
        end_offset: Offset(99),
    };
    assert_eq!(
        e.grant_vote(epoch, (NodeId(2), None), any, any).unwrap(),
        VoteDecision::LeaderKnown
    );
    // It may stand again in a new epoch.
    let next = e.become_candidate().unwrap();
    assert_eq!(next.0, epoch.0 + 1);
    assert_eq!(e.role(), Role::Candidate);
}

#[test]
fn an_epoch_behind_the_log_is_moved_up_and_written_back() {
    let fs = formatted();
    let mut e = open(&fs, None);
    e.grant_vote(
        Epoch(2),
        (NodeId(2), None),
        LogPosition {
            last_epoch: None,
            end_offset: Offset(0),
        },
        LogPosition {
            last_epoch: None,
            end_offset: Offset(0),
        },
    )
    .unwrap();
    drop(e);
    // The log holds records of epoch 4 (the file is behind: restored from
    // an old backup, say).
    let e = open(&fs, Some(Epoch(4)));
    assert_eq!((e.epoch(), e.role()), (Epoch(4), Role::Unattached));
    drop(e);
    // Written back: a plain reopen sees it.
    let e = open(&fs, None);
    assert_eq!(e.epoch(), Epoch(4));
    assert_eq!(e.state().voted, None);
}
