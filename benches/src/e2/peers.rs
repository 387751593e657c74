//! The peers' stores under the same loop: raft-engine written once per
//! loop pass (as `TiKV` does), and raft-rs's `MemStorage`.

#[allow(
    clippy::wildcard_imports,
    reason = "a child module: the parent's items and imports, as it sees them"
)]
use super::*;

/// A raft-rs entry for raft-engine's `add_entries`.
pub(super) struct RaftEntries;

impl raft_engine::MessageExt for RaftEntries {
    type Entry = Entry;

    fn index(e: &Entry) -> u64 {
        e.index
    }
}

/// raft-rs storage over raft-engine, as `TiKV`'s `RaftEngine` storage:
/// entries from the engine, the hard state in memory (and in the batch).
#[derive(Clone)]
pub(super) struct EngineStorage {
    pub(super) engine: Arc<TunedEngine>,
    pub(super) region: u64,
    pub(super) state: Arc<Mutex<RaftState>>,
}

impl EngineStorage {
    fn first(&self) -> u64 {
        self.engine.engine().first_index(self.region).unwrap_or(1)
    }

    fn last(&self) -> u64 {
        self.engine.engine().last_index(self.region).unwrap_or(0)
    }
}

pub(super) fn engine_err(e: raft_engine::Error) -> raft::Error {
    raft::Error::Store(raft::StorageError::Other(Box::new(e)))
}

impl Storage for EngineStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone())
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        let max = max_size
            .into()
            .filter(|&m| m != raft::NO_LIMIT)
            .map(|m| usize::try_from(m).unwrap_or(usize::MAX));
        let mut out = Vec::new();
        self.engine
            .engine()
            .fetch_entries_to::<RaftEntries>(self.region, low, high, max, &mut out)
            .map_err(engine_err)?;
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == 0 {
            return Ok(0);
        }
        if idx < self.first() {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        match self
            .engine
            .engine()
            .get_entry::<RaftEntries>(self.region, idx)
            .map_err(engine_err)?
        {
            Some(e) => Ok(e.term),
            None => Err(raft::Error::Store(raft::StorageError::Unavailable)),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last().max(self.first() - 1))
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<raft::eraftpb::Snapshot> {
        Err(raft::Error::Store(
            raft::StorageError::SnapshotTemporarilyUnavailable,
        ))
    }
}

/// What the synchronous loop needs of its storage: gathering a Ready's
/// writes into the pass's batch, writing the batch, compacting.
pub(super) trait SyncStore: Storage + Sized {
    /// Adds `rd`'s entries and hard state to the pass's writes.
    fn stage(&self, rd: &Ready, batch: &mut raft_engine::LogBatch) -> Result<(), BenchError>;
    /// Writes the pass's batch (synced if `sync`).
    fn write(&self, batch: &mut raft_engine::LogBatch, sync: bool) -> Result<(), BenchError>;
    /// Deletes entries below `index`.
    fn compact(&self, index: u64, batch: &mut raft_engine::LogBatch);
}

pub(super) const HARD_STATE_KEY: &[u8] = b"hs";

impl SyncStore for EngineStorage {
    fn stage(&self, rd: &Ready, batch: &mut raft_engine::LogBatch) -> Result<(), BenchError> {
        if !rd.entries().is_empty() {
            batch.add_entries::<RaftEntries>(self.region, rd.entries())?;
        }
        if let Some(hs) = rd.hs() {
            batch.put_message(self.region, HARD_STATE_KEY.to_vec(), hs)?;
            self.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .hard_state = hs.clone();
        }
        Ok(())
    }

    fn write(&self, batch: &mut raft_engine::LogBatch, sync: bool) -> Result<(), BenchError> {
        if !batch.is_empty() {
            self.engine.engine().write(batch, sync)?;
        }
        Ok(())
    }

    fn compact(&self, index: u64, _batch: &mut raft_engine::LogBatch) {
        self.engine.engine().compact_to(self.region, index);
    }
}

impl SyncStore for MemStorage {
    fn stage(&self, rd: &Ready, _batch: &mut raft_engine::LogBatch) -> Result<(), BenchError> {
        let mut core = self.wl();
        core.append(rd.entries())?;
        if let Some(hs) = rd.hs() {
            core.set_hardstate(HardState::clone(hs));
        }
        Ok(())
    }

    fn write(&self, _batch: &mut raft_engine::LogBatch, _sync: bool) -> Result<(), BenchError> {
        Ok(())
    }

    fn compact(&self, index: u64, _batch: &mut raft_engine::LogBatch) {
        let _ = self.wl().compact(index);
    }
}
