//! Fuzz target `ops`: see `idemdb_reliability::fuzzing::ops`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    idemdb_reliability::fuzzing::ops(data);
});
