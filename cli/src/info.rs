//! `quorumlog info` and `quorumlog quorum-state`: a node directory's
//! identity and groups, read without opening it
//! (`quorumlog_raft::inspect_node`).

use std::path::Path;

use quorumlog_checkpoint::read_meta;
use quorumlog_raft::{inspect_node, GroupSummary, SharedFs};

/// Prints the groups (all, or `only`); with `identity`, the directory's
/// identity and the log's extent first. Ok(false) when the walk met damage.
pub(crate) fn run(
    fs: &SharedFs,
    dir: &Path,
    only: Option<u64>,
    identity: bool,
) -> Result<bool, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", dir.display());
    let node = inspect_node(fs, dir).map_err(|e| at(&e))?;
    if identity {
        let meta = read_meta(fs.as_ref(), dir)
            .map_err(|e| at(&e))?
            .ok_or_else(|| at(&"no meta file"))?;
        println!(
            "{}: cluster {}, node {}, directory id {:032x}, format version {}",
            dir.display(),
            meta.cluster_id.0,
            meta.node_id.0,
            meta.directory_id.0,
            meta.format_version
        );
        println!(
            "shared log: checkpoint at {}, intact to {}{}; {} groups, {} dropped",
            node.checkpoint_position.0,
            node.log_end.0,
            if node.damaged {
                " (damage after: run `quorumlog verify`)"
            } else {
                ""
            },
            node.groups.len(),
            node.dropped.len()
        );
    }
    let shown: Vec<&GroupSummary> = node
        .groups
        .iter()
        .filter(|g| only.is_none_or(|o| g.group == o))
        .collect();
    if let (Some(o), true) = (only, shown.is_empty()) {
        return Err(format!("{}: no group {o}", dir.display()));
    }
    for g in shown {
        let q = &g.quorum_state;
        let leader = q
            .leader
            .map_or_else(|| "none".to_string(), |l| l.0.to_string());
        let voted = q
            .voted
            .as_ref()
            .map_or_else(|| "none".to_string(), |v| format!("{v:?}"));
        if identity {
            let hw = g
                .high_watermark
                .map_or_else(|| "none".to_string(), |h| h.0.to_string());
            println!(
                "group {}: log [{}, {}), high watermark {hw}, epoch {}, leader {leader}, voted {voted}",
                g.group, g.start.0, g.end.0, q.epoch.0
            );
        } else {
            println!(
                "group {}: epoch {}, leader {leader}, voted {voted}",
                g.group, q.epoch.0
            );
        }
    }
    Ok(!node.damaged)
}
