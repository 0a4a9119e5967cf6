#![no_main]
//! `cargo fuzz run redact`: see faultline::fuzzing::redact for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| faultline::fuzzing::redact(data));
