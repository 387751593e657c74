//! What the log counts, for operators: the [`LogStats`] snapshot an
//! embedder reads without any metrics library, and the same figures
//! through the `metrics` facade for one who installs a recorder.
//!
//! Counting costs the write path nothing it did not already pay: the
//! per-append counts are plain additions under the state lock an append
//! takes anyway, and the facade is told once per sync round (its counters
//! lag the stats by at most one round). Without a recorder the facade's
//! handles are no-ops. The library never installs a recorder.
//!
//! Names (`quorumlog_log_*`, label `dir`, the data directory):
//! counters `appends_total`, `records_total`, `append_bytes_total`,
//! `syncs_total`, `truncations_total`, `purges_total`,
//! `segments_recycled_total`, `poisonings_total`,
//! `recovery_bytes_verified_total`; histograms `sync_seconds`,
//! `append_to_durable_seconds`, `records_per_sync`; gauges `queue_depth`
//! (records written or queued and not yet durable), `sync_overdue` (1 while
//! a sync round has run longer than [`crate::LogOptions::sync_overdue_after`]),
//! `recovery_seconds`.

use std::time::{Duration, Instant};

use metrics::{Counter, Gauge, Histogram as FacadeHistogram};

/// Histogram bounds, in seconds: etcd's WAL fsync buckets (1 ms doubling
/// to 8.192 s) with four below them for fast devices (64–512 µs), so the
/// etcd series can be read off exactly.
pub const LATENCY_BUCKETS_SECONDS: [f64; 18] = [
    0.000_064, 0.000_128, 0.000_256, 0.000_512, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064,
    0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192,
];

/// A latency histogram over [`LATENCY_BUCKETS_SECONDS`].
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyHistogram {
    /// Observations in each bucket (`counts[i]`: at most bound `i`, above
    /// bound `i - 1`); the last counts those above every bound.
    pub counts: [u64; LATENCY_BUCKETS_SECONDS.len() + 1],
    /// Observations.
    pub count: u64,
    /// Their sum, in seconds.
    pub sum_seconds: f64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            counts: [0; LATENCY_BUCKETS_SECONDS.len() + 1],
            count: 0,
            sum_seconds: 0.0,
        }
    }
}

impl LatencyHistogram {
    pub(crate) fn record(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BUCKETS_SECONDS.partition_point(|b| *b < s);
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.count += 1;
        self.sum_seconds += s;
    }

    /// The upper bound of the bucket holding quantile `q` (0..=1), in
    /// seconds; `None` with no observations, infinity past the last bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        #[expect(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a rank among at most 2^53 observations"
        )]
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(
                    LATENCY_BUCKETS_SECONDS
                        .get(i)
                        .copied()
                        .unwrap_or(f64::INFINITY),
                );
            }
        }
        Some(f64::INFINITY)
    }
}

/// What a log has done since it was opened ([`crate::DurableLog::stats`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogStats {
    /// Appends (batches) queued.
    pub appends: u64,
    /// Records they hold.
    pub records: u64,
    /// Their bytes, as encoded.
    pub append_bytes: u64,
    /// Successful sync rounds (a flush counts as one).
    pub syncs: u64,
    /// Records made durable by those rounds.
    pub records_synced: u64,
    /// How long each round took from its start to durability.
    pub sync_latency: LatencyHistogram,
    /// Per round, how long its oldest append waited from being queued to
    /// being durable (the worst of the round's appends).
    pub append_to_durable: LatencyHistogram,
    /// Records written or queued and not yet durable, now.
    pub queue_depth: u64,
    /// Whether a sync round has been running longer than
    /// `LogOptions::sync_overdue_after`, now.
    pub sync_overdue: bool,
    /// Suffix and full truncations.
    pub truncations: u64,
    /// Prefix truncations (purges).
    pub purges: u64,
    /// Segment files taken from the recycled pool.
    pub segments_recycled: u64,
    /// Failures that poisoned the log (0 or 1).
    pub poisonings: u64,
    /// How long the open's recovery took.
    pub recovery: Duration,
    /// Bytes of batches the open's recovery read and verified.
    pub recovery_bytes_verified: u64,
}

/// The facade's handles, registered once at open (so a recorder installed
/// after a log opened sees nothing of it: install it first).
#[derive(Debug)]
pub(crate) struct Facade {
    appends: Counter,
    records: Counter,
    bytes: Counter,
    syncs: Counter,
    truncations: Counter,
    purges: Counter,
    poisonings: Counter,
    sync: FacadeHistogram,
    durable: FacadeHistogram,
    per_sync: FacadeHistogram,
    depth: Gauge,
    pub(crate) overdue: Gauge,
}

