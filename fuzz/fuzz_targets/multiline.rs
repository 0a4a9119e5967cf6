#![no_main]
//! `cargo fuzz run multiline`: see faultline::fuzzing::multiline for what it checks.

libfuzzer_sys::fuzz_target!(init: faultline::fuzzing::multiline_init(), |data: &[u8]| {
    faultline::fuzzing::multiline(data)
});
