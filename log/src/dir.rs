//! The log directory: the operations on its files that recovery and the
//! open log share (create and remove segments, redo a cut or a full
//! truncation, the clean marker), behind one handle.
//!
//! Crash safety of each operation (each step leaves a state recovery
//! accepts):
//! - a cut (`redo_cut`): lower the recovery point below the cut → remove
//!   later segments, newest first, and the cut segment's index → directory
//!   sync → cut and zero-fill the segment (+ the kept bytes or replacement
//!   batch written back) → sync. `cut_page_safe` saves the page's kept bytes
//!   in an intent first when the cut is not on a page boundary.
//! - a full truncation (`redo_full`): log start, empty epoch map → remove
//!   every segment → new segment → recovery point → high watermark.
//! - a segment is created from `next.prepared`: header written and synced,
//!   then renamed into place, then the directory synced. A named segment
//!   therefore always has a valid header.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use quorumlog_checkpoint::{DataDir, Epoch, EpochMap, Offset, RecoveryPoint, SharedFs};
use quorumlog_io::{FileSystem, OpenMode};

use crate::error::Result;
use crate::format::{
    index_file_name, parse_file_name, segment_file_name, PAGE_BYTES, SEGMENT_HEADER_BYTES,
};
use crate::intent::{self, Intent};
use crate::options::LogOptions;
use crate::segment::{preallocate, Segment};

/// The file prepared ahead of the next roll.
pub(crate) const PREPARED_FILE: &str = "next.prepared";
/// Segment files kept for reuse are named `recycled-<n>.segment`.
const POOL_PREFIX: &str = "recycled-";
/// See [`POOL_PREFIX`].
const POOL_SUFFIX: &str = ".segment";

/// Whether `name` is a file of the recycling pool.
pub(crate) fn is_pool_file(name: &str) -> bool {
    pool_number(name).is_some()
}

fn pool_number(name: &str) -> Option<u64> {
    let n = name.strip_prefix(POOL_PREFIX)?.strip_suffix(POOL_SUFFIX)?;
    if n.is_empty() || n.len() > 20 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// The marker a clean close leaves in the log directory.
pub(crate) const CLEAN_FILE: &str = "clean";
/// The clean marker's content.
pub(crate) const CLEAN_CONTENT: [u8; 8] = *b"QLCL\x01\x00\x00\x00";

/// Where a suffix truncation cuts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cut<'a> {
    /// The segment cut.
    pub(crate) segment: Offset,
    /// The byte position of the cut.
    pub(crate) position: u64,
    /// A batch written at the cut (the kept part of a cut batch).
    pub(crate) replacement: Option<&'a [u8]>,
    /// The offset at the cut (the replacement's base, if any).
    pub(crate) offset: Offset,
}

/// The log directory of one data directory, with the options its files
/// are made with.
#[derive(Debug)]
pub(crate) struct LogDir {
    fs: SharedFs,
    dd: Arc<DataDir>,
    path: PathBuf,
    options: LogOptions,
}

impl LogDir {
    /// The log directory of `dd`.
    pub(crate) fn new(dd: Arc<DataDir>, options: LogOptions) -> LogDir {
        LogDir {
            fs: dd.fs().clone(),
            path: dd.log_dir(),
            dd,
            options,
        }
    }

    /// The file system.
    pub(crate) fn fs(&self) -> &SharedFs {
        &self.fs
    }

    /// The data directory (checkpoints).
    pub(crate) fn dd(&self) -> &Arc<DataDir> {
        &self.dd
    }

    /// The log directory's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The options.
    pub(crate) fn options(&self) -> &LogOptions {
        &self.options
    }

    /// Syncs the directory.
    ///
    /// # Errors
    /// `Io`.
    pub(crate) fn sync(&self) -> Result<()> {
        self.fs.sync_dir(&self.path)?;
        Ok(())
    }

    /// Removes `name`, treating "already gone" as done (redo is idempotent).
    ///
    /// # Errors
    /// `Io`.
    pub(crate) fn remove_if_present(&self, name: &str) -> Result<bool> {
        remove_if_present(self.fs.as_ref(), &self.path.join(name))
    }

