#![no_main]
//! `cargo fuzz run engine`: see faultline::fuzzing::engine for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| faultline::fuzzing::engine(data));
