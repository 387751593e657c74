//! `import`: brings a one-group store's directory (the previous layout)
//! over into a new group of a node's directory, offline. The store's files
//! are only read (its log's open recovers its tail); the node gains the group durably, step by step (a failed import
//! leaves a group to drop and import again, and the store as it was).

use crate::out::say;
use std::path::Path;

use quorumlog_checkpoint::read_meta;
use quorumlog_raft::{Identity, Node, NodeOptions, SharedFs};

/// Imports `store_dir` into `node_dir` as group `group`. Ok(true) once
/// done.
pub(crate) fn run(
    fs: &SharedFs,
    store_dir: &Path,
    node_dir: &Path,
    group: u64,
) -> Result<bool, String> {
    let identity = |dir: &Path| -> Result<Identity, String> {
        let meta = read_meta(fs.as_ref(), dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .ok_or_else(|| format!("{}: no meta file", dir.display()))?;
        Ok(Identity::of(&meta))
    };
    let (node, _) = Node::open(fs, node_dir, &identity(node_dir)?, &NodeOptions::default())
        .map_err(|e| format!("{}: {e}", node_dir.display()))?;
    let report = node
        .import_store(group, fs, store_dir, &identity(store_dir)?)
        .map_err(|e| format!("import into group {group}: {e}"))?;
    node.close()
        .map_err(|e| format!("{}: {e}", node_dir.display()))?;
    say!(
        "imported {} into {} as group {group}: {} entries, {}",
        store_dir.display(),
        node_dir.display(),
        report.entries,
        if report.snapshot {
            "its latest snapshot"
        } else {
            "no snapshot"
        }
    );
    Ok(true)
}
