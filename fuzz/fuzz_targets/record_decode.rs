//! Fuzz target `record_decode`: see `idemdb_reliability::fuzzing::record_decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    idemdb_reliability::fuzzing::record_decode(data);
});
