//! `quorumlog recover-quorum`: the offline voter-set rewrite for a quorum
//! that lost its majority, on one surviving replica. Two kinds of
//! directory, told apart by what they hold:
//! - an openraft 0.10 group (a node's group, `--group G`, or a store
//!   whose log holds openraft's entries, as the key-value service's): the
//!   replica takes a vote above every term on file and appends a
//!   membership entry of the new voters (`--voters ID=ADDR,...`), through
//!   `quorumlog_openraft10::recover`; the entries must be of openraft's
//!   default types (`u64` ids, `BasicNode`, advanced leader ids), the
//!   service's, or it refuses before writing;
//! - a store of the `KRaft`-style wing, whose voter set is quorumlog's own
//!   control records (`--voters NODE:DIRECTORY_ID,...`).
//!
//! It says exactly what it overrides, changes nothing without `--yes`,
//! and refuses a running replica's directory (its lock).

use crate::out::say;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use openraft10::BasicNode;
use quorumlog_checkpoint::read_meta;
use quorumlog_openraft10::recover::{self, InForce, MembershipSource, Survey};
use quorumlog_raft::kraft::voters::{VoterEntry, VoterSet};
use quorumlog_raft::{
    kraft::KRAFT_GROUP, DirectoryId, Group, Identity, Node, NodeId, NodeOptions, SharedFs, Voter,
};

/// An entry's application data, read as nothing: a normal entry's head
/// (its log id and kind) is all the rewrite reads of it. The entry is
/// `bincode` with the payload last, and `bincode` leaves the application's
/// bytes unread behind a value that takes none.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(crate) struct Skip;

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(application data, not read)")
    }
}

openraft10::declare_raft_types!(
    /// openraft's default types, which the key-value service uses: `u64`
    /// node ids, `BasicNode`, advanced leader ids; the application's data
    /// is skipped.
    pub(crate) Ops:
        D = Skip,
        R = Skip,
);

/// Parses openraft voters, `ID=ADDR,...` (`ID=` for an empty address).
pub(crate) fn parse_members(s: &str) -> Result<BTreeMap<u64, BasicNode>, String> {
    let mut out = BTreeMap::new();
    for v in s.split(',') {
        let (id, addr) = v
            .split_once('=')
            .ok_or_else(|| format!("{v}: an openraft voter is ID=ADDR (the node's address, as its Raft network dials it)"))?;
        let id: u64 = id.trim().parse().map_err(|e| format!("{id}: {e}"))?;
        if out
            .insert(
                id,
                BasicNode {
                    addr: addr.trim().to_string(),
                },
            )
            .is_some()
        {
            return Err(format!("--voters: node {id} is named twice"));
        }
    }
    Ok(out)
}

fn block_on<F: std::future::Future>(f: F) -> Result<F::Output, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime: {e}"))?;
    Ok(rt.block_on(f))
}

fn sets(configs: &[BTreeSet<u64>]) -> String {
    configs
        .iter()
        .map(|c| format!("{c:?}"))
        .collect::<Vec<_>>()
        .join(" and ")
}

/// Prints what the rewrite of `found` to `voters` overrides.
fn plan(label: &str, me: u64, found: &Survey<Ops>, voters: &BTreeMap<u64, BasicNode>) {
    let (vote_term, vote_node, committed) = found.vote.as_ref().map_or((0, None, false), |v| {
        (v.leader_id.term, Some(v.leader_id.node_id), v.committed)
    });
    let log_term = found.last_log_id.as_ref().map_or(0, |l| l.leader_id.term);
    say!("{label}: an openraft group");
    say!(
        "this replica (node {me}) takes term {} as its own leader, without a quorum (now: vote term {vote_term}{}{})",
        vote_term.max(log_term) + 1,
        vote_node.map_or_else(String::new, |n| format!(" for node {n}")),
        if committed { ", committed" } else { "" },
    );
    match &found.membership {
        Some(InForce {
            log_id: at,
            membership: m,
            source: from,
        }) => say!(
            "the voters in force: {}{}, {} {}",
            sets(m.get_joint_config()),
            {
                let learners: Vec<u64> = m.learner_ids().collect();
                if learners.is_empty() {
                    String::new()
                } else {
                    format!(", learners {learners:?} (not carried over)")
                }
            },
            match from {
                MembershipSource::Log => "from the log's entry",
                MembershipSource::Snapshot => "from the snapshot of",
            },
            at.as_ref()
                .map_or_else(|| "none".to_string(), |l| l.index.to_string()),
        ),
        None => say!("the voters in force: none (the group was never initialized)"),
    }
    let next = found.last_log_id.as_ref().map_or(0, |l| l.index + 1);
    say!(
        "the log ends at index {}; the commit point on file is {} (entries above it were never known committed)",
        found
            .last_log_id
            .as_ref()
            .map_or_else(|| "none".to_string(), |l| l.index.to_string()),
        found
            .committed
            .as_ref()
            .map_or_else(|| "none".to_string(), |l| l.index.to_string()),
    );
    say!(
        "it appends the voters {:?} at index {next}, in force from then on",
        voters.keys().collect::<Vec<_>>()
    );
    say!(
        "it overrides Raft: entries only the lost replicas held are gone for good, and an \
         uncommitted membership change is replaced; run it on one survivor only, the one with the \
         longest log, start it alone, then add members back (openraft's add_learner and change_membership)"
    );
}

