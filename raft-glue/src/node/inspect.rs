//! A node's groups read without opening its directory (no lock, no
//! recovery, no write): its checkpoint, then the log after it, folded as an
//! open folds it. For inspectors (`quorumlog quorum-state`, `info`), which
//! may look at a live node's or a crashed node's directory as it is.

use std::path::{Path, PathBuf};

use quorumlog_checkpoint::{CorruptionKind, Offset, QuorumState, SharedFs};
use quorumlog_log::inspect::{walk_segments, SegmentReport, Walk};
use quorumlog_log::BatchRef;

use super::ckpt::read_checkpoint;
use super::fold::fold;
use super::record::Header;
use super::NodeState;
use crate::error::{Error, Result};

/// One group as a node's directory holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    /// Its id.
    pub group: u64,
    /// Its log's first offset.
    pub start: Offset,
    /// Its log's end (the offset after its last entry).
    pub end: Offset,
    /// The high watermark as the directory holds it durably.
    pub high_watermark: Option<Offset>,
    /// Its election state.
    pub quorum_state: QuorumState,
    /// Whether it holds application metadata.
    pub app_metadata: bool,
    /// The shared-log offset of the batch holding its oldest live entry
    /// (the lowest over its runs: a rewrite moves runs forward): the log's
    /// segments from the one holding it on are kept for this group. `None`
    /// for an empty log.
    pub oldest_live: Option<Offset>,
}

/// The first damage in a node's shared log, where the read stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDamage {
    /// The segment file.
    pub file: PathBuf,
    /// The byte position of the damage.
    pub position: u64,
    /// The shared-log offset its batch must hold.
    pub offset: Option<Offset>,
    /// What is wrong.
    pub what: String,
}

/// What [`inspect_node`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSummary {
    /// Every group, by id.
    pub groups: Vec<GroupSummary>,
    /// Groups dropped (their ids never used again).
    pub dropped: Vec<u64>,
    /// The shared-log position the checkpoint covers.
    pub checkpoint_position: Offset,
    /// Where an open after a crash starts reading the log: the lower of
    /// the checkpoint's position and the log's recovery point (0 without
    /// one: the open then verifies the whole log).
    pub replay_from: Offset,
    /// The end of the shared log's intact data (the replay stops at
    /// damage).
    pub log_end: Offset,
    /// The first damage the walk met (the groups are then as of before it).
    pub damage: Option<NodeDamage>,
    /// Each group's runs of entries as (group, first shared offset, shared
    /// offset after, live), for [`NodeSummary::group_at`] and
    /// [`NodeSummary::cost`].
    runs: Vec<(u64, u64, u64, bool)>,
}

/// What damaged bytes of a node's shared log cost, by the engine's own
/// rule of what is live ([`NodeSummary::cost`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DamageCost {
    /// They hold a batch a group still serves (entries at or above its
    /// start, and no later copy replaces it).
    Live {
        /// The groups served from them.
        groups: Vec<u64>,
    },
    /// At or past where an open after a crash starts reading the log (the
    /// checkpoint's position, or the log's recovery point if lower).
    Replayed,
    /// Nothing live, below where any open reads: superseded by a
    /// rewrite, below every group's start, or in a segment the next
    /// checkpoint deletes. No open reads them and no read serves them.
    Reclaimable,
}

impl DamageCost {
    /// Whether the damage costs nothing.
    #[must_use]
    pub fn reclaimable(&self) -> bool {
        *self == DamageCost::Reclaimable
    }

    /// A word for scripts: `live`, `replayed` or `reclaimable`.
    #[must_use]
    pub fn word(&self) -> &'static str {
        match self {
            DamageCost::Live { .. } => "live",
            DamageCost::Replayed => "replayed",
            DamageCost::Reclaimable => "reclaimable",
        }
    }
}

impl std::fmt::Display for DamageCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DamageCost::Live { groups } => {
                let gs: Vec<String> = groups.iter().map(u64::to_string).collect();
                let s = if groups.len() == 1 { "" } else { "s" };
                write!(f, "live: entries group{s} {} still serve", gs.join(", "))
            }
            DamageCost::Replayed => write!(f, "live: every open replays these bytes"),
            DamageCost::Reclaimable => write!(
                f,
                "reclaimable: nothing live, no open reads them (the node's reclamation deletes them)"
            ),
        }
    }
}

