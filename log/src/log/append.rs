//! Appends (leader and follower), segment rolls and the preparation of the
//! next segment file.
//!
//! Every check happens before anything is written: a rejected append leaves
//! the log untouched. Appends return before the data is durable; it is
//! readable at once.

use quorumlog_checkpoint::{Epoch, Offset};
use std::thread::JoinHandle;

use quorumlog_io::{File, OpenMode};

use crate::batch::{encoded_len, BatchEncoder};
use crate::dir::PREPARED_FILE;
use crate::error::{Error, Result};
use crate::format::{
    align_up, segment_file_name, BatchHeader, Salt, PAGE_BYTES, SEGMENT_HEADER_BYTES,
};
use crate::log::Log;
use crate::options::{SegmentPreparation, WriteAlignment};
use crate::segment::{preallocate, Segment};

/// The next segment file, prepared ahead of the roll that needs it.
#[derive(Debug)]
pub(crate) enum NextSegment {
    /// Prepared and synced.
    Ready(Box<dyn File>),
    /// Being prepared on a background thread.
    Preparing(JoinHandle<std::io::Result<Box<dyn File>>>),
    /// A recycled file of the pool (written blocks already).
    Pooled(std::path::PathBuf),
}

/// A sync round's group staged for a direct write outside the log's lock
/// ([`Log::prepare_direct`]).
#[derive(Debug)]
pub(crate) struct PreparedWrite {
    file: std::sync::Arc<dyn File>,
    buf: Vec<u8>,
    skip: usize,
    len: usize,
    start: u64,
    zeros_to: u64,
}

impl PreparedWrite {
    /// The durable write (`O_DIRECT | O_DSYNC`); the caller holds no lock
    /// readers need.
    ///
    /// # Errors
    /// The write's.
    pub(crate) fn write(&self) -> std::io::Result<()> {
        let window = self
            .buf
            .get(self.skip..self.skip + self.len)
            .unwrap_or_default();
        self.file.write_all_at(window, self.start)
    }
}

impl PreparedWrite {
    /// Starts the durable write and returns while the device may still be
    /// writing ([`quorumlog_io::File::start_write_at`]): a sync round's
    /// next write, submitted before the previous round's waiters are woken.
    pub(crate) fn start(self) -> StartedWrite {
        let PreparedWrite {
            file,
            buf,
            skip,
            len,
            start,
            zeros_to,
        } = self;
        let ticket = file.start_write_at(buf, skip..skip + len, start);
        StartedWrite {
            ticket,
            file,
            skip,
            len,
            start,
            zeros_to,
        }
    }
}

/// A [`PreparedWrite`] in flight ([`PreparedWrite::start`]).
#[derive(Debug)]
pub(crate) struct StartedWrite {
    ticket: quorumlog_io::WriteTicket,
    file: std::sync::Arc<dyn File>,
    skip: usize,
    len: usize,
    start: u64,
    zeros_to: u64,
}

impl StartedWrite {
    /// Waits for the write; the prepared write back (for
    /// [`Log::publish_direct`]) and how the write went.
    pub(crate) fn finish(self) -> (PreparedWrite, std::io::Result<()>) {
        let StartedWrite {
            ticket,
            file,
            skip,
            len,
            start,
            zeros_to,
        } = self;
        let (buf, result) = file.finish_write(ticket);
        (
            PreparedWrite {
                file,
                buf,
                skip,
                len,
                start,
                zeros_to,
            },
            result,
        )
    }
}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record appended.
    pub base_offset: Offset,
    /// Offset after the last record appended (the new log end).
    pub next_offset: Offset,
}

/// A batch replicated from the leader, with the offsets and epoch it has in
/// the leader's log.
#[derive(Debug, Clone, Copy)]
pub struct FollowerBatch<'a, R: AsRef<[u8]>> {
    /// Offset of the first record.
    pub base_offset: Offset,
    /// The leader epoch of the records.
    pub epoch: Epoch,
    /// The records.
    pub records: &'a [R],
}

