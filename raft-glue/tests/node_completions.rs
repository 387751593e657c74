//! Completions across groups: appends of many groups queued from many
//! threads share rounds, and each group's `on_durable` completions fire in
//! that group's submission order, each only once its entries are durable
//! (a power cut right after a completion loses none of them).
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::too_many_lines,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, SharedFs};
use quorumlog_io::{CrashPlan, SimFs};
use quorumlog_raft::{Identity, Isolation, Node, NodeOptions};

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(2))
}

fn options() -> NodeOptions {
    NodeOptions {
        log: quorumlog_testkit::small_log_options(),
        background: false,
        ..NodeOptions::default()
    }
}

#[test]
fn each_groups_completions_fire_in_its_order_once_durable() {
    // Repeated: the race it guards against (a completion registered while a
    // round runs its due ones) needs the threads to meet.
    for seed in 0..20 {
        run(seed);
    }
}

fn run(seed: u64) {
    let disk = SimFs::new(seed);
    let fs: SharedFs = Arc::new(disk.clone());
    Node::format(&fs, Path::new("/n"), meta(), &options()).unwrap();
    let (node, _) = Node::open(&fs, Path::new("/n"), &Identity::of(&meta()), &options()).unwrap();
    for g in 0..16 {
        node.create_group(g, Offset(1)).unwrap();
    }
    let node = Arc::new(node);
    // Per group: the offsets whose completion fired, in firing order.
    let fired: Arc<Mutex<BTreeMap<u64, Vec<u64>>>> = Arc::default();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (node, fired) = (Arc::clone(&node), Arc::clone(&fired));
            s.spawn(move || {
                // Each thread owns four groups.
                let groups: Vec<_> = (0..16)
                    .filter(|g| g % 4 == t)
                    .map(|g| node.group(g).unwrap())
                    .collect();
                for i in 1..=200u64 {
                    for g in &groups {
                        g.append(Offset(i), Epoch(1), &[format!("{} {i}", g.id())])
                            .unwrap();
                        let (fired, id) = (Arc::clone(&fired), g.id());
                        g.on_durable(
                            Offset(i + 1),
                            Box::new(move |r| {
                                assert_eq!(r.unwrap(), Offset(i + 1));
                                fired.lock().unwrap().entry(id).or_default().push(i);
                            }),
                        );
                    }
                }
                for g in &groups {
                    g.wait_durable(Offset(201)).unwrap();
                }
            });
        }
    });
    // Every completion is due; the thread running them may still be at it.
    let t0 = std::time::Instant::now();
    while fired.lock().unwrap().values().map(Vec::len).sum::<usize>() < 3_200
        && t0.elapsed().as_secs() < 30
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let fired = fired.lock().unwrap().clone();
    assert_eq!(fired.len(), 16);
    for (g, order) in &fired {
        assert_eq!(
            order,
            &(1..=200).collect::<Vec<_>>(),
            "group {g}'s completions out of order"
        );
    }
    // Shared rounds: far fewer syncs than appends.
    let syncs = node.stats().syncs;
    assert!(syncs < 16 * 200, "{syncs} syncs for 3,200 appends");
    // Everything completed is durable: a power cut loses none of it.
    let after = disk.crash_with(CrashPlan::LoseUnsynced);
    drop(node);
    let fs: SharedFs = Arc::new(after);
    let (node, _) = Node::open(&fs, Path::new("/n"), &Identity::of(&meta()), &options()).unwrap();
    for g in 0..16 {
        let h = node.group(g).unwrap();
        let got = h
            .read_entries(Offset(1), Offset(201), u64::MAX, Isolation::Uncommitted)
            .unwrap();
        assert_eq!(got.len(), 200, "group {g}");
        assert!(got
            .iter()
            .all(|e| e.bytes == format!("{g} {}", e.offset.0).into_bytes()));
    }
}

