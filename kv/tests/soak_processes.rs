//! The service as a user meets it: real node processes.
//!
//! - `quorumlog-kv soak` (short here; the long runs are in
//!   docs/testing.md): 16 clients on 8 keys while a nemesis sends SIGKILL
//!   (leader, follower, random node, all three) and SIGSTOP (a node, the
//!   leader) for 1–5 s; every operation's history must be linearizable
//!   per key. `QUORUMLOG_SOAK_SECONDS` (default 20) sets the length.
//! - `quorumlog-kv put` to a stopped (SIGSTOP) leader returns at its
//!   deadline with a non-zero exit, instead of hanging.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use quorumlog_kv_harness::processes::Processes;

const EXE: &str = env!("CARGO_BIN_EXE_quorumlog-kv");

#[test]
fn a_soak_of_real_processes_under_kills_and_stops_is_linearizable() {
    let seconds = std::env::var("QUORUMLOG_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(20);
    let seed = quorumlog_testkit::fresh_seed();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(EXE)
        .args(["soak", "--seconds", &seconds.to_string()])
        .args(["--seed", &seed.to_string()])
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    assert!(
        out.status.success()
            && text.contains("linearizable            PASS")
            && text.contains("every partition served  PASS"),
        "seed {seed}: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("fault "), "no fault was injected: {text}");
}

/// The node all three name as the controller's leader, within 20 s.
async fn controller_leader(ps: &Processes) -> Option<u64> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        let mut seen = Vec::new();
        for addr in ps.addrs() {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
            let s = quorumlog_kv::client::status(&addr, deadline).await;
            seen.push(s.ok().and_then(|s| s.leader));
        }
        if let Some(Some(first)) = seen.first().copied() {
            if seen.iter().all(|l| *l == Some(first)) {
                return Some(first);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

#[test]
fn a_put_to_a_stopped_leader_returns_at_its_deadline() {
    let rt = quorumlog_kv_harness::runtime().unwrap();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let mut ps = Processes::new(Path::new(EXE), dir.path(), 3).unwrap();
        for id in 1..=3 {
            ps.spawn(id).unwrap();
        }
        let leader = controller_leader(&ps).await.expect("a leader");
        // The client knows only the stopped node (the controller's
        // leader): whichever partition the key is in, the put reaches it
        // and gets no answer.
        ps.pause(leader, true);
        let t0 = Instant::now();
        let mut child = Command::new(EXE)
            .args([
                "put",
                "--nodes",
                &ps.addr(leader),
                "--timeout",
                "2",
                "k",
                "v",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "put did not keep its deadline"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            t0.elapsed() >= Duration::from_secs(2),
            "returned before its deadline"
        );
        assert!(!status.success(), "a put to a stopped node succeeded");
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(err.contains("outcome unknown"), "{err}");
        ps.pause(leader, false);
    });
}

/// `node --sync-on-flusher` (the log's rounds on its flusher thread, not
/// on the node's thread before it parks). Invariant: such nodes serve
/// too: every partition's write is acknowledged and read back
/// linearizably, on a cluster where one node leads its own rounds and
/// two leave them to the flusher.
#[test]
fn nodes_that_sync_on_the_flusher_serve_writes_and_reads() {
    use quorumlog_kv::client::partitioned::PartitionedClient;
    use quorumlog_kv::server::{partition_of, PARTITIONS};
    let rt = quorumlog_kv_harness::runtime().unwrap();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let mut ps = Processes::new(Path::new(EXE), dir.path(), 3).unwrap();
        ps.spawn(1).unwrap();
        ps.extra = vec!["--sync-on-flusher".into()];
        ps.spawn(2).unwrap();
        ps.spawn(3).unwrap();
        let mut c = PartitionedClient::new(&ps.addrs(), PARTITIONS);
        // A key in every partition.
        let mut keys = std::collections::BTreeMap::new();
        for i in 0.. {
            let k = format!("k{i}");
            keys.entry(partition_of(&k, PARTITIONS)).or_insert(k);
            if keys.len() == PARTITIONS as usize {
                break;
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        for (p, k) in &keys {
            c.put(k, &format!("v{p}"), deadline)
                .await
                .unwrap_or_else(|e| panic!("partition {p}: {e}"));
        }
        for (p, k) in &keys {
            let got = c.get(k, deadline).await.unwrap();
            assert_eq!(got.value, Some(format!("v{p}")), "partition {p}");
        }
    });
}
