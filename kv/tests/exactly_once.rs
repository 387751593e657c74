//! Exactly-once writes. Invariants: a put whose answer was lost after it
//! applied, retried with its request id, is applied once and answered with
//! its first result, also after a newer write of the same key (the retry
//! must not bring the old value back), after a snapshot purged its entry,
//! and after the whole cluster lost power; a put that certainly did not
//! apply is reported `Failed`, one that may have applied `Unknown`; the
//! session table is bounded and forgets the oldest client first.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::SimCluster;
use openraft10::async_runtime::WatchReceiver;
use openraft10::type_config::alias::EntryOf;
use openraft10::EntryPayload;
use quorumlog_io::CrashPlan;
use quorumlog_kv::client::{CallError, Client, Transport};
use quorumlog_kv::cluster::{addr, LocalTransport};
use quorumlog_kv::machine::MAX_SESSIONS;
use quorumlog_kv::wire::{Command, GroupRequest, Put, Reply, Request, RequestId, Response};
use quorumlog_kv::{Error, KvMachine, TypeConfig};
use tokio::time::Instant;

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

/// Delivers the first put, then loses its answer (as a connection reset
/// after the node applied it would); keeps the lost answer.
struct LoseFirstAnswer {
    inner: LocalTransport,
    lost: Arc<Mutex<Option<Response>>>,
}

impl Transport for LoseFirstAnswer {
    async fn call(
        &mut self,
        addr: &str,
        req: &Request,
        deadline: Instant,
    ) -> Result<Response, CallError> {
        let r = self.inner.call(addr, req, deadline).await?;
        let mut lost = self.lost.lock().unwrap();
        if matches!(
            req,
            Request::Group {
                body: GroupRequest::Put(_),
                ..
            }
        ) && matches!(r, Response::Put(Ok(_)))
            && lost.is_none()
        {
            *lost = Some(r);
            return Err(CallError {
                sent: true,
                error: std::io::Error::from(std::io::ErrorKind::ConnectionReset),
            });
        }
        Ok(r)
    }
}

async fn send(t: &mut LocalTransport, to: u64, req: &Request) -> Response {
    t.call(&addr(to), req, soon()).await.unwrap()
}

