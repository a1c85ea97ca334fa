//! Fuzz target `generic_webhook`: see `switchboard::fuzzing::generic_webhook`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchboard::fuzzing::generic_webhook(data));
