//! The systems under test, behind one small trait.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use quorumlog_checkpoint::{
    format, ClusterId, DataDir, Epoch, NodeId, OpenOptions as DirOptions, SharedFs,
};
use quorumlog_io::{IoBackend, RealFs};
use quorumlog_log::{
    DurableLog, LogOptions, Preallocation, SyncPolicy, TailWrites, WriteAlignment,
};

/// A boxed error for benchmark plumbing.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// One system under test: appends a group of records and returns once they
/// are durable. Shared by all writer threads.
pub trait System: Send + Sync {
    /// Short name, as printed in the tables and CSV.
    fn name(&self) -> String;

    /// Appends `records` (one append = one durable unit) from writer
    /// `writer`, returning once they are durable.
    ///
    /// # Errors
    /// Whatever the system reports.
    fn append_durable(&self, writer: usize, records: &[&[u8]]) -> Result<(), BenchError>;
}

/// quorumlog: a `DurableLog` with group commit. By default a compactor
/// thread truncates the log's prefix behind the writers, keeping its last
/// [`KEEP_SEGMENTS`] segments, as a Raft node does once a snapshot covers
/// the prefix: freed segment files are recycled, so appends land on
/// written blocks. (okaywal checkpoints and reuses its files by itself;
/// raw overwrites its preallocated file in place; raft-engine is not
/// purged here.)
pub struct Quorumlog {
    log: Arc<DurableLog>,
    label: String,
    compactor: Option<Compactor>,
}

/// The compactor thread; stopped and joined when dropped.
struct Compactor {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Compactor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

/// Segments the compactor keeps (the active one and the one before it).
pub const KEEP_SEGMENTS: usize = 2;

/// How to set up quorumlog for a run.
#[derive(Debug, Clone, Copy)]
pub struct QuorumlogSetup {
    /// The I/O backend.
    pub backend: IoBackend,
    /// Page alignment after syncs (the default) or packed writes.
    pub alignment: WriteAlignment,
    /// How segments are preallocated.
    pub preallocation: Preallocation,
    /// Truncate the prefix behind the writers (segments then recycle).
    pub compact: bool,
    /// How sync-round writes reach the disk.
    pub tail_writes: TailWrites,
}

impl Default for QuorumlogSetup {
    fn default() -> Self {
        QuorumlogSetup {
            backend: IoBackend::Auto,
            alignment: WriteAlignment::Page,
            preallocation: Preallocation::default(),
            compact: true,
            tail_writes: TailWrites::default(),
        }
    }
}

impl Quorumlog {
    /// Formats and opens a log in `dir`.
    ///
    /// # Errors
    /// Any open error.
    pub fn open(dir: &Path, setup: QuorumlogSetup) -> Result<Quorumlog, BenchError> {
        let real = RealFs::with_backend(setup.backend)?;
        let label = if setup.backend == IoBackend::Pwrite {
            "quorumlog-pwrite".to_string()
        } else if setup.alignment == WriteAlignment::Packed {
            "quorumlog-packed".to_string()
        } else if setup.preallocation != Preallocation::default() {
            format!("quorumlog-{:?}", setup.preallocation).to_lowercase()
        } else if !setup.compact {
            "quorumlog-growing".to_string()
        } else if setup.tail_writes != TailWrites::default() {
            format!("quorumlog-{:?}", setup.tail_writes).to_lowercase()
        } else {
            "quorumlog".to_string()
        };
        let fs: SharedFs = Arc::new(real);
        if !fs.exists(&dir.join("meta"))? {
            format(&fs, dir, ClusterId(1), NodeId(1))?;
        }
        let dd = Arc::new(DataDir::open(fs, dir, &DirOptions::default())?);
        let options = LogOptions {
            write_alignment: setup.alignment,
            preallocation: setup.preallocation,
            tail_writes: setup.tail_writes,
            ..LogOptions::default()
        };
        let log = Arc::new(DurableLog::open(dd, options, SyncPolicy::GroupCommit)?);
        let compactor = setup.compact.then(|| {
            let stop = Arc::new(AtomicBool::new(false));
            let (log, halt) = (Arc::clone(&log), Arc::clone(&stop));
            let thread = std::thread::spawn(move || compact(&log, &halt));
            Compactor {
                stop,
                thread: Some(thread),
            }
        });
        Ok(Quorumlog {
            log,
            label,
            compactor,
        })
    }

    /// The log.
    pub fn log(&self) -> &DurableLog {
        &self.log
    }

    /// Stops the compactor, closes cleanly.
    ///
    /// # Errors
    /// Any close error.
    pub fn close(self) -> Result<(), BenchError> {
        drop(self.compactor);
        let log = Arc::try_unwrap(self.log).map_err(|_| "the log is still shared")?;
        Ok(log.close()?)
    }
}

/// Every few milliseconds, truncates the prefix to the start of the
/// segment before the active one.
fn compact(log: &DurableLog, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(5));
        let bases = log.segment_bases();
        if bases.len() > KEEP_SEGMENTS {
            if let Some(&keep) = bases.get(bases.len() - KEEP_SEGMENTS) {
                if log.truncate_prefix_to(keep).is_err() {
                    return;
                }
            }
        }
    }
}