/// A node with eight groups; each turn appends to every group, queues a
/// high watermark on group 7 and registers a group completion on group 7
/// then a node completion on group 0; `at_node(i, result)` runs in the
/// node completion of turn `i`. Returns the firing order; stops early
/// once an append fails (the disk was cut).
fn node_turns(disk: &SimFs, at_node: &Arc<dyn Fn(u64) + Send + Sync>) -> Vec<&'static str> {
    let fs: SharedFs = Arc::new(disk.clone());
    Node::format(&fs, Path::new("/n"), meta(), &options()).unwrap();
    let (node, _) = Node::open(&fs, Path::new("/n"), &Identity::of(&meta()), &options()).unwrap();
    let groups: Vec<_> = (0..8)
        .map(|g| {
            node.create_group(g, Offset(1)).unwrap();
            node.group(g).unwrap()
        })
        .collect();
    let order: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    'turns: for i in 1..=20u64 {
        for g in &groups {
            if g.append(Offset(i), Epoch(1), &[format!("{} {i}", g.id())])
                .is_err()
            {
                break 'turns;
            }
        }
        // A watermark queued last, on a group other than the one the
        // node completion is registered on.
        if groups[7].set_high_watermark(Offset(i + 1)).is_err() {
            break;
        }
        let o = Arc::clone(&order);
        groups[7].on_durable(
            Offset(u64::MAX),
            Box::new(move |r| {
                o.lock()
                    .unwrap()
                    .push(if r.is_ok() { "group" } else { "failed" });
            }),
        );
        let (o, f) = (Arc::clone(&order), Arc::clone(at_node));
        groups[0].on_node_durable(Box::new(move |r| {
            let Ok(end) = r else {
                o.lock().unwrap().push("failed");
                return;
            };
            assert_eq!(end, Offset(i + 1), "the group's end");
            o.lock().unwrap().push("node");
            f(i);
        }));
    }
    for g in &groups {
        let _ = g.wait_durable(Offset(u64::MAX));
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    let order = order.lock().unwrap().clone();
    order
}

/// Node completions fire once each, after the group completions
/// registered before them.
#[test]
fn node_completions_fire_once_in_order_with_group_completions() {
    for seed in 0..10 {
        let disk = SimFs::new(seed);
        disk.set_sync_delay(std::time::Duration::from_micros(300));
        let order = node_turns(&disk, &(Arc::new(|_| {}) as Arc<dyn Fn(u64) + Send + Sync>));
        assert_eq!(order.len(), 40, "every completion fired once: {order:?}");
        assert!(
            order.chunks(2).all(|c| c == ["group", "node"]),
            "a node completion fired before a group's registered before it: {order:?}"
        );
    }
}

/// `on_node_durable` on one group covers every group's queued records: a
/// power cut taken when turn `k`'s completion fires keeps every group's
/// entry `k` and the high watermark queued on another group before it
/// (checked by opening the cut).
#[test]
fn a_node_completion_covers_every_groups_queued_records() {
    for seed in 0..10u64 {
        let disk = SimFs::new(seed);
        disk.set_sync_delay(std::time::Duration::from_micros(300));
        let k = 1 + seed * 2;
        let cut: Arc<Mutex<Option<SimFs>>> = Arc::default();
        let (c, d) = (Arc::clone(&cut), disk.clone());
        let at: Arc<dyn Fn(u64) + Send + Sync> = Arc::new(move |i| {
            if i == k {
                *c.lock().unwrap() = Some(d.crash_with(CrashPlan::LoseUnsynced));
            }
        });
        let _ = node_turns(&disk, &at);
        let fs: SharedFs = Arc::new(
            cut.lock()
                .unwrap()
                .take()
                .expect("turn k's completion fired"),
        );
        let (node, _) =
            Node::open(&fs, Path::new("/n"), &Identity::of(&meta()), &options()).unwrap();
        for g in 0..8 {
            let e = node.group(g).unwrap().extent();
            assert!(e.end.0 > k, "seed {seed}: group {g} lost entry {k}: {e:?}");
        }
        let e = node.group(7).unwrap().extent();
        assert!(
            e.high_watermark >= Some(Offset(k + 1)),
            "seed {seed}: the watermark {} queued before the completion is lost: {e:?}",
            k + 1
        );
    }
}

