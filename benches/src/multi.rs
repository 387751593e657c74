//! Many Raft groups on one node: W6 (writers appending to random groups),
//! W7 (a Raft node's write batch: one entry to each of 100 groups, then
//! wait for all), G1 (space with one group in a hundred never purging),
//! V1 (1,000 groups voting at once) and R6 (reopen after a crash with
//! 1,000 groups and gigabytes of live log).
//!
//! Systems: quorumlog's [`Node`] (one shared log, one group commit),
//! raft-engine as `TiKV` runs it (one region per group, [`TunedEngine`]),
//! one quorumlog directory per group (a one-group `Node` each), and
//! the raw disk (`pwrite` + `fdatasync` of everything a call appends).

mod votes;

use votes::on_64_threads;

pub use votes::{
    fill_engine, fill_node, reopen_engine, reopen_node, votes_node, votes_per_dir, Votes,
};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use quorumlog_checkpoint::{ClusterId, DirectoryId, Epoch, Meta, NodeId, Offset, Vote};
use quorumlog_io::{process_usage, RealFs};
use quorumlog_log::LogOptions;
use quorumlog_raft::{Group, Identity, Node, NodeOptions, Purge, QuorumState, SharedFs};

use crate::systems::{bench_entry, BenchEntries, BenchError, Raw, RawMode, System, TunedEngine};
use crate::workloads::{payload, Measured};

/// Entries each group keeps behind its writer before purging.
pub const KEEP_ENTRIES: u64 = 1_024;

/// A multi-group workload.
#[derive(Debug, Clone, Copy)]
pub struct MultiWorkload {
    /// Name.
    pub name: &'static str,
    /// Groups on the node.
    pub groups: usize,
    /// Writer threads.
    pub writers: usize,
    /// Groups one call appends to (1: a random one; all: W7's batch).
    pub per_call: usize,
    /// Bytes per entry.
    pub entry_bytes: usize,
}

/// W6 at 1,000 and 10,000 groups, and W7.
pub const MULTI_WORKLOADS: [MultiWorkload; 3] = [
    MultiWorkload {
        name: "W6",
        groups: 1_000,
        writers: 64,
        per_call: 1,
        entry_bytes: 256,
    },
    MultiWorkload {
        name: "W6-10K",
        groups: 10_000,
        writers: 64,
        per_call: 1,
        entry_bytes: 256,
    },
    MultiWorkload {
        name: "W7",
        groups: 100,
        writers: 1,
        per_call: 100,
        entry_bytes: 256,
    },
];

/// A system holding many groups.
pub trait MultiSystem: Send + Sync {
    /// Name in the tables.
    fn name(&self) -> String;

    /// Appends one entry of `data` to each group of `groups`, returning
    /// once all are durable.
    ///
    /// # Errors
    /// The system's.
    fn append_durable(&self, groups: &[usize], data: &[u8]) -> Result<(), BenchError>;

