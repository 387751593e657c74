//! `RegionStorage::entries` held to the read model the engine's tests use
//! (`quorumlog_testkit::read_model`): random appends through the adapter
//! (batches of one entry to a batch's worth, of every size, zstd on half
//! the seeds), conflicts that truncate, commits and compactions, and after
//! each step random reads with raft-rs's `max_size` in every budget shape,
//! with no entry cache (every read goes to the group, where the hole was)
//! and with a small one (reads that join the group's part and the
//! cache's). Invariant: `entries(low, high, max_size)` is contiguous from
//! `low`, the first entry always, then within `max_size` as raft-rs
//! counts it (`compute_size`), stopping at the first entry that does not
//! fit; `Compacted` below the first index, `Unavailable` past the last.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::cast_possible_truncation,
    clippy::too_many_lines,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;
use std::sync::Arc;

use protobuf::Message as _;
use quorumlog_io::{SimFs, SimRng};
use quorumlog_raft::{options::Compression, Identity, Node, NodeOptions, Offset, SharedFs};
use quorumlog_raftrs::RegionStorage;
use quorumlog_testkit::read_model::{
    check_read, entry_bytes, random_read, record_sizes, ModelLog, READS_CHECKED,
};
use raft::eraftpb::{Entry, HardState};
use raft::{GetEntriesContext, Storage, StorageError};

fn options(zstd: bool) -> NodeOptions {
    let mut o = common::options();
    o.log.max_batch_bytes = 16 << 10;
    if zstd {
        o.log.compression = Compression::Zstd { level: 1 };
        o.log.compression_threshold_bytes = 64;
    }
    o
}

/// The model: the first index and each entry's term and encoded bytes.
struct Model {
    first: u64,
    entries: Vec<(u64, Vec<u8>)>,
    commit: u64,
    /// The hard state's term (never back).
    hs_term: u64,
}

impl Model {
    fn last(&self) -> u64 {
        self.first + self.entries.len() as u64 - 1
    }
    fn term(&self) -> u64 {
        self.entries.last().map_or(1, |e| e.0)
    }
}

fn size(b: &[u8]) -> u64 {
    b.len() as u64
}

fn check_reads(rng: &mut SimRng, s: &RegionStorage, m: &Model, what: &str) {
    let log = ModelLog {
        start: m.first,
        entries: &m.entries,
        readable_end: m.last() + 1,
        commit: None,
    };
    for _ in 0..6 {
        let mut q = random_read(rng, &log, size);
        q.committed = false;
        let got = s.entries(q.from, q.to, q.max_bytes, GetEntriesContext::empty(false));
        if q.from < m.first {
            assert!(
                matches!(got, Err(raft::Error::Store(StorageError::Compacted))),
                "{what}: {q:?}: {got:?}"
            );
            continue;
        }
        if q.to > m.last() + 1 {
            assert!(
                matches!(got, Err(raft::Error::Store(StorageError::Unavailable))),
                "{what}: {q:?}: {got:?}"
            );
            continue;
        }
        if q.from >= q.to {
            assert!(got.unwrap().is_empty(), "{what}: {q:?}");
            continue;
        }
        let got: Vec<(u64, u64, Vec<u8>)> = got
            .unwrap()
            .into_iter()
            .map(|e| (e.index, e.term, e.write_to_bytes().unwrap()))
            .collect();
        check_read(&log, &q, Some(got), size, what);
    }
}

fn run(seed: u64, cache: usize) {
    let zstd = seed % 2 == 1;
    let disk = SimFs::new(seed);
    let fs: SharedFs = Arc::new(disk.clone());
    let dir = Path::new("/n");
    let meta = common::meta(1);
    Node::format(&fs, dir, meta, &options(zstd)).unwrap();
    let (node, _) = Node::open(&fs, dir, &Identity::of(&meta), &options(zstd)).unwrap();
    node.create_group(1, Offset(1)).unwrap();
    let s = RegionStorage::with_cache(Arc::new(node.group(1).unwrap()), 1, cache).unwrap();
    let mut rng = SimRng::new(seed);
    let mut m = Model {
        first: 1,
        entries: Vec::new(),
        commit: 0,
        hs_term: 0,
    };
    let limit = options(zstd).log.max_batch_bytes / 2;
    for step in 0..150 {
        let what = match rng.below(10) {
            0..=5 => {
                // An append at the end, or a conflict above the commit point.
                let end = m.last() + 1;
                let at = if rng.below(5) == 0 && end > m.commit + 2 {
                    m.commit + 1 + rng.below(end - m.commit - 1)
                } else {
                    end
                };
                let base_term = if at > m.first {
                    m.entries[(at - 1 - m.first) as usize].0
                } else {
                    m.term()
                };
                let term = base_term + u64::from(at < end || rng.below(8) == 0);
                let entries: Vec<Entry> = record_sizes(&mut rng, 6, limit)
                    .into_iter()
                    .enumerate()
                    .map(|(i, len)| Entry {
                        index: at + i as u64,
                        term,
                        data: entry_bytes(&mut rng, 1, at + i as u64, len).into(),
                        ..Entry::default()
                    })
                    .collect();
                s.append(&entries).unwrap();
                s.store().wait_durable(Offset(u64::MAX)).unwrap();
                m.entries.truncate((at - m.first) as usize);
                for e in &entries {
                    m.entries.push((e.term, e.write_to_bytes().unwrap()));
                }
                format!("append {} at {at} in {term}", entries.len())
            }
            6 | 7 => {
                let c = m.commit + rng.below(m.last() + 1 - m.commit);
                m.hs_term = m.hs_term.max(m.term());
                let hs = HardState {
                    term: m.hs_term,
                    commit: c,
                    ..HardState::default()
                };
                s.set_hard_state(&hs).unwrap();
                s.store().wait_durable(Offset(u64::MAX)).unwrap();
                m.commit = m.commit.max(c);
                format!("commit {c}")
            }
            _ => {
                // Compaction below the commit point, keeping one entry.
                if m.commit <= m.first {
                    continue;
                }
                let to = m.first + rng.below(m.commit - m.first);
                s.compact(to).unwrap();
                if to > m.first {
                    m.entries.drain(..(to - m.first) as usize);
                    m.first = to;
                }
                format!("compact {to}")
            }
        };
        check_reads(
            &mut rng,
            &s,
            &m,
            &format!("seed {seed} cache {cache} step {step} ({what})"),
        );
    }
    drop(s);
    node.close().unwrap();
}

#[test]
fn every_entries_read_matches_the_read_model() {
    for seed in 1..=40 {
        for cache in [0, 3] {
            run(seed, cache);
        }
    }
    eprintln!(
        "reads checked against the model: {}",
        READS_CHECKED.load(std::sync::atomic::Ordering::Relaxed)
    );
}
