//! Fuzz target `github`: see `switchboard::fuzzing::github`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchboard::fuzzing::github(data));
