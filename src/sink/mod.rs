//! Where events go. [`stdout`] prints them for `faultline scan` (JSON lines or text for
//! people); [`webhook`] turns incidents into tickets (generic JSON or Alertmanager's webhook
//! payload); [`alertmanager`] posts them to Alertmanager's API as alerts; both POST through
//! [`http`] (TLS, retries, `Retry-After`) and are incident outputs behind [`output`]'s one
//! interface.

pub mod alertmanager;
pub mod http;
pub mod kafka;
pub mod output;
pub mod stdout;
#[cfg(test)]
pub(crate) mod ticket_server;
pub mod webhook;

/// The incident page of `fingerprint` on the admin server at `base`: what tickets and alerts
/// link to (`incident_url`).
pub fn incident_url(base: &str, fingerprint: &str) -> String {
    format!("{}/incidents/{fingerprint}", base.trim_end_matches('/'))
}
