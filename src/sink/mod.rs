//! Where events go. [`stdout`] prints them for `faultline scan` (JSON lines or text for people).

pub mod kafka;
pub mod stdout;
