//! openraft's own storage suite (`openraft::testing::Suite::test_all`,
//! 0.9 with `storage-v2`), every case, against the adapter on a real
//! directory.
#![allow(
    clippy::unwrap_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::sync::Arc;

use common::{open_store, parts, KvMachine, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use quorumlog_checkpoint::SharedFs;
use quorumlog_io::RealFs;
use quorumlog_openraft::LogStore;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore<TypeConfig>, KvMachine, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore<TypeConfig>, KvMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().unwrap();
        let fs: SharedFs = Arc::new(RealFs::new());
        let store = open_store(&fs, dir.path(), 0, true);
        let (log, sm) = parts(&store, 0);
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    Suite::test_all(Builder).unwrap();
}
