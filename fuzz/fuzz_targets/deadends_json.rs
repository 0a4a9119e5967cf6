#![no_main]
//! `cargo fuzz run deadends_json`: see faultline::fuzzing::deadends_json for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| faultline::fuzzing::deadends_json(data));
