#![no_main]
//! `cargo fuzz run kb_toml`: see faultline::fuzzing::kb_toml for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| faultline::fuzzing::kb_toml(data));
