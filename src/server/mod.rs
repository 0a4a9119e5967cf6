//! The admin HTTP server: `/healthz`, `/readyz`, the incident API and pages, and whatever else
//! is registered on [`Routes`] (the metrics endpoint adds itself the same way).
//!
//! HTTP/1.1 on hyper, bound to 127.0.0.1 by default, read-only (GET and HEAD). Handlers are
//! plain functions from the request path and query to a status and a body: they read shared
//! state, never block.
//!
//! - [`config`]: the `[admin]` table, the bearer token.
//! - [`store`]: the open incidents and a bounded ring of resolved ones, fed by the incident
//!   stage (or `scan`).
//! - [`incidents`]: `/api/v1/incidents` (JSON) and `/incidents` (HTML), with filters.
//! - [`page`]: the HTML of the list and the detail page; [`chart`]: its timeline, inline SVG;
//!   [`html`]: escaping, which every text from a log goes through.
//! - [`report`]: `/report` and `/api/v1/report`, the fleet report over the store's live input,
//!   and the report's families for `/metrics`.

pub mod chart;
pub mod config;
pub mod html;
pub mod incidents;
pub mod kb;
pub mod page;
pub mod report;
pub mod store;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use config::{AdminConfig, AdminError, RawAdmin, Token, DEFAULT_ADMIN_LISTEN};

/// What a handler returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// Value of the `Content-Type` header.
    pub content_type: &'static str,
    /// The response body.
    pub body: String,
    /// Further headers.
    pub headers: Vec<(&'static str, String)>,
}

/// What the HTML pages may load: nothing from elsewhere, no script at all.
pub const PAGE_POLICY: &str =
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; \
     base-uri 'none'; frame-ancestors 'none'";

impl Reply {
    /// A reply of `content_type`.
    pub fn new(status: u16, content_type: &'static str, body: impl Into<String>) -> Self {
        Reply {
            status,
            content_type,
            body: body.into(),
            headers: Vec::new(),
        }
    }

    /// A `text/plain` reply.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Reply::new(status, "text/plain; charset=utf-8", body)
    }

    /// An `application/json` reply.
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        Reply::new(status, "application/json", body)
    }

    /// A `text/html` reply that may load nothing and run no script ([`PAGE_POLICY`]).
    pub fn html(status: u16, body: impl Into<String>) -> Self {
        Reply::new(status, "text/html; charset=utf-8", body)
            .header("Content-Security-Policy", PAGE_POLICY)
    }

    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

/// A request as handlers see it: the path and the decoded query parameters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Get {
    /// The path, as sent (`/incidents/fp2:...`).
    pub path: String,
    /// Query parameters in order, percent-decoded (`+` is a space).
    pub query: Vec<(String, String)>,
}

impl Get {
    /// A request of `path` with the raw query string `query`.
    pub fn new(path: &str, query: Option<&str>) -> Self {
        let query = query
            .unwrap_or("")
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (percent_decode(k), percent_decode(v))
            })
            .collect();
        Get {
            path: percent_decode_path(path),
            query,
        }
    }

    /// The first value of parameter `name`, unless empty.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }
}

fn percent_decode_bytes(text: &str, plus_is_space: bool) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let hex = |c: u8| (c as char).to_digit(16);
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus_is_space => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A query component, decoded (`+` is a space).
pub fn percent_decode(text: &str) -> String {
    percent_decode_bytes(text, true)
}

fn percent_decode_path(text: &str) -> String {
    percent_decode_bytes(text, false)
}

/// A route's handler: builds a fresh reply for each request.
pub type Handler = Arc<dyn Fn(&Get) -> Reply + Send + Sync>;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Anyone who reaches the port (probes, scrapers).
    Open,
    /// With the token, when one is set ([`Routes::with_token`]).
    Token,
}

/// The routing table: exact paths and path prefixes to handlers; the token of the guarded ones.
#[derive(Clone, Default)]
pub struct Routes {
    exact: BTreeMap<&'static str, (Handler, Access)>,
    prefixes: Vec<(&'static str, Handler, Access)>,
    token: Option<Token>,
    refusals: Arc<Refusals>,
}

/// A budget of requests refused for a missing or wrong token: [`Refusals::PER_SECOND`] a
/// second, past which they get 429 with `Retry-After`, so a guessing loop gains nothing by
/// going faster.
#[derive(Debug, Default)]
struct Refusals {
    window: Mutex<Option<(Instant, u32)>>,
}

impl Refusals {
    const PER_SECOND: u32 = 20;

    /// Whether one more refusal fits this second's budget (and counts it).
    fn admit(&self) -> bool {
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        match w.as_mut() {
            Some((start, n)) if now.duration_since(*start) < Duration::from_secs(1) => {
                *n += 1;
                *n <= Self::PER_SECOND
            }
            _ => {
                *w = Some((now, 1));
                true
            }
        }
    }
}

impl Routes {
    /// An empty table.
    pub fn new() -> Self {
        Routes::default()
    }

