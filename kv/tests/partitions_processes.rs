//! The partitioned service as processes: 5 nodes, 64 partitions of 3
//! replicas, clients writing throughout. Through the command line, 16
//! partitions move from nodes {1, 2, 3} to {3, 4, 5} (a plan file, a
//! throttle); a node holding adding replicas is killed mid-way (the
//! listing shows them down) and restarted; half the moves are cancelled
//! (they end at exactly {1, 2, 3}); a move stuck on a stopped node is
//! replaced by a target without it, which completes.
//!
//! Invariants: every acknowledged write reads back from every replica of
//! its partition at the end; at every sample (every 100 ms, from the
//! nodes' own state) each partition has a majority of its voter set alive
//! and hosting it; an alter naming a bad target is refused whole with a
//! reason per partition and changes nothing; the metrics count
//! reassigning partitions while they move, and at the end nothing is
//! under-replicated, reassigning or pending, and bytes were moved.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_lines,
    clippy::needless_pass_by_value,
    clippy::many_single_char_names,
    clippy::redundant_closure_for_method_calls,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlog_kv::client::partitioned::{self as pclient, PartitionedClient};
use quorumlog_kv::server::{partition_of, PARTITIONS};
use quorumlog_kv::wire::admin::{AddingState, Listing, NodeView};
use quorumlog_kv::wire::{GroupRequest, Request, Response};

mod ends;
use ends::{cli, five_nodes, soon, voters, wait_done};

async fn listing(nodes: &[String]) -> Vec<Listing> {
    pclient::list(nodes, Vec::new(), soon()).await.unwrap()
}

