//! The metrics, the alerting rules and the dashboard against the real Prometheus tools:
//! `promtool check metrics` on a rendered registry, `promtool check rules` and `promtool test
//! rules` on dashboards/alerts.yml, and every PromQL expression of the rules and the dashboard
//! evaluated by a real `prometheus` server scraping a rendered faultline registry.
//!
//! The tools come from Debian's `prometheus` package (scripts/setup.sh installs it). Without
//! them these tests print why and pass: everything else still runs.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use faultline::metrics::{
    Metrics, MetricsConfig, Output, RawMetricsConfig, ReloadResult, SpanDrop,
};

use crate::support;

/// The path of `tool` on PATH, or `None` after saying the test is skipped.
pub(crate) fn tool(tool: &str, test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(tool))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        eprintln!(
            "SKIPPED {test}: `{tool}` is not installed (Debian package `prometheus`; \
             scripts/setup.sh installs it)"
        );
    }
    found
}

/// A registry of the repository's KB with a non-zero value in every family.
pub(crate) fn busy_metrics() -> Metrics {
    let config = MetricsConfig::from_raw(&RawMetricsConfig {
        dimensions: vec!["cluster".into()],
        max_values_per_dimension: Some(4),
    })
    .expect("valid");
    let m = Metrics::new(config).expect("registry");
    let kb = support::kb();
    m.set_kb(&kb);
    let engine = support::hyperscan();
    let mut batch = m.batch();
    batch.consumed(120, 48_000);
    batch.scanned(4_000);
    batch.dead_lettered(faultline::metrics::DeadLetterReason::NotAnEnvelope);
    batch.scan_time(Duration::from_millis(12));
    let now = faultline::time::rfc3339_from_unix_nanos(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos(),
    );
    let lines = [
        "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation \
         timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) \
         ran for 600085 milliseconds before timing out.",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ];
    let mut codes = Vec::new();
    let mut correlator =
        faultline::incident::Correlator::new(faultline::incident::IncidentConfig::default())
            .expect("valid");
    let mut changes = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        for mut event in support::events_of_line(&engine, line) {
            event.cluster = Some(["eu-1", "us-2"][i % 2].into());
            event.timestamp = Some(now.clone());
            // One job per line, the Xid on a host: three incidents, one blaming a node.
            event.job_id = format!("job-{i}");
            event.host = Some(format!("node-{i}"));
            codes.push(event.error_code.clone());
            batch.matched(&event);
            correlator.observe(&event, &mut changes);
        }
    }
    correlator.resolve_all(&mut changes);
    assert!(codes.len() >= 3, "the sample lines match: {codes:?}");
    assert!(codes.iter().any(|c| c == "NCCL_TIMEOUT"), "{codes:?}");
    m.flush(&mut batch);
    m.set_partition("fleet.logs", 0, 1_500, Some(98_000));
    m.set_partition("fleet.logs", 1, 20, Some(97_000));
    m.produce_errors(Output::Events, 1);
    m.kb_reload(ReloadResult::Success);
    m.kb_reload(ReloadResult::Failure);
    m.spans_dropped(SpanDrop::QueueFull).inc_by(3);
    let inc = m.incidents();
    inc.open.set(2);
    for change in &changes {
        match change.status {
            faultline::incident::Status::Open => inc.opened(change),
            faultline::incident::Status::Resolved => inc.resolved_incident(change),
            faultline::incident::Status::Updated => {}
        }
    }
    inc.resolved(faultline::metrics::ResolutionLabel::Quiet);
    inc.evicted(faultline::metrics::Eviction::Incident, 1);
    inc.restart_loops.inc();
    inc.tickets_raised.inc_by(2);
    let webhook = m.outputs().output("webhook");
    webhook.count(faultline::metrics::OutputResult::Delivered, 5);
    webhook.retries.inc();
    m.outputs().output("alertmanager").open.set(3);
    inc.bad_node_score_max.set(1.5);
    inc.holds.set(2);
    inc.holds_expired.inc();
    // Unknown error lines, through a real live miner: two templates, three lines.
    let mut live = faultline::unknown::LiveMiner::new(&Default::default(), None);
    let meta = faultline::record::LineMeta::default();
    for message in [
        "ERROR: checkpoint upload to bucket-7 failed with code 12",
        "ERROR: checkpoint upload to bucket-9 failed with code 13",
        "fatal: plugin libnccl-net-x.so could not be loaded",
    ] {
        let line = faultline::unknown::UnknownLine {
            job_id: "job-0",
            message,
            meta: &meta,
            truncated: false,
        };
        live.observe(&line, None);
    }
    assert_eq!(live.templates(), 2);
    m.unknown()
        .publish(&Default::default(), &live.stats(), live.templates());
    m
}

