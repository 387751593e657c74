//! Measures open time and bytes verified for a large log on the real file
//! system: after a clean close (target: under 50 ms for 1 GiB, whatever the
//! size) and after a crash (work proportional to the tail after the
//! recovery point).
//!
//! `cargo run --release -p quorumlog-log --example reopen -- [GIB] [DIR]`
//! (default: 1 GiB in a temporary directory).

#![expect(
    clippy::cast_precision_loss,
    reason = "byte counts shown as GiB and GB/s"
)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use quorumlog_checkpoint::{format, ClusterId, DataDir, Epoch, NodeId, OpenOptions, SharedFs};
use quorumlog_io::RealFs;
use quorumlog_log::{Log, LogOptions};

fn open(fs: &SharedFs, dir: &std::path::Path) -> Result<(Log, f64), Box<dyn std::error::Error>> {
    let t = Instant::now();
    let dd = Arc::new(DataDir::open(fs.clone(), dir, &OpenOptions::default())?);
    let log = Log::open(dd, LogOptions::default())?;
    Ok((log, t.elapsed().as_secs_f64() * 1e3))
}

/// Fills the log with `gib` GiB of 64 × 256 B batches, flushed every
/// 64 MiB.
fn fill(
    log: &mut Log,
    gib: f64,
    records: &[Vec<u8>],
    batch_bytes: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    // Fill: 64 × 256 B records per batch, flushed every 64 MiB.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a millisecond figure for display"
    )]
    let target = (gib * f64::from(1u32 << 30)) as u64;
    let t = Instant::now();
    let mut written = 0u64;
    while written < target {
        log.append_as_leader(Epoch(1), records)?;
        written += batch_bytes;
        if written % (64 << 20) < batch_bytes {
            log.flush()?;
        }
    }
    log.flush()?;
    let fill_s = t.elapsed().as_secs_f64();
    let end = log.log_end_offset();
    println!(
        "filled {:.2} GiB ({} records, {} segments) in {fill_s:.1} s; index memory {} KiB",
        written as f64 / f64::from(1u32 << 30),
        end,
        log.segment_bases().len(),
        log.index_memory_bytes() / 1024
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gib: f64 = std::env::args().nth(1).map_or(Ok(1.0), |s| s.parse())?;
    let tmp = tempfile::tempdir_in(std::env::temp_dir())?;
    let dir = std::env::args()
        .nth(2)
        .map_or_else(|| tmp.path().join("data"), PathBuf::from);
    let fs: SharedFs = Arc::new(RealFs::new());
    format(&fs, &dir, ClusterId(1), NodeId(1))?;
    let (mut log, _) = open(&fs, &dir)?;

    let records: Vec<Vec<u8>> = (0..64u8).map(|i| vec![i; 256]).collect();
    let batch_bytes = 40 + 64 * (4 + 256);
    fill(&mut log, gib, &records, batch_bytes)?;
    log.close()?;

    for run in 0..3 {
        let (log, ms) = open(&fs, &dir)?;
        let r = log.recovery_report();
        println!(
            "open after clean close #{run}: {ms:.2} ms, clean {}, bytes verified {}",
            r.clean, r.bytes_scanned
        );
        log.close()?;
    }

    // A crash: 16 MiB appended and flushed after the recovery point, then
    // the process goes away without closing.
    let (mut log, _) = open(&fs, &dir)?;
    for _ in 0..(16 << 20) / batch_bytes {
        log.append_as_leader(Epoch(2), &records)?;
    }
    log.flush()?;
    drop(log);
    let (log, ms) = open(&fs, &dir)?;
    let r = log.recovery_report();
    println!(
        "open after crash: {ms:.2} ms, clean {}, bytes verified {} (the tail after the recovery point)",
        r.clean, r.bytes_scanned
    );

    // Sequential read of everything, verified.
    let t = Instant::now();
    let mut at = log.log_start_offset();
    let mut bytes = 0u64;
    while at < log.log_end_offset() {
        let b = log.read(at, 1 << 20)?;
        bytes += b.bytes().len() as u64;
        at = b.next_offset().unwrap_or(at);
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "sequential verified read: {:.2} GiB in {s:.2} s = {:.2} GB/s",
        bytes as f64 / f64::from(1u32 << 30),
        bytes as f64 / s / 1e9
    );
    Ok(())
}
