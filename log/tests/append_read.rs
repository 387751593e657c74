//! Appends (leader and follower) and reads: offsets, epochs, whole verified
//! batches, compression, and every kind of bad input rejected with a typed
//! error and nothing written. Runs on the real file system and the
//! simulated disk.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use common::{both, open_log, payload, read_all, small_options};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_log::{Compression, Error, FollowerBatch, LogOptions};

#[test]
fn leader_appends_assign_offsets_and_read_back() {
    both(|fs, dir| {
        let mut log = open_log(&fs, dir, &small_options()).unwrap();
        let a = log
            .append_as_leader(Epoch(1), &[b"a".as_slice(), b"b"])
            .unwrap();
        assert_eq!((a.base_offset, a.next_offset), (Offset(0), Offset(2)));
        let b = log.append_as_leader(Epoch(1), &[b"c"]).unwrap();
        assert_eq!(b.base_offset, Offset(2));
        let c = log.append_as_leader(Epoch(3), &[b"d"]).unwrap();
        assert_eq!(c.next_offset, Offset(4));
        // Readable before any flush.
        let all = read_all(&log, Offset(0));
        let recs: Vec<&[u8]> = all.iter().map(|(_, _, r)| r.as_slice()).collect();
        assert_eq!(recs, vec![b"a".as_slice(), b"b", b"c", b"d"]);
        assert_eq!(all[3].1, Epoch(3));
        assert_eq!(log.last_epoch(), Some(Epoch(3)));
        assert_eq!(
            log.end_offset_for_epoch(Epoch(2)),
            Some((Epoch(1), Offset(3)))
        );
        assert_eq!(
            log.end_offset_for_epoch(Epoch(3)),
            Some((Epoch(3), Offset(4)))
        );
        assert_eq!(log.end_offset_for_epoch(Epoch(0)), None);
        log.close().unwrap();
    });
}

#[test]
fn read_returns_whole_batches_bounded_by_max_bytes() {
    both(|fs, dir| {
        let mut log = open_log(&fs, dir, &LogOptions::default()).unwrap();
        for i in 0..10u64 {
            let recs: Vec<Vec<u8>> = (0..5).map(|j| payload(i * 5 + j, 0, 100)).collect();
            log.append_as_leader(Epoch(1), &recs).unwrap();
        }
        // A batch is 40 + 5 * 104 = 560 bytes.
        let r = log.read(Offset(12), 1).unwrap();
        assert_eq!(r.len(), 1, "at least one batch, even over max_bytes");
        let first = r.iter().next().unwrap();
        assert_eq!(
            first.base_offset(),
            Offset(10),
            "the batch holding offset 12"
        );
        let r = log.read(Offset(12), 1200).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r.next_offset(), Some(Offset(20)));
        assert_eq!(r.bytes().len(), 1120);
        assert!(
            log.read(Offset(50), 100).unwrap().is_empty(),
            "at the log end"
        );
        assert!(matches!(
            log.read(Offset(51), 100),
            Err(Error::OffsetOutOfRange { .. })
        ));
    });
}

#[test]
fn follower_batches_must_continue_the_log() {
    both(|fs, dir| {
        let mut log = open_log(&fs, dir, &small_options()).unwrap();
        let recs = [b"x".as_slice(), b"y"];
        let ok = [
            FollowerBatch {
                base_offset: Offset(0),
                epoch: Epoch(2),
                records: &recs[..],
            },
            FollowerBatch {
                base_offset: Offset(2),
                epoch: Epoch(4),
                records: &recs[..1],
            },
        ];
        assert_eq!(log.append_as_follower(&ok).unwrap().next_offset, Offset(3));
        let gap = [FollowerBatch {
            base_offset: Offset(4),
            epoch: Epoch(4),
            records: &recs[..],
        }];
        assert!(matches!(
            log.append_as_follower(&gap),
            Err(Error::NonContiguous {
                expected: Offset(3),
                found: Offset(4)
            })
        ));
        let back = [FollowerBatch {
            base_offset: Offset(3),
            epoch: Epoch(3),
            records: &recs[..],
        }];
        assert!(matches!(
            log.append_as_follower(&back),
            Err(Error::EpochRegression { .. })
        ));
        // A valid batch followed by an invalid one: nothing is written.
        let mixed = [
            FollowerBatch {
                base_offset: Offset(3),
                epoch: Epoch(4),
                records: &recs[..],
            },
            FollowerBatch {
                base_offset: Offset(9),
                epoch: Epoch(4),
                records: &recs[..],
            },
        ];
        assert!(log.append_as_follower(&mixed).is_err());
        assert_eq!(log.log_end_offset(), Offset(3));
        assert_eq!(read_all(&log, Offset(0)).len(), 3);
    });
}

#[test]
fn bad_appends_are_typed_errors_that_write_nothing() {
    both(|fs, dir| {
        let opts = small_options();
        let mut log = open_log(&fs, dir, &opts).unwrap();
        log.append_as_leader(Epoch(5), &[b"first"]).unwrap();
        let none: [&[u8]; 0] = [];
        assert!(matches!(
            log.append_as_leader(Epoch(5), &none),
            Err(Error::EmptyBatch)
        ));
        let huge = vec![0u8; 4000];
        assert!(matches!(
            log.append_as_leader(Epoch(5), &[&huge]),
            Err(Error::BatchTooLarge { .. })
        ));
        assert!(matches!(
            log.append_as_leader(Epoch(4), &[b"old"]),
            Err(Error::EpochRegression { .. })
        ));
        assert!(matches!(
            log.set_high_watermark(Offset(9)),
            Err(Error::HighWatermarkBeyondEnd { .. })
        ));
        assert_eq!(log.log_end_offset(), Offset(1));
        log.close().unwrap();
        let log = open_log(&fs, dir, &opts).unwrap();
        assert_eq!(log.log_end_offset(), Offset(1));
        assert!(log.recovery_report().clean);
    });
}

#[test]
fn compressed_batches_round_trip_and_shrink() {
    both(|fs, dir| {
        let opts = LogOptions {
            compression: Compression::Zstd { level: 1 },
            compression_threshold_bytes: 1024,
            ..LogOptions::default()
        };
        let mut log = open_log(&fs, dir, &opts).unwrap();
        let recs: Vec<Vec<u8>> = (0..64)
            .map(|i| vec![u8::try_from(i % 4).unwrap(); 256])
            .collect();
        log.append_as_leader(Epoch(1), &recs).unwrap();
        log.append_as_leader(Epoch(1), &[b"tiny, not compressed"])
            .unwrap();
        let r = log.read(Offset(0), 1 << 20).unwrap();
        assert!(
            r.bytes().len() < 64 * 256 / 4,
            "compressed: {} bytes",
            r.bytes().len()
        );
        log.close().unwrap();
        let log = open_log(&fs, dir, &opts).unwrap();
        let all = read_all(&log, Offset(0));
        assert_eq!(all.len(), 65);
        for (i, (_, _, r)) in all.iter().take(64).enumerate() {
            assert_eq!(r, &recs[i]);
        }
    });
}

#[test]
fn invalid_options_are_rejected() {
    both(|fs, dir| {
        let bad = LogOptions {
            index_interval_bytes: 0,
            ..LogOptions::default()
        };
        assert!(matches!(
            open_log(&fs, dir, &bad),
            Err(Error::InvalidOptions(_))
        ));
    });
}
