//! One HTTP client for the outputs that POST over HTTP (webhook tickets, Alertmanager alerts):
//! the URL check, TLS, the per-request timeout, the retry rule and `Retry-After`.
//!
//! TLS is in every build: rustls with the Mozilla roots (webpki-roots), or, with `ca_file`, the
//! PEM certificates of a private CA instead (what an in-house Alertmanager or ticket system
//! behind a company CA needs).
//!
//! Retries: transport errors, 408, 429 and 5xx are retried with exponential backoff (doubling
//! from `initial_backoff`, capped by `max_backoff`; a `Retry-After` in seconds is honoured up to
//! the cap) until `max_attempts`; other 4xx are not retried. Waiting goes through [`Pause`], so
//! tests record the backoff instead of sleeping. Errors never quote a URL's credentials.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::secret::{redact_url, redact_urls_in};

/// How a client waits between attempts.
pub trait Pause: Send {
    /// Waits `duration` (or records it, in tests).
    fn pause(&mut self, duration: Duration);
}

/// Really waits: `std::thread::sleep`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sleep;

impl Pause for Sleep {
    fn pause(&mut self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// A client that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// Neither `http://` nor `https://`; the URL shown without credentials.
    #[error("{0:?}: expected an http:// or https:// URL")]
    UnsupportedUrl(String),
    /// The CA file cannot be read or holds no PEM certificate.
    #[error("CA file {path}: {message}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

/// When to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per request, the first included.
    pub max_attempts: u32,
    /// Wait before the first retry; doubles on each one.
    pub initial_backoff: Duration,
    /// Cap on any wait, `Retry-After` included.
    pub max_backoff: Duration,
}

/// A request that failed after its retries (or at once, when not retryable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// Attempts made, the first included.
    pub attempts: u32,
    /// The last attempt's error (`HTTP 503`, a transport error without credentials).
    pub error: String,
}

/// The outcome of one attempt.
enum Attempt {
    Done,
    Retry {
        error: String,
        after: Option<Duration>,
    },
    Fail(String),
}

/// POSTs JSON bodies to one URL.
pub struct HttpClient {
    url: String,
    agent: ureq::Agent,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("url", &redact_url(&self.url))
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client for `url` (`http://` or `https://`), `timeout` per attempt (connection to
    /// response), trusting the certificates of `ca_file` (PEM) instead of the public roots when
    /// given.
    pub fn new(url: &str, timeout: Duration, ca_file: Option<&Path>) -> Result<Self, HttpError> {
        let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
        if !(lower.starts_with("http://") || lower.starts_with("https://")) {
            return Err(HttpError::UnsupportedUrl(redact_url(url).into_owned()));
        }
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(path) = ca_file {
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&read_ca_file(path)?));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .tls_config(tls.build())
            .build()
            .into();
        Ok(HttpClient {
            url: url.to_string(),
            agent,
        })
    }

    /// The URL, credentials and all (show it with [`redact_url`]).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// POSTs `body` as JSON with `headers`, retrying per `policy` and waiting through `pause`;
    /// `on_retry` is called before each retry. Ok: the attempts it took.
    pub fn post(
        &self,
        headers: &[(&str, &str)],
        body: &[u8],
        policy: RetryPolicy,
        pause: &mut dyn Pause,
        on_retry: &mut dyn FnMut(),
    ) -> Result<u32, Failed> {
        let mut attempts = 0;
        let mut backoff = policy.initial_backoff;
        loop {
            attempts += 1;
            match self.attempt(headers, body) {
                Attempt::Done => return Ok(attempts),
                Attempt::Retry { after, .. } if attempts < policy.max_attempts => {
                    on_retry();
                    pause.pause(after.unwrap_or(backoff).min(policy.max_backoff));
                    backoff = (backoff * 2).min(policy.max_backoff);
                }
                Attempt::Retry { error, .. } | Attempt::Fail(error) => {
                    return Err(Failed { attempts, error })
                }
            }
        }
    }

    fn attempt(&self, headers: &[(&str, &str)], body: &[u8]) -> Attempt {
        let mut request = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        match request.send(body) {
            Ok(response) => {
                let code = response.status().as_u16();
                if (200..300).contains(&code) {
                    return Attempt::Done;
                }
                let error = format!("HTTP {code}");
                if code == 408 || code == 429 || code >= 500 {
                    let after = response
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    Attempt::Retry { error, after }
                } else {
                    Attempt::Fail(error)
                }
            }
            Err(e) => Attempt::Retry {
                // ureq's errors may quote the URL, credentials and all.
                error: redact_urls_in(&e.to_string()).into_owned(),
                after: None,
            },
        }
    }
}

/// The certificates of a PEM file; an error when it cannot be read or holds none.
fn read_ca_file(path: &Path) -> Result<Vec<ureq::tls::Certificate<'static>>, HttpError> {
    let err = |message: String| HttpError::CaFile {
        path: path.to_path_buf(),
        message,
    };
    let pem = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        if let ureq::tls::PemItem::Certificate(c) = item.map_err(|e| err(e.to_string()))? {
            certs.push(c);
        }
    }
    if certs.is_empty() {
        return Err(err("holds no PEM certificate".into()));
    }
    Ok(certs)
}

/// Checks an output's `url` and `ca_file` settings at config time, so that a bad one is a
/// config error naming its field, not a failure when the output starts.
pub fn check_settings(url: &str, ca_file: Option<&Path>, errors: &mut crate::section::Errors<'_>) {
    match HttpClient::new(url, Duration::from_secs(1), ca_file) {
        Ok(_) => {}
        Err(e @ HttpError::UnsupportedUrl(_)) => errors.push("url", e.to_string()),
        Err(e @ HttpError::CaFile { .. }) => errors.push("ca_file", e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_need_an_http_scheme_and_errors_hide_credentials() {
        let t = Duration::from_secs(1);
        assert!(HttpClient::new("http://h/x", t, None).is_ok());
        assert!(HttpClient::new("HTTPS://h/x", t, None).is_ok());
        let e = HttpClient::new("ftp://user:hunter22@h/x", t, None).expect_err("refused");
        let shown = e.to_string();
        assert!(shown.contains("expected an http"), "{shown}");
        assert!(!shown.contains("hunter22"), "{shown}");
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = Duration::from_secs(1);
        let missing = dir.path().join("none.pem");
        let e = HttpClient::new("https://h", t, Some(&missing)).expect_err("missing");
        assert!(matches!(e, HttpError::CaFile { .. }), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").expect("write");
        let e = HttpClient::new("https://h", t, Some(&empty)).expect_err("empty");
        assert!(e.to_string().contains("holds no PEM certificate"), "{e}");
    }
}
