//! The default build posts to `https://` receivers: a private CA and a server certificate made
//! with `openssl` for the test, a Python TLS server on loopback (tests/fixtures/tls_receiver.py),
//! and faultline's Alertmanager sink trusting the CA through `ca_file`. Without the CA (the
//! public roots only) the same post fails: the certificate is verified, not merely accepted.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use faultline::sink::alertmanager::{Alert, AlertmanagerConfig, AlertmanagerSink};

use crate::alertmanager::installed;
use crate::support::repo;

/// Runs `openssl` with `args` in `dir`; panics with its stderr on failure.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("runs openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`ca.pem`) and a certificate for 127.0.0.1 it signed (`server.pem`, `server.key`).
fn make_certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.pem", "-days", "2"]);
    ca.extend(["-subj", "/CN=faultline test CA"]);
    openssl(dir, &ca);
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("ext.cnf"),
        "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .expect("writes ext.cnf");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
}

/// The Python TLS receiver, killed on drop; its stdout gives the port, then one line per POST.
struct Receiver {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    port: u16,
}

impl Receiver {
    fn start(dir: &Path) -> Receiver {
        let mut child = Command::new("python3")
            .arg(repo().join("tests/fixtures/tls_receiver.py"))
            .args([dir.join("server.pem"), dir.join("server.key")])
            .stdout(Stdio::piped())
            .spawn()
            .expect("starts the receiver");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let port = lines
            .next()
            .expect("a first line")
            .expect("reads")
            .trim()
            .parse()
            .expect("the port");
        Receiver { child, lines, port }
    }

    /// The next request the receiver printed (blocks until it prints one).
    fn next_request(&mut self) -> serde_json::Value {
        let line = self.lines.next().expect("a request line").expect("reads");
        serde_json::from_str(&line).expect("json")
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn alert() -> Alert {
    Alert {
        labels: BTreeMap::from([
            ("alertname".to_string(), "FaultlineIncident".to_string()),
            ("error_code".to_string(), "XID_79".to_string()),
        ]),
        annotations: BTreeMap::new(),
        starts_at: "2026-12-01T00:00:00.000Z".into(),
        ends_at: "2026-12-01T00:10:00.000Z".into(),
        generator_url: String::new(),
    }
}

fn sink(url: &str, ca_file: Option<&Path>) -> AlertmanagerSink {
    let mut cfg = AlertmanagerConfig::new(url);
    cfg.ca_file = ca_file.map(Path::to_path_buf);
    cfg.max_attempts = 1;
    cfg.timeout = Duration::from_secs(10);
    AlertmanagerSink::new(cfg).expect("an https URL is accepted by the default build")
}

#[test]
fn the_default_build_posts_to_an_https_receiver_that_a_private_ca_signed() {
    const TEST: &str = "the_default_build_posts_to_an_https_receiver_that_a_private_ca_signed";
    if installed("openssl", "openssl", TEST).is_none()
        || installed("python3", "python3", TEST).is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    make_certificates(dir.path());
    let mut receiver = Receiver::start(dir.path());
    let url = format!("https://user:hunter22@127.0.0.1:{}", receiver.port);

    // The public roots do not know the test CA: refused, and the error hides the password.
    let failed = sink(&url, None).post(&[alert()]).expect_err("unknown CA");
    assert_eq!(failed.attempts, 1);
    assert!(!failed.error.contains("hunter22"), "{}", failed.error);
    assert!(
        failed.error.to_ascii_lowercase().contains("certificate"),
        "{}",
        failed.error
    );

    // With the CA as ca_file the alert arrives, over TLS, at Alertmanager's API path.
    let mut trusting = sink(&url, Some(&dir.path().join("ca.pem")));
    trusting.post(&[alert()]).expect("posted over https");
    assert_eq!(trusting.stats().posted, 1);
    let request = receiver.next_request();
    assert_eq!(request["path"], "/api/v2/alerts");
    let body: serde_json::Value =
        serde_json::from_str(request["body"].as_str().expect("body")).expect("json body");
    assert_eq!(body[0]["labels"]["error_code"], "XID_79");
}
