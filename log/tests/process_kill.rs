//! Process-kill test (DESIGN.md invariant 1 on a real file system): a child
//! process appends with durable acknowledgements through `DurableLog`,
//! reporting each acknowledged offset and a CRC32C of its record on a pipe;
//! the parent kills it with SIGKILL after a random number of
//! acknowledgements, reopens the log, and checks that every acknowledged
//! record is present and byte-identical and the log is contiguous.
//!
//! `QUORUMLOG_KILLS=N` sets the number of kills (default 20).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use quorumlog_checkpoint::{
    format, ClusterId, DataDir, Epoch, NodeId, Offset, OpenOptions, SharedFs,
};
use quorumlog_io::{RealFs, SimRng};
use quorumlog_log::{DurableLog, Log, LogOptions, SyncPolicy};

const CHILD_ENV: &str = "QUORUMLOG_KILL_CHILD_DIR";

fn record(offset: u64, round: u64) -> Vec<u8> {
    let len = 16 + usize::try_from((offset * 37 + round) % 400).unwrap();
    let mut x = offset.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

fn options() -> LogOptions {
    LogOptions {
        segment_size_bytes: 256 << 10,
        max_batch_bytes: 16 << 10,
        ..LogOptions::default()
    }
}

/// The child: appends durably forever, printing `ACK <offset> <crc>` after
/// each acknowledgement. Does nothing unless started by the parent.
#[test]
fn child_role() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let round: u64 = std::env::var("QUORUMLOG_KILL_ROUND")
        .unwrap()
        .parse()
        .unwrap();
    let fs: SharedFs = Arc::new(RealFs::new());
    let dd = Arc::new(DataDir::open(fs, Path::new(&dir), &OpenOptions::default()).unwrap());
    let log = DurableLog::open(dd, options(), SyncPolicy::GroupCommit).unwrap();
    let mut out = std::io::stdout().lock();
    loop {
        let at = log.log_end_offset().0;
        let rec = record(at, round);
        let info = log.append_durable(Epoch(1), &[&rec]).unwrap();
        assert_eq!(info.base_offset.0, at);
        writeln!(out, "ACK {at} {}", crc32c::crc32c(&rec)).unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn killed_writers_lose_no_acknowledged_record() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let kills: u64 = std::env::var("QUORUMLOG_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let fs: SharedFs = Arc::new(RealFs::new());
    format(&fs, &dir, ClusterId(1), NodeId(1)).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = SimRng::new(42);
    // Every acknowledged record ever: offset -> crc (later rounds never
    // rewrite an acknowledged offset: the child appends at the end).
    let mut acked: std::collections::BTreeMap<u64, u32> = std::collections::BTreeMap::new();
    let mut total_acks = 0;
    for round in 0..kills {
        let target = 1 + rng.below(300);
        let mut child = Command::new(&exe)
            .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &dir)
            .env("QUORUMLOG_KILL_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut seen = 0;
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            let mut parts = line.split_whitespace();
            if parts.next() != Some("ACK") {
                continue;
            }
            let offset: u64 = parts.next().unwrap().parse().unwrap();
            let crc: u32 = parts.next().unwrap().parse().unwrap();
            acked.insert(offset, crc);
            seen += 1;
            if seen >= target {
                break;
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        total_acks += seen;
        // Reopen and check every acknowledged record.
        let dd = Arc::new(DataDir::open(fs.clone(), &dir, &OpenOptions::default()).unwrap());
        let log = Log::open(dd, options()).unwrap();
        let end = log.log_end_offset().0;
        assert!(
            end > *acked.keys().next_back().unwrap(),
            "round {round}: acknowledged records lost (end {end})"
        );
        let mut at = Offset(0);
        let mut next_expected = 0;
        while at.0 < end {
            let r = log.read(at, 1 << 20).unwrap();
            for b in r.iter() {
                assert_eq!(b.base_offset().0, next_expected, "round {round}: gap");
                for (i, rec) in b.to_vecs().unwrap().iter().enumerate() {
                    let o = b.base_offset().0 + i as u64;
                    if let Some(&crc) = acked.get(&o) {
                        assert_eq!(
                            crc32c::crc32c(rec),
                            crc,
                            "round {round}: offset {o} differs"
                        );
                    }
                }
                next_expected = b.next_offset().0;
            }
            at = r.next_offset().unwrap();
        }
        // Records past the last acknowledgement may exist (written, not yet
        // acknowledged when killed): the next round appends after them and
        // they are never acknowledged, so forget nothing else.
        log.close().unwrap();
    }
    eprintln!("process kills: {kills}, acknowledged records checked: {total_acks}");
    assert!(total_acks >= kills);
}
