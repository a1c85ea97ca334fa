//! Fuzz target `template`: see `switchboard::fuzzing::template`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchboard::fuzzing::template(data));
