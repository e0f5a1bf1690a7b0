//! Fuzz target `keys`: see `idemdb_reliability::fuzzing::keys`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    idemdb_reliability::fuzzing::keys(data);
});
