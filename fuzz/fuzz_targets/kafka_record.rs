#![no_main]
//! `cargo fuzz run kafka_record`: see faultline::fuzzing::kafka_record for what it checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| faultline::fuzzing::kafka_record(data));
