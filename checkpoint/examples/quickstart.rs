//! Quick start: formats a data directory on the real file system, persists a
//! quorum state and the checkpoints, reopens it and prints what it read back.
//!
//! `cargo run --release -p quorumlog-checkpoint --example quickstart [DIR]`
//! (default: a fresh temporary directory, removed afterwards).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use quorumlog_checkpoint::{
    format, ClusterId, DataDir, Epoch, EpochMap, NodeId, Offset, OpenOptions, QuorumState,
    RecoveryPoint, SharedFs, Vote, Voter,
};
use quorumlog_io::RealFs;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quickstart failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let (dir, _guard) = if let Some(d) = std::env::args().nth(1) {
        (PathBuf::from(d), None)
    } else {
        let t = tempfile::tempdir()?;
        (t.path().join("quorumlog"), Some(t))
    };
    let fs: SharedFs = Arc::new(RealFs::new());

    match DataDir::open(fs.clone(), &dir, &OpenOptions::default()) {
        Err(e) => println!("open before format: refused as expected: {e}"),
        Ok(_) => println!("open before format: {} is already formatted", dir.display()),
    }
    if !fs.exists(&dir.join("meta"))? {
        let meta = format(&fs, &dir, ClusterId(0x0123_4567_89ab_cdef), NodeId(1))?;
        println!(
            "formatted {}: cluster {} node {} directory {}",
            dir.display(),
            meta.cluster_id,
            meta.node_id,
            meta.directory_id
        );
    }

    let dd = DataDir::open(fs.clone(), &dir, &OpenOptions::default())?;
    let qs = vote_for_myself(&dd)?;

    let mut epochs = EpochMap::new();
    epochs.assign(qs.epoch, Offset(0))?;
    dd.write_epoch_map(&epochs)?;
    dd.write_recovery_point(RecoveryPoint {
        offset: Offset(0),
        segment: Offset(0),
        position: 0,
    })?;
    dd.write_high_watermark(Offset(0))?;
    dd.write_log_start_offset(Offset(0), None)?;
    println!("wrote checkpoints: recovery point, high watermark, log start offset, epoch map");
    drop(dd);

    let dd = DataDir::open(fs, &dir, &OpenOptions::default())?;
    let read = dd.quorum_state();
    assert_eq!(read, qs, "quorum state must read back identically");
    let cp = dd.checkpoints();
    println!(
        "reopened: epoch {} vote {:?}; epoch map {:?}; degraded files: {}",
        read.epoch,
        read.voted.map(|v| v.node_id.0),
        cp.epoch_map.map(|m| m.entries().to_vec()),
        dd.report().degraded.len()
    );
    Ok(())
}

/// Votes for this node in the next epoch (durable when it returns).
fn vote_for_myself(dd: &DataDir) -> Result<QuorumState, Box<dyn std::error::Error>> {
    let me = Voter {
        node_id: dd.meta().node_id,
        directory_id: dd.meta().directory_id,
    };
    let mut qs = dd.quorum_state();
    qs = QuorumState {
        epoch: Epoch(qs.epoch.0 + 1),
        leader: None,
        voted: Some(Vote {
            node_id: me.node_id,
            directory_id: me.directory_id,
        }),
    };
    dd.persist_quorum_state(&qs)?;
    println!(
        "persisted quorum state: epoch {} voted for {}",
        qs.epoch, me.node_id
    );
    Ok(qs)
}
