//! A reassignment to a node that is down (found from outside: a partition
//! wedged for good). Five node processes, 64 partitions; node 1 is
//! killed; partition A (idle, a dozen entries) is moved to {1, a, b} (two
//! of its voters kept) and partition B to {1} alone. Invariants:
//! - while node 1 is down, `list` shows it down (why the move waits), and
//!   it is never made a voter of either (it
//!   acknowledged nothing: the old plan promoted it at once, as a short
//!   log's lag is under the promotion bound), and every partition keeps
//!   a leader that takes writes;
//! - with node 1 back, both moves complete, every partition has a leader
//!   and every voter's node hosts its partition;
//! - a move to a down node cancelled while it is down rolls back at once
//!   (no removal waits for it) and its partition keeps taking writes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use quorumlog_kv::client::partitioned as pclient;
use quorumlog_kv::wire::admin::AddingState;

mod ends;
use ends::{cli, every_partition_led_and_hosted, five_nodes, soon, voters, wait_done, write_to};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_to_a_down_node_never_promotes_it_and_never_wedges_a_partition() {
    let dir = tempfile::tempdir().unwrap();
    let mut ps = five_nodes(dir.path()).await;
    let nodes = ps.addrs();
    let joined = nodes.join(",");
    every_partition_led_and_hosted(&nodes, Duration::from_secs(60)).await;
    let placed = voters(&nodes).await;
    // Three partitions without node 1, each with a few entries.
    let without_1: Vec<u32> = placed
        .iter()
        .filter(|(_, v)| !v.contains(&1) && v.len() >= 3)
        .map(|(p, _)| *p)
        .take(3)
        .collect();
    assert_eq!(without_1.len(), 3, "{placed:?}");
    let (a, b, c) = (without_1[0], without_1[1], without_1[2]);
    for p in [a, b, c] {
        for i in 0..4 {
            write_to(&nodes, p, &format!("pre-{i}")).await;
        }
    }

    ps.kill(1);
    let kept: Vec<u64> = placed[&a].iter().copied().take(2).collect();
    let target_a = format!("{a}=1,{},{}", kept[0], kept[1]);
    let target_b = format!("{b}=1");
    let (ok, out) = cli(&[
        "alter", "--nodes", &joined, "--target", &target_a, "--target", &target_b,
    ]);
    assert!(ok, "{out}");
    // For 8 s: node 1 is never a voter of either; both keep taking writes.
    let t0 = Instant::now();
    let mut rounds = 0;
    while t0.elapsed() < Duration::from_secs(8) {
        let v = voters(&nodes).await;
        for p in [a, b] {
            assert!(
                v.get(&p).is_none_or(|s| !s.contains(&1)),
                "partition {p}: node 1 made a voter while down: {:?}",
                v.get(&p)
            );
        }
        // `list` says why the move waits: the adding replica's node is down.
        let listed = pclient::list(&nodes, vec![a, b], soon()).await.unwrap();
        for l in &listed {
            let one = l.adding.iter().find(|x| x.node == 1);
            assert!(
                one.is_none_or(|x| x.state == AddingState::NodeDown),
                "partition {}: node 1 listed as {:?} while down",
                l.partition,
                one.map(|x| x.state)
            );
        }
        write_to(&nodes, a, &format!("down-{rounds}")).await;
        write_to(&nodes, b, &format!("down-{rounds}")).await;
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Node 1 back: both moves complete; every partition led and hosted.
    ps.spawn(1).unwrap();
    let mut want = BTreeMap::new();
    want.insert(a, [1, kept[0], kept[1]].into());
    want.insert(b, [1].into());
    wait_done(&nodes, &want, Duration::from_secs(90)).await;
    write_to(&nodes, a, "after-a").await;
    write_to(&nodes, b, "after-b").await;
    every_partition_led_and_hosted(&nodes, Duration::from_secs(60)).await;

    // A move to node 1 while it is down, cancelled while it is down: the
    // rollback completes at once, and partition c keeps its voters.
    ps.kill(1);
    let before_c = voters(&nodes).await[&c].clone();
    let target_c = format!("{c}=1");
    let (ok, out) = cli(&["alter", "--nodes", &joined, "--target", &target_c]);
    assert!(ok, "{out}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (ok, out) = cli(&["cancel", "--nodes", &joined, &c.to_string()]);
    assert!(ok, "{out}");
    let mut want = BTreeMap::new();
    want.insert(c, before_c);
    wait_done(&nodes, &want, Duration::from_secs(30)).await;
    write_to(&nodes, c, "cancelled").await;
    ps.spawn(1).unwrap();
    every_partition_led_and_hosted(&nodes, Duration::from_secs(60)).await;
    ends::every_partition_serves(&nodes).await;
}