/// The openraft rewrite of `store`'s group; Ok(true) once rewritten.
fn openraft(
    store: &Arc<Group>,
    label: &str,
    me: u64,
    voters: &str,
    yes: bool,
) -> Result<bool, String> {
    let at = |e: &dyn std::fmt::Display| format!("{label}: {e}");
    let members = parse_members(voters)?;
    if !members.contains_key(&me) {
        return Err(at(&format!(
            "refused: the new voters must include this replica (node {me}), which leads the recovered quorum"
        )));
    }
    let found = block_on(recover::survey::<Ops>(Arc::clone(store), me))?.map_err(|e| {
        at(&format!(
            "not an openraft 0.10 group of openraft's default types (u64 ids, BasicNode): {e}; \
             an application of other types calls quorumlog_openraft10::recover::recover_quorum with its own"
        ))
    })?;
    if found.membership.is_none() {
        return Err(at(
            &"no membership in the log or its snapshot: the group was never initialized (nothing to recover)",
        ));
    }
    plan(label, me, &found, &members);
    if !yes {
        say!("nothing changed: run again with --yes to rewrite");
        return Ok(false);
    }
    let r = block_on(recover::recover_quorum::<Ops>(
        Arc::clone(store),
        me,
        members,
    ))?
    .map_err(|e| at(&e))?;
    say!(
        "rewritten: vote term {} for node {me}, committed; the voters {:?} at index {}",
        r.vote.leader_id.term,
        r.voters,
        r.log_id.index
    );
    Ok(true)
}

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
    let meta = read_meta(fs.as_ref(), dir)
        .map_err(|e| at(&e))?
        .ok_or_else(|| at(&"no meta file"))?;
    let expect = Identity::node(meta.cluster_id, meta.node_id);
    let me = meta.node_id.0;
    if !fs.exists(&dir.join("groups.ckpt")).map_err(|e| at(&e))? {
        return Err(at(
            &"not a node's directory: bring a one-group directory of the previous layout over \
              with `quorumlog import STORE NODE --group G` first (G = 1 for a KRaft replica's)",
        ));
    }
    // Openraft voters (`ID=ADDR`), or a group other than the wing's: the
    // openraft path (which says what is wrong with the voters).
    if voters.contains('=') || group.is_some_and(|g| g != KRAFT_GROUP) {
        let g = group.ok_or_else(|| {
            at(&"a node's directory holds many groups: name one with --group G (`quorumlog info` lists them)")
        })?;
        let (node, _) =
            Node::open(fs, dir, &expect, &NodeOptions::default()).map_err(|e| at(&e))?;
        if !node.groups().contains(&g) {
            return Err(at(&format!(
                "no group {g} on this node (its groups: {:?})",
                node.groups()
            )));
        }
        let door = Arc::new(node.group(g).map_err(|e| at(&e))?);
        let label = format!("{} group {g}", dir.display());
        let r = openraft(&door, &label, me, voters, yes);
        drop(door);
        node.close().map_err(|e| at(&e))?;
        return r;
    }
    kraft(fs, dir, &expect, voters, yes)
}

/// The `KRaft`-style wing's rewrite of its group in the node of `dir`.
fn kraft(
    fs: &SharedFs,
    dir: &Path,
    expect: &Identity,
    voters: &str,
    yes: bool,
) -> Result<bool, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", dir.display());
    let set = parse_voters(voters)?;
    let meta = read_meta(fs.as_ref(), dir)
        .map_err(|e| at(&e))?
        .ok_or_else(|| at(&"no meta file"))?;
    // Read without opening (the plan changes nothing).
    let summary = quorumlog_raft::inspect::inspect_node(fs, dir).map_err(|e| at(&e))?;
    let state = summary
        .groups
        .iter()
        .find(|g| g.group == KRAFT_GROUP)
        .map(|g| g.quorum_state.clone())
        .ok_or_else(|| {
            let ids: Vec<u64> = summary.groups.iter().map(|g| g.group).collect();
            at(&format!(
                "no KRaft replica here (no group {KRAFT_GROUP}; its groups: {ids:?})"
            ))
        })?;
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
    say!(
        "this replica (node {}) takes epoch {} as its own leader, without a quorum (now: epoch {}, leader {})",
        me.node_id.0,
        state.epoch.0 + 1,
        state.epoch.0,
        state.leader.map_or_else(|| "none".to_string(), |l| l.0.to_string())
    );
    say!(
        "and appends the voter set {} in force from then on",
        names.join(", ")
    );
    say!(
        "it overrides Raft: entries only the lost replicas held are gone for good, and an \
         uncommitted voter change or a reassignment in progress is replaced; run it on one survivor \
         only, the one with the longest log, and start the others as its followers"
    );
    if !yes {
        say!("nothing changed: run again with --yes to rewrite");
        return Ok(false);
    }
    let r = quorumlog_raft::kraft::recover_quorum(fs, dir, expect, &NodeOptions::default(), set)
        .map_err(|e| at(&e))?;
    say!(
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
