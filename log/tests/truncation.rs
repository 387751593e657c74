//! Truncation: suffix (at a batch boundary and inside a batch), prefix and
//! full. Refused below the high watermark; durable once it returns, so
//! truncated records never come back after a reopen or a crash; the epoch
//! map follows every truncation.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;

use common::{both, open_log, payload, read_all, shared, sim, small_options, DIR};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_io::CrashPlan;
use quorumlog_log::{Error, Log};

/// 60 records in batches of 3, epochs 1 (0..30) and 2 (30..60).
fn fill(log: &mut Log, gen: u64) {
    for b in 0..20u64 {
        let recs: Vec<Vec<u8>> = (0..3).map(|j| payload(b * 3 + j, gen, 90)).collect();
        log.append_as_leader(Epoch(1 + b / 10), &recs).unwrap();
    }
}

#[test]
fn suffix_truncation_at_boundaries_and_inside_batches() {
    both(|fs, dir| {
        let opts = small_options();
        for cut in [0u64, 1, 30, 31, 44, 45, 59] {
            let mut log = open_log(&fs, dir, &opts).unwrap();
            log.truncate_fully_and_start_at(Offset(0), None).unwrap();
            fill(&mut log, 0);
            log.truncate_to(Offset(cut)).unwrap();
            assert_eq!(log.log_end_offset(), Offset(cut));
            let got = read_all(&log, Offset(0));
            assert_eq!(got.len() as u64, cut);
            for (o, _, r) in &got {
                assert_eq!(r, &payload(*o, 0, 90));
            }
            // The next append continues at the cut, with a newer epoch.
            log.append_as_leader(Epoch(3), &[b"after"]).unwrap();
            assert_eq!(log.log_end_offset(), Offset(cut + 1));
            if cut > 0 && cut < 30 {
                assert_eq!(
                    log.end_offset_for_epoch(Epoch(2)),
                    Some((Epoch(1), Offset(cut)))
                );
            }
            drop(log); // no clean close: recovery must agree
            let log = open_log(&fs, dir, &opts).unwrap();
            let got = read_all(&log, Offset(0));
            assert_eq!(got.len() as u64, cut + 1, "cut {cut}");
            assert_eq!(got.last().unwrap().2, b"after");
            assert_eq!(got.last().unwrap().1, Epoch(3));
            log.close().unwrap();
        }
    });
}

#[test]
fn truncation_below_the_high_watermark_is_refused() {
    both(|fs, dir| {
        let mut log = open_log(&fs, dir, &small_options()).unwrap();
        fill(&mut log, 0);
        log.set_high_watermark(Offset(40)).unwrap();
        assert!(matches!(
            log.truncate_to(Offset(39)),
            Err(Error::BelowHighWatermark { .. })
        ));
        assert_eq!(log.log_end_offset(), Offset(60));
        log.truncate_to(Offset(40)).unwrap();
        assert!(matches!(
            log.truncate_to(Offset(41)),
            Err(Error::OffsetOutOfRange { .. })
        ));
        log.close().unwrap();
        // The high watermark is durable across a clean close.
        let log = open_log(&fs, dir, &small_options()).unwrap();
        assert_eq!(log.high_watermark(), Some(Offset(40)));
    });
}

#[test]
fn truncated_records_never_come_back_after_a_crash() {
    for plan in [
        CrashPlan::LoseUnsynced,
        CrashPlan::KeepAll,
        CrashPlan::Random,
    ] {
        for seed in 0..20 {
            let (disk, fs) = sim(seed);
            let opts = small_options();
            let mut log = open_log(&fs, Path::new(DIR), &opts).unwrap();
            fill(&mut log, 0);
            log.flush().unwrap();
            let cut = 7 + seed % 40;
            log.truncate_to(Offset(cut)).unwrap();
            // New records in the truncated range, never flushed.
            for i in cut..cut + 5 {
                log.append_as_leader(Epoch(9), &[payload(i, 1, 90)])
                    .unwrap();
            }
            drop(log);
            let disk = disk.crash_with(plan);
            let log = open_log(&shared(&disk), Path::new(DIR), &opts).unwrap();
            let end = log.log_end_offset().0;
            assert!(
                (cut..=cut + 5).contains(&end),
                "{plan:?} seed {seed}: end {end}"
            );
            for (o, e, r) in read_all(&log, Offset(0)) {
                if o < cut {
                    assert_eq!(r, payload(o, 0, 90));
                } else {
                    assert_eq!(
                        (e, r),
                        (Epoch(9), payload(o, 1, 90)),
                        "old record {o} resurrected"
                    );
                }
            }
        }
    }
}

