//! Crash tests of a node on the simulated disk: the power is cut at every
//! I/O call of a sequence over four groups mixing votes, durable and
//! queued appends, a diverging truncation followed by new entries, a
//! purge, metadata, checkpoints with rewrites of old live entries and
//! freed segments, a drop, a create, a snapshot and its install into
//! another group — under every crash plan. After each crash the node must
//! open, and its state must be the model's after every acknowledged call,
//! with the call in flight either done or not:
//! - the same groups (creates and drops are durable on return);
//! - in each group, every entry acknowledged durable, byte-identical, and
//!   nothing that is not the model's (a truncated entry never comes back,
//!   no group reads another's);
//! - the same votes, metadata and snapshots.
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
use std::sync::Arc;

use quorumlog_checkpoint::{
    ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, QuorumState, SharedFs, Vote,
};
use quorumlog_io::SimFs;
use quorumlog_raft::Purge;
use quorumlog_raft::{Error, Group, Identity, Isolation, Node, NodeOptions, SnapshotId};
use quorumlog_snapshot::WriterOptions;
use quorumlog_testkit::AppendDurable;
use quorumlog_testkit::CRASH_PLANS;

const DIR: &str = "/node";

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(2))
}

fn options() -> NodeOptions {
    NodeOptions {
        log: quorumlog_testkit::small_log_options(),
        checkpoint_every_bytes: 2048,
        garbage_percent: 100,
        background: false,
        ..NodeOptions::default()
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
struct GModel {
    start: u64,
    entries: Vec<(u64, Vec<u8>)>,
    durable: u64,
    vote: QuorumState,
    meta: Option<Vec<u8>>,
    snapshot: Option<SnapshotId>,
}

impl GModel {
    fn end(&self) -> u64 {
        self.start + self.entries.len() as u64
    }
}

type Model = BTreeMap<u64, GModel>;

fn all_durable(m: &mut Model) {
    for g in m.values_mut() {
        g.durable = g.end();
    }
}

fn vote(epoch: u64) -> QuorumState {
    QuorumState {
        epoch: Epoch(epoch),
        leader: None,
        voted: Some(Vote {
            node_id: NodeId(2),
            directory_id: DirectoryId(3),
        }),
    }
}

fn entry(group: u64, o: u64, tag: &str) -> Vec<u8> {
    format!("group {group} offset {o} {tag}").into_bytes()
}

/// The node under test, its handles, and the model of what it
/// acknowledged.
struct Run {
    node: Node,
    handles: BTreeMap<u64, Arc<Group>>,
    model: Model,
}

impl Run {
    fn g(&self, id: u64) -> &Arc<Group> {
        &self.handles[&id]
    }
}

/// The whole sequence; stops at the first failed call. Returns the model
/// of acknowledged calls, and the model with the call in flight applied
/// when one failed.
fn sequence(disk: &SimFs) -> (Model, Option<Model>) {
    let fs: SharedFs = Arc::new(disk.clone());
    let Ok((node, _)) = Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options()) else {
        // The power went out while opening: nothing acknowledged.
        return (Model::new(), None);
    };
    let mut run = Run {
        node,
        handles: BTreeMap::new(),
        model: Model::new(),
    };
    macro_rules! go {
        ($f:expr, $change:expr) => {{
            let before = run.model.clone();
            let r: Result<(), Error> = $f(&mut run);
            let mut after = before.clone();
            ($change)(&mut after);
            match r {
                Ok(()) => run.model = after,
                Err(_) => return (run.model, Some(after)),
            }
        }};
    }
    for id in 1..=3u64 {
        go!(
            |r: &mut Run| -> Result<(), Error> {
                r.node.create_group(id, Offset(1))?;
                r.handles.insert(id, Arc::new(r.node.group(id)?));
                Ok(())
            },
            |m: &mut Model| {
                all_durable(m);
                m.insert(
                    id,
                    GModel {
                        start: 1,
                        durable: 1,
                        ..GModel::default()
                    },
                );
            }
        );
    }
    for id in 1..=2u64 {
        go!(
            |r: &mut Run| r.g(id).persist_quorum_state(&vote(1)),
            |m: &mut Model| {
                all_durable(m);
                m.get_mut(&id).unwrap().vote = vote(1);
            }
        );
    }
    for i in 0..12u64 {
        for id in 1..=3u64 {
            let durable = (i + id) % 3 == 0;
            let at = run.model[&id].end();
            let bytes = entry(id, at, "first");
            go!(
                |r: &mut Run| -> Result<(), Error> {
                    let g = r.g(id);
                    if durable {
                        g.append_durable(Offset(at), Epoch(1), &[&bytes])?;
                    } else {
                        g.append(Offset(at), Epoch(1), &[&bytes])?;
                    }
                    Ok(())
                },
                |m: &mut Model| {
                    let gm = m.get_mut(&id).unwrap();
                    gm.entries.push((1, bytes.clone()));
                    if durable {
                        // Durable through the shared log: every earlier
                        // queued append of every group with it.
                        all_durable(m);
                    }
                }
            );
        }
    }
    go!(
        |r: &mut Run| -> Result<(), Error> {
            r.g(1).set_high_watermark(Offset(5))?;
            r.g(1).wait_durable(Offset(u64::MAX))?;
            Ok(())
        },
        |_m: &mut Model| {}
    );
    go!(
        |r: &mut Run| r.g(1).truncate_to(Offset(8)),
        |m: &mut Model| {
            m.get_mut(&1).unwrap().entries.truncate(7);
            all_durable(m);
        }
    );
    for _ in 0..2 {
        let at = run.model[&1].end();
        let bytes = entry(1, at, "second");
        go!(
            |r: &mut Run| -> Result<(), Error> {
                r.g(1).append_durable(Offset(at), Epoch(2), &[&bytes])?;
                Ok(())
            },
            |m: &mut Model| {
                m.get_mut(&1).unwrap().entries.push((2, bytes.clone()));
                all_durable(m);
            }
        );
    }
    go!(
        |r: &mut Run| -> Result<(), Error> {
            r.g(2).set_high_watermark(Offset(10))?;
            r.g(2)
                .purge(Purge::To {
                    offset: Offset(6),
                    epoch: Epoch(1),
                })
                .map(|_| ())
        },
        |m: &mut Model| {
            let gm = m.get_mut(&2).unwrap();
            gm.entries.drain(..5);
            gm.start = 6;
            all_durable(m);
        }
    );
    go!(
        |r: &mut Run| r.g(3).write_app_metadata(b"m3"),
        |m: &mut Model| {
            m.get_mut(&3).unwrap().meta = Some(b"m3".to_vec());
            all_durable(m);
        }
    );
    go!(
        |r: &mut Run| r.node.maintain(),
        |m: &mut Model| all_durable(m)
    );
    for i in 0..10u64 {
        for id in 1..=2u64 {
            let epoch = if id == 1 { 2 } else { 1 };
            let at = run.model[&id].end();
            let bytes = entry(id, at, "third");
            let durable = i % 2 == 1;
            go!(
                |r: &mut Run| -> Result<(), Error> {
                    let g = r.g(id);
                    if durable {
                        g.append_durable(Offset(at), Epoch(epoch), &[&bytes])?;
                    } else {
                        g.append(Offset(at), Epoch(epoch), &[&bytes])?;
                    }
                    Ok(())
                },
                |m: &mut Model| {
                    m.get_mut(&id).unwrap().entries.push((epoch, bytes.clone()));
                    if durable {
                        all_durable(m);
                    }
                }
            );
        }
    }
    go!(
        |r: &mut Run| -> Result<(), Error> {
            r.handles.remove(&3);
            r.node.drop_group(3)
        },
        |m: &mut Model| {
            m.remove(&3);
            all_durable(m);
        }
    );
    go!(
        |r: &mut Run| -> Result<(), Error> {
            r.node.create_group(4, Offset(1))?;
            r.handles.insert(4, Arc::new(r.node.group(4)?));
            Ok(())
        },
        |m: &mut Model| {
            all_durable(m);
            m.insert(
                4,
                GModel {
                    start: 1,
                    durable: 1,
                    ..GModel::default()
                },
            );
        }
    );
    for _ in 0..3 {
        let at = run.model[&4].end();
        let bytes = entry(4, at, "fourth");
        go!(
            |r: &mut Run| -> Result<(), Error> {
                r.g(4).append_durable(Offset(at), Epoch(1), &[&bytes])?;
                Ok(())
            },
            |m: &mut Model| {
                m.get_mut(&4).unwrap().entries.push((1, bytes.clone()));
                all_durable(m);
            }
        );
    }
    go!(
        |r: &mut Run| r.node.maintain(),
        |m: &mut Model| all_durable(m)
    );
    let sid = SnapshotId {
        end_offset: Offset(10),
        epoch: Epoch(1),
    };
    go!(
        |r: &mut Run| -> Result<(), Error> {
            let mut w = r.g(2).create_snapshot(
                sid.end_offset,
                sid.epoch,
                b"meta",
                WriterOptions::default(),
            )?;
            w.write(b"group 2's state below 10")?;
            w.freeze()?;
            Ok(())
        },
        |m: &mut Model| m.get_mut(&2).unwrap().snapshot = Some(sid)
    );
    go!(
        |r: &mut Run| -> Result<(), Error> {
            let src = r.g(2);
            let total = src.snapshot(sid)?.info().size_bytes;
            let bytes = src.snapshot(sid)?.file()?;
            let mut inst = r.g(4).install_snapshot(sid, total)?;
            inst.write_chunk(0, &bytes)?;
            inst.finish()?;
            Ok(())
        },
        |m: &mut Model| {
            let gm = m.get_mut(&4).unwrap();
            gm.entries.clear();
            gm.start = 10;
            gm.snapshot = Some(sid);
            all_durable(m);
        }
    );
    let at = run.model[&4].end();
    let bytes = entry(4, at, "fifth");
    go!(
        |r: &mut Run| -> Result<(), Error> {
            r.g(4).append_durable(Offset(at), Epoch(1), &[&bytes])?;
            Ok(())
        },
        |m: &mut Model| {
            m.get_mut(&4).unwrap().entries.push((1, bytes.clone()));
            all_durable(m);
        }
    );
    (run.model, None)
}

/// Whether `node` holds `model` (durable entries at least, nothing else).
fn holds(node: &Node, model: &Model) -> Result<(), String> {
    let ids: Vec<u64> = model.keys().copied().collect();
    if node.groups() != ids {
        return Err(format!("groups {:?} != {ids:?}", node.groups()));
    }
    for (id, gm) in model {
        let g = node.group(*id).map_err(|e| format!("group {id}: {e}"))?;
        let (start, end) = (g.extent().start.0, g.extent().queued_end.0);
        if start != gm.start {
            return Err(format!("group {id} start {start} != {}", gm.start));
        }
        if end < gm.durable.max(gm.start) || end > gm.end() {
            return Err(format!(
                "group {id} end {end} outside [{}, {}]",
                gm.durable,
                gm.end()
            ));
        }
        let got = g
            .read_entries(Offset(start), Offset(end), u64::MAX, Isolation::Uncommitted)
            .map_err(|e| format!("group {id} read: {e}"))?;
        if got.len() as u64 != end - start {
            return Err(format!("group {id} read {} of {}", got.len(), end - start));
        }
        for (e, (epoch, bytes)) in got.iter().zip(&gm.entries) {
            if (e.epoch.0, &e.bytes) != (*epoch, bytes) {
                return Err(format!(
                    "group {id} entry {}: {:?} != {:?}",
                    e.offset.0,
                    String::from_utf8_lossy(&e.bytes),
                    String::from_utf8_lossy(bytes)
                ));
            }
        }
        if g.quorum_state() != gm.vote {
            return Err(format!(
                "group {id} vote {:?} != {:?}",
                g.quorum_state(),
                gm.vote
            ));
        }
        if g.app_metadata() != gm.meta {
            return Err(format!("group {id} metadata"));
        }
        if g.extent().latest_snapshot != gm.snapshot {
            return Err(format!(
                "group {id} snapshot {:?}",
                g.extent().latest_snapshot
            ));
        }
    }
    Ok(())
}

fn fresh(seed: u64) -> SimFs {
    let disk = SimFs::new(seed);
    let fs: SharedFs = Arc::new(disk.clone());
    Node::format(&fs, Path::new(DIR), meta(), &options()).unwrap();
    disk
}

#[test]
fn a_power_cut_at_every_call_keeps_every_acknowledged_call_of_every_group() {
    // The whole sequence, to count its calls and check it alone.
    let disk = fresh(1);
    let base = disk.calls();
    let (full, inflight) = sequence(&disk);
    assert!(inflight.is_none(), "the sequence runs without a crash");
    let calls = disk.calls() - base;
    assert!(calls > 100, "only {calls} calls");
    {
        let fs: SharedFs = Arc::new(disk.clone());
        let (node, _) =
            Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options()).unwrap();
        holds(&node, &full).unwrap();
    }
    let mut checked = 0;
    for k in 0..calls {
        for plan in CRASH_PLANS {
            let disk = fresh(k);
            disk.crash_after(k);
            let (acked, inflight) = sequence(&disk);
            let image = disk.crash_with(plan);
            let fs: SharedFs = Arc::new(image);
            let (node, _) = Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options())
                .unwrap_or_else(|e| panic!("crash after {k} calls ({plan:?}): open refused: {e}"));
            let without = holds(&node, &acked);
            let with = inflight.as_ref().map(|m| holds(&node, m));
            assert!(
                without.is_ok() || matches!(with, Some(Ok(()))),
                "crash after {k} calls ({plan:?}): without the call in flight: {without:?}; with it: {with:?}"
            );
            checked += 1;
        }
    }
    eprintln!(
        "{calls} crash points x {} plans: {checked} reopens checked",
        CRASH_PLANS.len()
    );
}
