//! Formatting is explicit: open never initialises a directory, format never
//! overwrites one, and a directory is open at most once, for the identity it
//! was formatted with.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;

use common::{both, overwrite};
use quorumlog_checkpoint::{
    format, ClusterId, CorruptionKind, DataDir, Epoch, Error, NodeId, NotFormattedReason,
    OpenOptions, QuorumState, SharedFs,
};
use quorumlog_io::OpenMode;

fn open(fs: &SharedFs, dir: &Path) -> Result<DataDir, Error> {
    DataDir::open(fs.clone(), dir, &OpenOptions::default())
}

#[test]
fn open_of_a_missing_or_blank_directory_is_not_formatted() {
    both(|fs, dir| {
        let e = open(&fs, dir).unwrap_err();
        assert!(matches!(
            e,
            Error::NotFormatted {
                reason: NotFormattedReason::NoDirectory,
                ..
            }
        ));
        fs.create_dir_all(dir).unwrap();
        let e = open(&fs, dir).unwrap_err();
        assert!(
            matches!(
                e,
                Error::NotFormatted {
                    reason: NotFormattedReason::NoMeta,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("not a quorumlog data directory"));
        // Nothing was created by the failed opens.
        assert!(fs.list(dir).unwrap().is_empty());
    });
}

#[test]
fn format_then_open_gives_epoch_zero_and_clean_checkpoints() {
    both(|fs, dir| {
        let meta = format(&fs, dir, ClusterId(0xABC), NodeId(4)).unwrap();
        let dd = open(&fs, dir).unwrap();
        assert_eq!(dd.meta(), meta);
        assert_ne!(meta.directory_id.0, 0);
        assert_eq!(dd.quorum_state(), QuorumState::default());
        assert!(dd.report().degraded.is_empty(), "{:?}", dd.report());
        let cp = dd.checkpoints();
        assert!(cp.recovery_point.is_some() && cp.high_watermark.is_some());
        assert!(cp.log_start_offset.is_some() && cp.epoch_map.is_some());
        assert!(fs.exists(&dd.log_dir()).unwrap());
        assert!(fs.exists(&dd.snapshots_dir()).unwrap());
    });
}

#[test]
fn two_formats_get_different_directory_ids() {
    both(|fs, dir| {
        let a = format(&fs, &dir.join("a"), ClusterId(1), NodeId(1)).unwrap();
        let b = format(&fs, &dir.join("b"), ClusterId(1), NodeId(1)).unwrap();
        assert_ne!(a.directory_id, b.directory_id);
    });
}

#[test]
fn format_refuses_formatted_and_foreign_directories() {
    both(|fs, dir| {
        format(&fs, dir, ClusterId(1), NodeId(1)).unwrap();
        assert!(matches!(
            format(&fs, dir, ClusterId(1), NodeId(1)),
            Err(Error::AlreadyFormatted { .. })
        ));
        let foreign = dir.join("foreign");
        fs.create_dir_all(&foreign).unwrap();
        overwrite(fs.as_ref(), &foreign.join("photo.jpg"), b"jpeg");
        let e = format(&fs, &foreign, ClusterId(1), NodeId(1)).unwrap_err();
        assert!(
            matches!(&e, Error::NotEmpty { entry, .. } if entry == "photo.jpg"),
            "{e}"
        );
        // A non-empty log directory is never formatted over.
        let half = dir.join("half");
        fs.create_dir_all(&half.join("log")).unwrap();
        overwrite(
            fs.as_ref(),
            &half.join("log/00000000000000000000.log"),
            b"x",
        );
        assert!(matches!(
            format(&fs, &half, ClusterId(1), NodeId(1)),
            Err(Error::NotEmpty { .. })
        ));
    });
}

#[test]
fn second_open_is_locked_until_the_first_is_dropped() {
    both(|fs, dir| {
        format(&fs, dir, ClusterId(1), NodeId(1)).unwrap();
        let first = open(&fs, dir).unwrap();
        let e = open(&fs, dir).unwrap_err();
        assert!(matches!(e, Error::Locked { .. }), "{e}");
        assert!(matches!(
            format(&fs, dir, ClusterId(1), NodeId(1)),
            Err(Error::AlreadyFormatted { .. })
        ));
        drop(first);
        open(&fs, dir).unwrap();
    });
}

#[test]
fn identity_mismatch_is_refused() {
    both(|fs, dir| {
        format(&fs, dir, ClusterId(1), NodeId(2)).unwrap();
        let wrong_cluster = OpenOptions {
            expected_cluster_id: Some(ClusterId(9)),
            ..OpenOptions::default()
        };
        let e = DataDir::open(fs.clone(), dir, &wrong_cluster).unwrap_err();
        assert!(
            matches!(
                e,
                Error::IdentityMismatch {
                    field: "cluster id",
                    ..
                }
            ),
            "{e}"
        );
        let wrong_node = OpenOptions {
            expected_node_id: Some(NodeId(3)),
            ..OpenOptions::default()
        };
        let e = DataDir::open(fs.clone(), dir, &wrong_node).unwrap_err();
        assert!(
            matches!(
                e,
                Error::IdentityMismatch {
                    field: "node id",
                    ..
                }
            ),
            "{e}"
        );
        let wrong_directory = OpenOptions {
            expected_directory_id: Some(quorumlog_checkpoint::DirectoryId(u128::MAX)),
            ..OpenOptions::default()
        };
        let e = DataDir::open(fs.clone(), dir, &wrong_directory).unwrap_err();
        assert!(
            matches!(
                e,
                Error::IdentityMismatch {
                    field: "directory id",
                    ..
                }
            ),
            "{e}"
        );
        let right = OpenOptions {
            expected_cluster_id: Some(ClusterId(1)),
            expected_node_id: Some(NodeId(2)),
            expected_directory_id: None,
        };
        let dd = DataDir::open(fs.clone(), dir, &right).unwrap();
        let exact = OpenOptions {
            expected_directory_id: Some(dd.meta().directory_id),
            ..right
        };
        drop(dd);
        DataDir::open(fs.clone(), dir, &exact).unwrap();
    });
}

#[test]
fn corrupt_meta_is_not_formatted_and_is_never_formatted_over() {
    both(|fs, dir| {
        format(&fs, dir, ClusterId(1), NodeId(1)).unwrap();
        let meta = dir.join("meta");
        let f = fs.open(&meta, OpenMode::ReadWrite).unwrap();
        f.write_all_at(&[0xFF], 14).unwrap();
        let e = open(&fs, dir).unwrap_err();
        assert!(
            matches!(
                e,
                Error::NotFormatted {
                    reason: NotFormattedReason::InvalidMeta(
                        CorruptionKind::ChecksumMismatch { .. }
                    ),
                    ..
                }
            ),
            "{e}"
        );
        assert!(matches!(
            format(&fs, dir, ClusterId(1), NodeId(1)),
            Err(Error::Corruption { .. })
        ));
    });
}

#[test]
fn quorum_state_survives_reopen() {
    both(|fs, dir| {
        format(&fs, dir, ClusterId(1), NodeId(1)).unwrap();
        let dd = open(&fs, dir).unwrap();
        let qs = QuorumState {
            epoch: Epoch(3),
            leader: Some(NodeId(2)),
            ..QuorumState::default()
        };
        dd.persist_quorum_state(&qs).unwrap();
        drop(dd);
        assert_eq!(open(&fs, dir).unwrap().quorum_state(), qs);
    });
}
