//! Fuzz target `journal_record`: see `switchboard::fuzzing::journal_record`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchboard::fuzzing::journal_record(data));
