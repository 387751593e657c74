//! The node binary's Prometheus endpoint: with the recorder installed
//! before a store opens, the storage's own figures are served over HTTP in
//! the text format, equal to what the store's `log_stats()` counts.
//! Invariant: the operator's view of syncs and their latency is the log's
//! own count.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::io::{Read as _, Write as _};
use std::sync::Arc;

use quorumlog_raft::{Epoch, Offset, RealFs, SharedFs};
use quorumlog_testkit::AppendDurable;

#[test]
fn the_endpoint_serves_the_logs_own_counts() {
    let registry = quorumlog_kv::server::prom::install().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let fs: SharedFs = Arc::new(RealFs::new());
    let dir = tmp.path().join("n1");
    let (node, store, fresh, _) = quorumlog_kv::cluster::open_store(&fs, &dir, 9, 1).unwrap();
    assert!(fresh);
    let first = store.extent().end.0;
    for i in 0..20u64 {
        let info = store
            .append_durable(
                Offset(first + i),
                Epoch(1),
                &[format!("entry-{i}").as_bytes()],
            )
            .unwrap_or_else(|e| panic!("append {i}: {e}"));
        store.wait_durable(info.next_offset).unwrap();
    }
    let addr = quorumlog_kv::server::prom::serve(registry, "127.0.0.1:0").unwrap();
    let get = || {
        let mut conn = std::net::TcpStream::connect(addr).unwrap();
        conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        conn.read_to_string(&mut body).unwrap();
        body
    };
    // Background rounds may run (the commit point): compare a scrape
    // taken between two equal readings of the stats.
    let (stats, body) = (0..100)
        .find_map(|_| {
            let before = node.stats().log;
            let body = get();
            (node.stats().log == before).then_some((before, body))
        })
        .expect("the log never went quiet");
    assert!(stats.syncs >= 1);
    assert!(body.starts_with("HTTP/1.0 200 OK"), "{body}");
    let label = format!("dir=\"{}\"", dir.display());
    let line = |name: &str| {
        body.lines()
            .find(|l| l.starts_with(name) && l.contains(&label))
            .unwrap_or_else(|| panic!("no {name} for {label} in {body}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string()
    };
    // The facade counts per directory since the process started: the
    // format's own log (opened and closed before this one) synced too.
    let syncs: u64 = line("quorumlog_log_syncs_total{").parse().unwrap();
    assert!(
        syncs >= stats.syncs && syncs <= stats.syncs + 2,
        "{syncs} against {stats:?}"
    );
    assert_eq!(
        line("quorumlog_log_appends_total{"),
        stats.appends.to_string()
    );
    assert_eq!(line("quorumlog_log_sync_seconds_count{"), syncs.to_string());
    assert!(
        body.contains("# TYPE quorumlog_log_sync_seconds histogram"),
        "{body}"
    );
    assert!(body.contains("le=\"0.001\""), "etcd's 1 ms bucket: {body}");
    assert!(body.contains("le=\"+Inf\""), "{body}");
}
