//! The engine's crash model: a node of one group or many (a quarter of
//! the seeds keep one group, as a one-group deployment does), random
//! sequences of group calls, the Raft
//! library's mistakes included (appends at the wrong offset or in an older
//! epoch or whose offsets would wrap, purges naming another epoch than the
//! log's, stale and future watermarks, truncations below the commit point,
//! second votes and old epochs, a second handle, a dropped id reused,
//! an unknown group), checkpoints and space reclamation (rewrites of a
//! group that never purges, segments freed), snapshot installs across
//! groups, drops, and power cuts at any moment, some in the middle of a
//! checkpoint or a rewrite. Checked after every call against one model
//! per group:
//! - each group reads exactly its model's entries, each with its epoch
//!   (no group ever reads another's: every entry names its group);
//! - what was reported durable survives a power cut, byte-identical, and
//!   a truncated entry never comes back (a truncation, purge, vote,
//!   metadata write, create or drop is durable on return, and makes every
//!   earlier append of every group durable with it);
//! - votes, metadata, the group set and the dropped ids survive exactly;
//! - a plain crash never leaves a directory that refuses to open.
//!
//! Run by `quorumlog-raft`'s `tests/node_model.rs` (`QUORUMLOG_NODE_SEEDS=N`
//! runs N fresh seeds; a failure prints its seed, `QUORUMLOG_NODE_SEED=S`
//! replays one, `QUORUMLOG_MODEL_TRACE` traces) and by the
//! `crash_recovery` fuzz target.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    clippy::too_many_lines,
    clippy::cast_possible_truncation,
    clippy::many_single_char_names,
    clippy::single_match_else,
    clippy::if_not_else,
    clippy::missing_panics_doc,
    reason = "test machinery: a panic is the violated invariant it reports"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::read_model::{check_read, entry_bytes, random_read, record_sizes, ModelLog};
use crate::AppendDurable;
use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, SharedFs, Vote};
use quorumlog_io::{CrashPlan, SimFs, SimRng};
use quorumlog_log::Compression;
use quorumlog_raft::{
    Error, Group, Identity, Isolation, Node, NodeOpenReport, NodeOptions, Purge, QuorumState,
    SnapshotId,
};
use quorumlog_snapshot::WriterOptions;

const DIR: &str = "/node";

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(2))
}

/// The node's options: small segments; with `zstd`, larger batches
/// compressed from 64 bytes up (a read plans by compressed sizes).
fn options(zstd: bool) -> NodeOptions {
    let mut log = crate::small_log_options();
    if zstd {
        log.segment_size_bytes = 16 << 10;
        log.max_batch_bytes = 8 << 10;
        log.compression = Compression::Zstd { level: 1 };
        log.compression_threshold_bytes = 64;
    }
    NodeOptions {
        log,
        checkpoint_every_bytes: 4096,
        garbage_percent: 150,
        background: false,
        ..NodeOptions::default()
    }
}

#[derive(Debug, Default, Clone)]
struct GModel {
    start: u64,
    entries: Vec<(u64, Vec<u8>)>,
    hw: Option<u64>,
    /// The last watermark set since the open (queued for a round).
    set_hw: Option<u64>,
    durable: u64,
    persisted: Option<u64>,
    vote: QuorumState,
    meta: Option<Vec<u8>>,
    snapshot: Option<SnapshotId>,
    /// The last purge or restart: its offset and the epoch before it.
    purged: Option<(u64, u64)>,
    /// The start before a restart append not yet known durable (a crash
    /// may lose the restart with the append).
    pre_restart: Option<u64>,
}

impl GModel {
    fn end(&self) -> u64 {
        self.start + self.entries.len() as u64
    }
    fn epoch_at(&self, o: u64) -> Option<u64> {
        o.checked_sub(self.start)
            .and_then(|i| self.entries.get(i as usize))
            .map(|e| e.0)
    }
    fn last_epoch(&self) -> u64 {
        match self.entries.last() {
            Some(e) => e.0,
            // An empty log continues its purge point's or its snapshot's.
            None => {
                let purged = self.purged.filter(|p| p.0 == self.start).map_or(0, |p| p.1);
                let snap = self
                    .snapshot
                    .filter(|s| s.end_offset.0 == self.start)
                    .map_or(0, |s| s.epoch.0);
                purged.max(snap)
            }
        }
    }
}