impl System for Quorumlog {
    fn name(&self) -> String {
        self.label.clone()
    }

    fn append_durable(&self, _writer: usize, records: &[&[u8]]) -> Result<(), BenchError> {
        self.log.append_durable(Epoch(1), records)?;
        Ok(())
    }
}

/// raft-engine's entry type for `LogBatch::add_entries`: a protobuf message
/// whose bytes start with the entry's index (`TiKV` passes `eraftpb::Entry`,
/// index, term and data; the engine only needs the index and the encoding).
pub struct BenchEntries;

impl raft_engine::MessageExt for BenchEntries {
    type Entry = protobuf::well_known_types::BytesValue;

    fn index(e: &Self::Entry) -> u64 {
        e.value
            .get(..8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, u64::from_le_bytes)
    }
}

/// Writers a raft-engine run may have (one region each).
const MAX_REGIONS: usize = 256;
/// Entries each region keeps behind its writer before `compact_to`.
const KEEP_ENTRIES: u64 = 1_024;

/// raft-engine 0.4 configured as `TiKV` runs it ([`TunedEngine`]): Raft
/// entries through `LogBatch::add_entries`, one region per writer, written
/// with `sync = true` (its leader-based group commit), each writer
/// compacting its region behind itself.
pub struct RaftEngine {
    engine: TunedEngine,
    next: Vec<AtomicU64>,
}

impl RaftEngine {
    /// Opens an engine in `dir` (prefilling its recycled files first).
    ///
    /// # Errors
    /// Any open error.
    pub fn open(dir: &Path) -> Result<RaftEngine, BenchError> {
        Ok(RaftEngine {
            engine: TunedEngine::open(dir, 512)?,
            next: (0..MAX_REGIONS).map(|_| AtomicU64::new(1)).collect(),
        })
    }
}

/// A raft-engine configured as `TiKV` runs it, with its purge worker: log
/// recycling with files prefilled at open (512 MiB for the append
/// workloads, 128 MiB per node for E1's three), 32 MiB files and a
/// 128 MiB purge threshold (so recycling happens within a short run), no
/// compression (quorumlog does not compress by default either), and
/// `purge_expired_files` every 200 ms (`TiKV`'s purge worker, faster for
/// a run of seconds). The writers `compact_to` behind themselves. Shared
/// by the append workloads and E1's openraft log store.
pub struct TunedEngine {
    engine: Arc<raft_engine::Engine>,
    stop: Arc<AtomicBool>,
    purger: Option<std::thread::JoinHandle<()>>,
}

impl TunedEngine {
    /// Opens one in `dir`, prefilling `prefill_mib` MiB of recycled files
    /// first.
    ///
    /// # Errors
    /// raft-engine's open error.
    pub fn open(dir: &Path, prefill_mib: u64) -> Result<TunedEngine, BenchError> {
        let cfg = raft_engine::Config {
            dir: dir.to_string_lossy().into_owned(),
            batch_compression_threshold: raft_engine::ReadableSize(0),
            target_file_size: raft_engine::ReadableSize::mb(32),
            purge_threshold: raft_engine::ReadableSize::mb(128),
            enable_log_recycle: true,
            prefill_for_recycle: true,
            prefill_limit: Some(raft_engine::ReadableSize::mb(prefill_mib)),
            ..raft_engine::Config::default()
        };
        let engine = Arc::new(raft_engine::Engine::open(cfg)?);
        let stop = Arc::new(AtomicBool::new(false));
        let purger = {
            let (engine, stop) = (Arc::clone(&engine), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    let _ = engine.purge_expired_files();
                }
            })
        };
        Ok(TunedEngine {
            engine,
            stop,
            purger: Some(purger),
        })
    }

    /// The engine.
    pub fn engine(&self) -> &raft_engine::Engine {
        &self.engine
    }
}

impl Drop for TunedEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(p) = self.purger.take() {
            let _ = p.join();
        }
    }
}

/// A raft-engine entry for [`BenchEntries`]: `index` then `data`.
pub fn bench_entry(index: u64, data: &[u8]) -> protobuf::well_known_types::BytesValue {
    let mut e = protobuf::well_known_types::BytesValue::new();
    e.value.reserve(8 + data.len());
    e.value.extend_from_slice(&index.to_le_bytes());
    e.value.extend_from_slice(data);
    e
}

impl System for RaftEngine {
    fn name(&self) -> String {
        "raft-engine".into()
    }

