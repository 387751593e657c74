//! Crash safety of the adapter on the simulated disk: a sequence of
//! appends, votes, a truncation and a purge, with the power cut after
//! every I/O call in turn under each crash plan. Invariants: every entry
//! acknowledged through `LogFlushed` (and not removed by an acknowledged
//! truncation or purge) is there after the reopen with its log id; the
//! vote never regresses from the last one `save_vote` acknowledged; the
//! last purged id is never older than an acknowledged purge; the store
//! always reopens.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::{open_store, parts, Put, TypeConfig, DIR};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{Entry, EntryPayload, LogId, RaftLogReader, Vote};
use quorumlog_io::{CrashPlan, SimFs, Tear};
use quorumlog_openraft::{mapping::log_id, LogStore};
use quorumlog_raft::SharedFs;

fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, 1, index),
        payload: EntryPayload::Normal(Put {
            key: format!("k{index}"),
            value: "x".repeat(usize::try_from(index * 37 % 300).unwrap()),
        }),
    }
}

/// What was acknowledged.
#[derive(Default, Debug)]
struct Acked {
    entries: BTreeMap<u64, LogId<u64>>,
    vote: Option<Vote<u64>>,
    purged: Option<LogId<u64>>,
    /// Entries in this range may be gone: a truncation or purge in flight
    /// (not acknowledged) may already have removed them.
    in_flight: Option<std::ops::Range<u64>>,
}

async fn sequence(log: &mut LogStore<TypeConfig>, acked: &mut Acked) -> Result<(), String> {
    let e = |x: openraft::StorageError<u64>| x.to_string();
    let vote = Vote::new(1, 1);
    log.save_vote(&vote).await.map_err(e)?;
    acked.vote = Some(vote);
    for chunk in [(0u64, 6u64), (6, 12), (12, 20)] {
        let batch: Vec<_> = (chunk.0..chunk.1).map(|i| entry(1, i)).collect();
        log.blocking_append(batch).await.map_err(e)?;
        for i in chunk.0..chunk.1 {
            acked.entries.insert(i, log_id(1, 1, i));
        }
    }
    // A new leader (node 2) in term 2; our uncommitted tail from 15 goes.
    let vote = Vote::new_committed(2, 2);
    log.save_vote(&vote).await.map_err(e)?;
    acked.vote = Some(vote);
    acked.in_flight = Some(15..u64::MAX);
    log.truncate(log_id(1, 1, 15)).await.map_err(e)?;
    acked.entries.retain(|&i, _| i < 15);
    acked.in_flight = None;
    let batch: Vec<_> = (15..25).map(|i| entry(2, i)).collect();
    log.blocking_append(batch).await.map_err(e)?;
    for i in 15..25 {
        acked.entries.insert(i, log_id(2, 1, i));
    }
    acked.in_flight = Some(0..10);
    log.purge(log_id(1, 1, 9)).await.map_err(e)?;
    acked.purged = Some(log_id(1, 1, 9));
    acked.entries.retain(|&i, _| i > 9);
    acked.in_flight = None;
    Ok(())
}

fn check(disk: &SimFs, acked: &Acked, what: &str) {
    let fs: SharedFs = Arc::new(disk.clone());
    let store = open_store(&fs, Path::new(DIR), 1, false);
    let (mut log, _) = parts(&store, 1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let vote = log.read_vote().await.unwrap();
        if let Some(v) = acked.vote {
            assert!(
                vote >= Some(v),
                "{what}: vote {vote:?} regressed from {v:?}"
            );
        }
        let state = log.get_log_state().await.unwrap();
        if let Some(p) = acked.purged {
            assert!(
                state.last_purged_log_id >= Some(p),
                "{what}: last purged {:?} < {p:?}",
                state.last_purged_log_id
            );
        }
        let got: BTreeMap<u64, LogId<u64>> = log
            .try_get_log_entries(0..)
            .await
            .unwrap()
            .into_iter()
            .map(|x| (x.log_id.index, x.log_id))
            .collect();
        for (i, id) in &acked.entries {
            if !got.contains_key(i) && acked.in_flight.as_ref().is_some_and(|r| r.contains(i)) {
                continue;
            }
            assert_eq!(got.get(i), Some(id), "{what}: acknowledged entry {i}");
        }
    });
}

#[test]
fn a_power_cut_at_every_call_keeps_what_was_acknowledged() {
    let plans = [
        CrashPlan::LoseUnsynced,
        CrashPlan::KeepAll,
        CrashPlan::Torn(Tear::Garbage),
    ];
    let total = {
        let sim = SimFs::new(1);
        let fs: SharedFs = Arc::new(sim.clone());
        let store = open_store(&fs, Path::new(DIR), 1, true);
        let before = sim.calls();
        let (mut log, _) = parts(&store, 1);
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(sequence(&mut log, &mut Acked::default()))
            .unwrap();
        sim.calls() - before
    };
    let mut states = 0;
    for point in 0..=total {
        for (p, plan) in plans.into_iter().enumerate() {
            let sim = SimFs::new(point * 3 + p as u64);
            sim.set_page_tearing(point % 2 == 1);
            let fs: SharedFs = Arc::new(sim.clone());
            let store = open_store(&fs, Path::new(DIR), 1, true);
            sim.crash_after(point);
            let mut acked = Acked::default();
            {
                let (mut log, _) = parts(&store, 1);
                let rt = tokio::runtime::Runtime::new().unwrap();
                let _ = rt.block_on(sequence(&mut log, &mut acked));
            }
            drop(store);
            let disk = sim.crash_with(plan);
            check(
                &disk,
                &acked,
                &format!("crash after {point}/{total}, {plan:?}"),
            );
            states += 1;
        }
    }
    eprintln!("openraft adapter crash states: {states}");
    // Every file call of the sequence is a crash point, under each plan. On
    // a one-group node the vote, metadata and purge are records sharing
    // the log's rounds (a store replaced a small file for each), so there
    // are fewer calls than on a store: 9 here, where a store made 37.
    assert_eq!(states, 3 * (total + 1));
    assert!(total >= 8, "{total} file calls: the sequence did not run");
}
