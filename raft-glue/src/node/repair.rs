//! The offline repair of a node whose shared log is damaged: cut the log
//! at its first corruption (the log's `TruncateAtCorruption` recovery) and
//! the node checkpoint's groups at the same point, so the node opens again
//! and its groups fetch what was cut from their leaders. For the operator's
//! `quorumlog repair --truncate-at-corruption`.

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{DataDir, Offset, SharedFs};
use quorumlog_log::{DurableLog, LogOptions, PlanCheck, RecoveryMode, RecoveryReport};

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
        let log = DurableLog::open_checked(Arc::clone(&dd), lenient, options.sync, check)?;
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
