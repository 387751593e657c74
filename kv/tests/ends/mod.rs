//! The end checks every fault test of the partitioned service makes: every
//! partition has a leader and every voter's node hosts its partition
//! (`pclient::health`), and a fresh client writes and reads back a key of
//! every partition.
#![allow(dead_code, reason = "each test binary uses part of it")]

use std::time::{Duration, Instant};

use quorumlog_kv::client::partitioned::{self as pclient, PartitionedClient};
use quorumlog_kv::server::{partition_of, PARTITIONS};

fn soon() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(5)
}

/// Every partition has a leader and every voter's node hosts it, within
/// `limit`.
///
/// # Panics
/// When it does not, naming the partitions and voters.
pub(crate) async fn every_partition_led_and_hosted(nodes: &[String], limit: Duration) {
    let t0 = Instant::now();
    loop {
        let h = pclient::health(nodes, PARTITIONS, soon()).await;
        if h.ok() {
            return;
        }
        assert!(t0.elapsed() < limit, "{h:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A fresh client writes a key of partition `p` and reads it back.
///
/// # Panics
/// When the partition takes no write or reads something else.
pub(crate) async fn write_to(nodes: &[String], p: u32, tag: &str) {
    let mut c = PartitionedClient::new(nodes, PARTITIONS);
    // 64 partitions: a key of each is among the first few thousand.
    let key = (0u64..100_000)
        .map(|i| format!("{tag}-{i}"))
        .find(|k| partition_of(k, PARTITIONS) == p)
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    c.put(&key, "v", deadline)
        .await
        .unwrap_or_else(|e| panic!("partition {p} takes no write: {e:?}"));
    let got = c.get(&key, deadline).await.unwrap();
    assert_eq!(got.value.as_deref(), Some("v"), "partition {p}");
}

/// Both checks, for every partition.
pub(crate) async fn every_partition_serves(nodes: &[String]) {
    every_partition_led_and_hosted(nodes, Duration::from_secs(60)).await;
    for p in 0..PARTITIONS {
        write_to(nodes, p, "end-probe").await;
    }
}
