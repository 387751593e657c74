//! Arbitrary bytes as a node's checkpoint (`groups.ckpt`) and as a node
//! record header: never panics, never decodes as valid unless the bytes
//! re-encode identically.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quorumlog_raft::fuzzing::decode_node(data);
});
