//! Regression (issue 9, bug 5): `persist_quorum_state` with `MAX_VOTERS + 1`
//! voters panicked in the encoder. It is now a typed `TooManyVoters` error,
//! checked before anything is written: the durable state is unchanged and
//! the directory is not poisoned (invariant: bad input gets a typed error
//! and loses nothing).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;

use quorumlog_checkpoint::{
    format, ClusterId, DataDir, DirectoryId, Epoch, Error, NodeId, OpenOptions, QuorumState, Voter,
    MAX_VOTERS,
};

fn voters(n: usize) -> Vec<Voter> {
    (0..n as u64)
        .map(|i| Voter {
            node_id: NodeId(i),
            directory_id: DirectoryId(u128::from(i) + 1),
        })
        .collect()
}

#[test]
fn one_voter_too_many_is_a_typed_error_that_writes_nothing() {
    common::both(|fs, dir: &Path| {
        format(&fs, dir, ClusterId(1), NodeId(1)).unwrap();
        let dd = DataDir::open(fs.clone(), dir, &OpenOptions::default()).unwrap();
        let full = QuorumState {
            epoch: Epoch(1),
            voters: voters(MAX_VOTERS),
            ..QuorumState::default()
        };
        dd.persist_quorum_state(&full).unwrap();
        let over = QuorumState {
            epoch: Epoch(2),
            voters: voters(MAX_VOTERS + 1),
            ..QuorumState::default()
        };
        let e = dd.persist_quorum_state(&over).unwrap_err();
        assert!(
            matches!(e, Error::TooManyVoters { count, max } if count == MAX_VOTERS + 1 && max == MAX_VOTERS),
            "{e:?}"
        );
        assert_eq!(dd.quorum_state(), full);
        // Not poisoned: a valid update still goes through.
        let next = QuorumState {
            epoch: Epoch(3),
            ..QuorumState::default()
        };
        dd.persist_quorum_state(&next).unwrap();
        drop(dd);
        let dd = DataDir::open(fs, dir, &OpenOptions::default()).unwrap();
        assert_eq!(dd.quorum_state(), next);
    });
}
