//! `app-metadata`: absent until written, then exactly the bytes last
//! acknowledged across reopens; too large is refused with nothing written;
//! a damaged file is refused at open, never taken for absent.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{
    format_with, path_of, AppMetadata, ClusterId, DataDir, DirectoryId, Error, Meta, NodeId,
    OpenOptions, SharedFs,
};
use quorumlog_io::SimFs;

const DIR: &str = "/data";

fn open(sim: &SimFs) -> Result<DataDir, Error> {
    let fs: SharedFs = Arc::new(sim.clone());
    DataDir::open(fs, Path::new(DIR), &OpenOptions::default())
}

#[test]
fn absent_written_replaced_refused() {
    let sim = SimFs::new(1);
    let fs: SharedFs = Arc::new(sim.clone());
    format_with(
        &fs,
        Path::new(DIR),
        Meta::new(ClusterId(1), NodeId(1), DirectoryId(9)),
    )
    .unwrap();
    let dd = open(&sim).unwrap();
    assert_eq!(dd.app_metadata(), None);
    dd.write_app_metadata(b"conf state").unwrap();
    assert!(matches!(
        dd.write_app_metadata(&vec![0u8; (1 << 20) + 1]),
        Err(Error::TooLarge { .. })
    ));
    drop(dd);
    let dd = open(&sim).unwrap();
    assert_eq!(dd.app_metadata().as_deref(), Some(b"conf state".as_slice()));
    dd.write_app_metadata(b"").unwrap();
    drop(dd);
    assert_eq!(open(&sim).unwrap().app_metadata(), Some(Vec::new()));
    // A flipped bit: refused, typed, not read as absent.
    let path = path_of::<AppMetadata>(Path::new(DIR));
    sim.flip_bit(&path, 20).unwrap();
    assert!(matches!(open(&sim), Err(Error::Corruption { .. })));
}