impl Log {
    /// Appends `records` as one batch in `epoch`, assigning the next offsets.
    /// Returns before the batch is durable (see [`Log::flush`]).
    ///
    /// # Errors
    /// `EmptyBatch`, `BatchTooLarge`, `EpochRegression`, `OffsetOverflow`
    /// (nothing written);
    /// `Io` (which poisons the log); `Poisoned`.
    pub fn append_as_leader<R: AsRef<[u8]>>(
        &mut self,
        epoch: Epoch,
        records: &[R],
    ) -> Result<AppendInfo> {
        self.check_poisoned()?;
        self.check_epoch(epoch)?;
        self.check_size(records)?;
        let base = self.log_end_offset();
        self.guard(|log| log.write_batch(base, epoch, records))?;
        Ok(AppendInfo {
            base_offset: base,
            next_offset: self.log_end_offset(),
        })
    }

    /// Appends batches replicated from the leader. They must continue the
    /// log exactly (the first at the log end, each at the previous one's
    /// end) and their epochs must not decrease. All are checked before any is
    /// written.
    ///
    /// # Errors
    /// `NonContiguous`, `EpochRegression`, `EmptyBatch`, `BatchTooLarge`,
    /// `OffsetOverflow` (nothing written); `Io` (which poisons the log); `Poisoned`.
    pub fn append_as_follower<R: AsRef<[u8]>>(
        &mut self,
        batches: &[FollowerBatch<'_, R>],
    ) -> Result<AppendInfo> {
        self.check_poisoned()?;
        let start = self.log_end_offset();
        let mut expected = start;
        let mut epoch = self.last_epoch();
        for b in batches {
            if b.base_offset != expected {
                return Err(Error::NonContiguous {
                    expected,
                    found: b.base_offset,
                });
            }
            if let Some(last) = epoch {
                if b.epoch < last {
                    return Err(Error::EpochRegression {
                        current: last,
                        proposed: b.epoch,
                    });
                }
            }
            self.check_size(b.records)?;
            epoch = Some(b.epoch);
            expected = crate::batch::next_offset_after(expected, b.records.len() as u64)?;
        }
        self.guard(|log| {
            for b in batches {
                log.write_batch(b.base_offset, b.epoch, b.records)?;
            }
            Ok(())
        })?;
        Ok(AppendInfo {
            base_offset: start,
            next_offset: self.log_end_offset(),
        })
    }

    fn check_epoch(&self, epoch: Epoch) -> Result<()> {
        match self.last_epoch() {
            Some(last) if epoch < last => Err(Error::EpochRegression {
                current: last,
                proposed: epoch,
            }),
            _ => Ok(()),
        }
    }

    fn check_size<R: AsRef<[u8]>>(&self, records: &[R]) -> Result<()> {
        if records.is_empty() {
            return Err(Error::EmptyBatch);
        }
        let bytes = encoded_len(records);
        let max = self
            .options()
            .max_batch_bytes
            .min(crate::batch::MAX_BATCH_BYTES);
        if bytes > max {
            return Err(Error::BatchTooLarge { bytes, max });
        }
        Ok(())
    }

    /// Encodes and writes one batch at the log end, rolling first if it does
    /// not fit in the active segment.
    fn write_batch<R: AsRef<[u8]>>(
        &mut self,
        base: Offset,
        epoch: Epoch,
        records: &[R],
    ) -> Result<()> {
        let mut buf = std::mem::take(&mut self.scratch);
        let header =
            BatchEncoder::from_options(self.options()).encode(&mut buf, base, epoch, records);
        let result = header.and_then(|mut header| {
            if self.active().end_position + buf.len() as u64 > self.options().segment_size_bytes {
                self.roll()?;
            }
            self.active_mut().append(&mut buf, &mut header)?;
            // The epoch map in memory is authoritative; it is made durable
            // with every recovery point, and recovery rebuilds it from the
            // batches after the recovery point.
            self.epochs.assign(epoch, base)?;
            self.maybe_prepare_next()
        });
        self.scratch = buf;
        result
    }

    /// Writes batches encoded ahead (unsalted, in offset order, continuing
    /// the log), as few writes as segment boundaries allow: one for a group
    /// of small batches from many writers. With page alignment each write
    /// carries the zeros up to the next page boundary, since a sync usually
    /// follows: the padding is then written once, and a write that starts a
    /// page covers it whole (no read of an uncached page first). With
    /// `direct` (a sync follows at once) and `TailWrites::Direct`, a write
    /// that starts a page goes straight to the device, durable on return.
    ///
    /// # Errors
    /// `Io` (which poisons the log); `Poisoned`.
    ///
    /// # Panics
    /// If the batches do not continue the log (a bug in the caller).
    pub(crate) fn append_encoded(
        &mut self,
        batches: &mut [(BatchHeader, Vec<u8>)],
        direct: bool,
    ) -> Result<()> {
        self.guard(|log| {
            let size = log.options().segment_size_bytes;
            let pad = log.options().write_alignment == WriteAlignment::Page;
            let mut rest = batches;
            while let Some((first, _)) = rest.first() {
                assert_eq!(
                    first.base_offset,
                    log.log_end_offset(),
                    "batches continue the log"
                );
                // As many batches as fit in the active segment.
                let start = log.active().end_position;
                let mut end = start;
                let fit = rest
                    .iter()
                    .take_while(|(_, b)| {
                        end += b.len() as u64;
                        end <= size
                    })
                    .count();
                if fit == 0 {
                    log.roll()?;
                    continue;
                }
                let (group, later) = std::mem::take(&mut rest).split_at_mut(fit);
                let zeros_to = if pad { align_up(end).min(size) } else { end };
                log.write_group(group, start, zeros_to, direct)?;
                for (h, b) in group.iter() {
                    log.active_mut().note_appended(b.len() as u64, h);
                    log.epochs.assign(h.epoch, h.base_offset)?;
                }
                let seg = log.active_mut();
                seg.zeros_to = seg.zeros_to.max(zeros_to);
                log.maybe_prepare_next()?;
                rest = later;
            }
            Ok(())
        })
    }

    /// For a sync round under `TailWrites::Direct`: if the whole queue
    /// `batches` fits in the active segment and its write starts a page,
    /// salts the batches and stages them (with the padding) in the aligned
    /// buffer, changing nothing in the log, so the caller can make the
    /// durable write **without the log's lock** (readers never wait behind
    /// it) and then [`Log::publish_direct`] it. `None` when the queue must
    /// take the ordinary path ([`Log::append_encoded`]).
    ///
    /// # Errors
    /// `Io` opening the direct handle (which poisons); `Poisoned`.
    ///
    /// # Panics
    /// If the batches do not continue the log (a bug in the caller).
    pub(crate) fn prepare_direct(
        &mut self,
        batches: &mut [(BatchHeader, Vec<u8>)],
    ) -> Result<Option<PreparedWrite>> {
        self.guard(|log| {
            let Some((first, _)) = batches.first() else {
                return Ok(None);
            };
            assert_eq!(
                first.base_offset,
                log.log_end_offset(),
                "batches continue the log"
            );
            let size = log.options().segment_size_bytes;
            let start = log.active().end_position;
            let end = start + batches.iter().map(|(_, b)| b.len() as u64).sum::<u64>();
            let page = log.options().write_alignment == WriteAlignment::Page;
            if !page || start % PAGE_BYTES != 0 || end > size {
                return Ok(None);
            }
            let Some(file) = log.direct_handle()? else {
                return Ok(None);
            };
            let salt = log.active().salt;
            for (h, b) in batches.iter_mut() {
                salt.restamp(Salt::NONE, h, b);
            }
            let zeros_to = align_up(end).min(size);
            // Lossless: within a segment of at most 2 GiB.
            let len = usize::try_from(zeros_to - start).unwrap_or(0);
            let mut buf = log.take_direct_buf();
            let skip = stage_aligned(&mut buf, batches, len);
            Ok(Some(PreparedWrite {
                file,
                buf,
                skip,
                len,
                start,
                zeros_to,
            }))
        })
    }

    /// Makes a prepared direct write part of the log once it is durable
    /// (the batches of [`Log::prepare_direct`], in the same order).
    ///
    /// # Errors
    /// `Io` preparing the next segment (which poisons); `Poisoned`.
    pub(crate) fn publish_direct(
        &mut self,
        prepared: PreparedWrite,
        batches: &[(BatchHeader, Vec<u8>)],
    ) -> Result<()> {
        let PreparedWrite { buf, zeros_to, .. } = prepared;
        self.give_direct_buf(buf);
        self.guard(|log| {
            for (h, b) in batches {
                log.active_mut().note_appended(b.len() as u64, h);
                log.epochs.assign(h.epoch, h.base_offset)?;
            }
            let seg = log.active_mut();
            seg.zeros_to = seg.zeros_to.max(zeros_to);
            log.maybe_prepare_next()
        })
    }

    /// Writes `group` (batches that fit the active segment) at `start`,
    /// salted for the segment, with zeros after it up to `zeros_to`: one
    /// write, direct when allowed and it starts a page, else buffered.
    fn write_group(
        &mut self,
        group: &mut [(BatchHeader, Vec<u8>)],
        start: u64,
        zeros_to: u64,
        direct: bool,
    ) -> Result<()> {
        let salt = self.active().salt;
        for (h, b) in group.iter_mut() {
            salt.restamp(Salt::NONE, h, b);
        }
        // Lossless: within a segment of at most 2 GiB.
        let write_len = usize::try_from(zeros_to - start).unwrap_or(0);
        let pad = self.options().write_alignment == WriteAlignment::Page;
        let direct = if direct && pad && start % PAGE_BYTES == 0 {
            self.direct_handle()?
        } else {
            None
        };
        if let Some(direct) = direct {
            // Straight to the device, durable on return: the group and its
            // padding, staged in an aligned buffer.
            let mut buf = self.take_direct_buf();
            let skip = stage_aligned(&mut buf, group, write_len);
            let window = buf.get(skip..skip + write_len).unwrap_or_default();
            let r = direct.write_all_at(window, start);
            self.give_direct_buf(buf);
            return Ok(r?);
        }
        self.active_mut().buffered_since_sync = true;
        if let [(_, one)] = group {
            // No copy: the padding goes after the batch in its own buffer
            // (the encoder reserved a page for it).
            let len = one.len();
            one.resize(write_len, 0);
            let r = self.active().file.write_all_at(one, start);
            one.truncate(len);
            return Ok(r?);
        }
        let mut joined = Vec::with_capacity(write_len);
        for (_, b) in group.iter() {
            joined.extend_from_slice(b);
        }
        joined.resize(write_len, 0);
        self.active().file.write_all_at(&joined, start)?;
        Ok(())
    }

    /// Creates and preallocates the next segment file once the active one is
    /// `prepare_next_segment_percent` full (on a background thread by
    /// default), so a roll only writes a header.
    fn maybe_prepare_next(&mut self) -> Result<()> {
        if self.prepared.is_some() {
            return Ok(());
        }
        let threshold = self.options().segment_size_bytes
            * u64::from(self.options().prepare_next_segment_percent)
            / 100;
        if self.active().end_position < threshold {
            return Ok(());
        }
        if let Some(pooled) = self.dir.pooled_file()? {
            // The roll reuses a recycled file: nothing to prepare.
            self.prepared = Some(NextSegment::Pooled(pooled));
            return Ok(());
        }
        let fs = self.dir.fs().clone();
        let path = self.dir.path().join(PREPARED_FILE);
        let size = self.options().segment_size_bytes;
        let prealloc = self.next_preallocation();
        let job = move || -> std::io::Result<Box<dyn File>> {
            let f = fs.open(&path, OpenMode::CreateOrTruncate)?;
            preallocate(f.as_ref(), size, prealloc).map_err(|e| match e {
                Error::Io(e) => e,
                other => std::io::Error::other(other.to_string()),
            })?;
            Ok(f)
        };
        self.prepared = Some(match self.options().segment_preparation {
            SegmentPreparation::Inline => NextSegment::Ready(job()?),
            SegmentPreparation::Background => NextSegment::Preparing(
                std::thread::Builder::new()
                    .name("quorumlog-prepare".into())
                    .spawn(job)?,
            ),
        });
        Ok(())
    }

    /// Seals the active segment (sync, index file) and opens a new one at
    /// the log end, then records a recovery point at its start.
    pub(crate) fn roll(&mut self) -> Result<()> {
        let base = self.log_end_offset();
        tracing::debug!(target: "quorumlog::log", base = base.0, "segment rolled");
        assert!(
            base > self.active().base,
            "a roll never leaves an empty segment"
        );
        // 1. Everything in the sealed segment is durable before a later
        //    segment exists: recovery relies on it to call an invalid batch
        //    in a sealed segment corruption, never a torn tail.
        self.active().file.sync_data()?;
        self.flushed = base;
        self.active()
            .write_index(self.dir.fs().as_ref(), self.dir.path())?;
        // 2. The new segment: prepared, recycled or new file → header page
        //    (fresh salt) → rename → dir sync.
        //    A recycled file first (a prepared one stays for a later roll).
        let mut from_path = self.dir.path().join(PREPARED_FILE);
        let pooled = match self.prepared.take() {
            Some(NextSegment::Pooled(p)) => Some(p),
            other => {
                self.prepared = other;
                self.dir.pooled_file()?
            }
        };
        let file = if let Some(pooled) = pooled {
            from_path = pooled;
            self.recycled += 1;
            self.dir.fs().open(&from_path, OpenMode::ReadWrite)?
        } else {
            match self.prepared.take() {
                Some(NextSegment::Ready(f)) => f,
                Some(NextSegment::Preparing(job)) => job
                    .join()
                    .map_err(|_| std::io::Error::other("segment preparation panicked"))??,
                Some(NextSegment::Pooled(_)) | None => {
                    self.dir.fs().open(&from_path, OpenMode::CreateOrTruncate)?
                }
            }
        };
        Segment::init_file(
            file.as_ref(),
            base,
            self.options().segment_size_bytes,
            self.next_preallocation(),
        )?;
        drop(file);
        self.dir
            .fs()
            .rename(&from_path, &self.dir.path().join(segment_file_name(base)))?;
        self.dir.sync()?;
        let seg = self.dir.open_segment(base)?;
        debug_assert_eq!(seg.end_position, SEGMENT_HEADER_BYTES as u64);
        self.active_mut().index.shrink();
        // Sealed: no more tail writes, direct or not.
        self.active_mut().direct = None;
        self.segments.push(seg);
        self.syncs_in_segment = 0;
        self.align_end();
        // 3. Recovery after a crash now scans the new segment only.
        self.write_recovery_point_at_end()?;
        if let Some(hw) = self.high_watermark {
            self.dir.dd().write_high_watermark(hw)?;
        }
        Ok(())
    }
}

/// Stages `batches`, then zeros up to `len` bytes, in a window of `buf`
/// whose address is aligned for direct I/O (`buf` grows as needed and is
/// kept for the next write). Returns where the window starts in `buf`.
fn stage_aligned(buf: &mut Vec<u8>, batches: &[(BatchHeader, Vec<u8>)], len: usize) -> usize {
    // Lossless: 4 KiB.
    let align = usize::try_from(quorumlog_io::DIRECT_ALIGN).unwrap_or(4096);
    if buf.len() < len + align {
        *buf = vec![0u8; len + align];
    }
    let skip = buf.as_ptr().align_offset(align).min(align);
    let window = quorumlog_io::codec::slice_mut(buf, skip..skip + len);
    let mut at = 0;
    for (_, b) in batches {
        quorumlog_io::codec::copy_into(window, at, b);
        at += b.len();
    }
    let rest = window.len();
    quorumlog_io::codec::slice_mut(window, at..rest).fill(0);
    skip
}
