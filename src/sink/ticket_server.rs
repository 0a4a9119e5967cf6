//! A ticket system for tests (unit and integration): an HTTP server on 127.0.0.1:0.
//!
//! Not part of the library: the unit tests compile it as `sink::ticket_server` (cfg(test)),
//! the integration tests include this same file (`tests/it/main.rs`).

// Each test binary uses part of it, and its `pub` items are for whichever binary includes it.
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// One request the server received.
#[derive(Debug, Clone)]
pub struct TicketRequest {
    pub fingerprint: String,
    pub idempotency_key: String,
    pub status: String,
    pub body: Value,
}

/// Answers the first `fail_first` requests with `status` (a 429 with `Retry-After: 7`),
/// then 200, upserting tickets by `X-Faultline-Fingerprint` and ignoring repeated
/// `Idempotency-Key`s. Every request, refused or not, is recorded.
pub struct TicketServer {
    pub url: String,
    addr: SocketAddr,
    pub tickets: Arc<Mutex<BTreeMap<String, Value>>>,
    pub applied: Arc<Mutex<BTreeSet<String>>>,
    /// The requests so far, and a signal on each new one.
    received: Arc<(Mutex<Vec<TicketRequest>>, Condvar)>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TicketServer {
    /// A server that accepts every request.
    pub fn accepting() -> Self {
        Self::start(0, 200)
    }

    pub fn start(fail_first: usize, status: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut server = TicketServer {
            url: format!("http://{addr}/tickets"),
            addr,
            tickets: Arc::default(),
            applied: Arc::default(),
            received: Arc::default(),
            stop: Arc::default(),
            thread: None,
        };
        let (tickets, applied, received, stop) = (
            Arc::clone(&server.tickets),
            Arc::clone(&server.applied),
            Arc::clone(&server.received),
            Arc::clone(&server.stop),
        );
        let thread = std::thread::spawn(move || {
            for (n, conn) in listener.incoming().enumerate() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let code = if n < fail_first { status } else { 200 };
                serve_one(conn, code, &tickets, &applied, &received);
            }
        });
        server.thread = Some(thread);
        server
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<TicketRequest> {
        self.received.0.lock().expect("lock").clone()
    }

    /// Waits until the requests received so far satisfy `done`, woken by each new request,
    /// for at most `timeout`; returns them either way.
    pub fn wait_for(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&[TicketRequest]) -> bool,
    ) -> Vec<TicketRequest> {
        let deadline = Instant::now() + timeout;
        let (lock, signal) = &*self.received;
        let mut got = lock.lock().expect("lock");
        while !done(&got) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            got = signal.wait_timeout(got, left).expect("lock").0;
        }
        got.clone()
    }
}

impl Drop for TicketServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_one(
    conn: TcpStream,
    code: u16,
    tickets: &Mutex<BTreeMap<String, Value>>,
    applied: &Mutex<BTreeSet<String>>,
    received: &(Mutex<Vec<TicketRequest>>, Condvar),
) -> Option<()> {
    let mut reader = BufReader::new(conn);
    let mut headers = BTreeMap::new();
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    let header = |k: &str| headers.get(k).cloned().unwrap_or_default();
    let req = TicketRequest {
        fingerprint: header("x-faultline-fingerprint"),
        idempotency_key: header("idempotency-key"),
        status: header("x-faultline-status"),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    if code == 200
        && applied
            .lock()
            .expect("lock")
            .insert(req.idempotency_key.clone())
    {
        tickets
            .lock()
            .expect("lock")
            .insert(req.fingerprint.clone(), req.body.clone());
    }
    let reason = if code == 200 { "OK" } else { "Unavailable" };
    let extra = if code == 429 {
        "Retry-After: 7\r\n"
    } else {
        ""
    };
    let response = format!(
        "HTTP/1.1 {code} {reason}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    // Recorded before the answer, so a test that saw its call return sees its request.
    received.0.lock().expect("lock").push(req);
    received.1.notify_all();
    let _ = reader.into_inner().write_all(response.as_bytes());
    Some(())
}
