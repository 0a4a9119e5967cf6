//! `faultline report`: what failures cost a fleet, from its logs alone.
//!
//! A layer above [`crate::scan`]: it reads the matches and incidents of a scan (run in-process
//! over log files, or read back from `scan --format json`) and turns them into the questions a
//! fleet's operators ask after the fact: the interruption table by root-cause bucket
//! ([`taxonomy`]), the GPU-hours each interruption cost, the effective training time ratio
//! (ETTR) per job and fleet-wide, the mean time to failure by job size, the lemon nodes, and what
//! the next attempt did after each root code. docs/report.md says how each number is estimated.

pub mod taxonomy;
