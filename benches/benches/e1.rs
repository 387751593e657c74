//! Criterion: E1 with 256 clients and 64-byte values on openraft 0.10,
//! quorumlog, raft-log and raft-engine (the whole matrix, with the in-memory ceiling and ratios,
//! is `compare --workloads E1`). Each sample is a fresh three-node cluster
//! timed over a fixed number of acknowledged writes.
#![allow(missing_docs, reason = "criterion's macros")]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quorumlog_benches::e1::{run, E1Store, Limit};

const WRITES: u64 = 5_000;

fn e1_256_clients(c: &mut Criterion) {
    let mut g = c.benchmark_group("e1_256_clients_64B");
    g.throughput(Throughput::Elements(WRITES));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    for store in [E1Store::Quorumlog, E1Store::RaftLog, E1Store::RaftEngine] {
        g.bench_function(store.name(), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    #[expect(clippy::unwrap_used, reason = "a failed bench run aborts")]
                    let dir = tempfile::tempdir().unwrap();
                    #[expect(clippy::unwrap_used, reason = "a failed bench run aborts")]
                    let (_, took) = run(store, dir.path(), 256, 64, Limit::Writes(WRITES)).unwrap();
                    total += took;
                }
                total
            });
        });
    }
    g.finish();
}

criterion_group!(benches, e1_256_clients);
criterion_main!(benches);
