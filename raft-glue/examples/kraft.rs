//! A `KRaft`-style leader and follower on `KraftReplica` (docs/embedding.md
//! §4b), each its own node directory: the leader takes an epoch, appends,
//! the follower validates its fetch position and appends what the leader's
//! read returned, and both commit to the same high watermark. A stale
//! leader's append is refused.
//!
//! `cargo run -p quorumlog-raft --example kraft DIR`

use std::path::Path;
use std::sync::Arc;

use quorumlog_raft::{
    kraft::FetchPosition, kraft::KraftReplica, ClusterId, DirectoryId, Epoch, Identity, Isolation,
    Meta, Node, NodeId, NodeOptions, RealFs, SharedFs,
};

type Error = Box<dyn std::error::Error>;

/// Formats node `id`'s directory under `root` and opens its replica (group
/// 1, created at offset 0 on the first open).
fn replica(fs: &SharedFs, root: &Path, id: u64) -> Result<KraftReplica, Error> {
    let dir = root.join(format!("node{id}"));
    let options = NodeOptions::with_segment_bytes(1 << 20);
    let meta = Meta::new(ClusterId(42), NodeId(id), DirectoryId::random());
    Node::format(fs, &dir, meta, &options)?;
    let identity = Identity::node(ClusterId(42), NodeId(id));
    let (replica, _report) = KraftReplica::open(fs, &dir, &identity, &options)?;
    Ok(replica)
}

/// The example in `root`.
///
/// # Errors
/// Any failed step, or a follower that does not end as the leader's copy.
pub fn run(root: &Path) -> Result<(), Error> {
    let fs: SharedFs = Arc::new(RealFs::new());
    let (leader, follower) = (replica(&fs, root, 1)?, replica(&fs, root, 2)?);
    let epoch = {
        let mut e = leader.election();
        let ep = e.become_candidate()?;
        e.become_leader()?;
        ep
    };
    leader.append_as_leader(epoch, &[b"record"])?; // written at once, durable with the next round
    let end = leader.wait_durable(leader.extent().queued_end)?;

    // The follower fetches from its end: the leader checks the position,
    // then its records are appended as they are (epochs checked).
    let from = follower.extent().queued_end;
    let last_epoch = follower.log_position().last_epoch.unwrap_or(Epoch(0));
    if leader.validate_offset_and_epoch(from, last_epoch)? != FetchPosition::Valid {
        return Err("an empty follower's fetch position was refused".into());
    }
    let entries = leader.read_entries(from, end, 1 << 20, Isolation::Uncommitted)?;
    follower.append_as_follower(&entries)?;
    let copied = follower.wait_durable(follower.extent().queued_end)?;
    if copied != end {
        return Err(format!("the follower holds up to {copied}, the leader {end}").into());
    }
    // Both durable: a majority of two; the leader commits, then the follower.
    leader.set_high_watermark(end)?;
    follower.set_high_watermark(end)?;

    // A leader of an older epoch is refused: the replica leads `epoch` only.
    if leader
        .append_as_leader(Epoch(epoch.0 - 1), &[b"stale"])
        .is_ok()
    {
        return Err("an append in an epoch the replica does not lead was taken".into());
    }
    leader.close()?;
    follower.close()?;
    Ok(())
}

#[allow(dead_code, reason = "the tests call `run`")]
fn main() -> Result<(), Error> {
    let root = std::env::args().nth(1).ok_or("usage: kraft DIR")?;
    run(Path::new(&root))?;
    println!("a leader and a follower agree; a stale epoch's append was refused");
    Ok(())
}
