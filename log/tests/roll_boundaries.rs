//! Segment rolls: a batch never spans segments, records on both sides of
//! every roll read back byte-identical before and after reopen, a clean
//! reopen scans nothing, and the sparse index stays within its memory bound.
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
use quorumlog_log::LogOptions;

#[test]
fn records_survive_many_rolls_and_reopen() {
    both(|fs, dir| {
        let opts = small_options();
        let mut log = open_log(&fs, dir, &opts).unwrap();
        let mut want = Vec::new();
        for i in 0..200u64 {
            let n = 1 + usize::try_from(i % 4).unwrap();
            let recs: Vec<Vec<u8>> = (0..n)
                .map(|j| {
                    payload(
                        want.len() as u64 + j as u64,
                        1,
                        10 + (usize::try_from(i).unwrap() * 37) % 300,
                    )
                })
                .collect();
            let epoch = Epoch(1 + i / 50);
            log.append_as_leader(epoch, &recs).unwrap();
            want.extend(recs.into_iter().map(|r| (epoch, r)));
        }
        let segments = log.segment_bases();
        assert!(segments.len() > 10, "rolled {} times", segments.len());
        // Segment bases are exactly batch boundaries, ascending.
        assert!(segments.windows(2).all(|w| w[0] < w[1]));
        let check = |log: &quorumlog_log::Log| {
            let got = read_all(log, Offset(0));
            assert_eq!(got.len(), want.len());
            for (o, e, r) in &got {
                let (we, wr) = &want[usize::try_from(*o).unwrap()];
                assert_eq!((e, r), (we, wr), "offset {o}");
            }
        };
        check(&log);
        // Reads starting at every offset find the right batch.
        for o in 0..want.len() as u64 {
            let r = log.read(Offset(o), 1).unwrap();
            let b = r.iter().next().unwrap();
            assert!(b.base_offset().0 <= o && o < b.next_offset().0);
        }
        log.close().unwrap();
        let log = open_log(&fs, dir, &opts).unwrap();
        let report = log.recovery_report();
        assert!(report.clean, "{report:?}");
        assert_eq!(report.bytes_scanned, 0, "a clean open scans nothing");
        assert_eq!(log.segment_bases(), segments);
        check(&log);
        assert_eq!(log.last_epoch(), Some(Epoch(4)));
        assert_eq!(log.end_offset_for_epoch(Epoch(2)).unwrap().0, Epoch(2));
    });
}

#[test]
fn index_memory_stays_within_4_mib_per_gib() {
    // 256-byte records, default options: measure index bytes per log byte.
    both(|fs, dir| {
        let opts = LogOptions {
            segment_size_bytes: 1 << 20,
            max_batch_bytes: 64 << 10,
            ..LogOptions::default()
        };
        let mut log = open_log(&fs, dir, &opts).unwrap();
        let rec = vec![7u8; 256];
        let mut log_bytes = 0u64;
        for _ in 0..16_000 {
            log.append_as_leader(Epoch(1), &[&rec]).unwrap();
            log_bytes += 40 + 4 + 256;
        }
        let index = log.index_memory_bytes() as u64;
        let per_gib = index * (1 << 30) / log_bytes;
        eprintln!("index memory: {index} B for {log_bytes} B of log = {per_gib} B per GiB");
        assert!(per_gib <= 4 << 20, "{per_gib} B per GiB");
        log.close().unwrap();
    });
}
