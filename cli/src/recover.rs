//! `quorumlog recover-quorum`: the offline voter-set rewrite for a quorum
//! that lost its majority, on one surviving replica of the `KRaft`-style
//! wing (a store's directory, whose voter set is quorumlog's own control
//! records). It says exactly what it overrides, changes nothing without
//! `--yes`, and refuses a running replica's directory (its lock).

use std::path::Path;

use quorumlog_checkpoint::{read_meta, read_small_file};
use quorumlog_raft::voters::{VoterEntry, VoterSet};
use quorumlog_raft::{
    DirectoryId, Identity, KraftReplica, NodeId, QuorumState, SharedFs, StoreOptions, Voter,
};

/// Parses `NODE:DIRECTORY_ID_HEX,...`.
pub(crate) fn parse_voters(s: &str) -> Result<VoterSet, String> {
    let entries = s
        .split(',')
        .map(|v| {
            let (node, dir) = v.split_once(':').ok_or_else(|| {
                format!("{v}: a voter is NODE_ID:DIRECTORY_ID (hex, as `quorumlog info` prints it)")
            })?;
            Ok(VoterEntry {
                voter: Voter {
                    node_id: NodeId(node.trim().parse().map_err(|e| format!("{node}: {e}"))?),
                    directory_id: DirectoryId(
                        u128::from_str_radix(dir.trim(), 16).map_err(|e| format!("{dir}: {e}"))?,
                    ),
                },
                endpoint: None,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    VoterSet::new(entries).map_err(|e| format!("--voters: {e}"))
}

/// Ok(true) once rewritten; Ok(false) for the plan alone.
pub(crate) fn run(
    fs: &SharedFs,
    dir: &Path,
    group: Option<u64>,
    voters: &str,
    yes: bool,
) -> Result<bool, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", dir.display());
    if fs.exists(&dir.join("groups.ckpt")).map_err(|e| at(&e))? {
        return Err(at(&format!(
            "a node's directory{}: its groups keep their voter sets in their Raft library's own entries \
             (openraft's membership), which quorumlog does not rewrite; recover-quorum rewrites the \
             voter set of a store's directory (the KRaft-style wing)",
            group.map_or_else(String::new, |g| format!(" (group {g})"))
        )));
    }
    let set = parse_voters(voters)?;
    let meta = read_meta(fs.as_ref(), dir)
        .map_err(|e| at(&e))?
        .ok_or_else(|| at(&"no meta file"))?;
    let state = read_small_file::<QuorumState>(fs.as_ref(), dir)
        .map_err(|e| at(&e))?
        .unwrap_or_default();
    let me = Voter {
        node_id: meta.node_id,
        directory_id: meta.directory_id,
    };
    if !set.contains(me) {
        return Err(at(&format!(
            "refused: the new voters must include this replica (node {}, directory id {:032x}), which leads the recovered quorum",
            me.node_id.0, me.directory_id.0
        )));
    }
    let names: Vec<String> = set
        .voters()
        .map(|v| format!("{}:{:032x}", v.node_id.0, v.directory_id.0))
        .collect();
    println!(
        "this replica (node {}) takes epoch {} as its own leader, without a quorum (now: epoch {}, leader {})",
        me.node_id.0,
        state.epoch.0 + 1,
        state.epoch.0,
        state.leader.map_or_else(|| "none".to_string(), |l| l.0.to_string())
    );
    println!(
        "and appends the voter set {} in force from then on",
        names.join(", ")
    );
    println!(
        "it overrides Raft: entries only the lost replicas held are gone for good, and an \
         uncommitted voter change or a reassignment in progress is replaced; run it on one survivor \
         only, the one with the longest log, and start the others as its followers"
    );
    if !yes {
        println!("nothing changed: run again with --yes to rewrite");
        return Ok(false);
    }
    let expect = Identity::node(meta.cluster_id, meta.node_id);
    let r = KraftReplica::recover_quorum(fs, dir, &expect, &StoreOptions::default(), set)
        .map_err(|e| at(&e))?;
    println!(
        "rewritten: epoch {} (was {}), voter set at offset {}{}; the log ended at {}, high watermark {}",
        r.epoch.0,
        r.previous_epoch.0,
        r.offset.0,
        if r.ended_reassignment { ", a reassignment in progress ended" } else { "" },
        r.log_end.0,
        r.high_watermark.map_or_else(|| "unknown".to_string(), |h| h.0.to_string())
    );
    Ok(true)
}
