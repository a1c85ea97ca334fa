//! Fuzz target `jsonrpc_line`: see `switchboard::fuzzing::jsonrpc_line`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| switchboard::fuzzing::jsonrpc_line(data));
