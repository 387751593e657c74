//! Helpers shared by the log scenario tests.
#![allow(
    dead_code,
    unused_imports,
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "helpers shared by the scenario tests; each test binary uses some"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quorumlog_checkpoint::{
    format_with, ClusterId, DataDir, DirectoryId, Epoch, Meta, NodeId, Offset, OpenOptions,
    SharedFs,
};
use quorumlog_io::{FileSystem, IoBackend, RealFs, SimFs};
use quorumlog_log::{Log, LogOptions, Result};

pub(crate) const DIR: &str = "/data";

/// Small segments so that tests roll often (page-aligned, the default:
/// each sync and each segment header take a page of their own).
pub(crate) use quorumlog_testkit::small_log_options as small_options;

/// Small-test options with room for several pages in one segment (64 KiB),
/// so that sync padding happens inside a segment.
pub(crate) fn multi_page_options() -> LogOptions {
    LogOptions {
        segment_size_bytes: 64 << 10,
        ..small_options()
    }
}

pub(crate) fn format_dir(fs: &SharedFs, dir: &Path) {
    format_with(
        fs,
        dir,
        Meta::new(ClusterId(1), NodeId(1), DirectoryId(0xD1)),
    )
    .unwrap();
}

pub(crate) fn open_dd(fs: &SharedFs, dir: &Path) -> Arc<DataDir> {
    Arc::new(DataDir::open(fs.clone(), dir, &OpenOptions::default()).unwrap())
}

/// Opens the log of `dir`. Every refused open in every log test is checked
/// to have changed nothing in the data directory (recovery never destroys
/// evidence), apart from what the data directory's own open removes (stale
/// `*.tmp` files of interrupted replaces) and a truncation intent redone.
pub(crate) fn open_log(fs: &SharedFs, dir: &Path, options: &LogOptions) -> Result<Log> {
    let evidence = |image: std::collections::BTreeMap<PathBuf, Vec<u8>>| {
        image
            .into_iter()
            .filter(|(p, _)| p.extension().is_none_or(|e| e != "tmp"))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let intent = dir.join("log/truncation.intent");
    let before = if fs.exists(&intent).unwrap_or(true) {
        None
    } else {
        try_dir_image(fs.as_ref(), dir).ok().map(evidence)
    };
    let opened = DataDir::open(fs.clone(), dir, &OpenOptions::default())
        .map_err(quorumlog_log::Error::from)
        .and_then(|dd| Log::open(Arc::new(dd), options.clone()));
    // (A simulated disk that went down during the open cannot be compared.)
    let after = try_dir_image(fs.as_ref(), dir).ok().map(evidence);
    if let (Err(e), Some(before), Some(after)) = (&opened, before, after) {
        assert!(
            before == after,
            "a refused open ({e}) changed the data directory: {:?}",
            before
                .keys()
                .chain(after.keys())
                .filter(|k| before.get(*k) != after.get(*k))
                .collect::<Vec<_>>()
        );
    }
    opened
}

/// A fresh simulated disk with a formatted data directory.
pub(crate) fn sim(seed: u64) -> (SimFs, SharedFs) {
    let sim = SimFs::new(seed);
    let fs: SharedFs = Arc::new(sim.clone());
    format_dir(&fs, Path::new(DIR));
    (sim, fs)
}

pub(crate) fn shared(sim: &SimFs) -> SharedFs {
    Arc::new(sim.clone())
}

/// Runs `check` on the real file system with each I/O backend (`io_uring`
/// where the kernel allows it, and pwrite + fdatasync) and on the simulated
/// disk.
pub(crate) fn both(check: impl Fn(SharedFs, &Path)) {
    let mut backends = vec![IoBackend::Pwrite];
    match RealFs::with_backend(IoBackend::Uring) {
        Ok(_) => backends.push(IoBackend::Uring),
        Err(e) => eprintln!("io_uring unavailable here ({e}): pwrite backend only"),
    }
    for backend in backends {
        let tmp = tempfile::tempdir().unwrap();
        let dir: PathBuf = tmp.path().join("data");
        let real: SharedFs = Arc::new(RealFs::with_backend(backend).unwrap());
        format_dir(&real, &dir);
        check(real, &dir);
    }
    let (_, fs) = sim(7);
    check(fs, Path::new(DIR));
}

pub(crate) use quorumlog_testkit::payload;

/// Every record in `[from, log end)`; panics on any error. Returns
/// (offset, epoch, record).
pub(crate) fn read_all(log: &Log, from: Offset) -> Vec<(u64, Epoch, Vec<u8>)> {
    quorumlog_testkit::read_records(log, from).unwrap_or_else(|e| panic!("{e}"))
}

/// The byte range `[start, end)` of the batch holding `offset`, found by
/// walking the segment file's batch headers.
pub(crate) fn batch_range(fs: &dyn FileSystem, seg_path: &Path, offset: u64) -> (u64, u64) {
    use quorumlog_io::OpenMode;
    let f = fs.open(seg_path, OpenMode::Read).unwrap();
    let mut pos = 32u64;
    loop {
        let mut h = [0u8; 40];
        f.read_exact_at(&mut h, pos).unwrap();
        if pos % 4096 != 0 && h[0] == 0 {
            // Sync padding (of any length): a batch never starts with a zero.
            pos = pos.div_ceil(4096) * 4096;
            continue;
        }
        let len = u64::from(u32::from_le_bytes(h[8..12].try_into().unwrap()));
        let base = u64::from_le_bytes(h[16..24].try_into().unwrap());
        let count = u64::from(u32::from_le_bytes(h[32..36].try_into().unwrap()));
        assert!(len > 0, "no batch holds {offset}");
        if offset < base + count {
            return (pos, pos + len);
        }
        pos += len;
    }
}

pub(crate) fn seg_path(dir: &Path, base: u64) -> PathBuf {
    dir.join("log").join(format!("{base:020}.log"))
}

/// Every file under `dir` (recursively) with its bytes.
pub(crate) fn dir_image(
    fs: &dyn FileSystem,
    dir: &Path,
) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    quorumlog_testkit::dir_image(fs, dir).unwrap()
}

pub(crate) use quorumlog_testkit::dir_image as try_dir_image;

/// Asserts that a strict open of `dir` is refused with a `Corruption` error
/// and leaves every file byte for byte as it was (recovery never destroys
/// evidence). Returns the error.
pub(crate) fn assert_refused_unchanged(
    fs: &SharedFs,
    dir: &Path,
    options: &LogOptions,
) -> quorumlog_log::Error {
    let before = dir_image(fs.as_ref(), dir);
    let err = match open_log(fs, dir, options) {
        Ok(log) => panic!("strict open succeeded: {:?}", log.recovery_report()),
        Err(e) => e,
    };
    assert!(
        matches!(err, quorumlog_log::Error::Corruption { .. }),
        "refused with {err:?}"
    );
    let after = dir_image(fs.as_ref(), dir);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "a refused open added or removed files"
    );
    for (path, bytes) in &before {
        assert!(
            after[path] == *bytes,
            "a refused open changed {}",
            path.display()
        );
    }
    err
}
