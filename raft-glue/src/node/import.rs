//! The explicit migration of a one-group directory of the previous layout
//! (a store: a log of its own, small files beside it) into a group of a
//! node: [`Node::import_store`]. The previous layout has no runtime type any
//! more; this module reads it straight from its parts.

use std::path::Path;
use std::sync::Arc;

use quorumlog_checkpoint::{DataDir, Epoch, Offset, SharedFs};
use quorumlog_log::{walk_records, DurableLog, LogOptions, SyncPolicy, WalkBatches};
use quorumlog_snapshot::SnapshotStore;

use super::record::{Header, Kind};
use super::Node;
use crate::error::{Error, Result};
use crate::{Group, Identity};

/// What an import copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Entries copied (control entries, a `KRaft` replica's, included).
    pub entries: u64,
    /// Whether the latest snapshot was copied.
    pub snapshot: bool,
}

/// A directory of the previous layout, open for reading.
struct Previous {
    dd: Arc<DataDir>,
    log: DurableLog,
    snapshots: SnapshotStore,
}

impl Previous {
    /// Opens it: its identity must be `expect`'s; its log recovers its
    /// tail as the previous open did (a torn batch past the last sync is
    /// cut).
    fn open(fs: &SharedFs, dir: &Path, expect: &Identity) -> Result<Previous> {
        if super::is_node_dir(fs, dir) {
            return Err(Error::WrongLayout {
                path: dir.to_path_buf(),
                found: "a node's directory",
                expected: "a one-group directory of the previous layout",
            });
        }
        let dd = Arc::new(DataDir::open(fs.clone(), dir, &expect.open_options())?);
        let snapshots = SnapshotStore::open(fs.clone(), &dd.snapshots_dir())?;
        let log = DurableLog::open(Arc::clone(&dd), LogOptions::default(), SyncPolicy::Never)?;
        Ok(Previous { dd, log, snapshots })
    }

    /// The entry below the log start, if it is known: the log's purge
    /// point, or the snapshot ending at the start.
    fn last_purged(&self) -> Option<(Offset, Epoch)> {
        let start = self.log.log_start_offset();
        self.log.last_purged().or_else(|| {
            let below = Offset(start.0.checked_sub(1)?);
            self.snapshots
                .list()
                .into_iter()
                .find(|s| s.id.end_offset == start)
                .map(|s| (below, s.id.epoch))
        })
    }

    /// Copies the log's entries into `group` (`Group::append_runs`: a
    /// batch per run of one epoch and kind, within the batch limit).
    /// Returns how many.
    fn copy_entries(&self, group: &Group) -> Result<u64> {
        let (start, end) = (self.log.log_start_offset(), self.log.log_end_offset());
        let mut at = start;
        while at < end {
            let walked = walk_records(&self.log, at, end, 4 << 20, WalkBatches::All)?;
            let runs: Vec<(Offset, Epoch, bool, &[u8])> = walked
                .records
                .iter()
                .map(|r| (r.offset, r.epoch, r.control, r.bytes.as_slice()))
                .collect();
            if !runs.is_empty() {
                group.append_runs(&runs)?;
            }
            if walked.next <= at {
                break;
            }
            at = walked.next;
        }
        group.wait_durable(Offset(u64::MAX))?;
        Ok(at.0 - start.0)
    }

    /// The latest snapshot's file, whole.
    fn latest_snapshot_file(&self) -> Result<Option<(quorumlog_snapshot::SnapshotId, Vec<u8>)>> {
        let Some(latest) = self.snapshots.latest().map(|s| s.id) else {
            return Ok(None);
        };
        let mut out = Vec::new();
        loop {
            let chunk = self
                .snapshots
                .read_chunk(latest, out.len() as u64, 1 << 20)?;
            if chunk.is_empty() {
                return Ok(Some((latest, out)));
            }
            out.extend_from_slice(&chunk);
        }
    }
}

impl Node {
    /// Copies the one-group directory `dir` of the previous layout (whose
    /// identity must be `expect`'s) into new group `id`: its log (offsets,
    /// epochs, bytes, control flags), its log start and the epoch before
    /// it, its election state, its application metadata, its high
    /// watermark and its latest snapshot. Each step is durable; the old
    /// directory's files are only read (its log's open may cut a torn tail,
    /// as its own open did). If it fails (a crash, a full disk), drop the
    /// group and import again.
    ///
    /// # Errors
    /// `WrongLayout` for a node's directory; `GroupExists`,
    /// `GroupDropped`; the old directory's open and read errors; the
    /// node's.
    pub fn import_store(
        &self,
        id: u64,
        fs: &SharedFs,
        dir: &Path,
        expect: &Identity,
    ) -> Result<ImportReport> {
        let old = Previous::open(fs, dir, expect)?;
        let start = old.log.log_start_offset();
        self.create_group(id, start)?;
        let group = Arc::new(self.group(id)?);
        if let Some((_, epoch)) = old.last_purged().filter(|(o, _)| o.0 + 1 == start.0) {
            let h = Header {
                kind: Kind::Reset,
                group: id,
                offset: start.0,
                epoch: epoch.0,
                control: false,
            };
            self.inner.control(h, None, |_| Ok(()))?;
        }
        let mut report = ImportReport {
            entries: old.copy_entries(&group)?,
            snapshot: false,
        };
        group.persist_quorum_state(&old.dd.quorum_state())?;
        if let Some(meta) = old.dd.app_metadata() {
            group.write_app_metadata(&meta)?;
        }
        if let Some((latest, file)) = old.latest_snapshot_file()? {
            let mut install = group.install_snapshot(latest, file.len() as u64)?;
            install.write_chunk(0, &file)?;
            install.finish()?;
            report.snapshot = true;
        }
        if let Some(hw) = old.log.high_watermark() {
            group.set_high_watermark(hw.max(group.extent().start))?;
            group.wait_durable(Offset(u64::MAX))?;
        }
        old.log.close()?;
        Ok(report)
    }
}
