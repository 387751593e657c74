//! One deadline per client call, covering connect, send and receive.
//! Invariants: against a node that accepts connections but never answers
//! (a stopped process: the kernel still completes the handshake), a put
//! returns `Unknown`, a get and a status `Timeout`, each at its deadline
//! and not before; against an address nobody listens on, a put returns
//! `Failed` (it certainly did not apply). A call that hangs fails the test
//! through the outer guard (ten times its deadline).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::time::Duration;

use quorumlog_kv::client::{status, Client};
use quorumlog_kv::Error;
use tokio::time::Instant;

const DEADLINE: Duration = Duration::from_millis(300);

/// Runs `f`, which must end by itself; returns what it returned and when.
async fn guarded<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let t0 = Instant::now();
    let r = tokio::time::timeout(DEADLINE * 10, f)
        .await
        .expect("the call did not keep its deadline");
    (r, t0.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_a_node_that_never_answers_end_at_their_deadline() {
    // Accepts, reads, never writes back.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    let mut c = Client::new(vec![addr.clone()]);
    let (r, took) = guarded(c.put("k", "v", Instant::now() + DEADLINE)).await;
    assert!(matches!(r, Err(Error::Unknown { .. })), "{r:?}");
    assert!(took >= DEADLINE, "returned before its deadline: {took:?}");
    let (r, took) = guarded(c.get("k", Instant::now() + DEADLINE)).await;
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    assert!(took >= DEADLINE);
    let (r, _) = guarded(status(&addr, Instant::now() + DEADLINE)).await;
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_to_nobody_certainly_failed() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap().to_string();
    drop(free);
    let mut c = Client::new(vec![addr]);
    let (r, _) = guarded(c.put("k", "v", Instant::now() + DEADLINE)).await;
    assert!(matches!(r, Err(Error::Failed { .. })), "{r:?}");
}