#[test]
fn prefix_truncation_deletes_whole_segments_below() {
    both(|fs, dir| {
        let opts = small_options();
        let mut log = open_log(&fs, dir, &opts).unwrap();
        fill(&mut log, 0);
        let before = log.segment_bases();
        log.truncate_prefix_to(Offset(40)).unwrap();
        assert_eq!(log.log_start_offset(), Offset(40));
        let after = log.segment_bases();
        assert!(after.len() < before.len());
        assert!(after[0] <= Offset(40));
        assert!(after.len() == 1 || after[1] > Offset(40));
        assert!(matches!(
            log.read(Offset(34), 100),
            Err(Error::OffsetOutOfRange { .. })
        ));
        assert_eq!(read_all(&log, Offset(40)).len(), 20);
        assert_eq!(log.epochs().entries()[0].start_offset, Offset(40));
        drop(log);
        let log = open_log(&fs, dir, &opts).unwrap();
        assert_eq!(log.log_start_offset(), Offset(40));
        assert_eq!(log.segment_bases(), after);
        assert_eq!(read_all(&log, Offset(40)).len(), 20);
    });
}

#[test]
fn full_truncation_restarts_the_log_elsewhere() {
    both(|fs, dir| {
        let opts = small_options();
        let mut log = open_log(&fs, dir, &opts).unwrap();
        fill(&mut log, 0);
        log.truncate_fully_and_start_at(Offset(1000), None).unwrap();
        assert_eq!(log.log_start_offset(), Offset(1000));
        assert_eq!(log.log_end_offset(), Offset(1000));
        assert_eq!(log.last_epoch(), None);
        log.append_as_leader(Epoch(7), &[b"x"]).unwrap();
        drop(log);
        let log = open_log(&fs, dir, &opts).unwrap();
        assert_eq!(log.segment_bases(), vec![Offset(1000)]);
        assert_eq!(read_all(&log, Offset(1000)).len(), 1);
        assert_eq!(log.last_epoch(), Some(Epoch(7)));
    });
}

#[test]
fn epoch_map_follows_truncations_and_reopens() {
    both(|fs, dir| {
        let opts = small_options();
        let mut log = open_log(&fs, dir, &opts).unwrap();
        fill(&mut log, 0); // epoch 1: 0..30, epoch 2: 30..60
        log.truncate_to(Offset(45)).unwrap();
        log.append_as_leader(Epoch(4), &[b"a", b"b"]).unwrap();
        log.truncate_to(Offset(46)).unwrap();
        log.append_as_leader(Epoch(5), &[b"c"]).unwrap();
        let entries = |log: &Log| {
            log.epochs()
                .entries()
                .iter()
                .map(|e| (e.epoch.0, e.start_offset.0))
                .collect::<Vec<_>>()
        };
        let want = vec![(1, 0), (2, 30), (4, 45), (5, 46)];
        assert_eq!(entries(&log), want);
        assert_eq!(
            log.end_offset_for_epoch(Epoch(3)),
            Some((Epoch(2), Offset(45)))
        );
        drop(log); // crash-like: epochs after the recovery point are rebuilt
        let log = open_log(&fs, dir, &opts).unwrap();
        assert_eq!(entries(&log), want);
        log.close().unwrap();
        let log = open_log(&fs, dir, &opts).unwrap();
        assert_eq!(entries(&log), want);
    });
}
