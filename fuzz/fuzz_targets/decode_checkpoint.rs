//! Arbitrary bytes as every small file of a data directory: never panics,
//! never decodes as valid unless the bytes re-encode identically.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quorumlog_checkpoint::fuzzing::decode_checkpoint(data);
});