/// Sends `req` to whichever node leads, until one applies it.
async fn to_leader(sim: &SimCluster, req: &Request) -> u64 {
    let mut t = sim.cluster.transport();
    let t0 = Instant::now();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no leader applied it"
        );
        for id in 1..=3 {
            if let Response::Put(Ok(index)) = send(&mut t, id, req).await {
                return index;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn value(sim: &SimCluster, key: &str) -> Option<String> {
    sim.client().get(key, soon()).await.unwrap().value
}

#[test]
fn a_retried_put_after_a_lost_answer_applies_once() {
    quorumlog_kv_harness::runtime().unwrap().block_on(async {
        let sim = SimCluster::start(21).await;
        sim.confirmed_leader(Duration::from_secs(10)).await.unwrap();
        // Through the client: the first answer is lost, the retry (same
        // request id) is answered with the first result.
        let lost = Arc::new(Mutex::new(None));
        let transport = LoseFirstAnswer {
            inner: sim.cluster.transport(),
            lost: Arc::clone(&lost),
        };
        let mut c = Client::with_transport(sim.cluster.addrs(), transport);
        let index = c.put("a", "1", soon()).await.unwrap();
        let first = lost.lock().unwrap().take();
        assert!(
            matches!(first, Some(Response::Put(Ok(i))) if i == index),
            "the retry answered {index}, the lost answer was {first:?}"
        );

        // The protocol alone: the put applies, a newer write follows, and
        // the retry neither applies again nor brings the old value back.
        let id = RequestId { client: 42, seq: 1 };
        let old = Request::group(
            0,
            GroupRequest::Put(Put {
                key: "k".into(),
                value: "old".into(),
                request: Some(id),
            }),
        );
        let applied = to_leader(&sim, &old).await;
        let mut other = sim.client();
        other.put("k", "new", soon()).await.unwrap();
        assert_eq!(to_leader(&sim, &old).await, applied);
        assert_eq!(value(&sim, "k").await.as_deref(), Some("new"));

        // Enough writes for a snapshot to purge the entry, then the power
        // of the whole cluster: the session comes back from the snapshot.
        for i in 0..400 {
            other.put(&format!("fill{i}"), "x", soon()).await.unwrap();
        }
        for (raft, _) in sim.cluster.nodes.values() {
            raft.trigger().snapshot().await.unwrap();
        }
        let t0 = Instant::now();
        while sim.cluster.nodes.values().any(|(r, _)| {
            r.metrics()
                .borrow_watched()
                .purged
                .is_none_or(|p| p.index <= applied)
        }) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "no purge past the entry"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut sim = sim;
        sim.power_loss(CrashPlan::LoseUnsynced).await;
        assert_eq!(to_leader(&sim, &old).await, applied);
        assert_eq!(value(&sim, "k").await.as_deref(), Some("new"));
        sim.cluster.shutdown().await;
    });
}

#[test]
fn a_put_that_certainly_did_not_apply_fails_and_one_that_may_have_is_unknown() {
    quorumlog_kv_harness::runtime().unwrap().block_on(async {
        let mut sim = SimCluster::start(22).await;
        sim.confirmed_leader(Duration::from_secs(10)).await.unwrap();
        // No node there: never sent.
        let mut nowhere = Client::with_transport(vec![addr(9)], sim.cluster.transport());
        let r = nowhere
            .put("k", "v", Instant::now() + Duration::from_millis(300))
            .await;
        assert!(matches!(r, Err(Error::Failed { .. })), "{r:?}");
        // A node that cannot commit (cut off, and it leads: its put is
        // appended and waits): the outcome is unknown at the deadline.
        let leader = sim.confirmed_leader(Duration::from_secs(10)).await.unwrap();
        sim.cluster.isolate(leader);
        let mut stuck = Client::with_transport(vec![addr(leader)], sim.cluster.transport());
        let r = stuck
            .put("k", "v", Instant::now() + Duration::from_millis(300))
            .await;
        assert!(matches!(r, Err(Error::Unknown { .. })), "{r:?}");
        sim.cluster.heal();
        // Every node stopped: nothing can apply it.
        for id in 1..=3 {
            sim.cluster.stop(id).await;
        }
        let mut c = Client::with_transport((1..=3).map(addr).collect(), sim.cluster.transport());
        let r = c
            .put("k", "v", Instant::now() + Duration::from_millis(300))
            .await;
        assert!(matches!(r, Err(Error::Failed { .. })), "{r:?}");
    });
}

fn put_entry(index: u64, client: u64, seq: u64) -> EntryOf<TypeConfig> {
    EntryOf::<TypeConfig> {
        log_id: quorumlog_openraft10::mapping::log_id::<
            openraft10::type_config::alias::LeaderIdOf<TypeConfig>,
        >(quorumlog_raft::Epoch((1 << 32) | 1), index),
        payload: EntryPayload::Normal(Command::Put(Put {
            key: format!("k{client}"),
            value: format!("v{index}"),
            request: Some(RequestId { client, seq }),
        })),
    }
}

#[test]
fn the_session_table_is_bounded_and_forgets_the_oldest_client() {
    quorumlog_kv_harness::runtime().unwrap().block_on(async {
        let m = KvMachine::in_memory();
        let n = MAX_SESSIONS as u64 + 5;
        let entries: Vec<_> = (0..n).map(|c| put_entry(c + 1, c, 1)).collect();
        for e in entries {
            m.apply_one(e);
        }
        assert_eq!(m.sessions(), MAX_SESSIONS);
        // The newest client's retry replays its first result.
        let newest = n - 1;
        let r = vec![m.apply_one(put_entry(n + 1, newest, 1))];
        assert_eq!(r, vec![Reply::Put { index: n }]);
        // The oldest was forgotten: its retry applies again (documented).
        let r = vec![m.apply_one(put_entry(n + 2, 0, 1))];
        assert_eq!(r, vec![Reply::Put { index: n + 2 }]);
        // An older request of a known client is not applied.
        let r = vec![m.apply_one(put_entry(n + 3, newest, 2))];
        assert_eq!(r, vec![Reply::Put { index: n + 3 }]);
        let r = vec![m.apply_one(put_entry(n + 4, newest, 1))];
        assert_eq!(r, vec![Reply::Superseded]);
        assert_eq!(
            m.get(&format!("k{newest}")).as_deref(),
            Some(&*format!("v{}", n + 3))
        );
    });
}