#[derive(Debug, Default)]
struct Model {
    /// One group only (id 1), never dropped: a one-group deployment.
    one_group: bool,
    groups: BTreeMap<u64, GModel>,
    dropped: BTreeSet<u64>,
}

impl Model {
    /// A durable control record makes every earlier append durable.
    fn all_durable(&mut self) {
        for g in self.groups.values_mut() {
            g.durable = g.end();
            g.pre_restart = None;
        }
    }
}

struct World {
    zstd: bool,
    disk: SimFs,
    node: Option<Node>,
    handles: BTreeMap<u64, Arc<Group>>,
}

impl World {
    fn node(&self) -> &Node {
        self.node.as_ref().unwrap()
    }

    /// A power cut with `plan` (the image taken before anything is
    /// dropped), then a reopen.
    fn power_cut(&mut self, plan: CrashPlan) {
        let disk = self.disk.crash_with(plan);
        self.handles.clear();
        self.node = None;
        let _ = self.reopen_on(disk);
    }

    fn reopen_on(&mut self, disk: SimFs) -> NodeOpenReport {
        let (node, handles, report) = open(&disk, self.zstd);
        self.node = Some(node);
        self.handles = handles;
        self.disk = disk;
        report
    }
}

fn open(disk: &SimFs, zstd: bool) -> (Node, BTreeMap<u64, Arc<Group>>, NodeOpenReport) {
    let fs: SharedFs = Arc::new(disk.clone());
    let (node, report) =
        Node::open(&fs, Path::new(DIR), &Identity::of(&meta()), &options(zstd)).unwrap();
    let handles = node
        .groups()
        .into_iter()
        .map(|id| (id, Arc::new(node.group(id).unwrap())))
        .collect();
    (node, handles, report)
}

/// The records of one append to `group` at `base`.
fn records(rng: &mut SimRng, w: &World, group: u64, base: u64, max: usize) -> Vec<Vec<u8>> {
    let limit = options(w.zstd).log.max_batch_bytes;
    record_sizes(rng, max, limit)
        .into_iter()
        .enumerate()
        .map(|(i, len)| entry_bytes(rng, group, base + i as u64, len))
        .collect()
}

/// Random reads of each group against the model (see
/// [`crate::read_model`]).
fn check_reads(rng: &mut SimRng, w: &World, m: &Model, what: &str) {
    for (id, gm) in &m.groups {
        let g = &w.handles[id];
        let size = |b: &[u8]| b.len() as u64;
        for _ in 0..4 {
            // The log's writer may make queued entries readable while we
            // read: a read counts when the readable end held still across it.
            let mut log = ModelLog {
                start: gm.start,
                entries: &gm.entries,
                readable_end: g.extent().end.0,
                commit: gm.hw,
            };
            let q = random_read(rng, &log, size);
            let isolation = if q.committed {
                Isolation::Committed
            } else {
                Isolation::Uncommitted
            };
            let got = loop {
                let got = match g.read_entries(Offset(q.from), Offset(q.to), q.max_bytes, isolation)
                {
                    Ok(es) => {
                        assert!(es.iter().all(|e| !e.control), "{what}: a control entry");
                        Some(
                            es.into_iter()
                                .map(|e| (e.offset.0, e.epoch.0, e.bytes))
                                .collect::<Vec<_>>(),
                        )
                    }
                    Err(Error::OffsetOutOfRange { .. }) => None,
                    Err(e) => panic!("{what}: group {id} {q:?}: {e}"),
                };
                let after = g.extent().end.0;
                if after == log.readable_end {
                    break got;
                }
                log.readable_end = after;
            };
            check_read(&log, &q, got, size, &format!("{what}: group {id}"));
        }
    }
}

