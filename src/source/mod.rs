//! Where lines come from. [`mod@file`] reads files, directories, compressed files and stdin in
//! chunks of whole lines for `faultline scan`, the tests and the benchmarks; [`kafka`] is the
//! consumer-group member of `faultline run`, and [`commit`] decides when it commits.

pub mod commit;
pub mod file;
pub mod kafka;