#[test]
fn rendered_metrics_pass_promtool_check_metrics() {
    let Some(promtool) = tool("promtool", "rendered_metrics_pass_promtool_check_metrics") else {
        return;
    };
    let text = busy_metrics().render();
    for family in [
        "faultline_matches_total",
        "faultline_label_overflow_total",
        "faultline_label_dimension_values",
        "faultline_records_consumed_total",
        "faultline_consumed_bytes_total",
        "faultline_lines_scanned_total",
        "faultline_records_dead_lettered_total",
        "faultline_batch_scan_duration_seconds",
        "faultline_log_to_metric_latency_seconds",
        "faultline_consumer_lag_records",
        "faultline_committed_offset",
        "faultline_produce_errors_total",
        "faultline_knowledge_base_entries",
        "faultline_knowledge_base_info",
        "faultline_knowledge_base_reloads_total",
        "faultline_build_info",
        "faultline_spans_dropped_total",
        "faultline_incidents_open",
        "faultline_incidents_opened_total",
        "faultline_incidents_resolved_total",
        "faultline_incident_evictions_total",
        "faultline_incident_restart_loops_total",
        "faultline_tickets_raised_total",
        "faultline_output_changes_total",
        "faultline_output_retries_total",
        "faultline_output_queued_changes",
        "faultline_output_open_items",
        "faultline_bad_node_score_max",
        "faultline_incident_commit_holds",
        "faultline_incident_commit_holds_expired_total",
        "faultline_incident_ranks",
        "faultline_node_incidents_total",
    ] {
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "{family} is rendered"
        );
    }
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("writes");
    let out = child.wait_with_output().expect("promtool runs");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // promtool really lints: a counter without `_total` is reported.
    let mut child = Command::new(tool("promtool", "").expect("found above"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"# HELP bad_counter A counter.\n# TYPE bad_counter counter\nbad_counter 1\n")
        .expect("writes");
    let out = child.wait_with_output().expect("promtool runs");
    assert!(!out.status.success(), "the lint catches a bad name");
}

pub(crate) fn promtool(args: &[&str]) -> std::process::Output {
    let promtool = tool("promtool", "promtool").expect("checked by the caller");
    Command::new(promtool)
        .args(args)
        .current_dir(support::repo())
        .output()
        .expect("promtool runs")
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    if tool(
        "promtool",
        "alert_rules_pass_promtool_check_and_their_unit_tests",
    )
    .is_none()
    {
        return;
    }
    let check = promtool(&["check", "rules", "dashboards/alerts.yml"]);
    support::assert_success(&check);
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(text.contains("SUCCESS: 10 rules found"), "{text}");
    support::assert_success(&promtool(&["test", "rules", "dashboards/alerts_test.yml"]));
}

/// One alerting rule as written in dashboards/alerts.yml.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Rule {
    pub alert: String,
    pub expr: String,
    annotations: std::collections::BTreeMap<String, String>,
}

pub(crate) fn rules() -> Vec<Rule> {
    #[derive(serde::Deserialize)]
    struct Group {
        rules: Vec<Rule>,
    }
    #[derive(serde::Deserialize)]
    struct File {
        groups: Vec<Group>,
    }
    let text =
        std::fs::read_to_string(support::repo().join("dashboards/alerts.yml")).expect("alerts.yml");
    let file: File = serde_norway::from_str(&text).expect("alerts.yml parses");
    file.groups.into_iter().flat_map(|g| g.rules).collect()
}

