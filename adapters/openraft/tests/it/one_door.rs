//! The adapter goes through the store's one door. Invariants protected:
//! - a vote saved through the adapter is the store's own election state
//!   (one writer of the quorum-state file, one view of it), and a vote
//!   that would move it back is refused;
//! - a snapshot the state machine builds takes the store's checked
//!   creation: refused beyond the high watermark (committed state only),
//!   accepted at it;
//! - a snapshot received from the leader is installed through the store's
//!   verified install: a damaged file is refused and nothing is published;
//! - the adapter's errors keep their source: the store's typed error is
//!   reachable from openraft's.

use crate::common;

use std::error::Error as _;
use std::path::Path;
use std::sync::Arc;

use common::{open_store, TypeConfig, DIR};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{Entry, SnapshotMeta, Vote};
use quorumlog_io::SimFs;
use quorumlog_openraft::mapping::log_id;
use quorumlog_openraft::{LogStore, SnapshotFiles};
use quorumlog_raft::{Epoch, SharedFs};

fn entry(index: u64) -> Entry<TypeConfig> {
    common::put_entry(index)
}

fn meta(last: u64) -> SnapshotMeta<u64, openraft::BasicNode> {
    common::snapshot_meta(last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_saved_through_the_adapter_is_the_stores_election_state() {
    let fs: SharedFs = Arc::new(SimFs::new(1));
    let store = open_store(&fs, Path::new(DIR), 1, true);
    let mut log = LogStore::<TypeConfig>::new(Arc::clone(&store), 1).unwrap();
    log.save_vote(&Vote::new(3, 2)).await.unwrap();
    let state = store.quorum_state();
    assert!(state.epoch >= Epoch(3), "{state:?}");
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 2)));
    // A vote from an older term would move the state back: refused, and
    // the error's source is the store's typed refusal.
    let e = log.save_vote(&Vote::new(1, 3)).await.unwrap_err();
    let source = e.source().map(ToString::to_string).unwrap_or_default();
    assert!(!source.is_empty(), "{e}");
    assert_eq!(store.quorum_state(), state, "nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_built_beyond_the_high_watermark_is_refused() {
    let fs: SharedFs = Arc::new(SimFs::new(2));
    let store = open_store(&fs, Path::new(DIR), 1, true);
    let mut log = LogStore::<TypeConfig>::new(Arc::clone(&store), 1).unwrap();
    log.blocking_append((0..=20).map(entry)).await.unwrap();
    log.save_committed(Some(log_id(1, 1, 5))).await.unwrap();
    let files = SnapshotFiles::new(Arc::clone(&store));
    assert!(files.save_built(&meta(10), b"state to 10").is_err());
    assert_eq!(
        store.extent().latest_snapshot,
        None,
        "nothing was published"
    );
    files.save_built(&meta(5), b"state to 5").unwrap();
    assert_eq!(
        store.extent().latest_snapshot.map(|s| s.end_offset.0),
        Some(6)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_received_snapshot_is_verified_before_it_is_published() {
    // The leader's snapshot file.
    let lfs: SharedFs = Arc::new(SimFs::new(3));
    let leader = open_store(&lfs, Path::new(DIR), 2, true);
    let mut llog = LogStore::<TypeConfig>::new(Arc::clone(&leader), 2).unwrap();
    llog.blocking_append((0..=30).map(entry)).await.unwrap();
    llog.save_committed(Some(log_id(1, 1, 30))).await.unwrap();
    let lfiles = SnapshotFiles::new(Arc::clone(&leader));
    lfiles.save_built(&meta(30), b"leader state").unwrap();
    let file = lfiles.file(&meta(30)).unwrap();

    let fs: SharedFs = Arc::new(SimFs::new(4));
    let store = open_store(&fs, Path::new(DIR), 1, true);
    let files = SnapshotFiles::new(Arc::clone(&store));
    let mut damaged = file.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0x40;
    assert!(files.save_received(&meta(30), &damaged).is_err());
    assert_eq!(store.extent().latest_snapshot, None);
    files.save_received(&meta(30), &file).unwrap();
    let (m, data) = files.latest::<openraft::BasicNode>().unwrap().unwrap();
    assert_eq!(m.last_log_id, meta(30).last_log_id);
    assert_eq!(data, b"leader state");
    assert_eq!(store.extent().high_watermark.map(|h| h.0), Some(31));
}

/// A leader's snapshot up to 40 of a 200 kB state, read through its
/// stream as openraft does (the end, then chunks from a seek): the state
/// and the bytes streamed, checked to be the header then the file.
async fn leader_stream() -> (Vec<u8>, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};

    let lfs: SharedFs = Arc::new(SimFs::new(5));
    let leader = open_store(&lfs, Path::new(DIR), 2, true);
    let mut llog = LogStore::<TypeConfig>::new(Arc::clone(&leader), 2).unwrap();
    llog.blocking_append((0..=40).map(entry)).await.unwrap();
    llog.save_committed(Some(log_id(1, 1, 40))).await.unwrap();
    let lfiles = SnapshotFiles::new(Arc::clone(&leader));
    let state: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    lfiles.save_built(&meta(40), &state).unwrap();
    let file = lfiles.file(&meta(40)).unwrap();

    // Read as openraft does: the end, then chunks from a seek.
    let mut sending = lfiles.sending(&meta(40)).unwrap();
    let end = sending.seek(std::io::SeekFrom::End(0)).await.unwrap();
    assert_eq!(
        end,
        quorumlog_openraft::stream::HEADER_BYTES + file.len() as u64
    );
    let mut streamed = Vec::new();
    let mut offset = 0u64;
    while offset < end {
        sending
            .seek(std::io::SeekFrom::Start(offset))
            .await
            .unwrap();
        let mut buf = vec![0u8; 7_919];
        let n = sending.read(&mut buf).await.unwrap();
        assert!(n > 0);
        streamed.extend_from_slice(&buf[..n]);
        offset += n as u64;
    }
    assert_eq!(&streamed[28..], file.as_slice());

    (state, streamed)
}

/// Snapshot streams (`SnapshotStream`): invariants protected:
/// - the leader's stream is a header then its snapshot file, read in place
///   in whatever chunks openraft asks for;
/// - a follower's stream writes each chunk straight into the store's
///   install, durable as it arrives: after a power cut mid-transfer the
///   partial install survives, and a transfer started again from offset 0
///   resumes it (the bytes it holds are skipped) and publishes the
///   snapshot;
/// - a damaged stream publishes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_stream_from_file_to_file_and_resume_after_a_power_cut() {
    use tokio::io::AsyncWriteExt;

    let (state, streamed) = leader_stream().await;
    // A follower receives half, then loses power.
    let sim = SimFs::new(6);
    let fs: SharedFs = Arc::new(sim.clone());
    let store = open_store(&fs, Path::new(DIR), 1, true);
    let files = SnapshotFiles::new(Arc::clone(&store));
    let mut receiving = files.receiving();
    let half = streamed.len() / 2;
    for chunk in streamed[..half].chunks(4_096) {
        receiving.write_all(chunk).await.unwrap();
    }
    drop((receiving, files, store));
    let sim = sim.crash_with(quorumlog_io::CrashPlan::LoseUnsynced);
    let fs: SharedFs = Arc::new(sim.clone());
    let store = open_store(&fs, Path::new(DIR), 1, false);
    assert_eq!(
        store.installs().unwrap().len(),
        1,
        "the half-received snapshot survived the power cut"
    );
    let files = SnapshotFiles::new(Arc::clone(&store));
    // openraft starts the transfer again from offset 0: what the install
    // holds is skipped, the rest completes it.
    let mut receiving = files.receiving();
    for chunk in streamed.chunks(10_007) {
        receiving.write_all(chunk).await.unwrap();
    }
    files.finish_received(&meta(40), receiving).unwrap();
    let (m, data) = files.latest::<openraft::BasicNode>().unwrap().unwrap();
    assert_eq!(m.last_log_id, meta(40).last_log_id);
    assert_eq!(data, state);
    assert_eq!(store.extent().high_watermark.map(|h| h.0), Some(41));

    // A damaged transfer into another follower publishes nothing.
    let fs: SharedFs = Arc::new(SimFs::new(7));
    let other = open_store(&fs, Path::new(DIR), 3, true);
    let files = SnapshotFiles::new(Arc::clone(&other));
    let mut bad = streamed.clone();
    let last = bad.len() - 10;
    bad[last] ^= 0x01;
    let mut receiving = files.receiving();
    for chunk in bad.chunks(10_007) {
        receiving.write_all(chunk).await.unwrap();
    }
    assert!(files.finish_received(&meta(40), receiving).is_err());
    assert_eq!(other.extent().latest_snapshot, None, "nothing published");
}
