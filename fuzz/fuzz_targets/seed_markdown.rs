#![no_main]
//! `cargo fuzz run seed_markdown`: see faultline::fuzzing::seed_markdown for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| faultline::fuzzing::seed_markdown(data));
