//! openraft's own storage suite (`openraft::testing::Suite::test_all`,
//! 0.9 with `storage-v2`), every case, against the adapter on a real
//! directory.

use crate::common;

use std::sync::Arc;

use common::{open_store, parts, Machine, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use quorumlog_io::RealFs;
use quorumlog_openraft::LogStore;
use quorumlog_raft::SharedFs;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore<TypeConfig>, Machine, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore<TypeConfig>, Machine), StorageError<u64>> {
        let dir = tempfile::tempdir().unwrap();
        let fs: SharedFs = Arc::new(RealFs::new());
        let store = open_store(&fs, dir.path(), 0, true);
        let (log, _) = parts(&store, 0);
        // The suite applies entries its log never held and snapshots
        // them; the store's checked creation refuses such a snapshot (a
        // state no committed entry of this log produced), so the suite's
        // state machine keeps its snapshots in memory. The snapshot files
        // are tested where openraft's order holds (tests/one_door.rs,
        // reopen.rs, bounded_purge.rs and the service's power-loss test).
        Ok((dir, log, Machine::in_memory()))
    }
}

#[test]
fn openraft_storage_suite() {
    Suite::test_all(Builder).unwrap();
}
