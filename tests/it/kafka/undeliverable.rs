//! Ticket changes and alerts that their receivers never accept: with Kafka they go to the
//! dead-letter topic (reason, stage, attempts), not only to a file on the node.

use std::collections::BTreeSet;

use crate::ticket_server::TicketServer;
use faultline::pipeline;

use super::incidents::{incidents, records};
use super::*;

/// The dead letters of one reason.
fn with_reason<'a>(read: &'a [In], reason: &str) -> Vec<&'a In> {
    read.iter()
        .filter(|r| r.header("faultline.reason").as_deref() == Some(reason))
        .collect()
}

/// The Xid 79 scenario against a webhook and an Alertmanager that answer 503 to everything:
/// every ticket change (open, updates, resolution) ends in the configured undeliverable topic
/// with reason `ticket_undeliverable`, stage `webhook`, the attempts made (3, as many requests
/// as the receiver got for that change) and the body that was sent; every alert of a change
/// ends there as `alert_undeliverable` with its attempts (2); the records' dead-letter topic
/// stays empty; and once the resolution's dead letter is acknowledged the incident's hold is
/// lifted, so everything is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_a_failing_receiver_never_accepts_end_in_the_dead_letter_topic() {
    let tickets = TicketServer::start(usize::MAX, 503);
    let alerts = TicketServer::start(usize::MAX, 503);
    let cluster = Cluster::start(1);
    let input = cluster.topic("logs", 1).await;
    let output = cluster.topic("events", 1).await;
    let dlq = cluster.topic("dead", 1).await;
    let undeliverable = cluster.topic("undeliverable", 1).await;
    let topic = cluster.topic("incidents", 1).await;
    let group = unique("group");
    let job = "llm-pretrain-9";
    let lines = crate::incidents::xid_job_hanging(job, 0, 1);
    produce(&cluster.bootstrap, &input, &records(&lines, job)).await;

    let kb = tempfile::tempdir().expect("tmp");
    let mut raw = test_config(&cluster.bootstrap, &group, &input, &output, &dlq, kb.path());
    raw.kb.dir = Some(crate::support::repo().join("kb"));
    raw.dead_letter.undeliverable_topic = Some(undeliverable.clone());
    raw.incidents.topic = Some(topic.clone());
    raw.incidents.resolved_hold_ms = Some(500);
    raw.incidents.window_ms = Some(3_000);
    raw.incidents.quiet_ms = Some(3_000);
    raw.webhook.url = Some(tickets.url.clone());
    raw.webhook.max_attempts = Some(3);
    raw.webhook.initial_backoff_ms = Some(10);
    raw.webhook.max_backoff_ms = Some(20);
    let base = alerts.url.trim_end_matches("/tickets").to_string();
    raw.alertmanager.url = Some(base);
    raw.alertmanager.max_attempts = Some(2);
    raw.alertmanager.initial_backoff_ms = Some(10);
    raw.alertmanager.max_backoff_ms = Some(20);
    raw.alertmanager.resend_interval_ms = Some(600_000);
    let running = pipeline::start(
        config(raw.clone()),
        pipeline::load_kb(&config(raw)).expect("KB"),
    )
    .await
    .expect("starts");

    let changes = incidents(&consume_until(&cluster.bootstrap, &topic, 1, |r| {
        r.iter().any(|m| m.json()["status"] == "resolved")
    }));
    let fingerprint = changes[0]["id"].as_str().expect("id").to_string();
    assert!(
        changes.iter().all(|c| c["ticket"]["raised"] == true),
        "a root-role incident is ticketed from its first change"
    );
    let read = consume_until(&cluster.bootstrap, &undeliverable, 1, |r| {
        with_reason(r, "ticket_undeliverable").len() >= changes.len()
            && with_reason(r, "alert_undeliverable").len() >= changes.len()
    });

    // Tickets: one dead letter per change, with what was sent and why it was given up.
    let dead_tickets = with_reason(&read, "ticket_undeliverable");
    assert_eq!(dead_tickets.len(), changes.len(), "each change once");
    let requests = tickets.requests();
    let mut keys = BTreeSet::new();
    for (d, change) in dead_tickets.iter().zip(&changes) {
        let body = d.json();
        assert_eq!(d.header("faultline.stage").as_deref(), Some("webhook"));
        assert_eq!(d.header("faultline.attempts").as_deref(), Some("3"));
        assert_eq!(d.header("faultline.error").as_deref(), Some("HTTP 503"));
        assert_eq!(d.key.as_deref(), Some(fingerprint.as_bytes()), "keyed");
        assert_eq!(body["type"], "dead_letter");
        assert_eq!(body["attempts"], 3);
        assert_eq!(body["url"], tickets.url.as_str());
        assert_eq!(body["ticket_key"], fingerprint.as_str());
        assert_eq!(body["payload"]["type"], "faultline.ticket");
        assert_eq!(
            body["payload"]["incident"]["revision"], change["revision"],
            "in order, the change that was sent"
        );
        let key = body["idempotency_key"].as_str().expect("key").to_string();
        assert_eq!(
            requests.iter().filter(|r| r.idempotency_key == key).count(),
            3,
            "the receiver saw every attempt of {key}"
        );
        keys.insert(key);
    }
    assert_eq!(keys.len(), changes.len(), "distinct changes");
    assert_eq!(
        dead_tickets.last().expect("resolution").json()["payload"]["incident"]["status"],
        "resolved"
    );
    assert!(
        tickets.tickets.lock().expect("lock").is_empty(),
        "never accepted"
    );

    // Alerts: the alert of each change, as Alertmanager's v2 API takes it.
    let dead_alerts = with_reason(&read, "alert_undeliverable");
    assert!(!alerts.requests().is_empty(), "Alertmanager was asked");
    for d in &dead_alerts {
        let body = d.json();
        assert_eq!(d.header("faultline.stage").as_deref(), Some("alertmanager"));
        assert_eq!(d.header("faultline.attempts").as_deref(), Some("2"));
        assert_eq!(d.header("faultline.error").as_deref(), Some("HTTP 503"));
        assert_eq!(d.key.as_deref(), Some(fingerprint.as_bytes()));
        assert_eq!(body["attempts"], 2);
        assert_eq!(body["incident_id"], fingerprint.as_str());
        assert_eq!(
            body["payload"][0]["labels"]["alertname"],
            "FaultlineIncident"
        );
        assert_eq!(
            body["payload"][0]["labels"]["incident_id"],
            fingerprint.as_str()
        );
    }

    // The records' dead-letter topic is for records only.
    assert_eq!(end_offsets(&cluster.bootstrap, &dlq, 1)[&0], 0);
    // The resolution's dead letter was acknowledged: the hold is lifted.
    wait_for("everything committed after the resolution", || {
        committed(&cluster.bootstrap, &group, &input, 1) == vec![lines.len() as i64]
    })
    .await;
    running.shutdown();
    running.wait().await.expect("clean stop");
}

/// Without `dead_letter.undeliverable_topic`, undeliverable changes go to `dead_letter.topic`;
/// the setting names its own topic, and may not be an input topic.
#[test]
fn the_undeliverable_topic_defaults_to_the_dead_letter_topic() {
    let kb = tempfile::tempdir().expect("tmp");
    let mut raw = test_config("localhost:9092", "g", "logs", "events", "dead", kb.path());
    let cfg = config(raw.clone());
    assert_eq!(cfg.dead_letter.undeliverable_topic, None);
    assert!(
        cfg.redacted().contains("undeliverable_topic = \"dead\""),
        "{}",
        cfg.redacted()
    );
    raw.dead_letter.undeliverable_topic = Some("logs".into());
    let err = Config::from_raw(raw).expect_err("an input topic");
    assert!(
        err.to_string().contains("dead_letter.undeliverable_topic"),
        "{err}"
    );
}