impl NodeSummary {
    /// The group whose batch holds shared-log offset `offset`, as the
    /// checkpoint and the records before any damage know it.
    #[must_use]
    pub fn group_at(&self, offset: Offset) -> Option<u64> {
        self.runs
            .iter()
            .find(|(_, from, to, _)| (*from..*to).contains(&offset.0))
            .map(|(g, _, _, _)| *g)
    }

    /// The shared offset below which nothing is needed (every group's
    /// oldest live batch, and the checkpoint's position): the engine's
    /// reclamation frees the segments wholly below it.
    #[must_use]
    pub fn keep_from(&self) -> Offset {
        let live = self
            .groups
            .iter()
            .filter_map(|g| g.oldest_live.map(|o| o.0));
        Offset(super::index::reclaim_floor(
            live,
            self.checkpoint_position.0,
        ))
    }

    /// What damage to the shared offsets `[from, to)` costs: live where a
    /// live run of some group lies in it, replayed where it reaches
    /// [`NodeSummary::replay_from`], else reclaimable.
    #[must_use]
    pub fn cost(&self, from: Offset, to: Offset) -> DamageCost {
        let to = to.0.max(from.0 + 1);
        let mut groups: Vec<u64> = self
            .runs
            .iter()
            .filter(|(_, a, b, live)| *live && *a < to && from.0 < *b)
            .map(|(g, _, _, _)| *g)
            .collect();
        groups.sort_unstable();
        groups.dedup();
        if !groups.is_empty() {
            DamageCost::Live { groups }
        } else if to > self.replay_from.0 {
            DamageCost::Replayed
        } else {
            DamageCost::Reclaimable
        }
    }
}

/// Reads node directory `dir`'s groups without opening it.
///
/// # Errors
/// `WrongLayout` without a node checkpoint; `NodeCorrupt` where the
/// checkpoint or a record does not decode or breaks the format's rules;
/// `Checkpoint`/`Log` on I/O.
pub fn inspect_node(fs: &SharedFs, dir: &Path) -> Result<NodeSummary> {
    let mut f = NodeFold::start(fs, dir)?;
    walk_segments::<_, Error>(fs.as_ref(), &dir.join("log"), Walk::Stop, |s, file, _| {
        f.feed(&s, file)
    })?;
    Ok(f.finish())
}

/// A node's groups folded from its checkpoint and the segments fed to it
/// in order, as an open folds them ([`inspect_node`]): for a reader that
/// walks the segments itself (`quorumlog verify`), so that each is read
/// once.
#[derive(Debug)]
pub struct NodeFold {
    state: NodeState,
    position: u64,
    replay_from: u64,
    log_end: Offset,
    damage: Option<NodeDamage>,
}

impl NodeFold {
    /// Reads the node checkpoint of `dir`.
    ///
    /// # Errors
    /// As [`inspect_node`].
    pub fn start(fs: &SharedFs, dir: &Path) -> Result<NodeFold> {
        let c = read_checkpoint(fs, dir)?;
        let claims = quorumlog_log::inspect::Claims::read(fs.as_ref(), &dir.join("log"), None)?;
        let recovery_point = claims.recovery_point.map_or(0, |(_, offset)| offset.0);
        Ok(NodeFold {
            replay_from: recovery_point.min(c.position),
            state: NodeState {
                groups: c.groups,
                dropped: c.dropped,
                ckpt_position: c.position,
                since_ckpt: 0,
                folded_end: c.position,
                queued_hw: super::index::IdMap::default(),
            },
            position: c.position,
            log_end: Offset(c.position),
            damage: None,
        })
    }

