//! The offline repair of a node whose shared log is damaged: cut the log
//! at its first corruption (the log's `TruncateAtCorruption` recovery) and
//! the node checkpoint's groups at the same point, so the node opens again
//! and its groups fetch what was cut from their leaders. For the operator's
//! `quorumlog repair --truncate-at-corruption`.

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{DataDir, Offset, SharedFs};
use quorumlog_io::FileSystem;
use quorumlog_log::{
    DurableLog, LogOptions, PlanCheck, RecoveryMode, RecoveryPlan, RecoveryReport,
};

use super::ckpt::{self, read_checkpoint, write_checkpoint_file};
use super::{Node, NodeOptions};
use crate::error::{Error, Result};
use crate::types::Identity;

/// What [`Node::repair_truncate_at_corruption`] did.
#[derive(Debug, Clone)]
pub struct NodeRepairReport {
    /// The shared log's recovery: what it dropped (`dropped`), if anything.
    pub log: RecoveryReport,
    /// The shared log's end after the cut.
    pub log_end: Offset,
    /// Groups whose log the cut shortened: (group, end before, end after).
    /// Their votes, metadata and purge points are kept as they were (a
    /// vote never goes back); their high watermarks are clamped.
    pub groups_cut: Vec<(u64, Offset, Offset)>,
}

impl Node {
    /// Cuts the node directory `dir` (which must be `expect`'s) at the
    /// first corruption of its shared log: the log as its
    /// `TruncateAtCorruption` recovery cuts it, then, if the node checkpoint
    /// reaches past the cut, every group's log at the first of its entries
    /// the cut removed, written as a new checkpoint at the cut. Then the
    /// node is opened as usual (and closed) to prove it opens. Holds the
    /// directory's lock throughout: a running node's directory is refused.
    ///
    /// Idempotent: interrupted anywhere, it can be run again.
    ///
    /// # Errors
    /// `Checkpoint(Locked { holder })` while the directory is open;
    /// `Checkpoint(IdentityMismatch…)`; `WrongLayout`; `NodeCorrupt` where
    /// the checkpoint itself is damaged; `Log` (I/O).
    pub fn repair_truncate_at_corruption(
        fs: &SharedFs,
        dir: &Path,
        expect: &Identity,
        options: &NodeOptions,
        check: PlanCheck<'_>,
    ) -> Result<NodeRepairReport> {
        let dd = Arc::new(DataDir::open(fs.clone(), dir, &expect.open_options())?);
        let mut checkpoint = read_checkpoint(fs, dd.path())?;
        // What is live, by the engine's rule, as the directory holds it
        // before the repair (unknown where the log after the checkpoint
        // does not fold: the repair then cuts as before). Segments wholly
        // below what anything needs go first, as the engine's reclamation
        // would delete them: damage there costs nothing.
        let summary = super::inspect::inspect_node(fs, dir).ok();
        if let Some(s) = &summary {
            free_reclaimable(fs.as_ref(), &dd, s.keep_from())?;
        }
        // Damage may lie anywhere, below the recovery point too: without
        // it and without the clean marker, the open verifies everything.
        let clean = dd.log_dir().join("clean");
        match fs.remove_file(&clean) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            r => r
                .and_then(|()| fs.sync_dir(&dd.log_dir()))
                .map_err(|e| Error::Checkpoint(e.into()))?,
        }
        dd.forget_recovery_point()?;
        let lenient = LogOptions {
            recovery_mode: RecoveryMode::TruncateAtCorruption,
            ..options.log.clone()
        };
        // A cut at damage in reclaimable bytes would remove the live
        // batches after it: refused, nothing changed.
        let mut refused = None;
        let mut guard = |plan: RecoveryPlan| {
            let at = plan.log_end;
            let dead = summary
                .as_ref()
                .is_some_and(|s| s.cost(at, Offset(at.0 + 1)).reclaimable());
            if plan.cut.is_some() && dead {
                refused = Some(at);
                return Err(quorumlog_log::Error::OpenRefused);
            }
            check(plan)
        };
        let opened = DurableLog::open_checked(Arc::clone(&dd), lenient, options.sync, &mut guard);
        let log = match (opened, refused) {
            (Ok(log), _) => log,
            (Err(_), Some(at)) => return Err(Error::CutInReclaimable { at }),
            (Err(e), None) => return Err(e.into()),
        };
        let report = log.recovery_report();
        let end = log.log_end_offset();
        let groups_cut = if checkpoint.position > end.0 {
            let cut = cut_groups(&mut checkpoint, end.0);
            let bytes = ckpt::encode(end.0, checkpoint.groups.iter(), &checkpoint.dropped);
            write_checkpoint_file(fs, dd.path(), &bytes)?;
            cut
        } else {
            Vec::new()
        };
        log.close()?;
        drop(dd);
        let (node, _) = Node::open(fs, dir, expect, options)?;
        node.close()?;
        Ok(NodeRepairReport {
            log: report,
            log_end: end,
            groups_cut,
        })
    }
}

/// Cuts every group of `c` whose entries reach shared offset `at` or
/// beyond, at the first such entry (a group's log stays a prefix).
fn cut_groups(c: &mut ckpt::Checkpoint, at: u64) -> Vec<(u64, Offset, Offset)> {
    let mut cut = Vec::new();
    for (id, g) in &mut c.groups {
        let before = g.end;
        // A run's batch begins one shared offset before its first entry,
        // and a cut falls between batches.
        let first_gone = g
            .runs
            .iter()
            .find(|r| r.shared.saturating_sub(1) >= at)
            .map(|r| r.offset.max(g.start));
        if let Some(to) = first_gone {
            g.truncate(to);
            g.durable_hw = g.durable_hw.map(|h| h.min(g.end));
        }
        if g.end != before {
            cut.push((*id, Offset(before), Offset(g.end)));
        }
    }
    cut.sort_unstable();
    c.position = at;
    cut
}

/// Moves the log's start to the segment holding `floor` when it is past
/// the start: the segments wholly below it (nothing live, nothing an open
/// replays) are then removed by the log's recovery, as the engine's
/// reclamation would remove them.
fn free_reclaimable(fs: &dyn FileSystem, dd: &DataDir, floor: Offset) -> Result<()> {
    let bases = quorumlog_log::inspect::segment_files(fs, &dd.log_dir())?;
    let Some(base) = bases.iter().map(|(b, _)| *b).filter(|b| *b <= floor).max() else {
        return Ok(());
    };
    let cp = dd.checkpoints();
    let start = cp.log_start_offset.map_or(Offset(0), |l| l.offset);
    if base <= start || bases.first().is_none_or(|(b, _)| *b >= base) {
        return Ok(());
    }
    let purged = cp
        .epoch_map
        .as_ref()
        .and_then(|m| m.epoch_at(Offset(base.0 - 1)));
    dd.write_log_start_offset(base, purged)?;
    Ok(())
}
