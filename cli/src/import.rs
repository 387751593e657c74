//! `import`: brings a one-group store's directory (the previous layout)
//! over into a new group of a node's directory, offline. It runs whole on
//! a copy-on-write overlay first, so an import its input refuses changes
//! nothing; then for real: the store's files are only read (its log's
//! open recovers its tail), and the node gains the group durably, step by
//! step (an import interrupted by a crash leaves a group to drop and
//! import again, and the store as it was).

use crate::out::say;
use std::path::Path;

use std::sync::Arc;

use quorumlog_checkpoint::read_meta;
use quorumlog_io::Overlay;
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
    let (node_id, store_id) = (identity(node_dir)?, identity(store_dir)?);
    // The whole import first on a copy-on-write overlay of both
    // directories (nothing reaches the disk): an import refused for its
    // input changes nothing anywhere, the node's directory included (an
    // open marks it not cleanly closed until its close).
    let once = |fs: &SharedFs| -> Result<quorumlog_raft::inspect::ImportReport, String> {
        let (node, _) = Node::open(fs, node_dir, &node_id, &NodeOptions::default())
            .map_err(|e| format!("{}: {e}", node_dir.display()))?;
        let report = node
            .import_store(group, fs, store_dir, &store_id)
            .map_err(|e| format!("import into group {group}: {e}"));
        let closed = node
            .close()
            .map_err(|e| format!("{}: {e}", node_dir.display()));
        let report = report?;
        closed?;
        Ok(report)
    };
    let overlay: SharedFs = Arc::new(Overlay::new(Arc::clone(fs)));
    once(&overlay)?;
    let report = once(fs)?;
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