fn check(w: &World, m: &Model, what: &str) {
    assert_eq!(
        w.node().groups(),
        m.groups.keys().copied().collect::<Vec<_>>(),
        "{what}: groups"
    );
    for (id, gm) in &m.groups {
        let g = &w.handles[id];
        assert_eq!(g.extent().start.0, gm.start, "{what}: group {id} start");
        assert_eq!(g.extent().queued_end.0, gm.end(), "{what}: group {id} end");
        assert_eq!(
            g.extent().high_watermark.map(|h| h.0),
            gm.hw,
            "{what}: group {id} hw"
        );
        let readable = g.extent().end.0;
        assert!(
            readable <= gm.end() && readable >= gm.start,
            "{what}: group {id} readable end"
        );
        let got = g
            .read_entries(
                Offset(gm.start),
                Offset(readable),
                u64::MAX,
                Isolation::Uncommitted,
            )
            .unwrap();
        assert_eq!(
            got.len() as u64,
            readable - gm.start,
            "{what}: group {id} entries"
        );
        for (e, (epoch, bytes)) in got.iter().zip(&gm.entries) {
            assert_eq!(
                (e.epoch.0, &e.bytes),
                (*epoch, bytes),
                "{what}: group {id} entry {}",
                e.offset.0
            );
        }
        // A bounded read returns whole entries from `from`, at least one.
        if readable > gm.start {
            let from = gm.start + (readable - gm.start) / 2;
            let few = g
                .read_entries(Offset(from), Offset(readable), 1, Isolation::Uncommitted)
                .unwrap();
            assert_eq!(few.len(), 1, "{what}: group {id} bounded read");
            assert_eq!(
                few[0].offset.0, from,
                "{what}: group {id} bounded read offset"
            );
        }
        assert_eq!(g.quorum_state(), gm.vote, "{what}: group {id} vote");
        assert_eq!(g.app_metadata(), gm.meta, "{what}: group {id} metadata");
        assert!(
            g.extent().flushed.0 >= gm.durable.min(gm.end()),
            "{what}: group {id} flushed"
        );
    }
}

fn pick(rng: &mut SimRng, m: &Model) -> Option<u64> {
    let ids: Vec<u64> = m.groups.keys().copied().collect();
    (!ids.is_empty()).then(|| ids[rng.index(ids.len())])
}

