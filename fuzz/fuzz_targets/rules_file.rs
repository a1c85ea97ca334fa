//! Fuzz target `rules_file`: see `switchboard::fuzzing::rules_file`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchboard::fuzzing::rules_file(data));
