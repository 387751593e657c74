//! The explicit migration of a one-group store's directory into a group
//! of a node: [`Node::import_store`].

use quorumlog_checkpoint::Offset;

use super::record::{Header, Kind};
use super::Node;
use crate::error::{Error, Result};
use crate::store::{Isolation, Store};

/// What an import copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Entries copied.
    pub entries: u64,
    /// Whether the latest snapshot was copied.
    pub snapshot: bool,
}

impl Node {
    /// Copies the store open as `store` (a one-group directory of the
    /// previous layout) into new group `id`: its log (offsets, epochs and
    /// bytes), its log start and the epoch before it, its election state,
    /// its application metadata, its high watermark and its latest
    /// snapshot. Each step is durable; the store is only read. If it
    /// fails (a crash, a full disk), drop the group and import again.
    ///
    /// # Errors
    /// `GroupExists`, `GroupDropped`; `ImportRefused` for a store holding
    /// control records (a `KRaft` wing's, which a group does not keep);
    /// the store's read errors; the node's.
    pub fn import_store(&self, id: u64, store: &Store) -> Result<ImportReport> {
        let (start, end) = (store.log_start_offset(), store.log_end_offset());
        self.create_group(id, start)?;
        let group = std::sync::Arc::new(self.group(id)?);
        if let Some((_, epoch)) = store.last_purged().filter(|(o, _)| o.0 + 1 == start.0) {
            let h = Header {
                kind: Kind::Reset,
                group: id,
                offset: start.0,
                epoch: epoch.0,
            };
            self.inner.control(h, None, |_| Ok(()))?;
        }
        let mut report = ImportReport::default();
        let mut at = start;
        while at < end {
            let entries = store.read_entries(at, end, 4 << 20, Isolation::Uncommitted)?;
            if entries.iter().any(|e| e.control) {
                return Err(Error::ImportRefused {
                    what: "the store holds control records (a KRaft replica's)",
                });
            }
            // One append per run of one epoch.
            let mut i = 0;
            while let Some(first) = entries.get(i) {
                let run: Vec<&[u8]> = entries
                    .iter()
                    .skip(i)
                    .take_while(|e| e.epoch == first.epoch)
                    .map(|e| e.bytes.as_slice())
                    .collect();
                let n = run.len();
                for chunk in run.chunks(1024) {
                    let base = Offset(start.0 + report.entries);
                    group.append(base, first.epoch, chunk)?;
                    report.entries += chunk.len() as u64;
                }
                i += n;
            }
            at = Offset(start.0 + report.entries);
        }
        group.wait_durable(Offset(u64::MAX))?;
        group.persist_quorum_state(&store.quorum_state())?;
        if let Some(meta) = store.app_metadata() {
            group.write_app_metadata(&meta)?;
        }
        if let Some(latest) = store.latest_snapshot() {
            let file = store.snapshot_file(latest)?;
            let mut install = group.install_snapshot(latest, file.len() as u64)?;
            install.write_chunk(0, &file)?;
            install.finish()?;
            report.snapshot = true;
        }
        if let Some(hw) = store.high_watermark() {
            group.set_high_watermark(hw.max(group.extent().start))?;
            group.wait_durable(Offset(u64::MAX))?;
        }
        Ok(report)
    }
}
