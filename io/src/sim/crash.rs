//! What survives a power loss on the simulated disk.
//!
//! The model, per file: the unsynced writes reach the platter in the order
//! they were issued, so a crash keeps a prefix of them; the last write kept
//! may be torn at a 512-byte sector boundary, the sectors after the tear
//! holding zeros, garbage, or their old bytes. Directory operations not made
//! durable by a directory sync are likewise kept as an ordered prefix.
//! Entries whose parent directory did not survive are gone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::{to_usize, write_into, Node, Pending, State};
use crate::fs::parent_dir;

/// The sector size at which writes tear.
pub(super) const SECTOR_BYTES: u64 = 512;
/// The page size of page tearing (`SimFs::set_page_tearing`).
pub(super) const PAGE_BYTES: u64 = 4096;

/// What a torn write leaves in the sectors it did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tear {
    /// Zeros (a device that zeroes unwritten sectors).
    Zeros,
    /// Random bytes.
    Garbage,
    /// The bytes that were there before the write.
    Old,
}

/// How much of the unsynced state a crash keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPlan {
    /// Every unsynced write and directory operation is lost.
    LoseUnsynced,
    /// Every unsynced write and directory operation reached the disk.
    KeepAll,
    /// Each file keeps a random prefix of its unsynced writes, the last one
    /// torn at a random sector with the given fill; a random prefix of the
    /// unsynced directory operations survives.
    Torn(Tear),
    /// As `Torn`, with the fill chosen at random per file.
    Random,
}

pub(super) struct Survivors {
    pub ns: BTreeMap<PathBuf, Node>,
    pub contents: BTreeMap<u64, Vec<u8>>,
}

pub(super) fn survivors(st: &mut State, plan: CrashPlan) -> Survivors {
    let kept_dir_ops = match plan {
        CrashPlan::LoseUnsynced => 0,
        CrashPlan::KeepAll => st.dir_ops.len(),
        CrashPlan::Torn(_) | CrashPlan::Random => st.rng.index(st.dir_ops.len() + 1),
    };
    let mut ns = st.durable_ns.clone();
    for op in &st.dir_ops[..kept_dir_ops] {
        op.apply(&mut ns);
    }
    prune_orphans(&mut ns);

    let live: BTreeSet<u64> = ns
        .values()
        .filter_map(|n| match n {
            Node::File(id) => Some(*id),
            Node::Dir => None,
        })
        .collect();
    let mut contents = BTreeMap::new();
    for id in live {
        let Some(inode) = st.inodes.get(&id) else {
            contents.insert(id, Vec::new());
            continue;
        };
        let pending = inode.pending.clone();
        let mut bytes = inode.durable.clone();
        match plan {
            CrashPlan::LoseUnsynced => {}
            CrashPlan::KeepAll => {
                for p in &pending {
                    p.apply(&mut bytes);
                }
            }
            CrashPlan::Torn(tear) => apply_torn_prefix(st, &mut bytes, &pending, tear),
            CrashPlan::Random => {
                let tear = match st.rng.below(3) {
                    0 => Tear::Zeros,
                    1 => Tear::Garbage,
                    _ => Tear::Old,
                };
                apply_torn_prefix(st, &mut bytes, &pending, tear);
            }
        }
        contents.insert(id, bytes);
    }
    Survivors { ns, contents }
}

/// Applies a random prefix of `pending`, tearing the last write applied.
fn apply_torn_prefix(st: &mut State, bytes: &mut Vec<u8>, pending: &[Pending], tear: Tear) {
    let kept = st.rng.index(pending.len() + 1);
    if kept == 0 {
        return;
    }
    for p in &pending[..kept - 1] {
        p.apply(bytes);
    }
    match &pending[kept - 1] {
        Pending::SetLen(len) => bytes.resize(to_usize(*len), 0),
        Pending::Write { pos, data } => tear_write(st, bytes, *pos, data, tear),
    }
}

/// Writes `data` at `pos`, but only up to a random sector boundary; the rest
/// of the range gets `tear`'s fill. With page tearing, the range is widened
/// to the pages the write touches: bytes of those pages from the tear on are
/// damaged too, even those the write did not cover.
fn tear_write(st: &mut State, bytes: &mut Vec<u8>, pos: u64, data: &[u8], tear: Tear) {
    let end = pos + data.len() as u64;
    let (lo, hi) = if st.page_tearing {
        let file_end = (bytes.len() as u64).max(end);
        let page_end = end.div_ceil(PAGE_BYTES) * PAGE_BYTES;
        ((pos / PAGE_BYTES) * PAGE_BYTES, page_end.min(file_end))
    } else {
        (pos, end)
    };
    // Candidate cut points: the start, every sector boundary inside, the end.
    let mut cuts = vec![lo];
    let mut b = (lo / SECTOR_BYTES + 1) * SECTOR_BYTES;
    while b < hi {
        cuts.push(b);
        b += SECTOR_BYTES;
    }
    cuts.push(hi);
    let cut = cuts[st.rng.index(cuts.len())];
    // The write's bytes before the cut land.
    let written = to_usize(cut.clamp(pos, end) - pos);
    write_into(bytes, pos, &data[..written]);
    if cut >= hi || tear == Tear::Old {
        return;
    }
    let mut fill = vec![0u8; to_usize(hi - cut)];
    if tear == Tear::Garbage {
        st.rng.fill(&mut fill);
    }
    write_into(bytes, cut, &fill);
}

/// Removes every entry whose parent directory is not in `ns`.
fn prune_orphans(ns: &mut BTreeMap<PathBuf, Node>) {
    loop {
        let orphans: Vec<PathBuf> = ns
            .keys()
            .filter(|p| p.as_os_str() != "/")
            .filter(|p| !matches!(ns.get(parent_dir(p)), Some(Node::Dir)))
            .cloned()
            .collect();
        if orphans.is_empty() {
            return;
        }
        for p in orphans {
            ns.remove(&p);
        }
    }
}