    /// Folds the batches of one segment's walk (`file`: its bytes) after
    /// the checkpoint's position; returns whether to go on (no damage
    /// yet: the groups stay as of before the first damage).
    ///
    /// # Errors
    /// `NodeCorrupt` where a record does not decode or breaks the rules.
    pub fn feed(&mut self, s: &SegmentReport, file: &[u8]) -> Result<bool> {
        if self.damage.is_some() {
            return Ok(false);
        }
        let corrupt = |offset: u64, what| Error::NodeCorrupt {
            group: None,
            offset: Offset(offset),
            what,
        };
        for b in s
            .batches
            .iter()
            .filter(|b| b.base_offset.0 >= self.position)
        {
            // A raw walk goes on past damage; the fold does not.
            if s.problems.first().is_some_and(|p| p.position < b.position) {
                break;
            }
            let start = usize::try_from(b.position).unwrap_or(usize::MAX);
            let raw = file
                .get(start..start.saturating_add(b.bytes as usize))
                .ok_or_else(|| corrupt(b.base_offset.0, "a batch past its file's end"))?;
            let (head, payload) = first_two_records(raw)
                .map_err(|_| corrupt(b.base_offset.0, "records that do not decode"))?;
            let head =
                head.ok_or_else(|| corrupt(b.base_offset.0, "a node batch without its header"))?;
            let h = Header::decode(&head).map_err(|what| corrupt(b.base_offset.0, what))?;
            let count = b.record_count.saturating_sub(1);
            fold(
                &mut self.state,
                &h,
                b.base_offset.0,
                count,
                b.bytes,
                payload.as_deref(),
            )
            .map_err(|what| corrupt(b.base_offset.0, what))?;
            self.log_end = Offset(b.base_offset.0 + u64::from(b.record_count));
        }
        if let Some(p) = s.problems.first() {
            // The data is intact to the damage (below the checkpoint too).
            self.log_end = p.offset.unwrap_or(s.end_offset);
            self.damage = Some(NodeDamage {
                file: p.file.clone(),
                position: p.position,
                offset: p.offset,
                what: p.kind.to_string(),
            });
        } else {
            self.log_end = self.log_end.max(s.end_offset);
        }
        Ok(self.damage.is_none())
    }

    /// The groups as folded.
    #[must_use]
    pub fn finish(self) -> NodeSummary {
        NodeSummary {
            groups: summaries(&self.state),
            dropped: self.state.dropped.iter().copied().collect(),
            checkpoint_position: Offset(self.position),
            replay_from: Offset(self.replay_from),
            log_end: self.log_end,
            damage: self.damage,
            runs: runs(&self.state),
        }
    }
}

/// A node batch's header record and its first entry, if any.
type TwoRecords = (Option<Vec<u8>>, Option<Vec<u8>>);

/// The first two records of a verified batch, copied (a node batch's
/// header and its first entry), the rest left where they are.
fn first_two_records(raw: &[u8]) -> std::result::Result<TwoRecords, CorruptionKind> {
    let batch = BatchRef::from_verified_raw(raw)?;
    let mut records = batch.records()?;
    let head = records.next_record().map(<[u8]>::to_vec);
    let second = records.next_record().map(<[u8]>::to_vec);
    Ok((head, second))
}

/// Each group's runs as (group, first shared offset, shared offset after,
/// live): a run's batch begins one shared offset before its first entry
/// (the node record header).
fn runs(state: &NodeState) -> Vec<(u64, u64, u64, bool)> {
    state
        .groups
        .iter()
        .flat_map(|(id, g)| {
            g.runs.iter().map(move |r| {
                let from = r.shared.saturating_sub(1);
                (*id, from, r.shared + u64::from(r.count), r.end() > g.start)
            })
        })
        .collect()
}

fn summaries(state: &NodeState) -> Vec<GroupSummary> {
    let mut groups: Vec<GroupSummary> = state
        .groups
        .iter()
        .map(|(id, g)| GroupSummary {
            group: *id,
            start: Offset(g.start),
            end: Offset(g.end),
            high_watermark: g.durable_hw.map(|h| Offset(h.clamp(g.start, g.end))),
            quorum_state: g.vote.clone(),
            app_metadata: g.app_meta.is_some(),
            oldest_live: g.min_shared().map(Offset),
        })
        .collect();
    groups.sort_by_key(|g| g.group);
    groups
}
