//! `try_get_log_entries` held to the read model the engine's tests use
//! (`quorumlog_testkit::read_model`): random appends of entries of every
//! size (zstd batches on half the seeds), truncations, purges, and after
//! each step random ranges read, with no entry cache (every read goes to
//! the group) and with a small one (reads that join the group's part and
//! the cache's). openraft reads without a byte budget: the answer is the
//! whole range, contiguous, each entry the one appended at its index.
#![allow(
    clippy::too_many_lines,
    clippy::cast_possible_truncation,
    reason = "test code: one scenario reads top to bottom"
)]

use crate::common::{Adv, Put};

use std::path::Path;
use std::sync::Arc;

use openraft10::entry::RaftEntry;
use openraft10::impls::leader_id_adv::LeaderId;
use openraft10::storage::{IOFlushed, RaftLogStorage};
use openraft10::type_config::alias::OneshotOf;
use openraft10::type_config::async_runtime::Oneshot;
use openraft10::{EntryPayload, LogId, RaftLogReader};
use quorumlog_io::{SimFs, SimRng};
use quorumlog_openraft10::LogStore;
use quorumlog_raft::{
    options::Compression, ClusterId, DirectoryId, Identity, Meta, Node, NodeId, NodeOptions,
    Offset, SharedFs,
};
use quorumlog_testkit::read_model::{entry_bytes, expected_read, random_read, ModelLog};

type Entry = <Adv as openraft10::RaftTypeConfig>::Entry;

fn id(term: u64, index: u64) -> LogId<LeaderId<u64, u64>> {
    LogId::new(LeaderId { term, node_id: 1 }, index)
}

fn value(e: &Entry) -> Vec<u8> {
    match &e.payload {
        EntryPayload::Normal(p) => p.value.clone().into_bytes(),
        _ => Vec::new(),
    }
}

async fn run(seed: u64, cache: u64) -> u64 {
    let zstd = seed % 2 == 1;
    let sim = SimFs::new(seed);
    let fs: SharedFs = Arc::new(sim.clone());
    let dir = Path::new("/n");
    let meta = Meta::new(ClusterId(1), NodeId(1), DirectoryId(2));
    let mut options = NodeOptions::with_segment_bytes(64 << 10);
    if zstd {
        options.log.compression = Compression::Zstd { level: 1 };
        options.log.compression_threshold_bytes = 64;
    }
    Node::format(&fs, dir, meta, &options).unwrap();
    let (node, _) = Node::open(&fs, dir, &Identity::of(&meta), &options).unwrap();
    node.create_group(1, Offset(0)).unwrap();
    let store = Arc::new(node.group(1).unwrap());
    let mut log: LogStore<Adv> = LogStore::new(Arc::clone(&store), 1)
        .unwrap()
        .read_cache_entries(cache);
    let mut rng = SimRng::new(seed);
    // The model: the first index, each entry's term and value.
    let mut start = 0u64;
    let mut model: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut reads = 0;
    for step in 0..80 {
        let end = start + model.len() as u64;
        match rng.below(8) {
            0..=4 => {
                let term = model.last().map_or(1, |e| e.0) + u64::from(rng.below(6) == 0);
                let n = 1 + rng.below(8);
                let entries: Vec<Entry> = (0..n)
                    .map(|i| {
                        let len = if rng.below(5) == 0 {
                            1 + rng.index(3000)
                        } else {
                            1 + rng.index(60)
                        };
                        // Printable, so the value is a string.
                        let v: String = entry_bytes(&mut rng, 1, end + i, len)
                            .iter()
                            .map(|b| char::from(b'a' + b % 26))
                            .collect();
                        Entry {
                            log_id: id(term, end + i),
                            payload: EntryPayload::Normal(Put {
                                key: format!("k{}", end + i),
                                value: v,
                            }),
                        }
                    })
                    .collect();
                for e in &entries {
                    model.push((term, value(e)));
                }
                let (tx, rx) = OneshotOf::<Adv>::channel();
                log.append(entries, IOFlushed::signal(tx)).await.unwrap();
                if rng.below(2) == 0 {
                    rx.await.unwrap().unwrap();
                }
            }
            5 if end > start + 1 => {
                let keep = start + 1 + rng.below(end - start - 1);
                let last = keep - 1;
                log.truncate_after(Some(id(model[(last - start) as usize].0, last)))
                    .await
                    .unwrap();
                model.truncate((keep - start) as usize);
            }
            6 if end > start + 2 => {
                store.wait_durable(Offset(u64::MAX)).unwrap();
                let to = start + rng.below(end - start - 1);
                log.purge(id(model[(to - start) as usize].0, to))
                    .await
                    .unwrap();
                model.drain(..=(to - start) as usize);
                start = to + 1;
            }
            _ => {}
        }
        let m = ModelLog {
            start,
            entries: &model,
            readable_end: start + model.len() as u64,
            commit: None,
        };
        for _ in 0..6 {
            let q = random_read(&mut rng, &m, |b| b.len() as u64);
            let (from, to) = (q.from.max(start), q.to.min(m.readable_end));
            let got = log.try_get_log_entries(from..to).await.unwrap();
            let want = expected_read(
                &ModelLog {
                    start,
                    entries: &model,
                    readable_end: m.readable_end,
                    commit: None,
                },
                &quorumlog_testkit::read_model::ReadQuery {
                    from,
                    to,
                    max_bytes: u64::MAX,
                    committed: false,
                },
                |b| b.len() as u64,
            )
            .unwrap_or(from..from);
            let ids: Vec<u64> = got.iter().map(RaftEntry::index).collect();
            assert_eq!(
                ids,
                want.collect::<Vec<_>>(),
                "seed {seed} cache {cache} step {step}: [{from}, {to})"
            );
            for e in &got {
                let (term, v) = &model[(e.index() - start) as usize];
                assert_eq!(e.log_id, id(*term, e.index()), "seed {seed} step {step}");
                assert_eq!(&value(e), v, "seed {seed} step {step}: entry {}", e.index());
            }
            reads += 1;
        }
    }
    drop(log);
    drop(store);
    node.close().unwrap();
    reads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_matches_the_read_model() {
    let mut reads = 0;
    for seed in 1..=8 {
        for cache in [0, 4] {
            reads += run(seed, cache).await;
        }
    }
    eprintln!("reads checked against the model: {reads}");
}