    fn append_durable(&self, writer: usize, records: &[&[u8]]) -> Result<(), BenchError> {
        let region = writer as u64 + 1;
        let next = self
            .next
            .get(writer)
            .ok_or("more writers than raft-engine regions")?;
        let first = next.fetch_add(records.len() as u64, Ordering::Relaxed);
        let entries: Vec<_> = records
            .iter()
            .zip(first..)
            .map(|(r, index)| bench_entry(index, r))
            .collect();
        let mut batch = raft_engine::LogBatch::with_capacity(entries.len());
        batch.add_entries::<BenchEntries>(region, &entries)?;
        let engine = self.engine.engine();
        engine.write(&mut batch, true)?;
        let last = first + records.len() as u64 - 1;
        if last / KEEP_ENTRIES != first.saturating_sub(1) / KEEP_ENTRIES && last > KEEP_ENTRIES {
            engine.compact_to(region, last - KEEP_ENTRIES);
        }
        Ok(())
    }
}

/// okaywal 0.3: each append is one entry of chunks, committed (it waits
/// for its fsync, shared between concurrent committers).
pub struct Okaywal {
    wal: okaywal::WriteAheadLog,
}

impl Okaywal {
    /// Opens a WAL in `dir`.
    ///
    /// # Errors
    /// Any open error.
    pub fn open(dir: &Path) -> Result<Okaywal, BenchError> {
        Ok(Okaywal {
            wal: okaywal::WriteAheadLog::recover(dir, okaywal::LogVoid)?,
        })
    }
}

impl System for Okaywal {
    fn name(&self) -> String {
        "okaywal".into()
    }

    fn append_durable(&self, _writer: usize, records: &[&[u8]]) -> Result<(), BenchError> {
        let mut entry = self.wal.begin_entry()?;
        for r in records {
            entry.write_chunk(r)?;
        }
        entry.commit()?;
        Ok(())
    }
}

/// How [`Raw`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawMode {
    /// `pwrite` of the records, then `fdatasync`.
    Buffered,
    /// Page-aligned `O_DIRECT | O_DSYNC` writes (each append padded to
    /// whole pages), durable on return.
    Direct,
}

/// The raw disk on a file written full of zeros and synced beforehand (an
/// overwrite of written blocks: a fallocated file's first writes pay for
/// extent conversion, so it is not the limit). The physical limit for one
/// writer, in both ways of writing.
pub struct Raw {
    file: File,
    pos: Mutex<u64>,
    size: u64,
    mode: RawMode,
    _path: PathBuf,
}

const PAGE: usize = 4096;

impl Raw {
    /// Creates `size` bytes of zeros (synced) in `dir`, opened for `mode`.
    ///
    /// # Errors
    /// Any I/O error.
    pub fn open(dir: &Path, size: u64, mode: RawMode) -> Result<Raw, BenchError> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("raw.log");
        {
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)?;
            let zeros = vec![0u8; 1 << 20];
            let mut at = 0u64;
            while at < size {
                f.write_all_at(&zeros, at)?;
                at += zeros.len() as u64;
            }
            f.sync_all()?;
        }
        let mut opts = OpenOptions::new();
        opts.read(true).write(true);
        if mode == RawMode::Direct {
            use std::os::unix::fs::OpenOptionsExt;
            opts.custom_flags(libc::O_DIRECT | libc::O_DSYNC);
        }
        Ok(Raw {
            file: opts.open(&path)?,
            pos: Mutex::new(0),
            size,
            mode,
            _path: path,
        })
    }

    /// The file, for read benchmarks.
    pub fn file(&self) -> &File {
        &self.file
    }
}

/// `len` bytes (a multiple of the page) at a page-aligned address inside
/// `buf`, which grows as needed; returns where they start.
fn aligned(buf: &mut Vec<u8>, len: usize) -> usize {
    buf.resize(len + PAGE, 0);
    let addr = buf.as_ptr() as usize;
    (PAGE - addr % PAGE) % PAGE
}

impl System for Raw {
    fn name(&self) -> String {
        match self.mode {
            RawMode::Buffered => "raw".into(),
            RawMode::Direct => "raw-direct".into(),
        }
    }

    fn append_durable(&self, _writer: usize, records: &[&[u8]]) -> Result<(), BenchError> {
        let data: Vec<u8> = records.concat();
        let mut pos = self.pos.lock().map_err(|_| io::Error::other("poisoned"))?;
        match self.mode {
            RawMode::Buffered => {
                if *pos + data.len() as u64 > self.size {
                    *pos = 0; // wrap: the blocks stay written
                }
                self.file.write_all_at(&data, *pos)?;
                self.file.sync_data()?;
                *pos += data.len() as u64;
            }
            RawMode::Direct => {
                let len = data.len().div_ceil(PAGE).max(1) * PAGE;
                if *pos + len as u64 > self.size {
                    *pos = 0;
                }
                let mut buf = Vec::new();
                let start = aligned(&mut buf, len);
                let window = buf
                    .get_mut(start..start + len)
                    .ok_or_else(|| io::Error::other("alignment window"))?;
                if let Some(head) = window.get_mut(..data.len()) {
                    head.copy_from_slice(&data);
                }
                self.file.write_all_at(window, *pos)?;
                *pos += len as u64;
            }
        }
        Ok(())
    }
}
