//! The physical cut of the log below openraft's last purged id: all of it, or (bounded) only what the latest snapshot file covers.
//!
//! 0.9 only: 0.10 waits for the snapshot that covers a purge itself.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's private items, as it sees them"
)]
use super::*;

/// Deletes the log below openraft's last purged id, as far as allowed:
/// all of it, or (`CoveredBySnapshot`) only what the latest snapshot file covers.
/// Called after a purge, after a snapshot file is saved, and at open.
pub(crate) fn physical_cut(store: &Group, purge: PurgeMode) -> Result<(), CutError> {
    let meta = AppMeta::decode(store.app_metadata().as_deref())?;
    let Some(purged) = meta.last_purged else {
        return Ok(());
    };
    let want = purged.index + 1;
    let snapshot = store.extent().latest_snapshot;
    let cut = if purge == PurgeMode::CoveredBySnapshot {
        want.min(snapshot.map_or(0, |s| s.end_offset.0))
    } else {
        want
    };
    if cut <= store.extent().start.0 {
        return Ok(());
    }
    let epoch = if cut == want {
        mapping::epoch_of(&purged.leader_id)?
    } else {
        match store
            .epoch_at(Offset(cut - 1))
            .or_else(|| snapshot.filter(|s| s.end_offset.0 == cut).map(|s| s.epoch))
        {
            Some(e) => e,
            None => return Ok(()),
        }
    };
    store.purge(Purge::To {
        offset: Offset(cut),
        epoch,
    })?;
    Ok(())
}

/// Why a physical cut failed, its source kept.
pub(crate) type CutError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl<C> LogStore<C>
where
    C: RaftTypeConfig<NodeId = u64, Entry = Entry<C>>,
    Entry<C>: Serialize + DeserializeOwned + Clone,
{
    /// Bounded mode, at open: a purge that no snapshot file covers (a power
    /// cut came before the state machine's file) is taken back to what the
    /// files and the log still hold, so openraft re-applies those entries
    /// over the latest snapshot instead of skipping them. The entries are
    /// there: the bounded cut kept them.
    pub(super) fn undo_uncovered_purge(&self) -> Result<(), StoreError> {
        let Some(purged) = self.meta()?.last_purged else {
            return Ok(());
        };
        let snapshot = self.store.extent().latest_snapshot;
        let covered = self
            .store
            .extent()
            .start
            .0
            .max(snapshot.map_or(0, |s| s.end_offset.0));
        if purged.index < covered {
            return Ok(());
        }
        let last_purged = match covered.checked_sub(1) {
            None => None,
            Some(index) => {
                let epoch = self
                    .store
                    .epoch_at(Offset(index))
                    .or_else(|| {
                        snapshot
                            .filter(|s| s.end_offset.0 == covered)
                            .map(|s| s.epoch)
                    })
                    .ok_or_else(|| {
                        logs_write(&std::io::Error::other(
                            "the entry below the covered log is neither in the log nor a snapshot",
                        ))
                    })?;
                let (term, node) = mapping::leader_of(epoch);
                Some(mapping::log_id(term, node, index))
            }
        };
        let bytes = AppMeta { last_purged }
            .encode()
            .map_err(|e| logs_write(&e))?;
        self.store
            .write_app_metadata(&bytes)
            .map_err(|e| logs_write(&e))
    }
}
