//! The checkpoints a log writes (the clean close's, the recovery point
//! after recovery and at the end), the page alignment before a sync, and
//! the space it reserves.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

impl Log {
    /// With `WriteAlignment::Page`, moves the active segment's end to the
    /// next page boundary, so the page holding the last synced bytes (or the
    /// segment header) is never written again. The bytes skipped are zeros,
    /// written before the sync ([`Segment::pad`], or the header page).
    pub(crate) fn align_end(&mut self) {
        if self.options().write_alignment != WriteAlignment::Page {
            return;
        }
        self.syncs_in_segment += 1;
        let size = self.options().segment_size_bytes;
        let seg = self.active_mut();
        // Also for an empty segment: its header page is synced data.
        seg.end_position = walk::padded_end(seg.end_position).min(size);
    }

    /// Writes the active segment's index file and the checkpoints that let
    /// the next open skip scanning: epoch map, high watermark, then the
    /// recovery point at the log end. Everything is flushed first.
    pub(crate) fn write_clean_checkpoint(&mut self) -> Result<()> {
        self.flush()?;
        self.guard(|log| {
            log.active()
                .write_index(log.dir.fs().as_ref(), log.dir.path())?;
            log.dir.sync()?;
            log.write_recovery_point_at_end()?;
            if let Some(hw) = log.high_watermark {
                log.dir.dd().write_high_watermark(hw)?;
            }
            Ok(())
        })
    }

    /// After an unclean stop: what was verified may sit in the page cache
    /// only (a process crash without power loss), so it is made durable;
    /// then the index file and checkpoints that let the next open start
    /// from here. On a full disk those wait (a warning, and the report
    /// says so): the directory is then as a crash just before them left
    /// it, so the next open scans the same tail and finds the same end
    /// (recovery is idempotent), and a node crashed on a full disk opens
    /// on it.
    pub(super) fn checkpoint_after_recovery(&mut self) -> Result<()> {
        self.flush()?;
        self.check_poisoned()?;
        let r = (|log: &mut Self| -> Result<()> {
            let index = log
                .active()
                .write_index(log.dir.fs().as_ref(), log.dir.path());
            match index {
                // An index file is checked when loaded (a partial one is
                // rebuilt from the segment): on a full disk it waits too.
                Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::StorageFull => {
                    let path = log.dir.path().join(index_file_name(log.active().base));
                    let _ = log.dir.fs().remove_file(&path);
                    return Err(Error::Checkpoint(quorumlog_checkpoint::Error::NoSpace {
                        path,
                        bytes: 0,
                    }));
                }
                r => r?,
            }
            log.dir.sync()?;
            log.write_recovery_point_at_end()?;
            if let Some(hw) = log.high_watermark {
                log.dir.dd().write_high_watermark(hw)?;
            }
            Ok(())
        })(self);
        match r {
            Err(Error::Checkpoint(quorumlog_checkpoint::Error::NoSpace { path, .. })) => {
                tracing::warn!(
                    target: "quorumlog::log",
                    file = %path.display(),
                    "disk full: the recovery checkpoint waits (the next open scans this tail again); writes wait for space"
                );
                self.report.checkpoint_deferred = true;
                self.space_short = true;
                Ok(())
            }
            Err(e) => {
                if e.is_io() {
                    self.poison(e.failure());
                }
                Err(e)
            }
            Ok(()) => Ok(()),
        }
    }

    /// Before a log opened on a full disk takes writes: the deferred
    /// recovery checkpoint written, the active segment allocated to its
    /// full size and the next segment prepared, so that nothing a write
    /// needs later takes new space but a few small files. Refused with
    /// `NoSpace` (nothing poisoned, nothing left behind) until the space
    /// is there.
    ///
    /// # Errors
    /// `NoSpace`; `Io` (which poisons).
    pub(crate) fn reserve_space(&mut self) -> Result<()> {
        let size = self.options().segment_size_bytes;
        let needed = size.saturating_mul(2);
        let full = |e: &Error| match e {
            Error::Io(io) => io.kind() == std::io::ErrorKind::StorageFull,
            Error::Checkpoint(quorumlog_checkpoint::Error::NoSpace { .. }) => true,
            _ => false,
        };
        let active = self.active().file.allocate(size).map_err(Error::from);
        match active {
            Err(e) if full(&e) => return Err(Error::NoSpace { needed }),
            r => self.guard(|_| r)?,
        }
        if self.prepared.is_none() {
            let path = self.dir.path().join(crate::dir::PREPARED_FILE);
            let fs = self.dir.fs().clone();
            let made = fs
                .open(&path, OpenMode::CreateOrTruncate)
                .map_err(Error::from)
                .and_then(|f| {
                    let prealloc = self.next_preallocation();
                    crate::segment::preallocate(f.as_ref(), size, prealloc)?;
                    Ok(f)
                });
            match made {
                Ok(f) => self.prepared = Some(append::NextSegment::Ready(f)),
                Err(e) if full(&e) => {
                    let _ = fs.remove_file(&path);
                    return Err(Error::NoSpace { needed });
                }
                Err(e) => return self.guard(|_| Err(e)),
            }
        }
        self.space_short = false;
        self.checkpoint_after_recovery()?;
        if self.space_short {
            return Err(Error::NoSpace { needed });
        }
        Ok(())
    }

    /// Whether writes wait for space ([`Log::reserve_space`]).
    pub(crate) fn space_short(&self) -> bool {
        self.space_short
    }

    /// Writes the epoch map, then a recovery point at the log end. The log
    /// must be flushed.
    pub(crate) fn write_recovery_point_at_end(&mut self) -> Result<()> {
        let seg = self.active();
        assert_eq!(
            self.flushed, seg.end_offset,
            "a recovery point covers durable data only"
        );
        let rp = RecoveryPoint {
            offset: seg.end_offset,
            segment: seg.base,
            position: seg.end_position,
        };
        self.dir.dd().write_epoch_map(&self.epochs)?;
        self.dir.dd().write_recovery_point(rp)?;
        Ok(())
    }
}
