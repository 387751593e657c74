//! Fills a new node directory with `MIB` MiB of records over eight groups,
//! to measure `quorumlog verify`'s read rate against the disk's:
//! `cargo run --release -p quorumlog-cli --example fill -- DIR MIB`.

use std::path::PathBuf;
use std::sync::Arc;

use quorumlog_io::RealFs;
use quorumlog_raft::{
    ClusterId, DirectoryId, Epoch, Identity, Meta, Node, NodeId, NodeOptions, Offset, SharedFs,
};

/// Records per batch, and bytes per record.
const BATCH: usize = 64;
const RECORD: usize = 1024;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(mib)) = (args.next(), args.next()) else {
        return Err("usage: fill DIR MIB".into());
    };
    let dir = PathBuf::from(dir);
    let mib: u64 = mib.parse()?;
    let fs: SharedFs = Arc::new(RealFs::new());
    let meta = Meta::new(ClusterId(1), NodeId(1), DirectoryId::random());
    Node::format(&fs, &dir, meta, &NodeOptions::default())?;
    let (node, _) = Node::open(&fs, &dir, &Identity::of(&meta), &NodeOptions::default())?;
    let groups: Vec<_> = (1..=8)
        .map(|g| {
            node.create_group(g, Offset(0))?;
            node.group(g)
        })
        .collect::<Result<_, _>>()?;
    let record = vec![0xa5_u8; RECORD];
    let records: Vec<&[u8]> = vec![&record; BATCH];
    let batches = (mib << 20) / (BATCH * RECORD) as u64;
    let mut next = [0_u64; 8];
    for b in 0..batches {
        let i = usize::try_from(b % 8)?;
        let (Some(g), Some(at)) = (groups.get(i), next.get_mut(i)) else {
            unreachable!("eight groups")
        };
        g.append(Offset(*at), Epoch(1), &records)?;
        *at += BATCH as u64;
    }
    for (g, at) in groups.iter().zip(next) {
        g.wait_durable(Offset(at))?;
    }
    drop(groups);
    node.close()?;
    println!(
        "{batches} batches of {BATCH} x {RECORD} B in {}",
        dir.display()
    );
    Ok(())
}
