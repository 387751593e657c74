//! The adapter keeps recent entries decoded in memory (replication reads
//! them right after the append; sync-round writes bypass the page cache).
//! Invariant: whatever the sequence of appends (several leader ids per
//! call), truncations and purges, every read returns exactly what the
//! store holds, decoded from the log itself.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use common::{open_store, parts, Put, TypeConfig, DIR};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{Entry, EntryPayload, LogId, RaftLogReader};
use quorumlog_io::{SimFs, SimRng};
use quorumlog_openraft::mapping::{decode_entry, log_id};
use quorumlog_raft::Isolation;
use quorumlog_raft::{Offset, SharedFs};

fn from_store(store: &quorumlog_raft::Group, from: u64, to: u64) -> Vec<LogId<u64>> {
    let (s, e) = (store.extent().start.0, store.extent().end.0);
    let (lo, hi) = (from.max(s), to.min(e));
    if lo >= hi {
        return Vec::new();
    }
    store
        .read_entries(Offset(lo), Offset(hi), u64::MAX, Isolation::Uncommitted)
        .unwrap()
        .iter()
        .map(|x| decode_entry::<TypeConfig>(&x.bytes).unwrap().log_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_always_match_the_log() {
    let sim = SimFs::new(9);
    let fs: SharedFs = Arc::new(sim);
    let store = open_store(&fs, Path::new(DIR), 1, true);
    let (mut log, _) = parts(&store, 1);
    let mut rng = SimRng::new(42);
    let (mut term, mut next, mut purged) = (1u64, 0u64, 0u64);
    for step in 0..400 {
        match rng.below(10) {
            0..=5 => {
                let n = 1 + rng.below(40);
                let entries: Vec<Entry<TypeConfig>> = (0..n)
                    .map(|i| {
                        if rng.below(20) == 0 {
                            term += 1;
                        }
                        Entry {
                            log_id: log_id(term, 1 + term % 3, next + i),
                            payload: EntryPayload::Normal(Put {
                                key: format!("k{}", next + i),
                                value: "v".repeat(usize::try_from(rng.below(3000)).unwrap()),
                            }),
                        }
                    })
                    .collect();
                log.blocking_append(entries).await.unwrap();
                next += n;
            }
            6 | 7 if next > purged + 1 => {
                let at = purged + 1 + rng.below(next - purged - 1);
                log.truncate(log_id(term, 1, at)).await.unwrap();
                next = at;
            }
            8 if next > purged + 1 => {
                let at = purged + rng.below(next - purged);
                let got = log.try_get_log_entries(at..=at).await.unwrap();
                log.purge(got[0].log_id).await.unwrap();
                purged = at + 1;
            }
            _ => {}
        }
        let a = rng.below(next + 5);
        let b = a + rng.below(next + 5);
        let got: Vec<LogId<u64>> = log
            .try_get_log_entries(a..b)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.log_id)
            .collect();
        assert_eq!(got, from_store(&store, a, b), "step {step}: [{a}, {b})");
    }
}

fn big_entries(term: u64, from: u64, to: u64) -> Vec<Entry<TypeConfig>> {
    (from..to)
        .map(|i| Entry {
            log_id: log_id(term, 1, i),
            payload: EntryPayload::Normal(Put {
                key: format!("k{i}"),
                value: "v".repeat(8 << 10),
            }),
        })
        .collect()
}

async fn ids_read(
    log: &mut quorumlog_openraft::LogStore<TypeConfig>,
    a: u64,
    b: u64,
) -> Vec<LogId<u64>> {
    log.try_get_log_entries(a..b)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.log_id)
        .collect()
}

/// The read-ahead window (entries older than the tail cache holds, read
/// 64 at a time forward and backward as openraft's startup does) never
/// serves an entry a truncation replaced: invariant, every read equals the
/// store's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_ahead_window_follows_truncations() {
    let fs: SharedFs = Arc::new(SimFs::new(5));
    let store = open_store(&fs, Path::new(DIR), 1, true);
    let (mut log, _) = parts(&store, 1);
    // 8 KiB entries: the tail cache (16 MiB) holds the last ~2,000.
    log.blocking_append(big_entries(1, 0, 3_000)).await.unwrap();
    assert_eq!(
        ids_read(&mut log, 100, 164).await,
        from_store(&store, 100, 164)
    );
    // Replace everything from 300 on (inside the window just read).
    log.truncate(log_id(1, 1, 300)).await.unwrap();
    log.blocking_append(big_entries(2, 300, 3_300))
        .await
        .unwrap();
    for a in (100..1_000).step_by(64) {
        let got = ids_read(&mut log, a, a + 64).await;
        assert_eq!(
            got,
            from_store(&store, a, a + 64),
            "forward [{a}, {})",
            a + 64
        );
    }
    // A backward scan, as openraft's membership search reads.
    let mut b = 1_200;
    while b > 64 {
        let got = ids_read(&mut log, b - 64, b).await;
        assert_eq!(
            got,
            from_store(&store, b - 64, b),
            "backward [{}, {b})",
            b - 64
        );
        b -= 64;
    }
    assert_eq!(ids_read(&mut log, 299, 301).await[1], log_id(2, 1, 300));
}
