//! Arbitrary bytes as a snapshot file (header, chunks, footer): never
//! panics, verifies only if whole and consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quorumlog_snapshot::fuzzing::decode_snapshot(data);
});
