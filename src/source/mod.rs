//! Where lines come from. [`file`] reads files, directories, compressed files and stdin in
//! chunks of whole lines for `faultline scan`, the tests and the benchmarks.

pub mod file;
pub mod kafka;