#[test]
fn every_alert_has_a_summary_a_description_and_a_runbook_section() {
    let runbooks =
        std::fs::read_to_string(support::repo().join("docs/runbooks.md")).expect("runbooks");
    let rules = rules();
    assert_eq!(rules.len(), 10);
    for rule in &rules {
        for key in ["summary", "description", "runbook_url"] {
            assert!(
                rule.annotations.contains_key(key),
                "{} has no {key}",
                rule.alert
            );
        }
        let url = &rule.annotations["runbook_url"];
        let anchor = format!("runbook-{}", rule.alert.to_lowercase());
        assert_eq!(
            url,
            &format!("https://github.com/faultline/faultline/blob/main/docs/runbooks.md#{anchor}"),
            "{}",
            rule.alert
        );
        let tag = format!("<a id=\"{anchor}\"></a>");
        assert!(
            runbooks.contains(&tag),
            "no runbook section {tag} in docs/runbooks.md"
        );
    }
}

pub(crate) fn dashboard() -> serde_json::Value {
    let text = std::fs::read_to_string(support::repo().join("dashboards/fleet-failures.json"))
        .expect("dashboard");
    serde_json::from_str(&text).expect("the dashboard is JSON")
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().expect("panels") {
        out.push(p);
        if let Some(nested) = p["panels"].as_array() {
            out.extend(nested);
        }
    }
    out
}

/// (panel title, PromQL) of every panel target.
pub(crate) fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    panels(dashboard)
        .into_iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or_default().to_string();
            p["targets"].as_array().into_iter().flatten().map(move |t| {
                (
                    title.clone(),
                    t["expr"].as_str().expect("target has expr").to_string(),
                )
            })
        })
        .collect()
}