impl Facade {
    pub(crate) fn new(dir: &str, recovery: Duration, verified: u64) -> Facade {
        let d = dir.to_string();
        metrics::gauge!("quorumlog_log_recovery_seconds", "dir" => d.clone())
            .set(recovery.as_secs_f64());
        metrics::counter!("quorumlog_log_recovery_bytes_verified_total", "dir" => d.clone())
            .increment(verified);
        Facade {
            appends: metrics::counter!("quorumlog_log_appends_total", "dir" => d.clone()),
            records: metrics::counter!("quorumlog_log_records_total", "dir" => d.clone()),
            bytes: metrics::counter!("quorumlog_log_append_bytes_total", "dir" => d.clone()),
            syncs: metrics::counter!("quorumlog_log_syncs_total", "dir" => d.clone()),
            truncations: metrics::counter!("quorumlog_log_truncations_total", "dir" => d.clone()),
            purges: metrics::counter!("quorumlog_log_purges_total", "dir" => d.clone()),
            poisonings: metrics::counter!("quorumlog_log_poisonings_total", "dir" => d.clone()),
            sync: metrics::histogram!("quorumlog_log_sync_seconds", "dir" => d.clone()),
            durable: metrics::histogram!("quorumlog_log_append_to_durable_seconds", "dir" => d.clone()),
            per_sync: metrics::histogram!("quorumlog_log_records_per_sync", "dir" => d.clone()),
            depth: metrics::gauge!("quorumlog_log_queue_depth", "dir" => d.clone()),
            overdue: metrics::gauge!("quorumlog_log_sync_overdue", "dir" => d),
        }
    }
}

/// The counts, kept in the sync state (under its lock).
#[derive(Debug, Default)]
pub(crate) struct Meters {
    pub(crate) stats: LogStats,
    /// Counts not yet given to the facade: appends, records, bytes.
    unsent: (u64, u64, u64),
    /// When the oldest append not yet covered by a round was queued.
    pub(crate) oldest_queued: Option<Instant>,
    /// When the round in flight started.
    pub(crate) round_started: Option<Instant>,
}

impl Meters {
    /// One append queued (under the state lock).
    pub(crate) fn appended(&mut self, records: u64, bytes: u64) {
        let s = &mut self.stats;
        s.appends += 1;
        s.records += records;
        s.append_bytes += bytes;
        self.unsent.0 += 1;
        self.unsent.1 += records;
        self.unsent.2 += bytes;
        if self.oldest_queued.is_none() {
            self.oldest_queued = Some(Instant::now());
        }
    }

    /// The counts of a log whose open's recovery took `recovery` and
    /// verified `verified` bytes.
    pub(crate) fn opened(recovery: Duration, verified: u64) -> Meters {
        Meters {
            stats: LogStats {
                recovery,
                recovery_bytes_verified: verified,
                ..LogStats::default()
            },
            ..Meters::default()
        }
    }

    /// A round starts at `now` (it covers every append queued before it);
    /// returns when the oldest of those was queued.
    pub(crate) fn round_start(&mut self, now: Instant) -> Option<Instant> {
        self.round_started.get_or_insert(now);
        self.oldest_queued.take()
    }

    /// A round that started at `started` made `records` durable; `oldest`
    /// is what [`Meters::round_start`] returned. Tells the facade.
    pub(crate) fn round_done(
        &mut self,
        facade: &Facade,
        records: u64,
        started: Instant,
        oldest: Option<Instant>,
        depth: u64,
    ) {
        let now = Instant::now();
        let took = now - started;
        let stats = &mut self.stats;
        stats.syncs += 1;
        stats.records_synced += records;
        stats.sync_latency.record(took);
        facade.sync.record(took.as_secs_f64());
        if let Some(o) = oldest {
            stats.append_to_durable.record(now - o);
            facade.durable.record((now - o).as_secs_f64());
        }
        #[expect(clippy::cast_precision_loss, reason = "a count for a histogram")]
        facade.per_sync.record(records as f64);
        facade.syncs.increment(1);
        let (a, r, b) = std::mem::take(&mut self.unsent);
        facade.appends.increment(a);
        facade.records.increment(r);
        facade.bytes.increment(b);
        #[expect(clippy::cast_precision_loss, reason = "a gauge")]
        facade.depth.set(depth as f64);
        facade.overdue.set(0.0);
    }

    pub(crate) fn truncated(&mut self, f: &Facade, prefix: bool) {
        if prefix {
            self.stats.purges += 1;
            f.purges.increment(1);
        } else {
            self.stats.truncations += 1;
            f.truncations.increment(1);
        }
    }

    pub(crate) fn poisoned(&mut self, f: &Facade) {
        self.stats.poisonings += 1;
        f.poisonings.increment(1);
    }

    /// Whether the round in flight is older than `after`.
    pub(crate) fn overdue(&self, after: Duration) -> bool {
        self.round_started.is_some_and(|t| t.elapsed() > after)
    }
}
