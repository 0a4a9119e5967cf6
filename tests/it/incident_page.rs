//! The incident pages in a real browser: Debian's `chromium`, headless, against the admin
//! server's `/incidents` routes serving the incidents of the `examples/` logs (scanned and
//! correlated as `faultline scan` does) and of one job whose lines are hostile. The list shows
//! every sample incident, the detail page draws the timeline (an SVG with its rows, the root
//! mark and the cascade band), and the hostile text (`<script>`, quotes, `</svg>`, control
//! characters) is text in the DOM, never markup. A screenshot of a detail page is checked to
//! be a PNG of the window's size; `FAULTLINE_WRITE_SCREENSHOT=1` also writes it to
//! `docs/incident-page.png`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use faultline::incident::{Correlator, IncidentConfig, IncidentEvent};
use faultline::scan::ScanOptions;
use faultline::server::{self, store::IncidentStore, Routes};

use crate::alertmanager::installed;
use crate::support::{hyperscan, repo, scan_paths};

/// The hostile job's lines: Vector envelopes whose job, host and message try to break out.
fn hostile_lines() -> String {
    let line = |sec: u32, rank: u32, message: &str| {
        serde_json::json!({
            "timestamp": format!("2024-11-30T21:00:{sec:02}Z"),
            "job_id": "evil-job\"><script>document.title='pwned'</script>",
            "host": "node-66\"><b id=\"injected\">x</b>",
            "rank": rank,
            "message": message,
        })
        .to_string()
    };
    [
        line(
            1,
            0,
            "RuntimeError: CUDA error: unknown error <script>document.title='pwned'</script> \
             \"double\" 'single' </svg></pre></body> \u{1b}[31mred\u{7}",
        ),
        line(2, 1, "Traceback (most recent call last):"),
    ]
    .join("\n")
        + "\n"
}

/// Every incident change of `paths`, scanned and correlated the way `faultline scan` does.
fn incident_changes(paths: &[&Path]) -> Vec<IncidentEvent> {
    let opts = ScanOptions {
        context_events: true,
        print_matches: false,
        summary: false,
        ..ScanOptions::default()
    };
    let (events, _) = scan_paths(&hyperscan(), paths, &opts);
    let mut correlator = Correlator::new(IncidentConfig::default()).expect("config");
    let mut changes = Vec::new();
    for e in &events {
        correlator.observe(e, &mut changes);
    }
    correlator.flush(&mut changes);
    changes
}

/// Runs headless chromium with `args` then `url`; its stdout. Killed after a minute.
pub(crate) fn chromium(binary: &Path, profile: &Path, args: &[&str], url: &str) -> String {
    let mut child = Command::new(binary)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).map(|_| out)
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().expect("waits").is_some() {
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish {url} within a minute");
        }
        // Waiting on a child process: a short pause between polls, not a synchronisation.
        std::thread::park_timeout(Duration::from_millis(50));
    }
    reader.join().expect("joins").expect("utf8 DOM")
}

