//! The embedding guide's first steps (docs/embedding.md §1), built against
//! the packaged crates, not the repository's paths: format a node's
//! directory, open it, create a group, append durably, close, reopen and
//! read the entries back.

use std::path::Path;
use std::sync::Arc;

use quorumlog_raft::{
    ClusterId, DirectoryId, Epoch, Identity, Isolation, Meta, Node, NodeId, NodeOptions, Offset,
    RealFs, SharedFs,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: scratch DIR")?;
    let dir = Path::new(&dir);
    let fs: SharedFs = Arc::new(RealFs::new());
    let options = NodeOptions::with_segment_bytes(1 << 20);
    let meta = Meta::new(ClusterId(42), NodeId(1), DirectoryId::random());
    Node::format(&fs, dir, meta, &options)?;
    let expect = Identity::node(ClusterId(42), NodeId(1));
    let (node, _report) = Node::open(&fs, dir, &expect, &options)?;
    node.create_group(7, Offset(0))?;
    let group = Arc::new(node.group(7)?);
    let info = group.append(Offset(0), Epoch(1), &[b"first".as_slice(), b"second"])?;
    group.wait_durable(info.next_offset)?;
    drop(group);
    node.close()?;

    let (node, _report) = Node::open(&fs, dir, &expect, &options)?;
    let group = node.group(7)?;
    let entries = group.read_entries(Offset(0), Offset(2), u64::MAX, Isolation::Uncommitted)?;
    let read: Vec<&[u8]> = entries.iter().map(|e| e.bytes.as_slice()).collect();
    if read != [b"first".as_slice(), b"second"] {
        return Err(format!("read back {read:?}").into());
    }
    drop(group);
    node.close()?;
    println!("the packaged crates: 2 entries written, reopened and read back");
    Ok(())
}
