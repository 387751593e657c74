//! The reassignment throttle: a node's budget, in bytes per second, for
//! the traffic its partition leaders send to replicas being added (their
//! catch-up: entries, snapshot chunks and heartbeats). Traffic to any
//! other replica never passes it, so normal replication is never slowed.
//!
//! A token bucket holding at most one second of the rate; a request
//! larger than the bucket waits until the bucket is full and then goes
//! (the bucket runs into debt, which later requests wait out), so a
//! large snapshot chunk is never stuck.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A node's reassignment throttle (see the module documentation). Rates
/// and sizes are far below 2^52: `f64` holds them exactly.
#[derive(Debug)]
pub struct Throttle {
    rate: AtomicU64,
    /// (tokens, when last refilled); tokens may be negative (debt).
    bucket: Mutex<(f64, Instant)>,
    /// (partition, node) pairs whose traffic is throttled: replicas being
    /// added, not yet promoted.
    adding: Mutex<BTreeSet<(u32, u64)>>,
    moved: AtomicU64,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new(0)
    }
}

impl Throttle {
    /// A throttle of `bytes_per_sec` (0: unlimited).
    #[expect(clippy::cast_precision_loss, reason = "see the type's documentation")]
    pub fn new(bytes_per_sec: u64) -> Self {
        Throttle {
            rate: AtomicU64::new(bytes_per_sec),
            bucket: Mutex::new((bytes_per_sec as f64, Instant::now())),
            adding: Mutex::new(BTreeSet::new()),
            moved: AtomicU64::new(0),
        }
    }

    /// Changes the rate (0: unlimited).
    pub fn set_rate(&self, bytes_per_sec: u64) {
        self.rate.store(bytes_per_sec, Ordering::Relaxed);
    }

    /// The rate (0: unlimited).
    pub fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// Marks the replicas of `partition` being added now (replacing the
    /// partition's previous set).
    pub fn set_adding(&self, partition: u32, nodes: impl IntoIterator<Item = u64>) {
        let mut adding = self.adding.lock().unwrap_or_else(PoisonError::into_inner);
        adding.retain(|(p, _)| *p != partition);
        adding.extend(nodes.into_iter().map(|n| (partition, n)));
    }

    /// Whether traffic of `partition` to `node` is throttled.
    pub fn applies(&self, partition: u32, node: u64) -> bool {
        self.adding
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&(partition, node))
    }

    /// How many replicas are being added (of partitions this node leads).
    pub fn adding(&self) -> usize {
        self.adding
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Bytes sent to replicas being added, in all.
    pub fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    /// Waits until `bytes` fit the budget, then counts them as moved.
    /// It waits in slices of at most 100 ms, so a new rate takes effect
    /// at once (a wait computed at the old rate could last many seconds).
    pub async fn take(&self, bytes: u64) {
        while let Some(d) = self.try_take(bytes, Instant::now()) {
            tokio::time::sleep(d.min(Duration::from_millis(100))).await;
        }
        self.moved.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Takes `bytes` at `now` if they fit (`None`), else how long to wait.
    #[expect(clippy::cast_precision_loss, reason = "see the type's documentation")]
    fn try_take(&self, bytes: u64, now: Instant) -> Option<Duration> {
        let rate = self.rate() as f64;
        if rate <= 0.0 {
            return None;
        }
        let mut b = self.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let (tokens, at) = *b;
        let tokens = (tokens + now.duration_since(at).as_secs_f64() * rate).min(rate);
        let need = (bytes as f64).min(rate);
        if tokens >= need {
            *b = (tokens - bytes as f64, now);
            return None;
        }
        *b = (tokens, now);
        Some(Duration::from_secs_f64((need - tokens) / rate).max(Duration::from_millis(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariant: the bucket never lets more than one second of the rate
    /// through at once, and refills at the rate.
    #[test]
    fn the_bucket_holds_one_second_and_refills_at_the_rate() {
        let t = Throttle::new(1000);
        let t0 = Instant::now();
        assert_eq!(t.try_take(600, t0), None);
        assert!(t.try_take(600, t0).is_some(), "only 400 left");
        assert_eq!(t.try_take(600, t0 + Duration::from_millis(200)), None);
        // A request larger than the bucket goes once the bucket is full.
        let t = Throttle::new(100);
        assert_eq!(t.try_take(5000, t0), None);
        let wait = t.try_take(10, t0).expect("in debt");
        assert!(wait >= Duration::from_secs(49), "{wait:?}");
        // Unlimited.
        let t = Throttle::new(0);
        assert_eq!(t.try_take(u64::MAX, t0), None);
    }

    /// Invariant: only the marked (partition, node) pairs are throttled.
    #[test]
    fn only_adding_replicas_are_throttled() {
        let t = Throttle::new(10);
        t.set_adding(3, [4, 5]);
        t.set_adding(7, [1]);
        assert!(t.applies(3, 4) && t.applies(3, 5) && t.applies(7, 1));
        assert!(!t.applies(3, 1) && !t.applies(7, 4));
        t.set_adding(3, []);
        assert!(!t.applies(3, 4));
        assert_eq!(t.adding(), 1);
    }
}