/// Samples every partition's voters and live replicas until stopped;
/// returns the violations seen (partition, voters, live hosting voters).
///
/// A node counts as live when it answers: every node the test has not
/// killed or paused (`down`) is asked on its own, with a generous bound,
/// so a node slow on a loaded machine is not mistaken for a dead one; a
/// node in `down` is not asked and does not count.
fn watch_majorities(
    nodes: Vec<String>,
    down: Arc<Mutex<BTreeSet<u64>>>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(usize, Vec<String>, u64)> {
    tokio::spawn(async move {
        let (mut samples, mut bad, mut max_reassigning) = (0, Vec::new(), 0);
        while !stop.load(Ordering::Relaxed) {
            let up: Vec<String> = {
                let down = down.lock().unwrap();
                (1u64..)
                    .zip(&nodes)
                    .filter(|(id, _)| !down.contains(id))
                    .map(|(_, a)| a.clone())
                    .collect()
            };
            let mut views: Vec<NodeView> = Vec::new();
            for addr in &up {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                views.extend(
                    pclient::views(std::slice::from_ref(addr), deadline)
                        .await
                        .into_values()
                        .flatten(),
                );
            }
            let hosting: BTreeMap<u64, BTreeSet<u32>> = views
                .iter()
                .map(|v| (v.node, v.partitions.iter().map(|p| p.partition).collect()))
                .collect();
            // The voters from the newest view of each partition.
            let mut newest: BTreeMap<u32, (u64, Vec<u64>)> = BTreeMap::new();
            for v in &views {
                for p in &v.partitions {
                    let e = newest.entry(p.partition).or_insert((0, Vec::new()));
                    if p.term >= e.0 && (p.leading || e.1.is_empty()) {
                        *e = (p.term, p.voters.clone());
                    }
                }
            }
            for (p, (_, vs)) in &newest {
                let live = vs
                    .iter()
                    .filter(|n| hosting.get(n).is_some_and(|h| h.contains(p)))
                    .count();
                if live * 2 <= vs.len() {
                    bad.push(format!("partition {p}: voters {vs:?}, {live} live"));
                }
            }
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            let m = pclient::metrics(&up, deadline).await;
            max_reassigning = max_reassigning.max(m.iter().map(|m| m.reassigning).sum());
            samples += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (samples, bad, max_reassigning)
    })
}

type Acked = Arc<Mutex<Vec<(String, String)>>>;

/// Writers of unique keys until stopped; every acknowledged write kept.
fn writers(
    nodes: Vec<String>,
    n: usize,
    stop: Arc<AtomicBool>,
    acked: Acked,
) -> Vec<tokio::task::JoinHandle<u64>> {
    (0..n)
        .map(|w| {
            let (nodes, stop, acked) = (nodes.clone(), Arc::clone(&stop), Arc::clone(&acked));
            tokio::spawn(async move {
                let mut c = PartitionedClient::new(&nodes, PARTITIONS);
                let (mut i, mut unknown) = (0u64, 0);
                while !stop.load(Ordering::Relaxed) {
                    let (k, v) = (
                        format!("w{w}-{i}"),
                        format!("value-{w}-{i}-{}", "x".repeat(200)),
                    );
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
                    match c.put(&k, &v, deadline).await {
                        Ok(_) => acked.lock().unwrap().push((k, v)),
                        Err(_) => unknown += 1,
                    }
                    i += 1;
                }
                unknown
            })
        })
        .collect()
}

fn plan_file(dir: &std::path::Path, name: &str, moves: &[(u32, Vec<u64>)]) -> String {
    let entries: Vec<String> = moves
        .iter()
        .map(|(p, r)| format!("{{\"partition\": {p}, \"replicas\": {r:?}}}"))
        .collect();
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "{{\"version\": 1, \"partitions\": [{}]}}",
            entries.join(", ")
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_partitions_move_through_a_kill_a_cancel_and_a_stuck_replica() {
    let dir = tempfile::tempdir().unwrap();
    let mut ps = five_nodes(dir.path()).await;
    let nodes = ps.addrs();
    let joined = nodes.join(",");

    let placed = voters(&nodes).await;
    wait_done(&nodes, &placed, Duration::from_secs(30)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let acked: Acked = Arc::default();
    let writing = writers(nodes.clone(), 8, Arc::clone(&stop), Arc::clone(&acked));
    let stop_watch = Arc::new(AtomicBool::new(false));
    let down: Arc<Mutex<BTreeSet<u64>>> = Arc::default();
    let watch = watch_majorities(nodes.clone(), Arc::clone(&down), Arc::clone(&stop_watch));
    tokio::time::sleep(Duration::from_secs(3)).await;

    // A bad alter is refused whole, with a reason per partition.
    let (ok, out) = cli(&[
        "alter", "--nodes", &joined, "--target", "1=1,2,3", "--target", "2=1,1,2", "--target",
        "3=1,9,2", "--target", "99=1,2,3",
    ]);
    assert!(!ok, "{out}");
    for want in [
        "partition 2: node 1 appears twice",
        "partition 3: unknown node 9",
        "partition 99: unknown partition",
    ] {
        assert!(out.contains(want), "{want} not in {out}");
    }
    assert!(
        listing(&nodes).await.is_empty(),
        "a refused alter changed nothing"
    );

    // 16 partitions on {1, 2, 3}: the 13 placed there, and 1, 2, 3 moved
    // there first (one request).
    let (ok, out) = cli(&[
        "alter", "--nodes", &joined, "--target", "1=1,2,3", "--target", "2=1,2,3", "--target",
        "3=1,2,3",
    ]);
    assert!(ok, "{out}");
    let mut want = placed.clone();
    for p in [1, 2, 3] {
        want.insert(p, [1, 2, 3].into());
    }
    wait_done(&nodes, &want, Duration::from_secs(60)).await;
    let on_123: Vec<u32> = want
        .iter()
        .filter(|(_, v)| **v == BTreeSet::from([1, 2, 3]))
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(on_123.len(), 16, "{on_123:?}");

    // Each of them gets 160 entries of 1 KiB (more than an adding replica
    // may lag by and be promoted), so their moves take a while throttled.
    let preload: Vec<_> = on_123
        .iter()
        .map(|p| {
            let (p, nodes) = (*p, nodes.clone());
            let acked = Arc::clone(&acked);
            tokio::spawn(async move {
                let mut c = PartitionedClient::new(&nodes, PARTITIONS);
                let keys = (0u64..)
                    .map(|i| format!("load-{i}"))
                    .filter(|k| partition_of(k, PARTITIONS) == p);
                for k in keys.take(160) {
                    let v = format!("{k}-{}", "y".repeat(1024));
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                    c.put(&k, &v, deadline).await.unwrap();
                    acked.lock().unwrap().push((k, v));
                }
            })
        })
        .collect();
    for t in preload {
        t.await.unwrap();
    }

    // The plan: all 16 to {3, 4, 5}, throttled.
    let moves: Vec<(u32, Vec<u64>)> = on_123.iter().map(|p| (*p, vec![3, 4, 5])).collect();
    let plan = plan_file(dir.path(), "plan.json", &moves);
    let (ok, out) = cli(&[
        "reassign",
        "--nodes",
        &joined,
        "--plan",
        &plan,
        "--throttle",
        "10000",
    ]);
    assert!(ok, "{out}");
    let (ok, out) = cli(&["reassign", "--nodes", &joined, "--plan", &plan, "--verify"]);
    assert!(!ok && out.contains("in progress"), "{out}");

    // Node 4 (adding replicas) killed mid-way: shown down; then back.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    down.lock().unwrap().insert(4);
    ps.kill(4);
    let t1 = Instant::now();
    loop {
        let l = listing(&nodes).await;
        let down = l
            .iter()
            .flat_map(|x| x.adding.iter())
            .any(|a| a.node == 4 && a.state == AddingState::NodeDown);
        if down {
            break;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(20),
            "node 4 never shown down: {l:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ps.spawn(4).unwrap();
    down.lock().unwrap().remove(&4);

    // Cancel half the moves.
    let cancelled: Vec<u32> = on_123.iter().copied().step_by(2).collect();
    let mut args: Vec<String> = ["cancel", "--nodes", &joined]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(cancelled.iter().map(u32::to_string));
    let (ok, out) = cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(ok, "{out}");
    let mut want = want.clone();
    for p in &on_123 {
        let set = if cancelled.contains(p) {
            [1, 2, 3]
        } else {
            [3, 4, 5]
        };
        want.insert(*p, set.into());
    }
    let (ok, out) = cli(&["throttle", "--nodes", &joined, "0"]);
    assert!(ok, "{out}");
    wait_done(&nodes, &want, Duration::from_secs(120)).await;
    let kept: Vec<(u32, Vec<u64>)> = moves
        .iter()
        .filter(|(p, _)| !cancelled.contains(p))
        .cloned()
        .collect();
    let kept_plan = plan_file(dir.path(), "kept.json", &kept);
    let (ok, out) = cli(&[
        "reassign", "--nodes", &joined, "--plan", &kept_plan, "--verify",
    ]);
    assert!(ok && out.contains("all complete"), "{out}");

    // A move stuck on a stopped node, replaced by a target without it.
    let stuck = cancelled[0];
    down.lock().unwrap().insert(5);
    ps.pause(5, true);
    let (ok, out) = cli(&[
        "alter",
        "--nodes",
        &joined,
        "--target",
        &format!("{stuck}=3,4,5"),
    ]);
    assert!(ok, "{out}");
    let t2 = Instant::now();
    loop {
        let l = listing(&nodes).await;
        let x = l
            .iter()
            .find(|x| x.partition == stuck)
            .expect("still pending");
        let four = x.adding.iter().find(|a| a.node == 4).unwrap();
        let five = x.adding.iter().find(|a| a.node == 5).unwrap();
        if four.state == AddingState::Promoted && five.state == AddingState::NodeDown {
            break;
        }
        assert!(t2.elapsed() < Duration::from_secs(60), "{x:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        listing(&nodes).await.iter().any(|x| x.partition == stuck),
        "stuck: it cannot finish"
    );
    let (ok, out) = cli(&[
        "alter",
        "--nodes",
        &joined,
        "--target",
        &format!("{stuck}=1,3,4"),
    ]);
    assert!(ok, "{out}");
    want.insert(stuck, [1, 3, 4].into());
    wait_done(&nodes, &want, Duration::from_secs(60)).await;
    ps.pause(5, false);
    down.lock().unwrap().remove(&5);

    // Writers stop; every acknowledged write is on every replica.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for w in writing {
        w.await.unwrap();
    }
    stop_watch.store(true, Ordering::Relaxed);
    let (samples, bad, max_reassigning) = watch.await.unwrap();
    assert!(
        bad.is_empty(),
        "{} of {samples} samples lacked a majority: {bad:?}",
        bad.len()
    );
    assert!(samples > 20, "{samples}");
    assert!(
        max_reassigning > 0,
        "the metrics never showed a reassigning partition"
    );

    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() > 100, "{} acknowledged writes", acked.len());
    let by_partition: BTreeMap<u32, Vec<&(String, String)>> =
        acked.iter().fold(BTreeMap::new(), |mut m, kv| {
            m.entry(partition_of(&kv.0, PARTITIONS))
                .or_insert_with(Vec::new)
                .push(kv);
            m
        });
    let final_voters = voters(&nodes).await;
    assert_eq!(final_voters, want);
    for (p, writes) in &by_partition {
        for n in &final_voters[p] {
            let addr = ps.addr(*n);
            let t3 = Instant::now();
            loop {
                let req = Request::group(*p, GroupRequest::Dump);
                let data = match quorumlog_kv::client::request(&addr, &req, soon()).await {
                    Ok(Response::Dump(d)) => d,
                    other => panic!("node {n} partition {p}: {other:?}"),
                };
                let missing = writes
                    .iter()
                    .filter(|(k, v)| data.get(k) != Some(v))
                    .count();
                if missing == 0 {
                    break;
                }
                assert!(
                    t3.elapsed() < Duration::from_secs(20),
                    "node {n} partition {p}: {missing} acknowledged writes missing"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    // Every node runs: a generous bound, so a slow answer is not a missing one.
    let m = pclient::metrics(
        &nodes,
        tokio::time::Instant::now() + Duration::from_secs(30),
    )
    .await;
    assert_eq!(m.len(), 5);
    let sum = |f: fn(&quorumlog_kv::wire::admin::Metrics) -> u64| m.iter().map(f).sum::<u64>();
    assert_eq!(sum(|m| m.reassigning), 0);
    assert_eq!(sum(|m| m.pending_additions), 0);
    assert_eq!(sum(|m| m.under_replicated), 0, "{m:?}");
    assert!(sum(|m| m.bytes_moved) > 0);
    // Every partition led, every voter hosted, every partition taking a
    // fresh client's write.
    ends::every_partition_serves(&nodes).await;
    println!(
        "{} acknowledged writes checked on every replica; {samples} majority samples",
        acked.len()
    );
}
