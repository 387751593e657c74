//! Arbitrary bytes as a log batch, index file and segment header: never
//! panics, valid only if they re-encode identically.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quorumlog_log::fuzzing::decode_batch(data);
});
