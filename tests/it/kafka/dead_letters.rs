//! What reaches the dead-letter topic, over the mock cluster: records that make the matcher
//! panic (injected through `pipeline::start_with_faults`, which `faultline run` never calls),
//! records one byte past `input.max_record_bytes`, and secrets with and without
//! `dead_letter.redact`.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use faultline::config::RawConfig;
use faultline::pipeline::{self, FaultInjection, FaultPoint, Running};
use faultline::redact::RuleSpec;
use faultline::sink::kafka::headers;

use super::*;

const MARKER: &str = "@@PANIC@@";

/// Topics and a group for one test.
struct Topics {
    input: String,
    output: String,
    dlq: String,
    group: String,
}

async fn topics(cluster: &Cluster) -> Topics {
    Topics {
        input: cluster.topic("logs", 1).await,
        output: cluster.topic("events", 1).await,
        dlq: cluster.topic("dead", 1).await,
        group: unique("group"),
    }
}

impl Topics {
    fn raw(&self, cluster: &Cluster, kb: &Path) -> RawConfig {
        let mut raw = test_config(
            &cluster.bootstrap,
            &self.group,
            &self.input,
            &self.output,
            &self.dlq,
            kb,
        );
        raw.admin.listen = Some("127.0.0.1:0".into());
        raw
    }
}

async fn start(raw: RawConfig, faults: Option<FaultInjection>) -> Running {
    let cfg = config(raw);
    let loaded = pipeline::load_kb(&cfg).expect("test KB loads");
    pipeline::start_with_faults(cfg, loaded, faults)
        .await
        .expect("pipeline starts")
}

fn fault(point: FaultPoint, times: Option<usize>) -> FaultInjection {
    FaultInjection {
        marker: MARKER.as_bytes().to_vec(),
        point,
        times: times.map(|n| Arc::new(AtomicUsize::new(n))),
    }
}

/// The running pipeline's `/metrics`, as rendered.
async fn metrics_text(running: &Running) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = running.admin_addr().expect("admin server");
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .expect("writes");
    let mut text = String::new();
    s.read_to_string(&mut text).await.expect("reads");
    text
}

/// The sum of the samples of `text` whose series starts with `prefix` (a name, or a name and
/// its first labels).
fn sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// A sample of the running pipeline's `/metrics`.
async fn metric(running: &Running, series: &str) -> Option<f64> {
    metrics_text(running)
        .await
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// What the metrics say went through the match stage.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Counted {
    records: f64,
    lines: f64,
    matches: f64,
    panics: f64,
    panic_dead_letters: f64,
}

impl Counted {
    fn of(text: &str) -> Counted {
        Counted {
            records: sum(text, "faultline_records_consumed_total "),
            lines: sum(text, "faultline_lines_scanned_total "),
            matches: sum(text, "faultline_matches_total{"),
            panics: sum(text, "faultline_panics_total{stage=\"match\"}"),
            panic_dead_letters: sum(
                text,
                "faultline_records_dead_lettered_total{reason=\"panic\"}",
            ),
        }
    }

    fn reached(&self, expected: &Counted) -> bool {
        self.records >= expected.records
            && self.lines >= expected.lines
            && self.matches >= expected.matches
            && self.panics >= expected.panics
            && self.panic_dead_letters >= expected.panic_dead_letters
    }
}

/// The counts once each has reached `expected`'s (a batch's families are published one after
/// the other, so one scrape may see a part), polled under the deadline; the caller asserts
/// that they are exactly `expected`, which a count made twice would exceed.
async fn counted(running: &Running, expected: Counted) -> Counted {
    let polled = tokio::time::timeout(DEADLINE, async {
        let mut ticks = tokio::time::interval(Duration::from_millis(50));
        loop {
            ticks.tick().await;
            let now = Counted::of(&metrics_text(running).await);
            if now.reached(&expected) {
                return now;
            }
        }
    });
    match polled.await {
        Ok(c) => c,
        Err(_) => panic!(
            "the metrics never reached {expected:?}: {:?}",
            Counted::of(&metrics_text(running).await)
        ),
    }
}

