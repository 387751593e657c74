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

/// Found by the three-replica simulation (a node numbered 0 given
/// directory id 0): `format` wrote a `meta` that `open` then refused.
#[test]
fn format_refuses_a_zero_directory_id_and_writes_nothing() {
    let sim = SimFs::new(2);
    let fs: SharedFs = Arc::new(sim.clone());
    assert!(matches!(
        format_with(
            &fs,
            Path::new(DIR),
            Meta::new(ClusterId(1), NodeId(0), DirectoryId(0))
        ),
        Err(Error::InvalidIdentity { .. })
    ));
    assert!(!fs.exists(Path::new(DIR)).unwrap());
}
