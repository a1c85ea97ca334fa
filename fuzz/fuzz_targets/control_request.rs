//! Fuzz target `control_request`: see `switchboard::fuzzing::control_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchboard::fuzzing::control_request(data));