    /// Adds (or replaces) the open handler of `path`.
    pub fn route(
        mut self,
        path: &'static str,
        handler: impl Fn() -> Reply + Send + Sync + 'static,
    ) -> Self {
        self.exact
            .insert(path, (Arc::new(move |_: &Get| handler()), Access::Open));
        self
    }

    /// Adds (or replaces) the handler of `path`, guarded by the token.
    pub fn guarded(
        mut self,
        path: &'static str,
        handler: impl Fn(&Get) -> Reply + Send + Sync + 'static,
    ) -> Self {
        self.exact.insert(path, (Arc::new(handler), Access::Token));
        self
    }

    /// Adds the handler of every path under `prefix` (ending in `/`), guarded by the token.
    pub fn guarded_prefix(
        mut self,
        prefix: &'static str,
        handler: impl Fn(&Get) -> Reply + Send + Sync + 'static,
    ) -> Self {
        self.prefixes
            .push((prefix, Arc::new(handler), Access::Token));
        self
    }

    /// Requires `token` on the guarded routes (`None`: they are open, as on loopback).
    pub fn with_token(mut self, token: Option<Token>) -> Self {
        self.token = token;
        self
    }

    /// Serves GET and HEAD on the registered paths without credentials.
    pub fn handle(&self, method: &hyper::Method, path: &str) -> Reply {
        self.dispatch(method, &Get::new(path, None), None)
    }

    /// Serves GET and HEAD: 404 on unknown paths, 405 for other methods, 401 on a guarded
    /// route without the token (`authorization` is the `Authorization` header).
    pub fn dispatch(
        &self,
        method: &hyper::Method,
        req: &Get,
        authorization: Option<&str>,
    ) -> Reply {
        let found = self.exact.get(req.path.as_str()).cloned().or_else(|| {
            self.prefixes
                .iter()
                .find(|(p, _, _)| req.path.len() > p.len() && req.path.starts_with(p))
                .map(|(_, h, a)| (Arc::clone(h), *a))
        });
        let Some((handler, access)) = found else {
            let known: Vec<&str> = self.exact.keys().copied().collect();
            return Reply::text(404, format!("not found; try {}\n", known.join(" ")));
        };
        if method != hyper::Method::GET && method != hyper::Method::HEAD {
            return Reply::text(405, "method not allowed\n").header("Allow", "GET, HEAD");
        }
        if access == Access::Token {
            if let Some(token) = &self.token {
                if !token.accepts(authorization) {
                    if !self.refusals.admit() {
                        return Reply::text(429, "too many requests without the token\n")
                            .header("Retry-After", "1");
                    }
                    return Reply::text(401, "a bearer token is required (admin.token)\n")
                        .header("WWW-Authenticate", "Bearer realm=\"faultline\"")
                        .header("WWW-Authenticate", "Basic realm=\"faultline\"");
                }
            }
            // Guarded pages show log text: no shared or browser cache keeps a copy.
            return handler(req).header("Cache-Control", "no-store");
        }
        handler(req)
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

/// How long a client may take to send a request's head, counted from the moment the server
/// waits for it: on a new connection, and again on a kept-alive one between requests. A silent,
/// slow or idle client is closed after it.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once. Past it a new connection is closed at once (and counted in the
/// log at DEBUG), so slow clients cannot take every file descriptor before a token is checked.
pub const MAX_CONNECTIONS: usize = 256;

/// The admin server's connection limits ([`HEADER_TIMEOUT`], [`MAX_CONNECTIONS`] by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// See [`HEADER_TIMEOUT`].
    pub header_timeout: Duration,
    /// See [`MAX_CONNECTIONS`].
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: HEADER_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// Serves until `stop` turns true, with the default [`Limits`].
pub async fn serve(listener: TcpListener, routes: Routes, stop: watch::Receiver<bool>) {
    serve_with(listener, routes, stop, Limits::default()).await;
}

/// Serves until `stop` turns true: each connection on a task of its own, at most
/// `limits.max_connections` at once, each closed when a request head is not complete within
/// `limits.header_timeout`. Accept errors (out of descriptors, say) back off from 10 ms to 1 s
/// instead of spinning.
pub async fn serve_with(
    listener: TcpListener,
    routes: Routes,
    mut stop: watch::Receiver<bool>,
    limits: Limits,
) {
    let routes = Arc::new(routes);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, _) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, backoff_ms = backoff.as_millis() as u64,
                    "admin server accept");
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        backoff = ACCEPT_BACKOFF_MIN;
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::debug!(
                max = limits.max_connections,
                "admin server full; closing a new connection"
            );
            drop(stream);
            continue;
        };
        let routes = Arc::clone(&routes);
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let get = Get::new(req.uri().path(), req.uri().query());
                let auth = req
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok());
                let reply = routes.dispatch(req.method(), &get, auth);
                let mut builder = Response::builder()
                    .status(StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK))
                    .header(hyper::header::CONTENT_TYPE, reply.content_type)
                    .header("X-Content-Type-Options", "nosniff")
                    .header("Referrer-Policy", "no-referrer");
                for (name, value) in &reply.headers {
                    builder = builder.header(*name, value);
                }
                let response = builder
                    .body(Full::new(Bytes::from(reply.body)))
                    .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())));
                async move { Ok::<_, Infallible>(response) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "admin connection");
            }
        });
    }
}

