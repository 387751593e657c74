//! The embedding guide's first steps (docs/embedding.md §1): format a
//! node's directory, open it, create a group, append durably, close,
//! reopen and read the entries back. CI runs it twice: as a test
//! (`tests/examples.rs`) and built against the packaged crates, not the
//! repository's paths (`.ci/package-check`).
//!
//! `cargo run -p quorumlog-raft --example first_steps DIR` (DIR must not
//! exist or be empty).

use std::path::Path;
use std::sync::Arc;

use quorumlog_raft::{
    ClusterId, DirectoryId, Epoch, Identity, Isolation, Meta, Node, NodeId, NodeOptions, Offset,
    RealFs, SharedFs,
};

/// The first steps in `dir`.
///
/// # Errors
/// Any failed step, or entries that do not read back.
pub fn run(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let fs: SharedFs = Arc::new(RealFs::new());
    let options = NodeOptions::with_segment_bytes(1 << 20);
    let meta = Meta::new(ClusterId(42), NodeId(1), DirectoryId::random());
    Node::format(&fs, dir, meta, &options)?; // once, at provisioning
    let expect = Identity::node(ClusterId(42), NodeId(1));
    let (node, _report) = Node::open(&fs, dir, &expect, &options)?;
    node.create_group(7, Offset(0))?; // durable on return; openraft's first index
    let group = Arc::new(node.group(7)?);
    let info = group.append(Offset(0), Epoch(1), &[b"first".as_slice(), b"second"])?;
    group.wait_durable(info.next_offset)?; // or `on_durable`, a callback
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
    Ok(())
}

#[allow(dead_code, reason = "the tests call `run`")]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: first_steps DIR")?;
    run(Path::new(&dir))?;
    println!("2 entries written, durable, reopened and read back");
    // The backend the default features give (io_uring on Linux, with its
    // fallback's reason otherwise).
    let fs: SharedFs = Arc::new(RealFs::new());
    println!("backend: {}", fs.backend_description());
    Ok(())
}
