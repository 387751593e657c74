//! What the log counts (`DurableLog::stats`) and what it tells the
//! `metrics` facade: every append, record and byte; every sync round with
//! its latency, its records and its oldest append's wait; truncations and
//! purges; the recovery; a round that hangs is overdue and stops being so
//! once it ends. Invariant: the figures an operator alerts on are the
//! log's own, counted exactly, and the facade agrees with them.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::float_cmp,
    clippy::too_many_lines,
    clippy::cast_possible_truncation,
    clippy::cast_precision_loss,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use quorumlog_checkpoint::{
    format, ClusterId, DataDir, Epoch, NodeId, Offset, OpenOptions, SharedFs,
};
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_log::{DurableLog, LogOptions, SyncPolicy};

/// A recorder keeping every metric by name.
#[derive(Default)]
struct Kept {
    counters: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    gauges: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<BTreeMap<String, Arc<Values>>>,
}

#[derive(Default)]
struct Values(Mutex<Vec<f64>>);

impl HistogramFn for Values {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

impl Recorder for Kept {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let c = self
            .counters
            .lock()
            .unwrap()
            .entry(key.name().to_string())
            .or_default()
            .clone();
        Counter::from_arc(c)
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let g = self
            .gauges
            .lock()
            .unwrap()
            .entry(key.name().to_string())
            .or_default()
            .clone();
        Gauge::from_arc(g)
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let h = self
            .histograms
            .lock()
            .unwrap()
            .entry(key.name().to_string())
            .or_default()
            .clone();
        Histogram::from_arc(h)
    }
}

impl Kept {
    fn counter(&self, name: &str) -> u64 {
        self.counters.lock().unwrap()[name].load(Ordering::Relaxed)
    }
    fn gauge(&self, name: &str) -> f64 {
        f64::from_bits(self.gauges.lock().unwrap()[name].load(Ordering::Relaxed))
    }
    fn histogram(&self, name: &str) -> Vec<f64> {
        self.histograms.lock().unwrap()[name]
            .0
            .lock()
            .unwrap()
            .clone()
    }
}

fn open(fs: &SharedFs, options: LogOptions) -> DurableLog {
    let dd = Arc::new(DataDir::open(fs.clone(), Path::new("/d"), &OpenOptions::default()).unwrap());
    DurableLog::open(dd, options, SyncPolicy::GroupCommit).unwrap()
}

#[test]
fn every_append_round_truncation_and_recovery_is_counted_and_the_facade_agrees() {
    let sim = Arc::new(SimFs::new(7));
    let fs: SharedFs = sim.clone();
    format(&fs, Path::new("/d"), ClusterId(1), NodeId(1)).unwrap();
    let kept = Kept::default();
    let log = metrics::with_local_recorder(&kept, || open(&fs, LogOptions::default()));
    let (mut records, mut bytes_min) = (0u64, 0u64);
    for i in 0..50u64 {
        let batch: Vec<Vec<u8>> = (0..=i % 3).map(|j| vec![b'a'; 10 + j as usize]).collect();
        records += batch.len() as u64;
        bytes_min += batch.iter().map(|r| r.len() as u64).sum::<u64>();
        let info = log.append_as_leader(Epoch(1), &batch).unwrap();
        if i % 5 == 4 {
            log.wait_durable(info.next_offset).unwrap();
        }
    }
    log.flush().unwrap();
    let s = log.stats();
    assert_eq!(s.appends, 50);
    assert_eq!(s.records, records);
    assert!(s.append_bytes > bytes_min, "encoded bytes include headers");
    assert!(s.syncs >= 10, "{s:?}");
    assert_eq!(s.records_synced, records, "every record made durable once");
    assert_eq!(s.sync_latency.count, s.syncs);
    assert!(s.append_to_durable.count >= 10 && s.append_to_durable.count <= s.syncs);
    assert_eq!(s.queue_depth, 0);
    assert!(!s.sync_overdue);
    assert!(s.sync_latency.quantile(0.5).is_some());
    assert_eq!(
        s.sync_latency.counts.iter().sum::<u64>(),
        s.sync_latency.count
    );

    // The facade agrees (it is told at every round; a flush is one).
    assert_eq!(kept.counter("quorumlog_log_appends_total"), s.appends);
    assert_eq!(kept.counter("quorumlog_log_records_total"), s.records);
    assert_eq!(
        kept.counter("quorumlog_log_append_bytes_total"),
        s.append_bytes
    );
    assert_eq!(kept.counter("quorumlog_log_syncs_total"), s.syncs);
    assert_eq!(
        kept.histogram("quorumlog_log_sync_seconds").len() as u64,
        s.syncs
    );
    assert_eq!(
        kept.histogram("quorumlog_log_records_per_sync")
            .iter()
            .sum::<f64>(),
        records as f64
    );
    assert_eq!(kept.gauge("quorumlog_log_queue_depth"), 0.0);

    log.truncate_to(Offset(40)).unwrap();
    log.truncate_prefix_to(Offset(10)).unwrap();
    let s = log.stats();
    assert_eq!((s.truncations, s.purges), (1, 1));
    assert_eq!(kept.counter("quorumlog_log_truncations_total"), 1);
    assert_eq!(kept.counter("quorumlog_log_purges_total"), 1);
    assert_eq!(s.poisonings, 0);

    // A crash: the reopen verifies what it must, and says how much.
    let after: SharedFs = Arc::new(sim.crash_with(CrashPlan::KeepAll));
    drop(log);
    let fs = after;
    let kept = Kept::default();
    let log = metrics::with_local_recorder(&kept, || open(&fs, LogOptions::default()));
    let s = log.stats();
    assert!(s.recovery_bytes_verified > 0, "{s:?}");
    assert_eq!(
        kept.counter("quorumlog_log_recovery_bytes_verified_total"),
        s.recovery_bytes_verified
    );
    assert_eq!(
        kept.gauge("quorumlog_log_recovery_seconds"),
        s.recovery.as_secs_f64()
    );
}

#[test]
fn a_round_that_hangs_is_overdue_until_it_ends() {
    let sim = Arc::new(SimFs::new(3));
    let fs: SharedFs = sim.clone();
    format(&fs, Path::new("/d"), ClusterId(1), NodeId(1)).unwrap();
    let options = LogOptions {
        sync_overdue_after: Duration::from_millis(50),
        ..LogOptions::default()
    };
    let kept = Kept::default();
    let log = Arc::new(metrics::with_local_recorder(&kept, || open(&fs, options)));
    log.append_as_leader(Epoch(1), &[b"first"]).unwrap();
    log.flush().unwrap();
    sim.hold_io(true);
    // The append and its wait in another thread: the append's own write
    // may be the one the disk holds.
    let waiter = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            let info = log.append_as_leader(Epoch(1), &[b"held"])?;
            log.wait_durable(info.next_offset)
        })
    };
    // The round cannot end while the disk holds its write: it becomes
    // overdue, in the stats and (through the flusher's watch) the gauge.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(log.stats().sync_overdue && kept.gauge("quorumlog_log_sync_overdue") == 1.0) {
        assert!(
            Instant::now() < deadline,
            "never overdue: {:?}",
            log.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    sim.hold_io(false);
    waiter.join().unwrap().unwrap();
    let s = log.stats();
    assert!(!s.sync_overdue, "{s:?}");
    assert_eq!(kept.gauge("quorumlog_log_sync_overdue"), 0.0);
    assert_eq!(s.queue_depth, 0);
    assert!(
        s.sync_latency.quantile(1.0).unwrap() >= 0.064,
        "the held round's latency is in the histogram: {:?}",
        s.sync_latency
    );
}
