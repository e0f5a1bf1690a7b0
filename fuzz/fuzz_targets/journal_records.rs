//! Fuzz target `journal_records`: see `idemdb_reliability::fuzzing::journal_records`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    idemdb_reliability::fuzzing::journal_records(data);
});