    /// Syncs issued so far, where the system counts them.
    fn syncs(&self) -> Option<u64> {
        None
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn meta() -> Meta {
    Meta::new(ClusterId(1), NodeId(1), DirectoryId(7))
}

/// quorumlog: one [`Node`], one group per Raft group.
pub struct NodeSystem {
    node: Node,
    groups: Vec<Mutex<(Group, u64)>>,
}

impl NodeSystem {
    /// Formats a node in `dir` with `groups` groups (created from 64
    /// threads, so their creations share syncs).
    ///
    /// # Errors
    /// Any open error.
    pub fn open(
        dir: &Path,
        groups: usize,
        options: &NodeOptions,
    ) -> Result<NodeSystem, BenchError> {
        let fs: SharedFs = Arc::new(RealFs::new());
        // Prefilled and recycled segments, as raft-engine's 512 MiB of
        // prefilled recycled files: appends overwrite written blocks.
        let mut options = options.clone();
        options.log.prefill_segments = options.log.prefill_segments.max(4);
        let options = &options;
        Node::format(&fs, dir, meta(), options)?;
        let (node, _) = Node::open(&fs, dir, &Identity::of(&meta()), options)?;
        create_groups(&node, groups)?;
        let handles = (0..groups)
            .map(|g| Ok(Mutex::new((node.group(g as u64)?, 1))))
            .collect::<Result<Vec<_>, BenchError>>()?;
        Ok(NodeSystem {
            node,
            groups: handles,
        })
    }

    /// The node.
    pub fn node(&self) -> &Node {
        &self.node
    }
}

/// Creates groups `0..n` of `node` from 64 threads.
fn create_groups(node: &Node, n: usize) -> Result<(), BenchError> {
    on_64_threads(n, |g| Ok(node.create_group(g as u64, Offset(1))?))
}

impl MultiSystem for NodeSystem {
    fn name(&self) -> String {
        "quorumlog".into()
    }

    fn append_durable(&self, groups: &[usize], data: &[u8]) -> Result<(), BenchError> {
        if let [g] = groups {
            let slot = self.groups.get(*g).ok_or("no such group")?;
            let mut s = lock(slot);
            let at = s.1;
            let info = s.0.append(Offset(at), Epoch(1), &[data])?;
            s.0.wait_durable(info.next_offset)?;
            s.1 += 1;
            if at % KEEP_ENTRIES == 0 && at > KEEP_ENTRIES {
                s.0.purge(Purge::To {
                    offset: Offset(at - KEEP_ENTRIES),
                    epoch: Epoch(1),
                })?;
            }
            return Ok(());
        }
        // A Raft node's write batch: one entry per group, one commit.
        let mut held: Vec<_> = groups
            .iter()
            .map(|g| self.groups.get(*g).map(lock).ok_or("no such group"))
            .collect::<Result<_, _>>()?;
        let mut batch = self.node.write_batch();
        for s in &held {
            let at = s.1;
            batch.append(&s.0, Offset(at), Epoch(1), &[data])?;
            // Log compaction rides the batch, as `TiKV`'s raft log GC does.
            if at % KEEP_ENTRIES == 0 && at > KEEP_ENTRIES {
                batch.purge(&s.0, Offset(at - KEEP_ENTRIES), Epoch(1))?;
            }
        }
        batch.commit()?;
        for s in &mut held {
            s.1 += 1;
        }
        Ok(())
    }

    fn syncs(&self) -> Option<u64> {
        Some(self.node.stats().syncs)
    }
}

/// raft-engine as `TiKV` runs it: one region per group.
pub struct EngineRegions {
    engine: TunedEngine,
    next: Vec<Mutex<u64>>,
}

impl EngineRegions {
    /// Opens one in `dir` with `groups` regions.
    ///
    /// # Errors
    /// raft-engine's.
    pub fn open(dir: &Path, groups: usize) -> Result<EngineRegions, BenchError> {
        Ok(EngineRegions {
            engine: TunedEngine::open(dir, 512)?,
            next: (0..groups).map(|_| Mutex::new(1)).collect(),
        })
    }
}

impl MultiSystem for EngineRegions {
    fn name(&self) -> String {
        "raft-engine".into()
    }

    fn append_durable(&self, groups: &[usize], data: &[u8]) -> Result<(), BenchError> {
        let engine = self.engine.engine();
        let mut batch = raft_engine::LogBatch::with_capacity(groups.len());
        // Held until the write returns: one writer per region at a time, as
        // in the quorumlog system.
        let mut held = Vec::with_capacity(groups.len());
        for g in groups {
            let slot = self.next.get(*g).ok_or("no such region")?;
            let mut next = lock(slot);
            let at = *next;
            batch.add_entries::<BenchEntries>(*g as u64 + 1, &[bench_entry(at, data)])?;
            *next += 1;
            held.push((next, at, *g as u64 + 1));
        }
        engine.write(&mut batch, true)?;
        for (_, at, region) in &held {
            if at % KEEP_ENTRIES == 0 && *at > KEEP_ENTRIES {
                engine.compact_to(*region, at - KEEP_ENTRIES);
            }
        }
        Ok(())
    }
}

/// One quorumlog directory (a one-group node) per group.
pub struct PerDirectory {
    stores: Vec<Mutex<(Group, u64)>>,
    _nodes: Vec<Node>,
    _root: PathBuf,
}

impl PerDirectory {
    /// Formats `groups` one-group nodes under `dir`, with 1 MiB segments
    /// and no prefilled or recycled files (a thousand default nodes would
    /// preallocate 256 GiB), maintained by the caller (no thread each).
    ///
    /// # Errors
    /// Any open error.
    pub fn open(dir: &Path, groups: usize) -> Result<PerDirectory, BenchError> {
        let fs: SharedFs = Arc::new(RealFs::new());
        let defaults = NodeOptions::default();
        let options = NodeOptions {
            log: LogOptions {
                segment_size_bytes: 1 << 20,
                max_batch_bytes: 256 << 10,
                prefill_segments: 0,
                recycled_segments: 1,
                ..defaults.log.clone()
            },
            background: false,
            ..defaults
        };
        let mut stores = Vec::with_capacity(groups);
        let mut nodes = Vec::with_capacity(groups);
        for g in 0..groups {
            let d = dir.join(format!("g{g}"));
            fs.create_dir_all(&d)?;
            Node::format(&fs, &d, meta(), &options)?;
            let (n, _) = Node::open(&fs, &d, &Identity::of(&meta()), &options)?;
            n.create_group(1, Offset(1))?;
            stores.push(Mutex::new((n.group(1)?, 1)));
            nodes.push(n);
        }
        Ok(PerDirectory {
            stores,
            _nodes: nodes,
            _root: dir.to_path_buf(),
        })
    }
}

impl MultiSystem for PerDirectory {
    fn name(&self) -> String {
        "quorumlog-per-dir".into()
    }

    fn append_durable(&self, groups: &[usize], data: &[u8]) -> Result<(), BenchError> {
        let mut waits = Vec::with_capacity(groups.len());
        for g in groups {
            let slot = self.stores.get(*g).ok_or("no such store")?;
            let mut s = lock(slot);
            let at = s.1;
            s.0.append(Offset(at), Epoch(1), &[data])?;
            s.1 += 1;
            if groups.len() == 1 {
                s.0.wait_durable(Offset(at + 1))?;
                return Ok(());
            }
            waits.push((slot, at + 1));
        }
        for (slot, end) in waits {
            lock(slot).0.wait_durable(Offset(end))?;
        }
        Ok(())
    }
}

/// The raw disk: everything one call appends in one `pwrite` +
/// `fdatasync` (no group commit between callers).
pub struct RawMulti(Raw);

impl RawMulti {
    /// A 256 MiB pre-written file in `dir`.
    ///
    /// # Errors
    /// I/O.
    pub fn open(dir: &Path) -> Result<RawMulti, BenchError> {
        Ok(RawMulti(Raw::open(dir, 256 << 20, RawMode::Buffered)?))
    }
}

impl MultiSystem for RawMulti {
    fn name(&self) -> String {
        "raw".into()
    }

    fn append_durable(&self, groups: &[usize], data: &[u8]) -> Result<(), BenchError> {
        let refs: Vec<&[u8]> = groups.iter().map(|_| data).collect();
        self.0.append_durable(0, &refs)
    }
}

/// Runs `w` on `system` for `duration`.
///
/// # Errors
/// The first append error.
pub fn run_multi(
    system: &dyn MultiSystem,
    w: &MultiWorkload,
    duration: Duration,
) -> Result<Measured, BenchError> {
    let entries = AtomicU64::new(0);
    let used = process_usage()?;
    let start = Instant::now();
    let deadline = start + duration;
    std::thread::scope(|s| -> Result<(), BenchError> {
        let hs: Vec<_> = (0..w.writers)
            .map(|writer| {
                let entries = &entries;
                s.spawn(move || -> Result<(), BenchError> {
                    let data = payload(writer, 0, w.entry_bytes);
                    let all: Vec<usize> = (0..w.per_call.min(w.groups)).collect();
                    let mut x = (writer as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    while Instant::now() < deadline {
                        if w.per_call == 1 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            #[expect(clippy::cast_possible_truncation, reason = "modulo a usize")]
                            let g = (x % w.groups as u64) as usize;
                            system.append_durable(&[g], &data)?;
                        } else {
                            system.append_durable(&all, &data)?;
                        }
                        entries.fetch_add(all.len().max(1) as u64, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| "writer panicked")??;
        }
        Ok(())
    })?;
    let entries = entries.load(Ordering::Relaxed);
    Ok(Measured {
        entries,
        bytes: entries * w.entry_bytes as u64,
        seconds: start.elapsed().as_secs_f64(),
        usage: process_usage()?.since(used),
    })
}

/// What G1 measured: one group in a hundred never purges.
#[derive(Debug, Clone, Copy, Default)]
pub struct Garbage {
    /// Entries appended.
    pub entries: u64,
    /// Seconds.
    pub seconds: f64,
    /// The largest disk use against live bytes seen (sampled every 100 ms
    /// after the first 4 segments).
    pub max_ratio: f64,
    /// Disk use and live bytes at that moment.
    pub at_max: (u64, u64),
    /// Disk use and live bytes at the end.
    pub end: (u64, u64),
    /// Bytes rewritten per byte appended.
    pub write_amplification: f64,
    /// Segments freed.
    pub segments_freed: u64,
}

/// G1: 100 groups on a node with 8 MiB segments, 16 writers appending
/// 16 × 256 B to random groups; every group but one purges behind itself,
/// keeping [`KEEP_ENTRIES`]; the node's background thread checkpoints and
/// reclaims.
///
/// # Errors
/// The node's.
#[expect(clippy::cast_precision_loss, reason = "ratios for display")]
pub fn garbage(dir: &Path, duration: Duration) -> Result<Garbage, BenchError> {
    let options = NodeOptions {
        log: LogOptions {
            segment_size_bytes: 8 << 20,
            max_batch_bytes: 1 << 20,
            ..LogOptions::default()
        },
        ..NodeOptions::default()
    };
    let sys = NodeSystem::open(dir, 100, &options)?;
    let entries = AtomicU64::new(0);
    let start = Instant::now();
    let deadline = start + duration;
    let mut out = Garbage::default();
    std::thread::scope(|s| -> Result<(), BenchError> {
        let hs: Vec<_> = (0..16)
            .map(|writer| {
                let (sys, entries) = (&sys, &entries);
                s.spawn(move || -> Result<(), BenchError> {
                    let records: Vec<Vec<u8>> = (0..16).map(|i| payload(writer, i, 256)).collect();
                    let mut x = (writer as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    while Instant::now() < deadline {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let g = usize::try_from(x % 100).unwrap_or(0);
                        let slot = sys.groups.get(g).ok_or("no group")?;
                        let mut st = lock(slot);
                        let at = st.1;
                        st.0.append(Offset(at), Epoch(1), &records)?;
                        st.1 += 16;
                        st.0.wait_durable(Offset(at + 16))?;
                        // Group 0 never purges.
                        if g != 0 && at > 2 * KEEP_ENTRIES {
                            st.0.purge(Purge::To {
                                offset: Offset(at - KEEP_ENTRIES),
                                epoch: Epoch(1),
                            })?;
                        }
                        drop(st);
                        entries.fetch_add(16, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            let sp = sys.node.stats().space;
            if sp.segments > 4 && sp.live_bytes > 0 {
                let r = sp.log_bytes as f64 / sp.live_bytes as f64;
                if r > out.max_ratio {
                    out.max_ratio = r;
                    out.at_max = (sp.log_bytes, sp.live_bytes);
                }
            }
        }
        for h in hs {
            h.join().map_err(|_| "writer panicked")??;
        }
        Ok(())
    })?;
    let sp = sys.node.stats().space;
    let stats = sys.node.stats();
    out.entries = entries.load(Ordering::Relaxed);
    out.seconds = start.elapsed().as_secs_f64();
    out.end = (sp.log_bytes, sp.live_bytes);
    out.write_amplification = stats.rewritten_bytes as f64 / stats.appended_bytes.max(1) as f64;
    out.segments_freed = stats.segments_freed;
    Ok(out)
}
