//! Regression: `Segment::locate` walked batch headers from an index entry
//! without skipping the zero padding a sync leaves before the next page, so
//! a read of an offset past a padded sync point (with no index entry in
//! between) failed with `Corruption { kind: BadMagic }` although the log was
//! intact. Found by the mixed concurrent-append test; fixed by skipping
//! padding in `locate` as the scanner and the read loop already did.
#![allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::expect_used,
    missing_docs,
    reason = "test code: a panic is a failed assertion"
)]

mod common;

use std::path::Path;

use common::{open_log, payload, sim, DIR};
use quorumlog_checkpoint::{Epoch, Offset};
use quorumlog_log::{LogOptions, SegmentPreparation};

#[test]
fn every_offset_reads_back_across_sync_padding() {
    let (_, fs) = sim(1);
    // A sparse index (one entry per 64 KiB) so reads walk across padding.
    let opts = LogOptions {
        segment_size_bytes: 1 << 20,
        max_batch_bytes: 4096,
        index_interval_bytes: 64 << 10,
        segment_preparation: SegmentPreparation::Inline,
        ..LogOptions::default()
    };
    let mut log = open_log(&fs, Path::new(DIR), &opts).unwrap();
    for i in 0..40u64 {
        log.append_as_leader(Epoch(1), &[payload(i, 0, 100)])
            .unwrap();
        if i % 3 == 0 {
            log.flush().unwrap(); // the next batch starts on a fresh page
        }
    }
    // Backwards, so no read continues where the previous one ended (that
    // path skipped padding already) and every read locates from the index.
    for o in (0..40u64).rev() {
        let r = log.read(Offset(o), 1).unwrap();
        let b = r.iter().next().unwrap();
        assert_eq!(b.base_offset(), Offset(o));
        assert_eq!(b.to_vecs().unwrap()[0], payload(o, 0, 100));
    }
}