fn step(rng: &mut SimRng, w: &mut World, m: &mut Model, next_id: &mut u64) -> String {
    let mut op = rng.below(20);
    if m.one_group && op == 1 {
        op = 2; // one group: never dropped
    }
    if op == 0 || m.groups.is_empty() {
        // Create: a new id, or a mistake (an existing or a dropped one).
        let id = match rng.below(4) {
            0 if !m.dropped.is_empty() => *m.dropped.iter().next().unwrap(),
            1 if !m.groups.is_empty() => pick(rng, m).unwrap(),
            _ if m.one_group && *next_id >= 1 => 1,
            _ => {
                *next_id += 1;
                *next_id
            }
        };
        let start = rng.below(3);
        let r = w.node().create_group(id, Offset(start));
        if m.dropped.contains(&id) {
            assert!(
                matches!(r, Err(Error::GroupDropped { group }) if group == id),
                "{r:?}"
            );
        } else if m.groups.contains_key(&id) {
            assert!(
                matches!(r, Err(Error::GroupExists { group }) if group == id),
                "{r:?}"
            );
        } else {
            r.unwrap();
            m.all_durable();
            m.groups.insert(
                id,
                GModel {
                    start,
                    durable: start,
                    ..GModel::default()
                },
            );
            w.handles.insert(id, Arc::new(w.node().group(id).unwrap()));
        }
        return format!("create {id} at {start}");
    }
    let id = pick(rng, m).unwrap();
    let g = &w.handles[&id];
    let gm = m.groups.get_mut(&id).unwrap();
    let end = gm.end();
    match op {
        1 => {
            // Drop: refused while a handle is open, then done.
            assert!(matches!(
                w.node().drop_group(id),
                Err(Error::GroupInUse { .. })
            ));
            w.handles.remove(&id);
            w.node().drop_group(id).unwrap();
            m.groups.remove(&id);
            m.dropped.insert(id);
            m.all_durable();
            assert!(matches!(
                w.node().group(id),
                Err(Error::GroupDropped { .. })
            ));
            format!("drop {id}")
        }
        2..=6 => {
            // An append; sometimes at the wrong offset or in an older epoch.
            let mut epoch = gm.last_epoch().max(gm.vote.epoch.0).max(1);
            if rng.below(6) == 0 {
                epoch += 1;
            }
            let mistake = rng.below(8);
            let base = match mistake {
                0 if end > gm.start => end - 1,
                1 => end + 1,
                _ => end,
            };
            if mistake == 2 && gm.last_epoch() > 1 {
                epoch = gm.last_epoch() - 1;
            }
            let empty = gm.entries.is_empty() && gm.snapshot.is_none();
            if mistake == 3 && empty {
                // Offsets that would wrap: an empty log's restart point
                // two below the end of the offset space, three entries.
                let base = u64::MAX - 1;
                let r = g.append_durable(Offset(base), Epoch(epoch), &[b"x", b"y", b"z"]);
                assert!(
                    matches!(
                        r,
                        Err(Error::Log(quorumlog_log::Error::OffsetOverflow { .. }))
                    ),
                    "{r:?}"
                );
                return format!("append {id} 3 at {base}: would wrap, refused");
            }
            let records = records(rng, w, id, base, 5);
            let n = records.len();
            let queued = rng.below(2) == 0;
            let r = if queued {
                g.append(Offset(base), Epoch(epoch), &records)
            } else {
                g.append_durable(Offset(base), Epoch(epoch), &records)
            };
            let restart = gm.entries.is_empty() && base > end && gm.snapshot.is_none();
            if base != end && !restart {
                assert!(
                    matches!(
                        r,
                        Err(Error::Log(quorumlog_log::Error::NonContiguous { .. }))
                    ),
                    "{r:?}"
                );
            } else if epoch < gm.last_epoch() && !restart {
                assert!(
                    matches!(
                        r,
                        Err(Error::Log(quorumlog_log::Error::EpochRegression { .. }))
                    ),
                    "{r:?}"
                );
            } else {
                r.unwrap();
                if restart {
                    gm.pre_restart = Some(gm.start);
                    gm.start = base;
                    gm.durable = base;
                    if let Some(h) = gm.hw {
                        gm.hw = Some(h.max(base));
                    }
                }
                for rec in records {
                    gm.entries.push((epoch, rec));
                }
            }
            format!("append {id} {n} at {base} in {epoch} queued {queued}")
        }
        7 => {
            let x = rng.below(end + 3);
            let r = g.set_high_watermark(Offset(x));
            if x > end {
                assert!(r.is_err());
            } else if gm.hw.is_some_and(|h| x < h) {
                assert!(
                    matches!(r, Err(Error::HighWatermarkBackwards { .. })),
                    "{r:?}"
                );
            } else {
                r.unwrap();
                gm.hw = Some(x.max(gm.start));
                gm.set_hw = gm.hw;
            }
            format!("set_hw {id} {x}")
        }
        8 | 9 => {
            let x = gm.start + rng.below(end - gm.start + 2);
            let floor = gm
                .hw
                .unwrap_or(0)
                .max(gm.snapshot.map_or(0, |s| s.end_offset.0));
            let r = g.truncate_to(Offset(x));
            if x < floor {
                assert!(matches!(r, Err(Error::BelowHighWatermark { .. })), "{r:?}");
            } else {
                r.unwrap();
                if x < end {
                    gm.entries.truncate((x - gm.start) as usize);
                    m.all_durable();
                }
            }
            format!("truncate {id} {x}")
        }
        10 => {
            // Purge, sometimes past the end (a restart).
            let x = gm.start + rng.below(end - gm.start + 3);
            let epoch = gm.epoch_at(x.wrapping_sub(1)).unwrap_or(gm.last_epoch());
            let in_log = x > gm.start && x <= end;
            if in_log && rng.below(6) == 0 {
                // A mistake: a stale log id, the right offset in another
                // epoch than the log's.
                let wrong = epoch + 1;
                let r = g.purge(Purge::To {
                    offset: Offset(x),
                    epoch: Epoch(wrong),
                });
                let refused = gm.snapshot.is_some_and(|s| x > s.end_offset.0);
                assert!(
                    matches!(r, Err(Error::PurgeEpochMismatch { .. }))
                        || refused && matches!(r, Err(Error::MissingSnapshot { .. })),
                    "{r:?}"
                );
                return format!("purge {id} {x} in {wrong}: not the log's epoch, refused");
            }
            let r = g.purge(Purge::To {
                offset: Offset(x),
                epoch: Epoch(epoch),
            });
            if x > gm.start && gm.snapshot.is_some_and(|s| x > s.end_offset.0) {
                // A mistake: past every snapshot, refused.
                assert!(matches!(r, Err(Error::MissingSnapshot { .. })), "{r:?}");
                return format!("purge {id} {x} refused");
            }
            r.unwrap();
            if x > gm.start {
                gm.purged = Some((x, epoch));
                if x > end {
                    gm.entries.clear();
                    gm.start = x;
                    gm.hw = Some(gm.hw.map_or(x, |h| h.max(x)));
                } else {
                    gm.entries.drain(..(x - gm.start) as usize);
                    gm.start = x;
                    if gm.hw.is_some_and(|h| h < x) {
                        gm.hw = Some(x);
                    }
                }
                m.all_durable();
            }
            format!("purge {id} {x}")
        }
        11 => {
            let fired = Arc::new(Mutex::new(None));
            let f = Arc::clone(&fired);
            g.on_durable(
                Offset(end),
                Box::new(move |r| *f.lock().unwrap() = Some(r.map(|o| o.0))),
            );
            let got = g.wait_durable(Offset(end)).unwrap();
            assert_eq!(got.0, end);
            gm.durable = gm.durable.max(end);
            gm.pre_restart = None;
            assert!(g.extent().flushed.0 >= end);
            format!("wait_durable {id} {end}")
        }
        12 => {
            // A vote: a new epoch, the same one again, a second vote, an old one.
            let cur = gm.vote.epoch.0;
            let epoch = (cur + 2).saturating_sub(rng.below(4));
            let candidate = 1 + rng.below(3);
            let next = QuorumState {
                epoch: Epoch(epoch),
                leader: None,
                voted: Some(Vote {
                    node_id: NodeId(candidate),
                    directory_id: DirectoryId(9),
                }),
            };
            let r = g.persist_quorum_state(&next);
            let ok = gm.vote.check_transition(&next).is_ok();
            assert_eq!(r.is_ok(), ok, "vote {next:?} over {:?}: {r:?}", gm.vote);
            if ok {
                gm.vote = next;
                m.all_durable();
            }
            format!("vote {id} epoch {epoch} for {candidate} -> {ok}")
        }
        13 => {
            // A wait at the end makes every record the group queued
            // durable: the high watermark queued by its last set included.
            g.wait_durable(Offset(u64::MAX)).unwrap();
            let x = g.extent();
            let got = x.durable_high_watermark.map(|o| o.0);
            if let Some(p) = got {
                assert!(
                    gm.persisted.is_none_or(|q| p >= q),
                    "persisted hw moved back"
                );
                assert!(
                    p <= gm.hw.unwrap_or(0).max(gm.start),
                    "persisted hw {p} past {:?}",
                    gm.hw
                );
                gm.persisted = Some(p);
            }
            // Every set watermark was queued: after the wait it is durable
            // (a purge, a restart or an install may have raised it further,
            // in memory only).
            if let Some(h) = gm.set_hw {
                assert!(
                    got.is_some_and(|p| p >= h.min(x.queued_end.0)),
                    "a set watermark {h} not durable after a wait at the end: {got:?}"
                );
            }
            format!("persist_hw {id} -> {got:?}")
        }
        14 => {
            let bytes = vec![id as u8; rng.index(30)];
            g.write_app_metadata(&bytes).unwrap();
            gm.meta = Some(bytes);
            m.all_durable();
            format!("metadata {id}")
        }
        15 => {
            // A snapshot at the watermark, then cleaning below it.
            let at = gm.hw.unwrap_or(gm.start);
            let epoch = gm.epoch_at(at.wrapping_sub(1));
            let Some(epoch) = epoch.filter(|_| at > gm.start) else {
                return format!("no snapshot {id}");
            };
            let id_s = SnapshotId {
                end_offset: Offset(at),
                epoch: Epoch(epoch),
            };
            if gm.snapshot.is_some_and(|s| s >= id_s) {
                return format!("no newer snapshot {id}");
            }
            let mut wr = g
                .create_snapshot(Offset(at), Epoch(epoch), b"m", WriterOptions::default())
                .unwrap();
            wr.write(&[id as u8; 100]).unwrap();
            wr.freeze().unwrap();
            gm.snapshot = Some(id_s);
            if rng.below(2) == 0 {
                let to = gm.start + rng.below(at - gm.start + 1);
                let s = g.purge(Purge::Covered { up_to: Offset(to) }).unwrap().0;
                if s > gm.start {
                    gm.purged = Some((s, gm.epoch_at(s - 1).unwrap()));
                    gm.entries.drain(..(s - gm.start) as usize);
                    gm.start = s;
                    m.all_durable();
                }
            }
            format!("snapshot {id} at {at}")
        }
        16 => {
            // Install another group's latest snapshot here.
            let Some(src) = pick(rng, m).filter(|s| *s != id) else {
                return "no install".into();
            };
            let Some(sid) = m.groups[&src].snapshot else {
                return "no install".into();
            };
            let gm = m.groups.get_mut(&id).unwrap();
            if gm.snapshot.is_some_and(|s| s >= sid) {
                return "no newer install".into();
            }
            let s = &w.handles[&src];
            let total = s.snapshot(sid).map(|s| s.info().size_bytes).unwrap();
            if sid.end_offset.0 < gm.start {
                let r = g.install_snapshot(sid, total);
                assert!(matches!(r, Err(Error::SnapshotRefused { .. })), "{r:?}");
                return "install below the log start refused".into();
            }
            let last = sid.end_offset.0 - 1;
            // The group keeps its log if it continues the snapshot.
            let keeps = if last < gm.start {
                gm.entries.first().is_none_or(|e| e.0 >= sid.epoch.0)
            } else {
                gm.epoch_at(last) == Some(sid.epoch.0)
            };
            if !keeps && gm.hw.unwrap_or(gm.start) > sid.end_offset.0 {
                let r = g.install_snapshot(sid, total);
                assert!(matches!(r, Err(Error::SnapshotRefused { .. })), "{r:?}");
                return "install conflicting with committed entries refused".into();
            }
            let mut inst = g.install_snapshot(sid, total).unwrap();
            let mut pos = 0;
            while pos < total {
                let chunk = s.snapshot(sid).and_then(|s| s.read_chunk(pos, 64)).unwrap();
                inst.write_chunk(pos, &chunk).unwrap();
                pos += chunk.len() as u64;
            }
            inst.finish().unwrap();
            if !keeps {
                gm.entries.clear();
                gm.start = sid.end_offset.0;
                gm.purged = Some((gm.start, sid.epoch.0));
                gm.hw = Some(gm.hw.map_or(gm.start, |h| h.max(gm.start)));
                m.all_durable();
            } else {
                let to = sid.end_offset.0.min(gm.end()).max(gm.start);
                gm.hw = Some(gm.hw.map_or(to, |h| h.max(to)));
            }
            m.groups.get_mut(&id).unwrap().snapshot = Some(sid);
            format!("install {src}'s {sid:?} into {id} keeps {keeps}")
        }
        17 => {
            // Handle mistakes: a second handle, an unknown group.
            assert!(matches!(w.node().group(id), Err(Error::GroupInUse { .. })));
            assert!(matches!(
                w.node().group(u64::MAX),
                Err(Error::UnknownGroup { .. })
            ));
            "handle mistakes".into()
        }
        18 => write_batch(rng, w, m),
        _ => {
            // Checkpoint and reclamation (rewrites, freed segments).
            w.node().maintain().unwrap();
            m.all_durable();
            let space = w.node().stats().space;
            format!("maintain -> {space:?}")
        }
    }
}

