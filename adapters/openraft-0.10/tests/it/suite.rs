//! openraft 0.10's own storage suite (`openraft::testing::log::Suite`),
//! every case, against the adapter on a real directory, with both kinds
//! of leader id (advanced, openraft's default, and standard).

use crate::common;

use std::sync::Arc;

use common::{open_store, Adv, MemMachine, Std};
use openraft10::testing::log::{StoreBuilder, Suite};
use openraft10::StorageError;
use quorumlog_io::RealFs;
use quorumlog_openraft10::LogStore;
use quorumlog_raft::SharedFs;

struct Builder;

impl StoreBuilder<Adv, LogStore<Adv>, MemMachine<Adv>, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore<Adv>, MemMachine<Adv>), StorageError<Adv>> {
        let dir = tempfile::tempdir().unwrap();
        let fs: SharedFs = Arc::new(RealFs::new());
        let store = open_store(&fs, dir.path(), 0, true);
        Ok((dir, LogStore::new(store, 0).unwrap(), MemMachine::new()))
    }
}

impl StoreBuilder<Std, LogStore<Std>, MemMachine<Std>, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore<Std>, MemMachine<Std>), StorageError<Std>> {
        let dir = tempfile::tempdir().unwrap();
        let fs: SharedFs = Arc::new(RealFs::new());
        let store = open_store(&fs, dir.path(), 0, true);
        Ok((dir, LogStore::new(store, 0).unwrap(), MemMachine::new()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_advanced_leader_ids() {
    Suite::<Adv, LogStore<Adv>, MemMachine<Adv>, Builder, tempfile::TempDir>::test_all(Builder)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_standard_leader_ids() {
    Suite::<Std, LogStore<Std>, MemMachine<Std>, Builder, tempfile::TempDir>::test_all(Builder)
        .await
        .unwrap();
}
