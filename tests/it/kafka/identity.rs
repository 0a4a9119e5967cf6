//! One identity per failure across a restart: a correlator that starts reads the incidents
//! topic back and gives an incident left open its id again, even when the replayed lines open
//! it with another line (here the first run's records are no longer re-read at all: its holds
//! were lifted after `max_hold_ms`, so the second run sees only the failure's later lines).

use std::sync::Arc;

use faultline::pipeline;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_correlator_keeps_the_id_of_an_incident_left_open() {
    let rig = IncidentRig::start().await;
    let cluster = &rig.cluster;
    let (input, topic, group) = (rig.input.clone(), rig.incidents.clone(), rig.group.clone());
    let job = "llm-pretrain-9";
    let lines = crate::incidents::xid_job_hanging(job, 0, 1);
    let (before, after) = lines.split_at(lines.len() - 20);
    produce(
        &cluster.bootstrap,
        &input,
        &super::incidents::records(before, job),
    )
    .await;

    let mut raw = rig.raw.clone();
    raw.incidents.quiet_ms = Some(600_000);
    // Holds lifted after a second: the first run's records get committed while still open.
    raw.incidents.max_hold_ms = Some(1_000);
    let first = pipeline::start(
        config(raw.clone()),
        pipeline::load_kb(&config(raw.clone())).expect("KB"),
    )
    .await
    .expect("starts");
    let opened = consume_until(&cluster.bootstrap, &topic, 1, |r| !r.is_empty());
    let id = opened[0].json()["id"].as_str().expect("id").to_string();
    wait_for(
        "the first run's records committed, the incident still open",
        || committed(&cluster.bootstrap, &group, &input, 1) == vec![before.len() as i64],
    )
    .await;
    first.shutdown();
    first.wait().await.expect("clean stop");

    // The failure's last lines arrive; a new correlator reads only them.
    produce(
        &cluster.bootstrap,
        &input,
        &super::incidents::records(after, job),
    )
    .await;
    let loaded = pipeline::load_kb(&config(raw.clone())).expect("KB");
    let second = pipeline::start_with(config(raw), Arc::new(loaded), Default::default())
        .await
        .expect("starts");
    let read = consume_until(&cluster.bootstrap, &topic, 1, |r| {
        r.iter().filter(|m| m.json()["revision"] == 1).count() >= 2
    });
    second.shutdown();
    second.wait().await.expect("clean stop");
    let opens: Vec<serde_json::Value> = read
        .iter()
        .map(|m| m.json())
        .filter(|j| j["revision"] == 1)
        .collect();
    let reopened = &opens[1];
    assert_ne!(
        reopened["fingerprint"], opens[0]["fingerprint"],
        "the second run opened it with another line"
    );
    assert_eq!(reopened["id"], id.as_str(), "the same failure, the same id");
    assert!(
        read.iter().all(|m| m.json()["id"] == id.as_str()),
        "every change of the failure carries its id"
    );
    assert!(
        read.iter().all(|m| m.key.as_deref() == Some(id.as_bytes())),
        "the incidents topic is keyed by the id"
    );
}
