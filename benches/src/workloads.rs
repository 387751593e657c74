//! The workloads: W1–W5 (durable appends), R1 (sequential read) and O1
//! (reopen after a clean close and after a crash).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlog_checkpoint::{format, ClusterId, DataDir, Epoch, NodeId, OpenOptions, SharedFs};
use quorumlog_io::{process_usage, RealFs, Usage};
use quorumlog_log::{Log, LogOptions};

use crate::systems::{BenchError, System};

/// A durable-append workload.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Name (`W1`…`W5`).
    pub name: &'static str,
    /// Concurrent writer threads.
    pub writers: usize,
    /// Records per durable append.
    pub records_per_append: usize,
    /// Bytes per record.
    pub record_bytes: usize,
}

/// The write workloads of the comparison.
pub const WRITE_WORKLOADS: [Workload; 5] = [
    Workload {
        name: "W1",
        writers: 1,
        records_per_append: 1,
        record_bytes: 256,
    },
    Workload {
        name: "W2",
        writers: 1,
        records_per_append: 64,
        record_bytes: 256,
    },
    Workload {
        name: "W3",
        writers: 8,
        records_per_append: 1,
        record_bytes: 256,
    },
    Workload {
        name: "W4",
        writers: 64,
        records_per_append: 1,
        record_bytes: 256,
    },
    Workload {
        name: "W5",
        writers: 1,
        records_per_append: 16,
        record_bytes: 16 << 10,
    },
];

/// What a run measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct Measured {
    /// Entries (records) made durable.
    pub entries: u64,
    /// Payload bytes made durable.
    pub bytes: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// CPU time and context switches of the whole process over the run
    /// (zero where not measured).
    pub usage: Usage,
}

#[expect(clippy::cast_precision_loss, reason = "rates for display")]
impl Measured {
    /// Entries per second.
    pub fn entries_per_s(&self) -> f64 {
        self.entries as f64 / self.seconds
    }

    /// Payload MB (10^6 bytes) per second.
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e6
    }

    /// Microseconds of CPU (all threads, user and system) per entry.
    pub fn cpu_us_per_entry(&self) -> f64 {
        self.usage.cpu.as_secs_f64() * 1e6 / self.entries.max(1) as f64
    }

    /// Context switches per entry.
    pub fn switches_per_entry(&self) -> f64 {
        self.usage.switches as f64 / self.entries.max(1) as f64
    }
}

