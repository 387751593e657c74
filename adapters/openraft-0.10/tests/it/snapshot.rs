//! Snapshots on openraft 0.10 as the store's snapshot files, sent chunk by
//! chunk into the follower's install (`SnapshotFiles::receive`).
//!
//! Invariants: a follower the leader's purged log no longer reaches gets
//! the leader's snapshot file and ends with every acknowledged write; a
//! transfer cut in the middle resumes where the follower's install holds
//! it durably (not from byte 0); a transfer with a corrupt byte is refused
//! when the follower verifies it and publishes nothing (the next transfer
//! starts clean); a verified download is published only by openraft's
//! install, after openraft made the leader's vote durable; a node restarted after the install comes back from its snapshot file and
//! its log.

use crate::common;

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Adv, Get, Machine, Put, TEST_CHUNK};
use openraft10::type_config::alias::SnapshotMetaOf;
use openraft10::{BasicNode, Config, Raft, SnapshotPolicy};
use quorumlog_io::RealFs;
use quorumlog_openraft10::{LogStore, SnapshotData, SnapshotFiles};
use quorumlog_raft::{
    ClusterId, DirectoryId, Group, Identity, Meta, Node, NodeId, NodeOptions, Offset, SharedFs,
};

type R = Raft<Adv, Machine<Adv>>;
type Router = quorumlog_openraft10::LocalRouter<Adv, Machine<Adv>>;

/// Small segments, none prepared ahead: a case opens its node in
/// milliseconds.
fn small_options() -> NodeOptions {
    NodeOptions::with_segment_bytes(1 << 20)
}

const GROUP: u64 = 0;

/// What the follower's network saw, attempt by attempt.
#[derive(Debug, Default)]
struct Seen {
    attempts: usize,
    /// Where each attempt's install started.
    started_at: Vec<u64>,
    /// The corrupt attempt's `finish` failed.
    corrupt_refused: bool,
    /// After it, the store published no snapshot.
    nothing_published: bool,
    /// The clean transfer, verified, was not published before openraft's
    /// install.
    unpublished_until_installed: bool,
    sizes: Vec<u64>,
}

/// The follower's network: attempt 0 is cut after half the file, attempt
/// 1 resumes and carries a flipped byte, later attempts are clean.
fn scripted(
    files: &SnapshotFiles,
    meta: &SnapshotMetaOf<Adv>,
    from: &SnapshotData,
    seen: &Mutex<Seen>,
) -> io::Result<SnapshotData> {
    let attempt = {
        let mut s = seen.lock().unwrap();
        s.attempts += 1;
        s.sizes.push(from.size());
        s.attempts - 1
    };
    let mut rx = files.receive::<Adv>(meta, from.size())?;
    seen.lock().unwrap().started_at.push(rx.position());
    let half = from.size() / 2;
    let mut flipped = false;
    while rx.position() < from.size() {
        let at = rx.position();
        if attempt == 0 && at >= half {
            return Err(io::Error::other("connection cut (scripted)"));
        }
        let mut chunk = from.read_chunk(at, TEST_CHUNK)?;
        if attempt == 1 && !flipped {
            chunk[0] ^= 0x40;
            flipped = true;
        }
        rx.write_chunk(at, &chunk)?;
    }
    let id = rx.id();
    let store = Arc::clone(files.store());
    match rx.verified() {
        Err(e) if attempt == 1 => {
            let mut s = seen.lock().unwrap();
            s.corrupt_refused = true;
            s.nothing_published = store.snapshot(id).is_err();
            Err(e)
        }
        Ok(data) => {
            // Verified, and not yet published: only openraft's install
            // (after it made the leader's vote durable) publishes it.
            seen.lock().unwrap().unpublished_until_installed = store.snapshot(id).is_err();
            Ok(data)
        }
        other => other,
    }
}

fn meta(id: u64) -> Meta {
    Meta::new(ClusterId(1), NodeId(id), DirectoryId(u128::from(id) + 1))
}

fn config() -> Arc<Config> {
    quorumlog_openraft10::raft_config(Config {
        heartbeat_interval: 100,
        election_timeout_min: 1000,
        election_timeout_max: 2000,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(100),
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        ..Config::default()
    })
    .unwrap()
}

struct Member {
    node: Node,
    raft: R,
    machine: Machine<Adv>,
}

async fn start(
    router: &Router,
    fs: &SharedFs,
    root: &Path,
    id: u64,
    fresh: bool,
    seen: Option<Arc<Mutex<Seen>>>,
) -> Member {
    let dir = root.join(format!("n{id}"));
    let options = small_options();
    if fresh {
        fs.create_dir_all(&dir).unwrap();
        Node::format(fs, &dir, meta(id), &options).unwrap();
    }
    let (node, _) = Node::open(fs, &dir, &Identity::of(&meta(id)), &options).unwrap();
    if fresh {
        node.create_group(7, Offset(0)).unwrap();
    }
    let group: Arc<Group> = Arc::new(node.group(7).unwrap());
    let machine = common::machine::<Adv>(Arc::clone(&group));
    let log = LogStore::new(group, id).unwrap();
    let raft = Raft::new(id, config(), router.factory(GROUP), log, machine.clone())
        .await
        .unwrap();
    let files = machine.files().clone();
    match seen {
        Some(seen) => router.insert_receiving(
            id,
            GROUP,
            raft.clone(),
            Arc::new(move |meta, from| scripted(&files, meta, &from, &seen)),
        ),
        None => router.insert_files(id, GROUP, raft.clone(), files),
    }
    Member {
        node,
        raft,
        machine,
    }
}

