//! Signals of `faultline run`: SIGTERM and SIGINT drain and stop, SIGHUP reloads the KB.

use std::sync::Arc;

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::runtime::Shutdown;

/// The signals `run` and `demo` answer, registered as the process starts. From then on a
/// SIGTERM no longer kills the process by the default action: one that arrives while the KB
/// loads or the consumers connect is kept and stops the pipeline as soon as it has started,
/// with offsets committed and exit status 0, as a pod stopped during start-up expects.
pub struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    /// Registers the handlers; `None` (logged) where the runtime cannot.
    pub fn register() -> Option<Self> {
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(term), Ok(int), Ok(hup)) => Some(Self { term, int, hup }),
            _ => {
                tracing::error!("cannot install signal handlers");
                None
            }
        }
    }

    /// SIGTERM and SIGINT request a graceful stop (a second one exits at once); SIGHUP reloads
    /// the KB.
    pub async fn handle(mut self, stop: Arc<Shutdown>, reload: tokio::sync::mpsc::Sender<()>) {
        loop {
            tokio::select! {
                _ = self.term.recv() => {}
                _ = self.int.recv() => {}
                _ = self.hup.recv() => {
                    tracing::info!("SIGHUP: reloading the knowledge base");
                    let _ = reload.try_send(());
                    continue;
                }
            }
            if stop.requested() {
                tracing::warn!("second signal: exiting without draining");
                std::process::exit(130);
            }
            tracing::info!("signal: draining in-flight records, committing, exiting");
            stop.request();
        }
    }
}