/// A write batch over up to three groups (a group twice, sometimes),
/// sometimes with a purge riding it, sometimes with one item at the wrong
/// offset: then nothing of the batch is applied.
fn write_batch(rng: &mut SimRng, w: &World, m: &mut Model) -> String {
    let ids: Vec<u64> = (0..=rng.index(3)).filter_map(|_| pick(rng, m)).collect();
    let mut batch = w.node().write_batch();
    let mut ends: BTreeMap<u64, u64> = BTreeMap::new();
    let mut planned: Vec<(u64, u64, Vec<Vec<u8>>)> = Vec::new();
    let bad = rng.below(6) == 0;
    for (k, id) in ids.iter().enumerate() {
        let gm = &m.groups[id];
        let end = *ends.entry(*id).or_insert(gm.end());
        let epoch = gm.last_epoch().max(gm.vote.epoch.0).max(1);
        let base = if bad && k == ids.len() - 1 {
            end + 1
        } else {
            end
        };
        // Up to nine records of one group may share a batch: each a sixteenth.
        let mut records = records(rng, w, *id, base, 3);
        records.truncate(1 + rng.index(3));
        for r in &mut records {
            r.truncate((options(w.zstd).log.max_batch_bytes / 16) as usize);
        }
        let n = records.len();
        batch
            .append(&w.handles[id], Offset(base), Epoch(epoch), &records)
            .unwrap();
        ends.insert(*id, base + n as u64);
        planned.push((*id, epoch, records));
    }
    // A purge of the first group riding the batch, below its snapshot.
    let purge = ids.first().and_then(|id| {
        let gm = &m.groups[id];
        let to = gm.start + 1;
        let ok = to < gm.end() && gm.snapshot.is_none_or(|s| to <= s.end_offset.0);
        (ok && rng.below(3) == 0).then(|| (*id, to, gm.epoch_at(to - 1).unwrap()))
    });
    if let Some((id, to, e)) = purge {
        batch.purge(&w.handles[&id], Offset(to), Epoch(e)).unwrap();
    }
    let empty_restart = planned.iter().any(|(id, ..)| {
        let gm = &m.groups[id];
        gm.entries.is_empty() && gm.snapshot.is_none()
    });
    let r = batch.commit();
    if bad && !empty_restart {
        assert!(r.is_err(), "a batch with a bad item committed");
        return format!("write batch {ids:?} refused");
    }
    if bad {
        // A restart point may make the bad offset valid: take what it did.
        if r.is_err() {
            return format!("write batch {ids:?} refused");
        }
    }
    let infos = r.unwrap();
    for ((id, epoch, records), info) in planned.into_iter().zip(infos) {
        let gm = m.groups.get_mut(&id).unwrap();
        if info.base_offset.0 != gm.end() {
            // An empty log restarted at the batch's offset.
            gm.pre_restart = Some(gm.start);
            gm.start = info.base_offset.0;
            gm.durable = gm.start;
            if let Some(h) = gm.hw {
                gm.hw = Some(h.max(gm.start));
            }
        }
        for rec in records {
            gm.entries.push((epoch, rec));
        }
    }
    if let Some((id, to, e)) = purge {
        let gm = m.groups.get_mut(&id).unwrap();
        if to > gm.start {
            gm.entries.drain(..(to - gm.start) as usize);
            gm.start = to;
            gm.purged = Some((to, e));
            if gm.hw.is_some_and(|h| h < to) {
                gm.hw = Some(to);
            }
        }
    }
    m.all_durable();
    format!("write batch {ids:?} purge {purge:?}")
}

