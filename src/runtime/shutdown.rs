//! The stop signal shared by every stage of a driver: a graceful stop (drain, commit, exit),
//! and past the drain deadline an abandon (stages stop waiting on their output).
//!
//! Why an error is not kept here: which error stops the service is the driver's business
//! (`pipeline::Stop` keeps the first one); sources and sinks only read the flags.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

/// The shutdown flags.
#[derive(Debug)]
pub struct Shutdown {
    requested: watch::Sender<bool>,
    /// Past the drain deadline: stages give up waiting on the output.
    abandoned: AtomicBool,
}

impl Shutdown {
    /// A shutdown nobody has requested yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Shutdown {
            requested: watch::channel(false).0,
            abandoned: AtomicBool::new(false),
        })
    }

    /// Asks for a graceful stop: drain, commit, exit.
    pub fn request(&self) {
        self.requested.send_replace(true);
    }

    /// Whether a stop was requested.
    pub fn requested(&self) -> bool {
        *self.requested.borrow()
    }

    /// The drain deadline passed: whoever still waits on an output gives up.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::Relaxed);
    }

    /// Whether the drain deadline passed.
    pub fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed)
    }

    /// A receiver that turns true when a stop is requested, for async tasks.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.requested.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reaches_subscribers_and_abandon_is_separate() {
        let s = Shutdown::new();
        let mut rx = s.subscribe();
        assert!(!s.requested() && !*rx.borrow_and_update());
        s.request();
        assert!(s.requested());
        assert!(rx.has_changed().unwrap_or(false) && *rx.borrow());
        assert!(!s.abandoned(), "a request does not abandon");
        s.abandon();
        assert!(s.abandoned());
    }
}
