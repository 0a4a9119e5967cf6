//! Signals of `faultline run`: SIGTERM and SIGINT drain and stop, SIGHUP reloads the KB.

use std::sync::Arc;

use crate::runtime::Shutdown;

/// SIGTERM and SIGINT request a graceful stop (a second one exits at once); SIGHUP reloads the
/// KB.
pub async fn handle_signals(stop: Arc<Shutdown>, reload: tokio::sync::mpsc::Sender<()>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = hup.recv() => {
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
