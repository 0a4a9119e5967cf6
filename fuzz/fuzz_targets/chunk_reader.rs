#![no_main]
//! `cargo fuzz run chunk_reader`: see faultline::fuzzing::chunk_reader for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| faultline::fuzzing::chunk_reader(data));