    /// Removes segment `base` and its index file (not synced).
    ///
    /// # Errors
    /// `Io`.
    pub(crate) fn remove_segment(&self, base: Offset) -> Result<()> {
        self.remove_if_present(&segment_file_name(base))?;
        self.remove_if_present(&index_file_name(base))?;
        Ok(())
    }

    /// Retires segment `base` (not synced): its index file is removed, and
    /// the segment file joins the recycling pool if the pool has room and
    /// the file has the full segment size (so a later roll overwrites
    /// written blocks instead of allocating), else it is removed. Its bytes
    /// stay: the new life's salt makes them stale.
    ///
    /// # Errors
    /// `Io`.
    pub(crate) fn retire_segment(&self, base: Offset) -> Result<()> {
        self.remove_if_present(&index_file_name(base))?;
        let path = self.path.join(segment_file_name(base));
        let pool = self.pool()?;
        if pool.len() < self.options.recycled_segments {
            let full = match self.fs.open(&path, OpenMode::Read) {
                Ok(f) => f.len()? == self.options.segment_size_bytes,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            if full {
                let n = pool.iter().max().map_or(0, |m| m + 1);
                let to = self.path.join(format!("{POOL_PREFIX}{n}{POOL_SUFFIX}"));
                self.fs.rename(&path, &to)?;
                return Ok(());
            }
        }
        self.remove_if_present(&segment_file_name(base))?;
        Ok(())
    }

    /// The numbers of the pool's files.
    fn pool(&self) -> Result<Vec<u64>> {
        Ok(self
            .fs
            .list(&self.path)?
            .iter()
            .filter_map(|e| pool_number(&e.name))
            .collect())
    }

    /// Tops the pool up to `LogOptions::prefill_segments` (at most
    /// `recycled_segments`) files of zeros, synced (a new log's first
    /// rolls then land on written blocks). A crash leaves a pool file short
    /// at worst: the roll that takes it preallocates the rest.
    ///
    /// # Errors
    /// `Io`.
    pub(crate) fn prefill_pool(&self) -> Result<()> {
        let want = self
            .options
            .prefill_segments
            .min(self.options.recycled_segments);
        let mut pool = self.pool()?;
        if pool.len() >= want {
            return Ok(());
        }
        while pool.len() < want {
            let n = pool.iter().max().map_or(0, |m| m + 1);
            let path = self.path.join(format!("{POOL_PREFIX}{n}{POOL_SUFFIX}"));
            let f = self.fs.open(&path, OpenMode::CreateOrTruncate)?;
            f.fill_zeros(0, self.options.segment_size_bytes)?;
            f.sync_data()?;
            pool.push(n);
        }
        self.sync()
    }

    /// The path of a pooled segment file to reuse, if any.
    ///
    /// # Errors
    /// `Io`.
    pub(crate) fn pooled_file(&self) -> Result<Option<PathBuf>> {
        Ok(self
            .pool()?
            .into_iter()
            .min()
            .map(|n| self.path.join(format!("{POOL_PREFIX}{n}{POOL_SUFFIX}"))))
    }

    /// Zeros `[position, until)` of segment `segment` in place (the file
    /// keeps its length and its written blocks), synced. When `position`
    /// is inside a page, that page's kept bytes are saved in an intent
    /// first, as for a cut, so a crash or a torn page never loses them.
    ///
    /// # Errors
    /// `Io`, `Checkpoint`.
    pub(crate) fn zero_in_place(&self, segment: Offset, position: u64, until: u64) -> Result<()> {
        let page_start = position / PAGE_BYTES * PAGE_BYTES;
        if page_start == position {
            // Nothing kept shares a page with the zeros: redoing is safe.
            return self.redo_zero(segment, position, &[], until);
        }
        let file = self
            .fs
            .open(&self.path.join(segment_file_name(segment)), OpenMode::Read)?;
        // Lossless: less than a page.
        let mut kept = vec![0u8; usize::try_from(position - page_start).unwrap_or(0)];
        file.read_exact_at(&mut kept, page_start)?;
        drop(file);
        intent::write(
            self.fs.as_ref(),
            &self.path,
            &Intent::Zero {
                segment,
                position: page_start,
                bytes: kept.clone(),
                until,
            },
        )?;
        self.redo_zero(segment, page_start, &kept, until)?;
        intent::remove(self.fs.as_ref(), &self.path)
    }

    /// The idempotent part of [`LogDir::zero_in_place`]: `bytes` at
    /// `position`, zeros after them up to `until`, synced. A segment that
    /// no longer exists needs nothing.
    ///
    /// # Errors
    /// `Io`.
    pub(crate) fn redo_zero(
        &self,
        segment: Offset,
        position: u64,
        bytes: &[u8],
        until: u64,
    ) -> Result<()> {
        let path = self.path.join(segment_file_name(segment));
        let file = match self.fs.open(&path, OpenMode::ReadWrite) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if !bytes.is_empty() {
            file.write_all_at(bytes, position)?;
        }
        let from = position + bytes.len() as u64;
        let until = until.min(file.len()?);
        if from < until {
            file.fill_zeros(from, until)?;
        }
        file.sync_data()?;
        Ok(())
    }

    /// Opens segment `base`, checking its header.
    ///
    /// # Errors
    /// `Io`; `Corruption` if the header is invalid.
    pub(crate) fn open_segment(&self, base: Offset) -> Result<Segment> {
        Segment::open(
            self.fs.as_ref(),
            &self.path,
            base,
            self.options.index_interval_bytes,
        )
    }

    /// The base offsets of the segment files, sorted.
    ///
    /// # Errors
    /// `Io`.
    pub(crate) fn segment_bases(&self) -> Result<Vec<Offset>> {
        let mut bases: Vec<Offset> = self
            .fs
            .list(&self.path)?
            .iter()
            .filter_map(|e| parse_file_name(&e.name, "log"))
            .collect();
        bases.sort_unstable();
        Ok(bases)
    }

    /// Creates segment `base` (header written and synced, directory synced).
    ///
    /// # Errors
    /// `Io`.
    pub(crate) fn create_segment(&self, base: Offset) -> Result<()> {
        let prepared = self.path.join(PREPARED_FILE);
        let f = self.fs.open(&prepared, OpenMode::CreateOrTruncate)?;
        Segment::init_file(
            f.as_ref(),
            base,
            self.options.segment_size_bytes,
            self.options.preallocation,
        )?;
        drop(f);
        self.fs
            .rename(&prepared, &self.path.join(segment_file_name(base)))?;
        self.sync()
    }

    /// Lowers the recovery point to `(cut_offset, segment, position)` if it
    /// is above it. Everything below the old recovery point was durable, so
    /// the lower one is true as well.
    fn lower_recovery_point(
        &self,
        cut_offset: Offset,
        segment: Offset,
        position: u64,
    ) -> Result<()> {
        if let Some(rp) = self.dd.checkpoints().recovery_point {
            let beyond = rp.offset > cut_offset
                || rp.segment > segment
                || (rp.segment == segment && rp.position > position);
            if beyond {
                self.dd.write_recovery_point(RecoveryPoint {
                    offset: cut_offset,
                    segment,
                    position,
                })?;
            }
        }
        Ok(())
    }

    /// The idempotent part of a suffix truncation: lower the recovery point,
    /// remove every segment after the cut's, cut it at its position,
    /// zero-fill, write the replacement there, sync.
    ///
    /// # Errors
    /// `Io`, `Checkpoint`.
    pub(crate) fn redo_cut(&self, cut: Cut<'_>) -> Result<()> {
        let end = cut.position + cut.replacement.map_or(0, |r| r.len() as u64);
        self.lower_recovery_point(cut.offset, cut.segment, end)?;
        let later: Vec<Offset> = self
            .segment_bases()?
            .into_iter()
            .filter(|&b| b > cut.segment)
            .collect();
        for base in later.iter().rev() {
            self.retire_segment(*base)?;
        }
        self.remove_if_present(&index_file_name(cut.segment))?;
        self.sync()?;
        let file = self.fs.open(
            &self.path.join(segment_file_name(cut.segment)),
            OpenMode::ReadWrite,
        )?;
        file.set_len(cut.position)?;
        preallocate(
            file.as_ref(),
            self.options.segment_size_bytes,
            self.options.preallocation,
        )?;
        if let Some(batch) = cut.replacement {
            file.write_all_at(batch, cut.position)?;
        }
        file.sync_data()?;
        Ok(())
    }

    /// A cut that never loses kept bytes: if the cut is not on a page
    /// boundary (or a batch is cut), the page's kept bytes and the
    /// replacement are saved in an intent first, the cut is made at the page
    /// boundary and the bytes written back, then the intent is removed. A
    /// crash or a torn page in between is repaired by recovery redoing the
    /// intent.
    ///
    /// # Errors
    /// `Io`, `Checkpoint`.
    pub(crate) fn cut_page_safe(&self, cut: Cut<'_>) -> Result<()> {
        let page_start = cut.position / PAGE_BYTES * PAGE_BYTES;
        if page_start == cut.position && cut.replacement.is_none() {
            return self.redo_cut(cut);
        }
        let file = self.fs.open(
            &self.path.join(segment_file_name(cut.segment)),
            OpenMode::Read,
        )?;
        // Lossless: less than a page.
        let mut bytes = vec![0u8; usize::try_from(cut.position - page_start).unwrap_or(0)];
        file.read_exact_at(&mut bytes, page_start)?;
        drop(file);
        if let Some(r) = cut.replacement {
            bytes.extend_from_slice(r);
        }
        intent::write(
            self.fs.as_ref(),
            &self.path,
            &Intent::Cut {
                segment: cut.segment,
                position: page_start,
                bytes: bytes.clone(),
                offset: cut.offset,
            },
        )?;
        self.redo_cut(Cut {
            segment: cut.segment,
            position: page_start,
            replacement: Some(&bytes),
            offset: cut.offset,
        })?;
        intent::remove(self.fs.as_ref(), &self.path)
    }

    /// The idempotent part of a full truncation: the log restarts, empty, at
    /// `start`.
    ///
    /// # Errors
    /// `Io`, `Checkpoint`.
    pub(crate) fn redo_full(&self, start: Offset, purged_epoch: Option<Epoch>) -> Result<()> {
        self.dd.write_log_start_offset(start, purged_epoch)?;
        self.dd.write_epoch_map(&EpochMap::new())?;
        for e in self.fs.list(&self.path)? {
            let ours = parse_file_name(&e.name, "log").is_some()
                || parse_file_name(&e.name, "index").is_some()
                || e.name == PREPARED_FILE;
            if ours {
                self.remove_if_present(&e.name)?;
            }
        }
        self.sync()?;
        self.create_segment(start)?;
        self.dd.write_recovery_point(RecoveryPoint {
            offset: start,
            segment: start,
            position: SEGMENT_HEADER_BYTES as u64,
        })?;
        // Nothing below `start` is left to commit; nothing above it exists.
        self.dd.write_high_watermark(start)?;
        Ok(())
    }

    /// Writes the clean-close marker (after the clean checkpoint is durable).
    ///
    /// # Errors
    /// `Io`.
    pub(crate) fn write_clean_marker(&self) -> Result<()> {
        let f = self
            .fs
            .open(&self.path.join(CLEAN_FILE), OpenMode::CreateOrTruncate)?;
        f.write_all_at(&CLEAN_CONTENT, 0)?;
        f.sync_data()?;
        drop(f);
        self.sync()
    }
}

/// Removes `path`, treating "already gone" as done.
///
/// # Errors
/// `Io`.
pub(crate) fn remove_if_present(fs: &dyn FileSystem, path: &Path) -> Result<bool> {
    match fs.remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e.into()),
    }
}
