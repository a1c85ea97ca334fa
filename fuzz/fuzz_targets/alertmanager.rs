//! Fuzz target `alertmanager`: see `switchboard::fuzzing::alertmanager`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchboard::fuzzing::alertmanager(data));