/// After a power cut: the survivors against the model.
fn after_power_cut(w: &World, m: &mut Model, seed: u64) {
    assert_eq!(
        w.node().groups(),
        m.groups.keys().copied().collect::<Vec<_>>(),
        "seed {seed}: groups after a crash"
    );
    for (id, gm) in &mut m.groups {
        let g = &w.handles[id];
        let (start, end) = (g.extent().start.0, g.extent().queued_end.0);
        if start != gm.start && gm.pre_restart == Some(start) && end == start {
            // The restart append was lost with the crash.
            gm.start = start;
            gm.entries.clear();
            gm.durable = start;
        }
        let snap = g.extent().latest_snapshot.map(|s| s.end_offset.0);
        if start != gm.start && snap == Some(start) && end == start {
            // The one other legitimate move (as a store's): the group lost
            // unsynced entries below its latest snapshot's end (a snapshot
            // of committed state is durable while the entries it covers
            // need not be), so it restarted, empty, at that end. Nothing
            // reported durable was in what it dropped.
            assert!(
                start > gm.start,
                "seed {seed}: group {id}'s start moved back"
            );
            assert!(
                gm.durable <= start,
                "seed {seed}: group {id} dropped durable entries"
            );
            gm.start = start;
            gm.entries.clear();
            gm.durable = start;
            gm.purged = g.extent().last_purged.map(|(o, e)| (o.0 + 1, e.0));
        }
        gm.pre_restart = None;
        assert_eq!(
            start, gm.start,
            "seed {seed}: group {id} start after a crash"
        );
        assert!(
            end >= gm.durable.max(gm.start),
            "seed {seed}: group {id} lost durable entries: {end} < {}",
            gm.durable
        );
        assert!(
            end <= gm.end(),
            "seed {seed}: group {id} entries from nowhere"
        );
        gm.entries.truncate((end - gm.start) as usize);
        let hw = g.extent().high_watermark.map(|h| h.0);
        if let Some(p) = gm.persisted {
            assert!(
                hw.unwrap_or(0) >= p.min(end),
                "seed {seed}: group {id} persisted hw {p} lost: {hw:?}"
            );
        }
        gm.hw = hw;
        gm.set_hw = None;
        gm.durable = end;
        assert_eq!(
            g.extent().latest_snapshot,
            gm.snapshot,
            "seed {seed}: group {id} snapshot"
        );
    }
}

