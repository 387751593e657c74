//! The input chooses a crash-tester cycle (workload, crash point, tear,
//! fault, bit flip, recovery crash); any violated invariant panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quorumlog_testkit::harness::fuzz_crash_recovery(data);
});