/// Incompressible record bytes, different per writer and record.
pub fn payload(writer: usize, i: usize, len: usize) -> Vec<u8> {
    let mut x = (writer as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Runs `w` on `system` for `duration`: every writer appends durably in a
/// loop until the deadline.
///
/// # Errors
/// The first append error.
pub fn run_write(
    system: &dyn System,
    w: &Workload,
    duration: Duration,
) -> Result<Measured, BenchError> {
    let entries = AtomicU64::new(0);
    let used = process_usage()?;
    let start = Instant::now();
    let deadline = start + duration;
    let result: Result<(), BenchError> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..w.writers)
            .map(|writer| {
                let entries = &entries;
                s.spawn(move || -> Result<(), BenchError> {
                    let records: Vec<Vec<u8>> = (0..w.records_per_append)
                        .map(|i| payload(writer, i, w.record_bytes))
                        .collect();
                    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
                    while Instant::now() < deadline {
                        system.append_durable(writer, &refs)?;
                        entries.fetch_add(w.records_per_append as u64, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| "writer panicked")??;
        }
        Ok(())
    });
    result?;
    let entries = entries.load(Ordering::Relaxed);
    Ok(Measured {
        entries,
        bytes: entries * w.record_bytes as u64,
        seconds: start.elapsed().as_secs_f64(),
        usage: process_usage()?.since(used),
    })
}

/// R1 and O1 on quorumlog.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadReopen {
    /// Sequential verified read of the whole log.
    pub read: Measured,
    /// Open after a clean close, in milliseconds.
    pub open_clean_ms: f64,
    /// Bytes verified by that open.
    pub open_clean_scanned: u64,
    /// Open after a crash (16 MiB appended and flushed after the recovery
    /// point, no close), in milliseconds.
    pub open_crash_ms: f64,
    /// Bytes verified by that open.
    pub open_crash_scanned: u64,
    /// Records in the log.
    pub records: u64,
    /// Bytes of log.
    pub log_bytes: u64,
}

fn open_log(fs: &SharedFs, dir: &Path) -> Result<(Log, f64), BenchError> {
    let t = Instant::now();
    let dd = Arc::new(DataDir::open(fs.clone(), dir, &OpenOptions::default())?);
    let log = Log::open(dd, LogOptions::default())?;
    Ok((log, t.elapsed().as_secs_f64() * 1e3))
}

/// Builds a log of `bytes` (256-byte records, 64 per batch), then measures
/// R1 (sequential verified read) and O1 (reopen clean, reopen after crash).
///
/// # Errors
/// Any I/O error.
pub fn read_and_reopen(dir: &Path, bytes: u64) -> Result<ReadReopen, BenchError> {
    let fs: SharedFs = Arc::new(RealFs::new());
    format(&fs, dir, ClusterId(1), NodeId(1))?;
    let (mut log, _) = open_log(&fs, dir)?;
    let records: Vec<Vec<u8>> = (0..64).map(|i| payload(0, i, 256)).collect();
    let mut written = 0u64;
    let mut n = 0u64;
    while written < bytes {
        log.append_as_leader(Epoch(1), &records)?;
        written += 64 * 256;
        n += 64;
        if n % (1 << 18) == 0 {
            log.flush()?;
        }
    }
    log.close()?;

    let (log, open_clean_ms) = open_log(&fs, dir)?;
    let open_clean_scanned = log.recovery_report().bytes_scanned;
    let t = Instant::now();
    let mut at = log.log_start_offset();
    let mut read_bytes = 0u64;
    let mut read_records = 0u64;
    while at < log.log_end_offset() {
        let batches = log.read(at, 1 << 20)?;
        for b in batches.iter() {
            read_records += u64::from(b.record_count());
            let mut recs = b.records()?;
            while let Some(r) = recs.next_record() {
                read_bytes += r.len() as u64;
            }
        }
        at = batches.next_offset().ok_or("empty read")?;
    }
    let read = Measured {
        entries: read_records,
        bytes: read_bytes,
        seconds: t.elapsed().as_secs_f64(),
        usage: Usage::default(),
    };
    let mut log = log;
    for _ in 0..(16 << 20) / (64 * 256) {
        log.append_as_leader(Epoch(2), &records)?;
    }
    log.flush()?;
    drop(log); // a crash: no clean close
    let (log, open_crash_ms) = open_log(&fs, dir)?;
    let open_crash_scanned = log.recovery_report().bytes_scanned;
    Ok(ReadReopen {
        read,
        open_clean_ms,
        open_clean_scanned,
        open_crash_ms,
        open_crash_scanned,
        records: n,
        log_bytes: written,
    })
}

/// S1: write and read back a snapshot of `bytes` on the real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct SnapshotRun {
    /// Writing (streamed, frozen: synced and published).
    pub write: Measured,
    /// Reading (whole-file verification, then every chunk again).
    pub read: Measured,
    /// Size of the file.
    pub file_bytes: u64,
}

/// Writes a snapshot of `bytes` of state (1 MiB chunks, `zstd_level`
/// compression if any), then reads it back verified.
///
/// # Errors
/// Any error.
pub fn snapshot_write_read(
    dir: &Path,
    bytes: u64,
    zstd_level: Option<i32>,
) -> Result<SnapshotRun, BenchError> {
    use quorumlog_snapshot::{SnapshotId, SnapshotStore, WriterOptions};
    let fs: SharedFs = Arc::new(RealFs::new());
    let store = SnapshotStore::open(fs, dir)?;
    let id = SnapshotId {
        end_offset: quorumlog_checkpoint::Offset(bytes),
        epoch: Epoch(1),
    };
    // Semi-compressible state: 1 MiB of a 16-value alphabet (about 2:1
    // with zstd), written in 4 KiB pieces.
    let state: Vec<u8> = payload(7, 0, 1 << 20).iter().map(|b| b % 16).collect();
    let mut pieces = state.chunks(4096).cycle();
    let t = Instant::now();
    let mut w = store.create(
        id,
        b"",
        WriterOptions {
            chunk_bytes: 1 << 20,
            zstd_level,
        },
    )?;
    let mut written = 0u64;
    while written < bytes {
        let piece = pieces.next().ok_or("no state")?;
        w.write(piece)?;
        written += piece.len() as u64;
    }
    let info = w.freeze()?;
    let write = Measured {
        entries: written >> 20,
        bytes: written,
        seconds: t.elapsed().as_secs_f64(),
        usage: Usage::default(),
    };
    let t = Instant::now();
    let mut r = store.reader(id)?;
    let mut read = 0u64;
    while let Some(c) = r.next_chunk()? {
        read += c.len() as u64;
    }
    let read = Measured {
        entries: read >> 20,
        bytes: read,
        seconds: t.elapsed().as_secs_f64(),
        usage: Usage::default(),
    };
    Ok(SnapshotRun {
        write,
        read,
        file_bytes: info.size_bytes,
    })
}

/// This process's peak resident set size in KiB (`VmHWM`), if known.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
