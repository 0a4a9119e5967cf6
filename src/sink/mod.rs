//! Where events go. [`stdout`] prints them for `faultline scan` (JSON lines or text for
//! people); [`webhook`] turns incidents into tickets (generic JSON or Alertmanager).

pub mod kafka;
pub mod stdout;
pub mod webhook;