/// (width, height) of a PNG, from its IHDR chunk.
fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    if bytes.len() < 24 || &bytes[..8] != b"\x89PNG\r\n\x1a\n" || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Some((be(&bytes[16..20]), be(&bytes[20..24])))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_shows_the_list_the_timeline_and_hostile_lines_as_text() {
    let test = "incident_page::chromium_shows_the_list_the_timeline_and_hostile_lines_as_text";
    let Some(binary) = installed("chromium", "chromium", test) else {
        return;
    };
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tmp");
    let hostile = dir.path().join("hostile.jsonl");
    std::fs::write(&hostile, hostile_lines()).expect("write");
    let examples = repo().join("examples");
    let changes = incident_changes(&[&examples, &hostile]);
    let store = IncidentStore::new(1_000, 1_000);
    for c in &changes {
        store.record(c);
    }
    let (open, resolved) = store.len();
    let latest: Vec<Arc<IncidentEvent>> = store.query(&Default::default(), 1_000);
    assert_eq!(latest.len(), open + resolved);
    let jobs: std::collections::BTreeSet<&str> = latest.iter().map(|i| i.job_id.as_str()).collect();
    for want in [
        "llama-pretrain-4821",
        "bert-finetune-oom-77",
        "gpt-neox-mpirun-55",
        "moe-sft-991",
    ] {
        assert!(jobs.contains(want), "{want} missing from {jobs:?}");
    }

    let listener = server::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let routes = server::incidents::routes(Routes::new(), Arc::clone(&store));
    let serving = tokio::spawn(server::serve(listener, routes, stopped));

    let xid = latest
        .iter()
        .find(|i| i.job_id == "llama-pretrain-4821")
        .expect("the Xid incident")
        .clone();
    let evil = latest
        .iter()
        .find(|i| i.job_id.starts_with("evil-job"))
        .expect("the hostile incident")
        .clone();
    let profile = dir.path().join("profile");
    let shot = dir.path().join("incident.png");
    let (list, detail, bad) = tokio::task::spawn_blocking({
        let (binary, profile, shot) = (binary.clone(), profile.clone(), shot.clone());
        let (xid_fp, evil_fp) = (xid.fingerprint.clone(), evil.fingerprint.clone());
        move || {
            let url = |path: &str| format!("http://{addr}{path}");
            let list = chromium(&binary, &profile, &["--dump-dom"], &url("/incidents"));
            let detail = chromium(
                &binary,
                &profile,
                &["--dump-dom"],
                &url(&format!("/incidents/{xid_fp}")),
            );
            let bad = chromium(
                &binary,
                &profile,
                &["--dump-dom"],
                &url(&format!("/incidents/{evil_fp}")),
            );
            let _ = chromium(
                &binary,
                &profile,
                &[
                    &format!("--screenshot={}", shot.display()),
                    "--window-size=1200,1750",
                ],
                &url(&format!("/incidents/{xid_fp}")),
            );
            (list, detail, bad)
        }
    })
    .await
    .expect("joins");

    // The list: one row per incident held, every sample job among them.
    assert_eq!(
        list.matches("<tr class=\"incident\"").count(),
        latest.len().min(100),
        "{list}"
    );
    for job in &jobs {
        if !job.starts_with("evil") {
            assert!(list.contains(job), "{job} not listed");
        }
    }
    assert!(list.contains(&format!("href=\"/incidents/{}\"", xid.id)));

    // The detail page draws the timeline: rows, the root mark, the cascade band.
    assert!(
        detail.contains(&xid.summary.replace('&', "&amp;")),
        "headline"
    );
    let svg_start = detail.find("<svg").expect("an inline SVG");
    let svg = &detail[svg_start
        ..detail[svg_start..]
            .find("</svg>")
            .map_or(detail.len(), |e| svg_start + e)];
    assert!(svg.contains("id=\"timeline\""), "{svg}");
    assert_eq!(svg.matches("class=\"mark root\"").count(), 1, "{svg}");
    assert_eq!(
        svg.matches("class=\"row\"").count(),
        xid.timeline.rows.len(),
        "one row per rank or host"
    );
    assert!(xid.timeline.rows.len() > 2, "{:?}", xid.timeline.rows);
    if xid.cascades.matches > 0 {
        assert!(svg.contains("class=\"cascade-band\""), "{svg}");
    }
    assert!(detail.contains("id=\"workarounds\""), "the diagnosis");

    // The hostile lines are text: no element they tried to inject, the text shown escaped.
    assert!(
        !bad.contains("<script"),
        "a script element in the DOM: {bad}"
    );
    assert!(
        !bad.contains("<b id=\"injected\""),
        "an injected element: {bad}"
    );
    assert!(
        bad.contains("&lt;b id=\"injected\"&gt;"),
        "the host as text"
    );
    assert!(!bad.contains("<title>pwned"), "{bad}");
    assert!(
        bad.contains("&lt;script&gt;document.title='pwned'&lt;/script&gt;"),
        "the line as text: {bad}"
    );
    assert!(bad.contains("&lt;/svg&gt;&lt;/pre&gt;"), "{bad}");
    assert!(
        bad.contains("red\u{2407}") && !bad.contains('\u{1b}'),
        "the colour code stripped as in every quoted line, other controls as pictures: {bad}"
    );
    assert_eq!(bad.matches("</svg>").count(), 1, "one chart, closed once");
    assert!(
        bad.contains("class=\"mark root\""),
        "the chart survived the host name"
    );

    // The screenshot is a PNG of the window.
    let png = std::fs::read(&shot).expect("a screenshot");
    assert_eq!(png_size(&png), Some((1200, 1750)));
    if std::env::var_os("FAULTLINE_WRITE_SCREENSHOT").is_some() {
        let out: PathBuf = repo().join("docs/incident-page.png");
        std::fs::write(&out, &png).expect("docs/incident-page.png");
    }
    stop.send_replace(true);
    serving.await.expect("server stops");
    eprintln!(
        "incident page test: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The dashboard's data links on "Failures by root cause" and "Error codes" open the incident
/// list filtered by the code they were clicked on: followed against a served list, each shows
/// the incidents with that root and no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_links_each_root_cause_to_its_incidents() {
    let d = crate::observability::dashboard();
    let var = d["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .find(|v| v["name"] == "faultline_url")
        .expect("a faultline_url variable")
        .clone();
    assert_eq!(var["type"], "textbox");
    assert_eq!(
        var["query"],
        format!("http://{}", faultline::server::DEFAULT_ADMIN_LISTEN)
    );
    let mut links = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        let title = p["title"].as_str().unwrap_or("");
        let defaults = p["fieldConfig"]["defaults"]["links"].as_array().cloned();
        let overrides = p["fieldConfig"]["overrides"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|o| o["matcher"]["options"] == "error_code")
            .flat_map(|o| o["properties"].as_array().cloned().unwrap_or_default())
            .filter(|prop| prop["id"] == "links")
            .flat_map(|prop| prop["value"].as_array().cloned().unwrap_or_default());
        for link in defaults.into_iter().flatten().chain(overrides) {
            links.push((
                title.to_string(),
                link["url"].as_str().unwrap_or("").to_string(),
            ));
        }
    }
    let titles: Vec<&str> = links.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        titles,
        ["Failures by root cause", "Error codes"],
        "{links:?}"
    );

    let store = IncidentStore::new(1_000, 1_000);
    for c in incident_changes(&[&repo().join("examples")]) {
        store.record(&c);
    }
    let listener = server::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let routes = server::incidents::routes(Routes::new(), Arc::clone(&store));
    let serving = tokio::spawn(server::serve(listener, routes, stopped));
    let checked = tokio::task::spawn_blocking(move || {
        let mut checked = 0;
        for (_, url) in &links {
            for code in ["XID_79", "CUDA_OOM"] {
                let url = url
                    .replace("${faultline_url}", &format!("http://{addr}"))
                    .replace("${__field.labels.error_code}", code)
                    .replace("${__data.fields.error_code}", code);
                let path = url
                    .strip_prefix(&format!("http://{addr}"))
                    .expect("under the admin server");
                let (status, body) = crate::observability::http_get(addr, path).expect("answers");
                assert_eq!(status, 200, "{url}");
                let rows = body.matches("<tr class=\"incident\"").count();
                let with_code = body
                    .matches(&format!("<td><code>{code}</code></td>"))
                    .count();
                assert!(
                    rows >= 1 && rows == with_code,
                    "{url}: {rows} rows, {with_code} {code}"
                );
                checked += 1;
            }
        }
        checked
    })
    .await
    .expect("joins");
    assert_eq!(checked, 4);
    stop.send_replace(true);
    serving.await.expect("server stops");
}
