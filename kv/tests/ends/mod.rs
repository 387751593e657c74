//! What the partitioned service's process tests share: the command line,
//! the nodes' views and voters, waiting for moves to finish, and the end
//! checks every fault test makes (every partition has a leader and every
//! voter's node hosts its partition, `pclient::health`; a fresh client
//! writes and reads back a key of every partition).
#![allow(dead_code, reason = "each test binary uses part of it")]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use quorumlog_kv::client::partitioned::{self as pclient, PartitionedClient};
use quorumlog_kv::server::{partition_of, PARTITIONS};
use quorumlog_kv::wire::admin::{leaders, NodeView};

pub(crate) const EXE: &str = env!("CARGO_BIN_EXE_quorumlog-kv");

/// Five seconds from now.
pub(crate) fn soon() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(5)
}

/// Runs the command line; returns its success and output.
pub(crate) fn cli(args: &[&str]) -> (bool, String) {
    let out = Command::new(EXE).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Every answering node's view.
pub(crate) async fn views(nodes: &[String]) -> Vec<NodeView> {
    pclient::views(nodes, soon())
        .await
        .into_values()
        .flatten()
        .collect()
}

/// Each led partition's voters, as its leader sees them.
pub(crate) async fn voters(nodes: &[String]) -> BTreeMap<u32, BTreeSet<u64>> {
    leaders(&views(nodes).await)
        .into_iter()
        .map(|(p, l)| (p, l.voters.iter().copied().collect()))
        .collect()
}

/// Waits until nothing is pending and each of `want`'s partitions has
/// exactly its voters (a listing that fails is not "nothing pending").
///
/// # Panics
/// Past `limit`, naming what is pending and the wrong voters.
pub(crate) async fn wait_done(
    nodes: &[String],
    want: &BTreeMap<u32, BTreeSet<u64>>,
    limit: Duration,
) {
    let t0 = Instant::now();
    loop {
        let l = pclient::list(nodes, Vec::new(), soon()).await;
        let v = voters(nodes).await;
        let wrong: Vec<_> = want
            .iter()
            .filter(|(p, w)| v.get(p) != Some(w))
            .map(|(p, w)| (*p, w.clone(), v.get(p).cloned()))
            .collect();
        if l.as_ref().is_ok_and(Vec::is_empty) && wrong.is_empty() {
            return;
        }
        assert!(
            t0.elapsed() < limit,
            "not done: pending {:?}, wrong voters (partition, want, have) {wrong:?}",
            l.map(|l| l.iter().map(|x| x.partition).collect::<Vec<_>>())
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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

/// Five node processes under `dir` on 4 MiB segments (five nodes do not
/// write 384 MiB of segments each before they serve), started, once every
/// partition has voters, `list` answers and the controller knows every
/// partition (an alter of partition 0 to its own set is not refused as of
/// an unknown partition).
pub(crate) async fn five_nodes(
    dir: &std::path::Path,
) -> quorumlog_kv_harness::processes::Processes {
    let mut ps = quorumlog_kv_harness::processes::Processes::new(EXE.as_ref(), dir, 5).unwrap();
    ps.init_every = true;
    ps.extra = vec!["--segment-bytes".into(), (4u64 << 20).to_string()];
    for id in 1..=5 {
        ps.spawn(id).unwrap();
    }
    let nodes = ps.addrs();
    let t0 = Instant::now();
    loop {
        // The probe's target is partition 0's own set: it moves nothing.
        let now = voters(&nodes).await;
        let same: Vec<u64> = now
            .get(&0)
            .map(|v| v.iter().copied().collect())
            .unwrap_or_default();
        let ready = now.len() == PARTITIONS as usize
            && pclient::list(&nodes, Vec::new(), soon()).await.is_ok()
            && !matches!(
                pclient::alter(&nodes, vec![(0, same)], soon()).await,
                Ok(Err(ref e)) if e.iter().any(|(_, e)| matches!(e, quorumlog_kv::wire::admin::AlterError::UnknownPartition))
            );
        if ready {
            return ps;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "the cluster never came up"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
