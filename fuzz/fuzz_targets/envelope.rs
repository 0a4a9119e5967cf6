#![no_main]
//! `cargo fuzz run envelope`: see faultline::fuzzing::envelope for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| faultline::fuzzing::envelope(data));