async fn stop(router: &Router, m: Member, id: u64) {
    router.remove(id, GROUP);
    m.raft.shutdown().await.unwrap();
    drop(m.raft);
    drop(m.machine);
    m.node.close().unwrap();
}

/// 100-byte values, so a snapshot spans many test chunks.
fn value(i: u64) -> String {
    format!("{i:0>100}")
}

async fn write(leader: &R, from: u64, to: u64) {
    for i in from..to {
        leader
            .client_write(Put {
                key: format!("k{i}"),
                value: value(i),
            })
            .await
            .unwrap();
    }
}

async fn applied_everywhere(members: &BTreeMap<u64, Member>, leader: &R) {
    let last = leader
        .wait(Some(Duration::from_secs(30)))
        .metrics(|_| true, "the leader's metrics")
        .await
        .unwrap()
        .last_log_index;
    for m in members.values() {
        m.raft
            .wait(Some(Duration::from_secs(30)))
            .applied_index_at_least(last, "applied")
            .await
            .unwrap();
    }
}

/// The leader snapshots what it holds and purges its log up to it.
async fn snapshot_and_purge(leader: &R) {
    leader.trigger().snapshot().await.unwrap();
    let snap = leader
        .wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.snapshot.is_some_and(|s| s.index >= 400), "a snapshot")
        .await
        .unwrap()
        .snapshot
        .unwrap();
    leader.trigger().purge_log(snap.index).await.unwrap();
    leader
        .wait(Some(Duration::from_secs(30)))
        .metrics(
            |m| m.purged.is_some_and(|p| p.index >= snap.index),
            "the log purged",
        )
        .await
        .unwrap();
}

/// What the scripted transfers must have seen.
fn check_transfers(s: &Seen) {
    assert!(s.attempts >= 3, "{s:?}");
    assert_eq!(s.started_at[0], 0, "{s:?}");
    assert!(
        s.started_at[1] + 2 * TEST_CHUNK as u64 >= s.sizes[0] / 2
            && s.started_at[1] <= s.sizes[0] / 2,
        "the second transfer resumes the first's durable bytes: {s:?}"
    );
    assert!(
        s.corrupt_refused,
        "a flipped byte is refused at finish: {s:?}"
    );
    assert!(
        s.nothing_published,
        "a refused file is not published: {s:?}"
    );
    assert!(
        s.unpublished_until_installed,
        "a verified download waits for openraft's install: {s:?}"
    );
    assert_eq!(
        s.started_at[2], 0,
        "after a refused file, the next starts clean: {s:?}"
    );
}

/// Three fresh members; the leader's id.
async fn elect(router: &Router, fs: &SharedFs, root: &Path) -> (BTreeMap<u64, Member>, u64) {
    let mut members = BTreeMap::new();
    for id in 1..=3 {
        members.insert(id, start(router, fs, root, id, true, None).await);
    }
    let voters: BTreeMap<u64, BasicNode> = (1..=3).map(|i| (i, BasicNode::default())).collect();
    members[&1].raft.initialize(voters).await.unwrap();
    let leader_id = members[&1]
        .raft
        .wait(Some(Duration::from_secs(30)))
        .metrics(|m| m.current_leader.is_some(), "a leader")
        .await
        .unwrap()
        .current_leader
        .unwrap();
    (members, leader_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_follower_gets_the_snapshot_file_resumed_and_verified() {
    let tmp = tempfile::tempdir().unwrap();
    let fs: SharedFs = Arc::new(RealFs::new());
    let router = Router::default();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (mut members, leader_id) = elect(&router, &fs, tmp.path()).await;
    let leader = members[&leader_id].raft.clone();
    applied_everywhere(&members, &leader).await;
    write(&leader, 0, 50).await;
    applied_everywhere(&members, &leader).await;

    // A follower goes away; the leader writes on, snapshots and purges
    // what the follower would need.
    let follower = (1..=3u64).find(|i| *i != leader_id).unwrap();
    stop(&router, members.remove(&follower).unwrap(), follower).await;
    write(&leader, 50, 450).await;
    snapshot_and_purge(&leader).await;
    let leader_group = members[&leader_id].machine.files().store().clone();
    assert!(
        leader_group.extent().start.0 > 50,
        "the leader's log no longer reaches the follower"
    );
    assert!(
        leader_group.extent().latest_snapshot.is_some(),
        "the leader's snapshot is a file"
    );

    members.insert(
        follower,
        start(
            &router,
            &fs,
            tmp.path(),
            follower,
            false,
            Some(Arc::clone(&seen)),
        )
        .await,
    );
    applied_everywhere(&members, &leader).await;
    for m in members.values() {
        for i in [0u64, 49, 50, 300, 449] {
            assert_eq!(m.machine.get(&format!("k{i}")), Some(value(i)), "k{i}");
        }
    }
    check_transfers(&seen.lock().unwrap());
    let got = members[&follower].machine.files().store().clone();
    let id = got.extent().latest_snapshot.unwrap();
    assert!(id.end_offset.0 > 400, "{id}");

    // Restarted after the install: from its snapshot file and its log
    // (the test's own handle goes first, or the close is refused).
    drop(got);
    stop(&router, members.remove(&follower).unwrap(), follower).await;
    write(&leader, 450, 470).await;
    members.insert(
        follower,
        start(&router, &fs, tmp.path(), follower, false, None).await,
    );
    applied_everywhere(&members, &leader).await;
    let m = &members[&follower];
    for i in [0u64, 300, 449, 469] {
        assert_eq!(
            m.machine.get(&format!("k{i}")),
            Some(value(i)),
            "k{i} after restart"
        );
    }
    // The test's own handles of the leader go before its close.
    drop((leader, leader_group));
    for (id, m) in members {
        stop(&router, m, id).await;
    }
}
