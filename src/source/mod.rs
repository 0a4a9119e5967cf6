//! Where lines come from. [`mod@file`] reads files, directories, compressed files and stdin in
//! chunks of whole lines for `faultline scan`, the tests and the benchmarks; [`kafka`] is the
//! consumer-group member of `faultline run`, [`commit`] decides when it commits, and `end` when a
//! replay (`--exit-at-end`) has read everything.

pub mod commit;
mod end;
pub mod file;
pub mod kafka;