#[test]
fn the_dashboard_is_a_current_grafana_model() {
    let d = dashboard();
    assert!(d["schemaVersion"].as_u64().expect("schemaVersion") >= 39);
    assert_eq!(d["title"], "Fleet failures");
    assert_eq!(d["uid"], "faultline-fleet");
    let vars = d["templating"]["list"].as_array().expect("variables");
    let ds = vars
        .iter()
        .find(|v| v["name"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    let mut ids = std::collections::HashSet::new();
    let mut kinds = std::collections::BTreeSet::new();
    for p in panels(&d) {
        assert!(
            ids.insert(p["id"].as_u64().expect("id")),
            "duplicate panel id"
        );
        let kind = p["type"].as_str().expect("type");
        assert!(
            ["row", "timeseries", "stat", "bargauge", "table"].contains(&kind),
            "panel type {kind}"
        );
        kinds.insert(kind);
        for key in ["h", "w", "x", "y"] {
            assert!(
                p["gridPos"][key].is_u64(),
                "gridPos.{key} of {}",
                p["title"]
            );
        }
        if kind != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
            assert!(!p["targets"].as_array().expect("targets").is_empty());
            for t in p["targets"].as_array().expect("targets") {
                assert_eq!(t["datasource"]["uid"], "${datasource}", "{}", p["title"]);
            }
        }
    }
    assert_eq!(kinds.len(), 5, "every panel type is used: {kinds:?}");
    let titles: Vec<String> = panels(&d)
        .iter()
        .map(|p| p["title"].as_str().unwrap_or_default().to_string())
        .collect();
    for want in [
        "Failure rate by error code",
        "Top error codes",
        "NCCL_TIMEOUT over time",
        "Root versus cascade",
        "By domain",
        "By category",
        "Consumer lag",
        "Throughput",
        "Dead letters",
        "Knowledge-base reloads",
        "Unknown error lines",
    ] {
        assert!(titles.iter().any(|t| t == want), "panel {want:?} missing");
    }
    // The provisioning files point where docker-compose.yml mounts the dashboard.
    let provider = std::fs::read_to_string(
        support::repo().join("dashboards/provisioning/dashboards/faultline.yml"),
    )
    .expect("provider");
    assert!(provider.contains("path: /var/lib/grafana/dashboards/faultline"));
}

/// Grafana's variables, replaced the way Grafana would before sending a query.
pub(crate) fn grafana_to_promql(expr: &str) -> String {
    let out = expr
        .replace("$__rate_interval", "1m")
        .replace("$__range", "5m")
        .replace("$__interval", "15s")
        .replace("$error_code", ".*")
        .replace("$domain", ".*");
    assert!(!out.contains('$'), "an unknown variable in {expr}");
    out
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A plain HTTP/1.0 GET: (status, body), or `None` when nothing answers yet.
pub(crate) fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split(' ').nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// Polls `f` until it returns `Some`, or panics with `what` after `secs`.
pub(crate) fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::yield_now();
        // Polling a local server: a short pause between attempts, not a synchronisation.
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

/// Serves a live faultline registry on 127.0.0.1; every scrape first publishes one more
/// batch, so counters move between scrapes and rates are not zero.
struct Exporter {
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Exporter {
    fn start(metrics: Metrics) -> Self {
        use std::io::Read;
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
        let addr = listener.local_addr().expect("addr");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let engine = support::hyperscan();
        let events: Vec<_> = [
            "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation \
             timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, \
             Timeout(ms)=600000) ran for 600085 milliseconds before timing out.",
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        ]
        .iter()
        .flat_map(|l| support::events_of_line(&engine, l))
        .collect();
        assert_eq!(events.len(), 2, "both sample lines match");
        // What the report reads of a job besides its incident: rank 0's start-up (16 GPUs)
        // and a progress line.
        let job_facts: Vec<_> = [
            "gpu-a:4242:4300 [0] NCCL INFO comm 0x55d0c8a0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 \
             busId 18000 commId 0x7f3a - Init COMPLETE",
            " iteration      100/  100000 | consumed samples:         3200 | elapsed time per \
             iteration (ms): 812.5 | learning rate: 1.500000E-04 | global batch size:    32 | lm \
             loss: 2.123456E+00 |",
        ]
        .iter()
        .flat_map(|l| support::events_of_line(&engine, l))
        .collect();
        assert_eq!(job_facts.len(), 2, "both report lines match");
        let store = faultline::server::store::IncidentStore::new(1_000, 1_000);
        let flag = std::sync::Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut batch = metrics.batch();
            let mut correlator = faultline::incident::Correlator::new(
                faultline::incident::IncidentConfig::default(),
            )
            .expect("valid");
            for (scrape, stream) in listener.incoming().enumerate() {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 65_536 {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                batch.consumed(10, 4_000);
                batch.scanned(400);
                batch.dead_lettered(faultline::metrics::DeadLetterReason::NotAnEnvelope);
                batch.scan_time(Duration::from_millis(2));
                // rate() over 10 minutes of a young series is small: a burst of NCCL timeouts
                // per scrape makes the NcclTimeoutSpike condition true.
                for e in &events {
                    let n = if e.error_code == "NCCL_TIMEOUT" {
                        100
                    } else {
                        1
                    };
                    for _ in 0..n {
                        batch.matched(e);
                    }
                }
                metrics.flush(&mut batch);
                // One failure per scrape: a job that started, trained for 20 minutes and lost
                // a GPU on a node. The correlator's live report input (what `faultline run`'s
                // admin server keeps) sees its facts and incident, as in the service.
                let t0 = 1_767_225_600_000 + scrape as i64 * 3_600_000;
                let at = |ms: i64| Some(faultline::time::format_ms(t0 + ms));
                for (e, ms) in job_facts.iter().zip([0, 600_000]) {
                    let mut e = e.clone();
                    e.job_id = format!("job-{scrape}");
                    e.timestamp = at(ms);
                    store.observe_match(&e);
                }
                let mut changes = Vec::new();
                for e in &events {
                    let mut e = e.clone();
                    e.job_id = format!("job-{scrape}");
                    e.host = Some(format!("node-{}", scrape % 3));
                    e.timestamp = at(1_800_000);
                    correlator.observe(&e, &mut changes);
                    store.observe_match(&e);
                }
                correlator.resolve_all(&mut changes);
                for c in &changes {
                    store.record(c);
                }
                for c in &changes {
                    match c.status {
                        faultline::incident::Status::Open => metrics.incidents().opened(c),
                        faultline::incident::Status::Resolved => {
                            metrics.incidents().resolved_incident(c)
                        }
                        faultline::incident::Status::Updated => {}
                    }
                }
                if scrape == 2 {
                    metrics.kb_reload(ReloadResult::Failure);
                }
                metrics.set_partition("fleet.logs", 0, 1_500, Some(98_000));
                let body = metrics.render() + &faultline::server::report::families(&store);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    faultline::metrics::CONTENT_TYPE,
                    body.len()
                );
            }
        });
        Exporter {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A `prometheus` server on 127.0.0.1 with its own storage, killed on drop.
pub(crate) struct PrometheusServer {
    child: std::process::Child,
    addr: std::net::SocketAddr,
    dir: tempfile::TempDir,
}

impl PrometheusServer {
    pub(crate) fn start(binary: &std::path::Path, target: std::net::SocketAddr) -> Self {
        let dir = tempfile::tempdir().expect("tmp");
        let rules = support::repo().join("dashboards/alerts.yml");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: faultline\n    static_configs:\n      \
             - targets: ['{target}']\n",
            rules.display()
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).expect("config");
        let addr = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            probe.local_addr().expect("addr")
        };
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        PrometheusServer { child, addr, dir }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The `data.result` of an instant query, or the error Prometheus gave.
    pub(crate) fn query(&self, promql: &str) -> Result<Vec<serde_json::Value>, String> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let (status, body) = http_get(self.addr, &path).ok_or("no answer")?;
        let v: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("{status}: {e}: {body}"))?;
        if v["status"] != "success" {
            return Err(format!("{status}: {} {}", v["errorType"], v["error"]));
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn every_promql_expression_runs_against_a_real_prometheus() {
    let Some(binary) = tool(
        "prometheus",
        "every_promql_expression_runs_against_a_real_prometheus",
    ) else {
        return;
    };
    let exporter = Exporter::start(busy_metrics());
    let server = PrometheusServer::start(&binary, exporter.addr);
    wait_for(120, "prometheus to be ready", || {
        http_get(server.addr, "/-/ready").filter(|(s, _)| *s == 200)
    });
    // Four scrapes, so that every rate over a minute has points to work with.
    wait_for(120, "four scrapes of faultline", || {
        let r = server
            .query("count_over_time(faultline_build_info{job=\"faultline\"}[1m]) >= 4")
            .ok()?;
        (!r.is_empty()).then_some(())
    });

    let d = dashboard();
    let queries = dashboard_queries(&d);
    assert!(queries.len() >= 20, "{} dashboard queries", queries.len());
    for (panel, expr) in &queries {
        let promql = grafana_to_promql(expr);
        let result = server
            .query(&promql)
            .unwrap_or_else(|e| panic!("panel {panel:?}: {promql}\n{e}\n{}", server.log()));
        // A baseline from a day ago has no data in a fresh server; everything else must.
        if !promql.contains("offset 1d") {
            assert!(!result.is_empty(), "panel {panel:?} has no data: {promql}");
        }
    }
    // The report's families come from the live report: interruptions, and GPU-hours lost
    // by the GPU bucket (16 GPUs x 20 minutes of work per failed job).
    for promql in [
        "sum(faultline_interruptions_total{cause=\"gpu\"}) > 0",
        "sum(faultline_gpu_hours_lost_total{cause=\"gpu\"}) > 5",
    ] {
        let r = server.query(promql).expect("query");
        assert!(!r.is_empty(), "{promql}: no data");
    }
    // The template variables' metric and labels exist.
    for var in ["error_code", "domain"] {
        let r = server
            .query(&format!("count by ({var}) (faultline_matches_total)"))
            .expect("query");
        assert!(r.len() > 1, "label_values(faultline_matches_total, {var})");
    }

    // Every rule evaluates without error, and exactly those whose conditions the exporter
    // creates return data: NCCL_TIMEOUT at ~1/s with no baseline, codes never seen before, 10%
    // dead letters, one failed reload.
    let mut with_data = Vec::new();
    for rule in rules() {
        let result = server
            .query(&rule.expr)
            .unwrap_or_else(|e| panic!("rule {}: {}\n{e}", rule.alert, rule.expr));
        if !result.is_empty() {
            with_data.push(rule.alert.clone());
        }
    }
    with_data.sort();
    assert_eq!(
        with_data,
        [
            "FaultlineDeadLetterRate",
            "KnowledgeBaseReloadFailing",
            "NcclTimeoutSpike",
            "NewErrorCode"
        ]
    );
    let health = wait_for(60, "every rule evaluated", || {
        let (_, body) = http_get(server.addr, "/api/v1/rules")?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let rules: Vec<serde_json::Value> = v["data"]["groups"]
            .as_array()?
            .iter()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        let done = rules.len() == 10 && rules.iter().all(|r| r["health"] != "unknown");
        done.then_some(rules)
    });
    for r in &health {
        assert_eq!(
            r["health"], "ok",
            "rule {} failed: {}",
            r["name"], r["lastError"]
        );
    }
    drop(server);
    drop(exporter);
}
