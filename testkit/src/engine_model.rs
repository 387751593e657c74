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

mod checks;
mod step;

use checks::{check, check_reads};
use step::step;

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

fn pick(rng: &mut SimRng, m: &Model) -> Option<u64> {
    let ids: Vec<u64> = m.groups.keys().copied().collect();
    (!ids.is_empty()).then(|| ids[rng.index(ids.len())])
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
