//! Fuzz target `journal_header`: see `idemdb_reliability::fuzzing::journal_header`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    idemdb_reliability::fuzzing::journal_header(data);
});
