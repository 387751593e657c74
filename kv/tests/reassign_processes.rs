//! A running three-process cluster grows to four voters and back through
//! the command line (`quorumlog-kv reassign --target …`), the leader
//! driving each step with the store's reassignment state machine over
//! openraft's membership changes. Invariants: the request is refused with
//! a typed reason when it cannot be planned (a duplicate node, a cancel
//! with nothing pending); each reassignment ends with exactly the target
//! voters and nothing pending; the listing shows an adding replica that
//! cannot catch up (node 5, killed after the request); writes acknowledged
//! before, during and after are on every voter. (The driver runs on
//! metrics changes, so a replica that can catch up is often promoted
//! before any listing: the grow step only prints what it saw.)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use quorumlog_kv::client::{self, Client};
use quorumlog_kv::demo::Processes;
use quorumlog_kv::proto::{Request, Response};

const EXE: &str = env!("CARGO_BIN_EXE_quorumlog-kv");

/// Deadline of one status, dump or listing call.
fn soon() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(5)
}

/// Runs the command line; returns its success and output.
fn cli(args: &[&str]) -> (bool, String) {
    let out = Command::new(EXE).args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Polls the listing every 10 ms until told to stop, keeping each distinct
/// text: started before a reassignment, it sees the intermediate states
/// however fast the new voter catches up (polling only after the writes
/// that follow the command could miss them all).
fn watch_listings(
    addr: String,
) -> (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<Vec<String>>,
) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = std::sync::Arc::clone(&stop);
    let task = tokio::spawn(async move {
        let mut seen: Vec<String> = Vec::new();
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            let text = listing(&addr).await;
            if seen.last() != Some(&text) {
                seen.push(text);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        seen
    });
    (stop, task)
}

async fn listing(addr: &str) -> String {
    match client::to_leader(addr, &Request::Reassignments, soon()).await {
        Ok(Response::Reassignments(Ok(t))) => t,
        other => format!("{other:?}"),
    }
}

/// Waits until the leader's voters are `want` and nothing is pending;
/// returns the listings seen on the way.
async fn wait_voters(addr: &str, want: &[u64], limit: Duration) -> Vec<String> {
    let t0 = Instant::now();
    let mut seen = Vec::new();
    while t0.elapsed() < limit {
        let text = listing(addr).await;
        if seen.last() != Some(&text) {
            seen.push(text.clone());
        }
        if let Ok(s) = client::status(addr, soon()).await {
            let leader_view = match s.leader.and_then(|l| {
                s.nodes
                    .iter()
                    .find(|(i, _)| *i == l)
                    .map(|(_, a)| a.clone())
            }) {
                Some(l) => client::status(&l, soon()).await.ok(),
                None => None,
            };
            if let Some(l) = leader_view {
                if l.voters == want && text.starts_with("no reassignment") {
                    return seen;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("voters never became {want:?}; listings seen: {seen:#?}");
}

async fn write(w: &mut Client, acked: &mut Vec<(String, String)>, n: usize, tag: &str) {
    for i in 0..n {
        let (k, v) = (format!("{tag}-{i}"), format!("v{i}"));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        w.put(&k, &v, deadline).await.unwrap();
        acked.push((k, v));
    }
}

async fn check_on(addr: &str, acked: &[(String, String)]) {
    let t0 = Instant::now();
    loop {
        let data = client::dump(addr, soon()).await.unwrap();
        let missing = acked.iter().filter(|(k, v)| data.get(k) != Some(v)).count();
        if missing == 0 {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{addr}: {missing} acknowledged writes missing"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts node `id` outside the cluster; returns its address once it
/// listens.
async fn start_extra(ps: &mut Processes, id: u64) -> String {
    let addr = ps.add(id).unwrap();
    ps.spawn(id).unwrap();
    let t0 = Instant::now();
    while client::status(&addr, soon()).await.is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "node {id} never listened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    addr
}

/// Node 5 is added, then its process dies before it can catch up; the
/// cancel rolls back to exactly {1, 2, 3}. (If it was promoted before the
/// kill, the reassignment ended first: the cancel finds nothing, and a
/// reassignment back removes it.)
async fn cancel_an_addition(ps: &mut Processes, w: &mut Client, acked: &mut Vec<(String, String)>) {
    let a1 = ps.addr(1);
    let a5 = start_extra(ps, 5).await;
    let peers = format!("5={a5}");
    let (ok, out) = cli(&[
        "reassign", "--addr", &a1, "--target", "1,2,3,5", "--peers", &peers,
    ]);
    assert!(ok, "{out}");
    ps.kill(5);
    // Node 5 cannot catch up now: the reassignment stays pending, and the
    // listing shows it (unless it ended before the kill).
    let listed = listing(&a1).await;
    assert!(
        listed.contains("adding   5") || listed.contains("no reassignment"),
        "{listed}"
    );
    if listed.contains("adding   5") {
        assert!(listed.contains("catching up"), "{listed}");
    }
    let (ok, out) = cli(&["reassign", "--addr", &a1, "--cancel"]);
    eprintln!("cancel: {}", if ok { "rolled back" } else { "ended first" });
    if ok {
        wait_voters(&a1, &[1, 2, 3], Duration::from_secs(60)).await;
    } else {
        assert!(out.contains("no reassignment"), "{out}");
        let (ok, out) = cli(&["reassign", "--addr", &a1, "--target", "1,2,3"]);
        assert!(ok, "{out}");
        wait_voters(&a1, &[1, 2, 3], Duration::from_secs(60)).await;
    }
    write(w, acked, 20, "cancelled").await;
    for id in 1..=3 {
        check_on(&ps.addr(id), acked).await;
    }
}

#[test]
fn a_running_cluster_grows_to_four_voters_and_back() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let mut ps = Processes::new(Path::new(EXE), dir.path(), 3).unwrap();
        for id in 1..=3 {
            ps.spawn(id).unwrap();
        }
        ps.wait_leader(None, Duration::from_secs(20))
            .await
            .expect("a first leader");
        let a1 = ps.addr(1);
        let mut w = Client::new((1..=3).map(|i| ps.addr(i)).collect());
        let mut acked = Vec::new();
        write(&mut w, &mut acked, 50, "before").await;

        // Typed refusals, nothing started.
        let (ok, out) = cli(&["reassign", "--addr", &a1, "--cancel"]);
        assert!(!ok && out.contains("no reassignment"), "{out}");
        let (ok, out) = cli(&["reassign", "--addr", &a1, "--target", "1,2,2"]);
        assert!(
            !ok && out.contains("node 2 appears more than once"),
            "{out}"
        );

        // Grow: node 4 starts empty, joins as a learner, is promoted.
        let a4 = ps.add(4).unwrap();
        ps.spawn(4).unwrap();
        let t0 = Instant::now();
        while client::status(&a4, soon()).await.is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "node 4 never listened"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let peers = format!("4={a4}");
        let (stop, watcher) = watch_listings(a1.clone());
        let (ok, out) = cli(&[
            "reassign", "--addr", &a1, "--target", "1,2,3,4", "--peers", &peers,
        ]);
        assert!(ok, "{out}");
        write(&mut w, &mut acked, 50, "growing").await;
        let mut seen = wait_voters(&a1, &[1, 2, 3, 4], Duration::from_secs(60)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        seen.extend(watcher.await.unwrap());
        eprintln!(
            "listings while node 4 was added: {}",
            seen.iter().filter(|t| t.contains("adding   4")).count()
        );
        write(&mut w, &mut acked, 50, "grown").await;
        for id in 1..=4 {
            check_on(&ps.addr(id), &acked).await;
        }

        // And back: node 4 is removed.
        let (ok, out) = cli(&["reassign", "--addr", &a1, "--target", "1,2,3"]);
        assert!(ok, "{out}");
        wait_voters(&a1, &[1, 2, 3], Duration::from_secs(60)).await;
        write(&mut w, &mut acked, 50, "after").await;
        for id in 1..=3 {
            check_on(&ps.addr(id), &acked).await;
        }
        let (ok, out) = cli(&["reassignments", "--addr", &a1]);
        assert!(ok && out.contains("no reassignment in progress"), "{out}");

        cancel_an_addition(&mut ps, &mut w, &mut acked).await;
    });
}