/// `Node::lead_round` under `SyncPolicy::CallerLed` (a loop that leads
/// its node's rounds before it sleeps). Invariants: every group's queued
/// appends are durable when it returns; their completions (a group's and
/// the node's) fire in order, on the calling thread (nothing else was
/// woken to run the round) but where this thread stalled for the
/// flusher's whole backstop interval before it led, so at least 16 turns
/// of 20; with nothing queued it returns at once; a power cut right after
/// it loses none of them.
#[test]
fn lead_round_makes_every_groups_queue_durable_on_the_calling_thread() {
    let disk = SimFs::new(11);
    let fs: SharedFs = Arc::new(disk.clone());
    let opts = NodeOptions {
        sync: quorumlog_log::SyncPolicy::CallerLed,
        ..options()
    };
    Node::format(&fs, Path::new("/n"), meta(), &opts).unwrap();
    let (node, _) = Node::open(&fs, Path::new("/n"), &Identity::of(&meta()), &opts).unwrap();
    node.lead_round().unwrap();
    let groups: Vec<_> = (0..4u64)
        .map(|g| {
            node.create_group(g, Offset(1)).unwrap();
            node.group(g).unwrap()
        })
        .collect();
    let me = std::thread::current().id();
    let fired: Arc<Mutex<Vec<(String, std::thread::ThreadId)>>> = Arc::default();
    let mut led_here = 0;
    for turn in 0..20u64 {
        for (g, group) in groups.iter().enumerate() {
            let info = group
                .append(
                    Offset(turn + 1),
                    Epoch(1),
                    &[format!("g{g} t{turn}").as_bytes()],
                )
                .unwrap();
            let f = Arc::clone(&fired);
            group.on_durable(
                info.next_offset,
                Box::new(move |r| {
                    r.unwrap();
                    f.lock()
                        .unwrap()
                        .push((format!("g{g} t{turn}"), std::thread::current().id()));
                }),
            );
        }
        let f = Arc::clone(&fired);
        groups[0].on_node_durable(Box::new(move |r| {
            r.unwrap();
            f.lock()
                .unwrap()
                .push((format!("node t{turn}"), std::thread::current().id()));
        }));
        std::thread::yield_now();
        node.lead_round().unwrap();
        for g in &groups {
            assert_eq!(g.extent().flushed, Offset(turn + 2), "turn {turn}");
        }
        // Fired already when it led; a backstop round's may still be firing.
        let t0 = std::time::Instant::now();
        while fired.lock().unwrap().len() < 5 && t0.elapsed().as_secs() < 30 {
            std::thread::yield_now();
        }
        let got = std::mem::take(&mut *fired.lock().unwrap());
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        let want: Vec<String> = (0..4)
            .map(|g| format!("g{g} t{turn}"))
            .chain([format!("node t{turn}")])
            .collect();
        assert_eq!(names, want, "turn {turn}: every completion, in order");
        if got.iter().all(|(_, t)| *t == me) {
            led_here += 1;
        }
    }
    assert!(
        led_here >= 16,
        "only {led_here} of 20 turns' completions fired on the leading thread"
    );
    node.lead_round().unwrap();
    let crashed = disk.crash_with(CrashPlan::LoseUnsynced);
    drop(groups);
    drop(node);
    let fs: SharedFs = Arc::new(crashed);
    let (node, _) = Node::open(&fs, Path::new("/n"), &Identity::of(&meta()), &opts).unwrap();
    for g in 0..4u64 {
        assert_eq!(node.group(g).unwrap().extent().end, Offset(21), "group {g}");
    }
}
