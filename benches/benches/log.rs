//! Criterion benches of the log: durable append (entry size × records per
//! sync), group commit (writer count), sequential read, reopen (clean and
//! after a crash). The `compare` binary runs the peers side by side.

#![allow(
    clippy::unwrap_used,
    clippy::similar_names,
    clippy::cast_possible_truncation,
    missing_docs,
    reason = "a benchmark harness: a failure aborts the run"
)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use quorumlog_benches::systems::{Quorumlog, QuorumlogSetup, System};
use quorumlog_benches::workloads::payload;
use quorumlog_checkpoint::{format, ClusterId, DataDir, Epoch, NodeId, OpenOptions, SharedFs};
use quorumlog_io::RealFs;
use quorumlog_log::{Log, LogOptions};

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("append_durable");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    for (size, per_sync) in [(256usize, 1usize), (256, 64), (4096, 16), (16 << 10, 16)] {
        let tmp = tempfile::tempdir().unwrap();
        let q = Quorumlog::open(&tmp.path().join("q"), QuorumlogSetup::default()).unwrap();
        let recs: Vec<Vec<u8>> = (0..per_sync).map(|i| payload(0, i, size)).collect();
        let refs: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
        g.throughput(Throughput::Bytes((size * per_sync) as u64));
        g.bench_with_input(
            BenchmarkId::new(format!("{size}B"), format!("{per_sync}_per_sync")),
            &refs,
            |b, refs| b.iter(|| q.append_durable(0, refs).unwrap()),
        );
    }
    g.finish();
}

fn group_commit(c: &mut Criterion) {
    let mut g = c.benchmark_group("group_commit_256B");
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    for writers in [1usize, 8, 64] {
        let tmp = tempfile::tempdir().unwrap();
        let q = Quorumlog::open(&tmp.path().join("q"), QuorumlogSetup::default()).unwrap();
        g.throughput(Throughput::Elements(writers as u64 * 100));
        g.bench_function(BenchmarkId::from_parameter(writers), |b| {
            b.iter(|| {
                std::thread::scope(|s| {
                    for w in 0..writers {
                        let q = &q;
                        s.spawn(move || {
                            let rec = payload(w, 0, 256);
                            for _ in 0..100 {
                                q.append_durable(w, &[&rec]).unwrap();
                            }
                        });
                    }
                });
            });
        });
    }
    g.finish();
}

fn build(dir: &Path, mib: u64) -> SharedFs {
    let fs: SharedFs = Arc::new(RealFs::new());
    format(&fs, dir, ClusterId(1), NodeId(1)).unwrap();
    let dd = Arc::new(DataDir::open(fs.clone(), dir, &OpenOptions::default()).unwrap());
    let mut log = Log::open(dd, LogOptions::default()).unwrap();
    let recs: Vec<Vec<u8>> = (0..64).map(|i| payload(0, i, 256)).collect();
    for _ in 0..(mib << 20) / (64 * 256) {
        log.append_as_leader(Epoch(1), &recs).unwrap();
    }
    log.close().unwrap();
    fs
}

fn open(fs: &SharedFs, dir: &Path) -> Log {
    let dd = Arc::new(DataDir::open(fs.clone(), dir, &OpenOptions::default()).unwrap());
    Log::open(dd, LogOptions::default()).unwrap()
}

fn read_and_reopen(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("q");
    let mib = 256;
    let fs = build(&dir, mib);
    let mut g = c.benchmark_group("read");
    g.sample_size(10).throughput(Throughput::Bytes(mib << 20));
    g.bench_function("sequential_256MiB", |b| {
        let log = open(&fs, &dir);
        b.iter(|| {
            let mut at = log.log_start_offset();
            while at < log.log_end_offset() {
                at = log.read(at, 1 << 20).unwrap().next_offset().unwrap();
            }
        });
        log.close().unwrap(); // so the clean reopen below opens a clean log
    });
    g.finish();
    let mut g = c.benchmark_group("reopen_256MiB");
    g.sample_size(10);
    g.bench_function("clean", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let log = open(&fs, &dir);
                total += t.elapsed();
                assert!(log.recovery_report().clean);
                log.close().unwrap(); // so the next open is clean again
            }
            total
        });
    });
    g.bench_function("after_crash_16MiB_tail", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let mut log = open(&fs, &dir);
                let recs: Vec<Vec<u8>> = (0..64).map(|i| payload(1, i, 256)).collect();
                for _ in 0..(16 << 20) / (64 * 256) {
                    log.append_as_leader(Epoch(1), &recs).unwrap();
                }
                log.flush().unwrap();
                drop(log);
                let t = Instant::now();
                let log = open(&fs, &dir);
                total += t.elapsed();
                log.close().unwrap();
            }
            total
        });
    });
    g.finish();
}

criterion_group!(benches, append, group_commit, read_and_reopen);

fn snapshot(c: &mut Criterion) {
    use quorumlog_benches::workloads::snapshot_write_read;
    let mut g = c.benchmark_group("snapshot_64MiB");
    g.sample_size(10).throughput(Throughput::Bytes(64 << 20));
    for (name, level) in [("plain", None), ("zstd1", Some(1))] {
        g.bench_function(format!("write_then_verified_read_{name}"), |b| {
            b.iter(|| {
                let tmp = tempfile::tempdir().unwrap();
                snapshot_write_read(tmp.path(), 64 << 20, level).unwrap()
            });
        });
    }
    g.finish();
}

criterion_group!(snapshots, snapshot);
criterion_main!(benches, snapshots);
