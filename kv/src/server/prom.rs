//! The node binary's Prometheus endpoint (`node --metrics-addr ADDR`): a
//! recorder for the `metrics` facade, installed by the binary before it
//! opens its store (the storage crates register their handles at open),
//! the text exposition format over plain HTTP on `GET /metrics` (any
//! path). The partitions' own state is the `metrics` command's
//! (`NodeRequest::Metrics`).
//!
//! Latency histograms (`*_seconds`) use the log's buckets (etcd's from
//! 1 ms, and four below); other histograms powers of two to 65,536.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// One histogram's buckets.
#[derive(Debug)]
struct Buckets {
    bounds: Vec<f64>,
    counts: Vec<AtomicU64>,
    sum: Mutex<f64>,
}

impl HistogramFn for Buckets {
    fn record(&self, value: f64) {
        let i = self.bounds.partition_point(|b| *b < value);
        if let Some(c) = self.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        *self.sum.lock().unwrap_or_else(PoisonError::into_inner) += value;
    }
}

/// Every metric registered, by name and then by rendered labels.
#[derive(Debug, Default)]
pub struct Registry {
    counters: Mutex<BTreeMap<(String, String), Arc<AtomicU64>>>,
    gauges: Mutex<BTreeMap<(String, String), Arc<AtomicU64>>>,
    histograms: Mutex<BTreeMap<(String, String), Arc<Buckets>>>,
}

fn split(key: &Key) -> (String, String) {
    let labels: Vec<String> = key
        .labels()
        .map(|l| {
            format!(
                "{}=\"{}\"",
                l.key(),
                l.value().replace('\\', "\\\\").replace('"', "\\\"")
            )
        })
        .collect();
    (key.name().to_string(), labels.join(","))
}

impl Recorder for Registry {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut m = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        Counter::from_arc(Arc::clone(m.entry(split(key)).or_default()))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut m = self.gauges.lock().unwrap_or_else(PoisonError::into_inner);
        Gauge::from_arc(Arc::clone(m.entry(split(key)).or_default()))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let (name, labels) = split(key);
        let bounds: Vec<f64> = if name.ends_with("_seconds") {
            quorumlog_raft::stats::LATENCY_BUCKETS_SECONDS.to_vec()
        } else {
            (0..=16).map(|i| f64::from(1u32 << i)).collect()
        };
        let mut m = self
            .histograms
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let h = m.entry((name, labels)).or_insert_with(|| {
            Arc::new(Buckets {
                counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
                bounds,
                sum: Mutex::new(0.0),
            })
        });
        Histogram::from_arc(Arc::clone(h))
    }
}

fn braces(labels: &str, extra: &str) -> String {
    match (labels.is_empty(), extra.is_empty()) {
        (true, true) => String::new(),
        (false, true) => format!("{{{labels}}}"),
        (true, false) => format!("{{{extra}}}"),
        (false, false) => format!("{{{labels},{extra}}}"),
    }
}

impl Registry {
    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let typed = |out: &mut String, name: &str, kind: &str, last: &mut String| {
            if last != name {
                let _ = writeln!(out, "# TYPE {name} {kind}");
                *last = name.to_string();
            }
        };
        let mut last = String::new();
        for ((name, labels), v) in self
            .counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            typed(&mut out, name, "counter", &mut last);
            let _ = writeln!(
                out,
                "{name}{} {}",
                braces(labels, ""),
                v.load(Ordering::Relaxed)
            );
        }
        for ((name, labels), v) in self
            .gauges
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            typed(&mut out, name, "gauge", &mut last);
            let _ = writeln!(
                out,
                "{name}{} {}",
                braces(labels, ""),
                f64::from_bits(v.load(Ordering::Relaxed))
            );
        }
        for ((name, labels), h) in self
            .histograms
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            typed(&mut out, name, "histogram", &mut last);
            let mut seen = 0u64;
            for (i, c) in h.counts.iter().enumerate() {
                seen += c.load(Ordering::Relaxed);
                let le = h
                    .bounds
                    .get(i)
                    .map_or_else(|| "+Inf".to_string(), |b| format!("{b}"));
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {seen}",
                    braces(labels, &format!("le=\"{le}\""))
                );
            }
            let sum = *h.sum.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels, ""));
            let _ = writeln!(out, "{name}_count{} {seen}", braces(labels, ""));
        }
        out
    }
}

static REGISTRY: OnceLock<&'static Registry> = OnceLock::new();

/// Installs the process's recorder (once; the binary calls it before it
/// opens its store).
///
/// # Errors
/// Another recorder is installed already.
pub fn install() -> Result<&'static Registry, String> {
    if let Some(r) = REGISTRY.get() {
        return Ok(r);
    }
    let r: &'static Registry = Box::leak(Box::default());
    metrics::set_global_recorder(r).map_err(|e| e.to_string())?;
    Ok(REGISTRY.get_or_init(|| r))
}

/// Serves `registry` on `addr` from a thread of its own; returns the
/// address bound (port 0 picks one).
///
/// # Errors
/// The address cannot be bound.
pub fn serve(registry: &'static Registry, addr: &str) -> std::io::Result<std::net::SocketAddr> {
    let listener = std::net::TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let mut conn = conn;
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf);
                let body = registry.render();
                let _ = write!(
                    conn,
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        })?;
    Ok(bound)
}
