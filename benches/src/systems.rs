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
/// purged here, see docs/performance.md.)
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

/// raft-engine 0.4: each append is one `LogBatch` of puts, written with
/// `sync = true` (its own leader-based group commit). Keys cycle within a
/// bounded range per writer so its memtable stays small; every put is still
/// written to its log.
pub struct RaftEngine {
    engine: raft_engine::Engine,
    next_key: AtomicU64,
}

impl RaftEngine {
    /// Opens an engine in `dir`.
    ///
    /// # Errors
    /// Any open error.
    pub fn open(dir: &Path) -> Result<RaftEngine, BenchError> {
        let cfg = raft_engine::Config {
            dir: dir.to_string_lossy().into_owned(),
            // No compression: quorumlog does not compress by default either.
            batch_compression_threshold: raft_engine::ReadableSize(0),
            ..raft_engine::Config::default()
        };
        Ok(RaftEngine {
            engine: raft_engine::Engine::open(cfg)?,
            next_key: AtomicU64::new(0),
        })
    }
}

impl System for RaftEngine {
    fn name(&self) -> String {
        "raft-engine".into()
    }

    fn append_durable(&self, writer: usize, records: &[&[u8]]) -> Result<(), BenchError> {
        let mut batch = raft_engine::LogBatch::with_capacity(records.len());
        for r in records {
            let k = self.next_key.fetch_add(1, Ordering::Relaxed) % 4096;
            batch.put(writer as u64 + 1, k.to_be_bytes().to_vec(), r.to_vec())?;
        }
        self.engine.write(&mut batch, true)?;
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

/// The raw disk: `pwrite` of the records, then `fdatasync`, on a
/// preallocated file. The physical limit for one writer.
pub struct Raw {
    file: File,
    pos: Mutex<u64>,
    size: u64,
    _path: PathBuf,
}

impl Raw {
    /// Creates a preallocated file of `size` bytes in `dir`.
    ///
    /// # Errors
    /// Any I/O error.
    pub fn open(dir: &Path, size: u64) -> Result<Raw, BenchError> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("raw.log");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        // Preallocate through the same fallocate the engine uses.
        let fs = RealFs::with_backend(IoBackend::Pwrite)?;
        let f = quorumlog_io::FileSystem::open(&fs, &path, quorumlog_io::OpenMode::ReadWrite)?;
        f.allocate(size)?;
        f.sync_all()?;
        Ok(Raw {
            file,
            pos: Mutex::new(0),
            size,
            _path: path,
        })
    }

    /// The file, for read benchmarks.
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl System for Raw {
    fn name(&self) -> String {
        "raw".into()
    }

    fn append_durable(&self, _writer: usize, records: &[&[u8]]) -> Result<(), BenchError> {
        let buf: Vec<u8> = records.concat();
        let mut pos = self.pos.lock().map_err(|_| io::Error::other("poisoned"))?;
        if *pos + buf.len() as u64 > self.size {
            *pos = 0; // wrap: the file stays preallocated
        }
        self.file.write_all_at(&buf, *pos)?;
        self.file.sync_data()?;
        *pos += buf.len() as u64;
        Ok(())
    }
}
