//! Fuzz target `canonical`: see `idemdb_reliability::fuzzing::canonical`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    idemdb_reliability::fuzzing::canonical(data);
});