const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

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

    async fn get_with(addr: SocketAddr, path: &str, auth: Option<&str>) -> String {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        let auth = auth
            .map(|a| format!("Authorization: {a}\r\n"))
            .unwrap_or_default();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("writes");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("reads");
        out
    }

    #[tokio::test]
    async fn guarded_routes_need_the_token_and_probes_do_not() {
        let routes = health_routes(|| Ok("ready\n".into()))
            .guarded("/secret", |req: &Get| {
                Reply::text(200, format!("job={:?}\n", req.param("job")))
            })
            .guarded_prefix("/things/", |req: &Get| Reply::text(200, req.path.clone()))
            .with_token(Token::new("t0ken"));
        let listener = bind("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("binds");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = watch::channel(false);
        let server = tokio::spawn(serve(listener, routes, rx));
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let refused = get(addr, "/secret").await;
        assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
        assert!(refused.contains("www-authenticate: Basic"), "{refused}");
        let wrong = get_with(addr, "/secret", Some("Bearer nope")).await;
        assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
        let ok = get_with(addr, "/secret?job=a%20b+c&x", Some("Bearer t0ken")).await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.ends_with("job=Some(\"a b c\")\n"), "{ok}");
        assert!(ok.contains("x-content-type-options: nosniff"), "{ok}");
        assert!(ok.contains("cache-control: no-store"), "{ok}");
        assert!(!get(addr, "/healthz").await.contains("no-store"));
        // A guessing loop is slowed: past the budget of refusals a second, 429.
        let mut statuses = Vec::new();
        for _ in 0..Refusals::PER_SECOND + 5 {
            let r = get_with(addr, "/secret", Some("Bearer guess")).await;
            statuses.push(r[9..12].to_string());
        }
        assert!(statuses.iter().any(|s| s == "429"), "{statuses:?}");
        let thing = get_with(addr, "/things/fp2%3Aab", Some("Bearer t0ken")).await;
        assert!(thing.ends_with("/things/fp2:ab"), "{thing}");
        assert!(get_with(addr, "/things/", Some("Bearer t0ken"))
            .await
            .starts_with("HTTP/1.1 404"));
        tx.send_replace(true);
        server.await.expect("server stops");
    }

    #[tokio::test]
    async fn silent_slow_and_idle_clients_are_closed_and_probes_still_answer() {
        let routes = health_routes(|| Ok("ready\n".into()));
        let listener = bind("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("binds");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = watch::channel(false);
        let limits = Limits {
            header_timeout: Duration::from_millis(300),
            max_connections: 4,
        };
        let server = tokio::spawn(serve_with(listener, routes, rx, limits));
        // Every slot taken by a client that never sends anything.
        let mut silent = Vec::new();
        for _ in 0..limits.max_connections {
            silent.push(
                tokio::net::TcpStream::connect(addr)
                    .await
                    .expect("connects"),
            );
        }
        // Each is closed by the server (EOF), well before the test's own bound.
        for mut s in silent {
            let mut buf = [0u8; 64];
            let read = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
                .await
                .expect("closed by the server, not held open");
            assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        }
        // A slow client, one header line every 100 ms, never finishing: closed too.
        let mut slow = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        slow.write_all(b"GET /healthz HTTP/1.1\r\n")
            .await
            .expect("writes");
        let closed = tokio::time::timeout(Duration::from_secs(10), async {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                if slow.write_all(b"X-Slow: 1\r\n").await.is_err() {
                    return;
                }
                let mut buf = [0u8; 256];
                let read =
                    tokio::time::timeout(Duration::from_millis(1), slow.read(&mut buf)).await;
                if let Ok(Ok(0) | Err(_)) = read {
                    return;
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "the slow client was held open");
        // A kept-alive connection that goes idle after its request is closed as well.
        let mut idle = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("writes");
        let mut seen = Vec::new();
        let eof = tokio::time::timeout(Duration::from_secs(10), async {
            let mut buf = [0u8; 512];
            loop {
                match idle.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        assert!(eof.is_ok(), "the idle connection was held open");
        assert!(String::from_utf8_lossy(&seen).starts_with("HTTP/1.1 200"));
        // And the probe answers.
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        tx.send_replace(true);
        server.await.expect("server stops");
    }
}