/// The input offsets of the events on the output topic, in order.
fn event_offsets(events: &[In]) -> Vec<i64> {
    let mut offsets: Vec<i64> = events
        .iter()
        .map(|e| e.json()["source"]["offset"].as_i64().expect("offset"))
        .collect();
    offsets.sort_unstable();
    offsets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_panics_is_dead_lettered_and_every_other_record_matches() {
    let cluster = Cluster::start(1);
    let t = topics(&cluster).await;
    let poison = format!("[rank2]: BOOM 2 {MARKER}");
    let mut records = vec![Out::new(0, "job-1", "[rank0]: BOOM 1")];
    let mut p = Out::new(0, "job-1", poison.clone());
    p.headers.push(("trace".into(), "t-1".into()));
    records.push(p);
    for (i, line) in ["BOOM 3", "all fine", "BOOM 5"].iter().enumerate() {
        records.push(Out::new(0, &format!("job-{i}"), *line));
    }
    produce(&cluster.bootstrap, &t.input, &records).await;
    let kb = test_kb();
    let running = start(
        t.raw(&cluster, kb.path()),
        Some(fault(FaultPoint::Scan, None)),
    )
    .await;
    wait_for("the group commits past every record", || {
        committed(&cluster.bootstrap, &t.group, &t.input, 1) == vec![5]
    })
    .await;

    let dead = consume_all(&cluster.bootstrap, &t.dlq, 1);
    assert_eq!(dead.len(), 1, "only the record that panics on its own");
    let d = &dead[0];
    assert_eq!(
        d.payload,
        poison.as_bytes(),
        "the original bytes, for replay"
    );
    assert_eq!(d.key.as_deref(), Some(&b"job-1"[..]));
    assert_eq!(d.header("trace").as_deref(), Some("t-1"));
    assert_eq!(d.header(headers::REASON).as_deref(), Some("panic"));
    assert_eq!(d.header(headers::STAGE).as_deref(), Some("match"));
    assert_eq!(d.header(headers::SOURCE), Some(format!("{}/0@1", t.input)));
    assert!(d
        .header(headers::ERROR)
        .is_some_and(|e| e.contains("injected fault")));
    assert_eq!(d.header(headers::REDACTED), None, "not redacted by default");

    let events = consume_all(&cluster.bootstrap, &t.output, 1);
    assert_eq!(event_offsets(&events), vec![0, 2, 4]);

    // The batch panicked, then its retry, then the record alone; the same number whichever
    // batches the records fell into.
    assert_eq!(
        metric(&running, "faultline_panics_total{stage=\"match\"}").await,
        Some(3.0)
    );
    assert_eq!(
        metric(
            &running,
            "faultline_records_dead_lettered_total{reason=\"panic\"}"
        )
        .await,
        Some(1.0)
    );
    let stats = running.stats();
    assert_eq!(
        stats.records, 5,
        "each record counted once despite the retries"
    );
    // The metrics agree: every record consumed once (the poison one too), the four others'
    // lines scanned once, the three matches once, whichever attempt finished them.
    let expected = Counted {
        records: 5.0,
        lines: 4.0,
        matches: 3.0,
        panics: 3.0,
        panic_dead_letters: 1.0,
    };
    assert_eq!(counted(&running, expected).await, expected);
    assert_eq!((stats.invalid, stats.dead_letters_acked), (0, 1));
    assert_eq!(running.health().tracker.errors(), 0);
    running.shutdown();
    running.wait().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_after_a_record_s_events_went_out_sends_none_twice() {
    let cluster = Cluster::start(1);
    let t = topics(&cluster).await;
    let records = [
        Out::new(0, "j", "BOOM 1"),
        Out::new(0, "j", format!("BOOM 2 {MARKER}")),
        Out::new(0, "j", "BOOM 3\nBOOM 4"),
    ];
    produce(&cluster.bootstrap, &t.input, &records).await;
    let kb = test_kb();
    let running = start(
        t.raw(&cluster, kb.path()),
        Some(fault(FaultPoint::AfterSend, None)),
    )
    .await;
    wait_for("the group commits past every record", || {
        committed(&cluster.bootstrap, &t.group, &t.input, 1) == vec![3]
    })
    .await;
    // The poison record's event was with the producer when the panic struck: it stays, the
    // record is dead-lettered, and nothing before or after it is sent again.
    let events = consume_all(&cluster.bootstrap, &t.output, 1);
    assert_eq!(event_offsets(&events), vec![0, 1, 2, 2]);
    let dead = consume_all(&cluster.bootstrap, &t.dlq, 1);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].header(headers::REASON).as_deref(), Some("panic"));
    assert_eq!(
        dead[0].header(headers::SOURCE),
        Some(format!("{}/0@1", t.input))
    );
    assert_eq!(
        metric(&running, "faultline_panics_total{stage=\"match\"}").await,
        Some(1.0)
    );
    assert_eq!(
        running.health().tracker.errors(),
        0,
        "every ack matched an output"
    );
    assert_eq!(running.stats().records, 3);
    // What went out is counted, once: the three records and their four lines, the four events
    // (the poison record's went out before the panic), the panic and its dead letter; the
    // record after the poison one is counted by the retry alone.
    let expected = Counted {
        records: 3.0,
        lines: 4.0,
        matches: 4.0,
        panics: 1.0,
        panic_dead_letters: 1.0,
    };
    assert_eq!(counted(&running, expected).await, expected);
    running.shutdown();
    running.wait().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_that_does_not_recur_is_retried_and_loses_nothing() {
    let cluster = Cluster::start(1);
    let t = topics(&cluster).await;
    let records = [
        Out::new(0, "j", "BOOM 1"),
        Out::new(0, "j", format!("BOOM 2 {MARKER}")),
        Out::new(0, "j", "BOOM 3"),
    ];
    produce(&cluster.bootstrap, &t.input, &records).await;
    let kb = test_kb();
    let running = start(
        t.raw(&cluster, kb.path()),
        Some(fault(FaultPoint::Scan, Some(1))),
    )
    .await;
    wait_for("the group commits past every record", || {
        committed(&cluster.bootstrap, &t.group, &t.input, 1) == vec![3]
    })
    .await;
    let events = consume_all(&cluster.bootstrap, &t.output, 1);
    assert_eq!(event_offsets(&events), vec![0, 1, 2], "each event once");
    assert!(consume_all(&cluster.bootstrap, &t.dlq, 1).is_empty());
    assert_eq!(
        metric(&running, "faultline_panics_total{stage=\"match\"}").await,
        Some(1.0)
    );
    assert_eq!(running.stats().records, 3);
    // The panic struck after the batch was decoded and counted: the retry counts it, once.
    let expected = Counted {
        records: 3.0,
        lines: 3.0,
        matches: 3.0,
        panics: 1.0,
        panic_dead_letters: 0.0,
    };
    assert_eq!(counted(&running, expected).await, expected);
    running.shutdown();
    running.wait().await.expect("clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_of_exactly_max_record_bytes_is_matched_one_more_is_dead_lettered() {
    let cluster = Cluster::start(1);
    let t = topics(&cluster).await;
    let max = 64;
    let pad = |n: usize| format!("BOOM 7 {}", "x".repeat(n - "BOOM 7 ".len()));
    let (at, past) = (pad(max), pad(max + 1));
    assert_eq!((at.len(), past.len()), (max, max + 1));
    let records = [Out::new(0, "j", at.clone()), Out::new(0, "j", past.clone())];
    produce(&cluster.bootstrap, &t.input, &records).await;
    let kb = test_kb();
    let mut raw = t.raw(&cluster, kb.path());
    raw.input.max_record_bytes = Some(max);
    let running = start(raw, None).await;
    wait_for("the group commits past both records", || {
        committed(&cluster.bootstrap, &t.group, &t.input, 1) == vec![2]
    })
    .await;
    let events = consume_all(&cluster.bootstrap, &t.output, 1);
    assert_eq!(
        event_offsets(&events),
        vec![0],
        "exactly the limit is matched"
    );
    assert_eq!(events[0].json()["line"], at.as_str());
    let dead = consume_all(&cluster.bootstrap, &t.dlq, 1);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload, past.as_bytes(), "one past is kept whole");
    assert_eq!(
        dead[0].header(headers::REASON).as_deref(),
        Some("too_large")
    );
    assert_eq!(
        dead[0].header(headers::SOURCE),
        Some(format!("{}/0@1", t.input))
    );
    running.shutdown();
    running.wait().await.expect("clean stop");
}

const HF_TOKEN: &str = "hf_jKlMnOpQrStUvWxYzAbCdEfGhIj0987654321";
const INTERNAL: &str = "itk_k3y0f8ch";

/// One undecodable record holding two secrets (a built-in kind and one of an extra rule), and
/// one match holding them too, under `dead_letter.redact = redact`.
async fn dead_letter_of_a_secret(redact: bool) -> (In, serde_json::Value) {
    let cluster = Cluster::start(1);
    let t = topics(&cluster).await;
    let secret_line = format!("BOOM 1 --hf-token {HF_TOKEN} internal_token={INTERNAL}");
    let records = [
        Out::new(0, "j", format!(r#"{{"log":"{secret_line}"}}"#)),
        Out::new(0, "j", format!("not an envelope: {secret_line}")),
    ];
    produce(&cluster.bootstrap, &t.input, &records).await;
    let kb = test_kb();
    let mut raw = t.raw(&cluster, kb.path());
    raw.input.envelope = Some("json".into());
    raw.dead_letter.redact = Some(redact);
    raw.redact.extra = vec![RuleSpec {
        name: "internal_token".into(),
        pattern: "internal_token=(?P<secret>itk_[a-z0-9]{8})".into(),
    }];
    let running = start(raw, None).await;
    wait_for("the group commits past both records", || {
        committed(&cluster.bootstrap, &t.group, &t.input, 1) == vec![2]
    })
    .await;
    let dead = consume_all(&cluster.bootstrap, &t.dlq, 1);
    let events = consume_all(&cluster.bootstrap, &t.output, 1);
    assert_eq!((dead.len(), events.len()), (1, 1));
    running.shutdown();
    running.wait().await.expect("clean stop");
    (dead[0].clone(), events[0].json())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_keep_the_original_bytes_by_default() {
    let (dead, event) = dead_letter_of_a_secret(false).await;
    let payload = String::from_utf8_lossy(&dead.payload);
    assert!(
        payload.contains(HF_TOKEN) && payload.contains(INTERNAL),
        "{payload}"
    );
    assert_eq!(dead.header(headers::REDACTED), None);
    // Events are redacted whatever dead_letter.redact says, with the extra rule too.
    let line = event["line"].as_str().expect("line");
    assert!(
        !line.contains(HF_TOKEN) && !line.contains(INTERNAL),
        "{line}"
    );
    assert!(line.contains("[REDACTED:internal_token]"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_redact_takes_the_secrets_out_of_dead_letters() {
    let (dead, _) = dead_letter_of_a_secret(true).await;
    let payload = String::from_utf8_lossy(&dead.payload);
    assert!(!payload.contains(HF_TOKEN), "{payload}");
    assert!(!payload.contains(INTERNAL), "{payload}");
    assert!(payload.contains("[REDACTED:hf_token]"), "{payload}");
    assert!(payload.contains("[REDACTED:internal_token]"), "{payload}");
    assert!(
        payload.starts_with("not an envelope: BOOM 1"),
        "the rest is kept"
    );
    assert_eq!(dead.header(headers::REDACTED).as_deref(), Some("true"));
    assert_eq!(
        dead.header(headers::REASON).as_deref(),
        Some("not_an_envelope")
    );
}
