//! The admin HTTP server: `/healthz`, `/readyz`, and whatever else is registered on [`Routes`]
//! (the metrics endpoint adds itself the same way).
//!
//! HTTP/1.1 on hyper, bound to 127.0.0.1 by default. Handlers are plain functions from the
//! request path to a status and a text body: they read shared state, never block.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::section::{Errors, Printer};

/// The admin server's default address: loopback only.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9477";

/// `[admin]` as written.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    /// `IP:PORT`, or `off`.
    pub listen: Option<String>,
    /// In-flight records without progress for this long make /readyz fail.
    pub stall_timeout_ms: Option<u64>,
}

/// Validated `[admin]`.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// `None`: no admin server.
    pub listen: Option<SocketAddr>,
    /// In-flight records without progress for this long make /readyz fail.
    pub stall_timeout: std::time::Duration,
}

impl AdminConfig {
    /// Validates `[admin]`, applying defaults.
    pub fn from_raw(raw: RawAdmin, errors: &mut Errors<'_>) -> AdminConfig {
        let listen = match raw.listen.as_deref().unwrap_or(DEFAULT_ADMIN_LISTEN) {
            "off" | "" => None,
            addr => match addr.parse::<SocketAddr>() {
                Ok(a) => Some(a),
                Err(e) => {
                    errors.push(
                        "listen",
                        format!("{addr:?}: {e} (expected IP:PORT, or off)"),
                    );
                    None
                }
            },
        };
        let stall_ms = raw.stall_timeout_ms.unwrap_or(60_000);
        if stall_ms == 0 {
            errors.push("stall_timeout_ms", "must be positive");
        }
        AdminConfig {
            listen,
            stall_timeout: std::time::Duration::from_millis(stall_ms),
        }
    }

    /// The effective `[admin]` table.
    pub fn print(&self, p: &mut Printer) {
        p.table("admin");
        p.value(
            "listen",
            self.listen
                .map_or_else(|| "off".to_string(), |a| a.to_string()),
        );
        p.number("stall_timeout_ms", self.stall_timeout.as_millis());
    }
}

/// What a handler returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// Value of the `Content-Type` header.
    pub content_type: &'static str,
    /// The response body.
    pub body: String,
}

impl Reply {
    /// A `text/plain` reply.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

/// A route's handler: builds a fresh reply for each request.
pub type Handler = Arc<dyn Fn() -> Reply + Send + Sync>;

/// The routing table: exact paths to handlers.
#[derive(Clone, Default)]
pub struct Routes(BTreeMap<&'static str, Handler>);

impl Routes {
    /// An empty table.
    pub fn new() -> Self {
        Routes::default()
    }

    /// Adds (or replaces) the handler of `path`.
    pub fn route(
        mut self,
        path: &'static str,
        handler: impl Fn() -> Reply + Send + Sync + 'static,
    ) -> Self {
        self.0.insert(path, Arc::new(handler));
        self
    }

    /// Serves GET and HEAD on the registered paths; 404 elsewhere, 405 for other methods.
    pub fn handle(&self, method: &hyper::Method, path: &str) -> Reply {
        let Some(h) = self.0.get(path) else {
            let known: Vec<&str> = self.0.keys().copied().collect();
            return Reply::text(404, format!("not found; try {}\n", known.join(" ")));
        };
        if method != hyper::Method::GET && method != hyper::Method::HEAD {
            return Reply::text(405, "method not allowed\n");
        }
        h()
    }
}

/// `/healthz` (the process is alive) and `/readyz` (`ready` says whether the process is ready,
/// and why not).
pub fn health_routes(ready: impl Fn() -> Result<String, String> + Send + Sync + 'static) -> Routes {
    Routes::new()
        .route("/healthz", || Reply::text(200, "ok\n"))
        .route("/readyz", move || match ready() {
            Ok(body) => Reply::text(200, body),
            Err(body) => Reply::text(503, body),
        })
}

/// Binds the admin address. Separate from [`serve`] so callers learn the port (tests bind
/// `127.0.0.1:0`) and a taken port fails at startup.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves until `stop` turns true.
pub async fn serve(listener: TcpListener, routes: Routes, mut stop: watch::Receiver<bool>) {
    let routes = Arc::new(routes);
    loop {
        let (stream, _) = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "admin server accept");
                    continue;
                }
            },
        };
        let routes = Arc::clone(&routes);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let reply = routes.handle(req.method(), req.uri().path());
                let response = Response::builder()
                    .status(StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK))
                    .header(hyper::header::CONTENT_TYPE, reply.content_type)
                    .body(Full::new(Bytes::from(reply.body)))
                    .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())));
                async move { Ok::<_, Infallible>(response) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "admin connection");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("writes");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("reads");
        out
    }

    #[tokio::test]
    async fn routes_answer_over_http() {
        let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let r = Arc::clone(&ready);
        let routes = health_routes(move || {
            if r.load(std::sync::atomic::Ordering::Relaxed) {
                Ok("ready\n".into())
            } else {
                Err("no partitions assigned\n".into())
            }
        })
        .route("/extra", || Reply::text(200, "added later\n"));
        let listener = bind("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("binds");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = watch::channel(false);
        let server = tokio::spawn(serve(listener, routes, rx));
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let not_ready = get(addr, "/readyz").await;
        assert!(not_ready.starts_with("HTTP/1.1 503"), "{not_ready}");
        assert!(not_ready.ends_with("no partitions assigned\n"));
        ready.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/extra").await.ends_with("added later\n"));
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
        tx.send_replace(true);
        server.await.expect("server stops");
    }
}