/// Names the seed of a failing run.
struct Seed(u64);

impl Drop for Seed {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("failing seed: QUORUMLOG_NODE_SEED={}", self.0);
        }
    }
}

/// Runs `steps` random calls of seed `seed` (see the module
/// documentation), checking the model after each.
///
/// # Panics
/// At the first violated invariant, naming the seed and the step.
pub fn run_engine_case(seed: u64, steps: usize) {
    let _seed = Seed(seed);
    let mut rng = SimRng::new(seed);
    let disk = SimFs::new(seed);
    let fs: SharedFs = Arc::new(disk.clone());
    let zstd = seed % 2 == 1;
    Node::format(&fs, Path::new(DIR), meta(), &options(zstd)).unwrap();
    let (node, handles, _) = open(&disk, zstd);
    let mut w = World {
        zstd,
        disk,
        node: Some(node),
        handles,
    };
    let mut m = Model {
        one_group: seed % 4 == 0,
        ..Model::default()
    };
    let mut next_id = 0;
    let trace = std::env::var_os("QUORUMLOG_MODEL_TRACE").is_some();
    for i in 0..steps {
        let what = match rng.below(30) {
            0 => {
                // A power cut between calls.
                let plan = if rng.below(2) == 0 {
                    CrashPlan::LoseUnsynced
                } else {
                    CrashPlan::Random
                };
                w.power_cut(plan);
                after_power_cut(&w, &mut m, seed);
                format!("power cut {plan:?}")
            }
            1 => {
                // A power cut in the middle of a checkpoint or a rewrite:
                // nothing logical changes, so the model stands as it was.
                let k = 1 + rng.below(12);
                w.disk.crash_after(k);
                let r = w.node().maintain();
                w.power_cut(CrashPlan::Random);
                after_power_cut(&w, &mut m, seed);
                format!("power cut {k} calls into maintain ({})", r.is_ok())
            }
            2 => {
                // A clean close and reopen: everything is there exactly.
                w.handles.clear();
                w.node.take().unwrap().close().unwrap();
                let disk = w.disk.clone();
                let report = w.reopen_on(disk);
                // A clean close reopens clean, whatever the active
                // segment's earlier life (recycled files included).
                assert!(
                    report.log.clean && report.log.torn_tail.is_none(),
                    "seed {seed}: a clean close reopened as {report}"
                );
                m.all_durable();
                "close and reopen".into()
            }
            _ => step(&mut rng, &mut w, &mut m, &mut next_id),
        };
        if trace {
            eprintln!("{i}: {what}; space {:?}", w.node().stats().space);
        }
        let what = format!("seed {seed} step {i} ({what})");
        check(&w, &m, &what);
        check_reads(&mut rng, &w, &m, &what);
    }
    w.handles.clear();
}
