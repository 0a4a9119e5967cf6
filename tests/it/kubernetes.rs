//! deploy/kubernetes/, checked without a cluster: every manifest parses, each Deployment's
//! arguments are a command line the binary accepts with the ConfigMap's configuration in the
//! role it names, and the names, labels and ports that tie the objects together agree (the
//! Service and the PodMonitor select pods that exist, KEDA scales the match members on the
//! group and topic the configuration consumes, the correlator has a standby).

use std::collections::BTreeMap;

use clap::Parser;
use faultline::cli::{Cli, Command};
use faultline::config::{Config, RawConfig};
use faultline::incident::config::ProcessRole;
use serde::Deserialize;
use serde_norway::Value;

use crate::support;

/// Every document of every manifest, by `kind/name`.
fn manifests() -> BTreeMap<String, Value> {
    let dir = support::repo().join("deploy/kubernetes");
    let mut out = BTreeMap::new();
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("deploy/kubernetes")
        .map(|e| e.expect("entry").path())
        .collect();
    paths.sort();
    for path in paths {
        assert_eq!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml"),
            "{path:?}"
        );
        let text = std::fs::read_to_string(&path).expect("read");
        for doc in serde_norway::Deserializer::from_str(&text) {
            let v = Value::deserialize(doc).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            let kind = v["kind"].as_str().expect("kind").to_string();
            let name = v["metadata"]["name"].as_str().expect("name").to_string();
            assert!(
                out.insert(format!("{kind}/{name}"), v).is_none(),
                "{kind}/{name} twice"
            );
        }
    }
    out
}

fn get<'a>(m: &'a BTreeMap<String, Value>, key: &str) -> &'a Value {
    m.get(key)
        .unwrap_or_else(|| panic!("no {key} in deploy/kubernetes"))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .expect("a list")
        .iter()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

/// The ConfigMap's faultline.toml.
fn toml_text(m: &BTreeMap<String, Value>) -> String {
    get(m, "ConfigMap/faultline-config")["data"]["faultline.toml"]
        .as_str()
        .expect("faultline.toml")
        .to_string()
}

/// Whether `selector` (matchLabels) selects pods labelled `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_mapping()
        .expect("matchLabels")
        .iter()
        .all(|(k, v)| &labels[k.as_str().expect("key")] == v)
}

#[test]
fn each_deployment_runs_its_role_on_the_configmap() {
    let m = manifests();
    let text = toml_text(&m);
    let dir = tempfile::tempdir().expect("tmp");
    // The token the pods mount from their Secret.
    let token = dir.path().join("admin-token");
    std::fs::write(&token, "t0ken\n").expect("write");
    let file = dir.path().join("faultline.toml");
    std::fs::write(
        &file,
        text.replace(
            "/run/secrets/faultline/admin-token",
            &token.display().to_string(),
        ),
    )
    .expect("write");

    for (name, role) in [
        ("faultline-match", ProcessRole::Match),
        ("faultline-correlate", ProcessRole::Correlate),
    ] {
        let d = get(&m, &format!("Deployment/{name}"));
        let pod = &d["spec"]["template"];
        assert!(selects(
            &d["spec"]["selector"]["matchLabels"],
            &pod["metadata"]["labels"]
        ));
        let c = &pod["spec"]["containers"][0];
        let mut args = strings(&c["args"]);
        // The config file is the ConfigMap, mounted where --config points.
        let at = args.iter().position(|a| a == "--config").expect("--config") + 1;
        let mount = c["volumeMounts"]
            .as_sequence()
            .expect("mounts")
            .iter()
            .find(|v| v["name"] == "config")
            .expect("the config mount");
        assert_eq!(
            format!(
                "{}/faultline.toml",
                mount["mountPath"].as_str().expect("path")
            ),
            args[at],
            "{name}"
        );
        let volume = pod["spec"]["volumes"]
            .as_sequence()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == "config")
            .expect("the config volume");
        assert_eq!(volume["configMap"]["name"], "faultline-config");
        args[at] = file.display().to_string();

        let cli = Cli::try_parse_from(std::iter::once("faultline".to_string()).chain(args))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let Command::Run(run) = cli.command else {
            panic!("{name} does not run `faultline run`");
        };
        let config = Config::load(run.config.as_deref(), &run.overrides)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let incidents = config.incidents.as_ref().expect("incidents on");
        assert_eq!(incidents.role, role, "{name}");

        // The admin port the probes and the PodMonitor use is the one faultline listens on.
        let port = &c["ports"][0];
        assert_eq!(port["name"], "admin");
        let listen = config.admin.listen.expect("admin on");
        assert_eq!(
            port["containerPort"].as_u64(),
            Some(u64::from(listen.port())),
            "{name}"
        );
        for probe in ["readinessProbe", "livenessProbe"] {
            assert_eq!(c[probe]["httpGet"]["port"], "admin", "{name} {probe}");
        }
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    }
    // A standby correlator.
    assert!(
        get(&m, "Deployment/faultline-correlate")["spec"]["replicas"]
            .as_u64()
            .is_some_and(|n| n >= 2)
    );
}

#[test]
fn the_service_podmonitor_and_scaler_point_at_what_exists() {
    let m = manifests();
    let raw = RawConfig::from_toml(&toml_text(&m)).expect("faultline.toml parses");
    let labels = |d: &str| {
        get(&m, &format!("Deployment/{d}"))["spec"]["template"]["metadata"]["labels"].clone()
    };
    let (matching, correlating) = (labels("faultline-match"), labels("faultline-correlate"));

    // The incident pages are the correlator's.
    let svc = get(&m, "Service/faultline");
    assert!(selects(&svc["spec"]["selector"], &correlating));
    assert!(!selects(&svc["spec"]["selector"], &matching));
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "admin");
    let external = raw.admin.external_url.clone().expect("external_url");
    assert!(
        external.starts_with("http://faultline."),
        "links name the Service: {external}"
    );

    // Both roles scraped.
    let pm = get(&m, "PodMonitor/faultline");
    let sel = &pm["spec"]["selector"]["matchLabels"];
    assert!(selects(sel, &matching) && selects(sel, &correlating));
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["port"], "admin");
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["path"], "/metrics");

    // KEDA scales the match members on the lag of the group and topic they consume.
    let so = get(&m, "ScaledObject/faultline-match");
    assert_eq!(so["spec"]["scaleTargetRef"]["name"], "faultline-match");
    let trigger = &so["spec"]["triggers"][0];
    assert_eq!(trigger["type"], "kafka");
    assert_eq!(
        trigger["metadata"]["consumerGroup"].as_str(),
        raw.kafka.group_id.as_deref()
    );
    assert_eq!(
        trigger["metadata"]["bootstrapServers"].as_str(),
        raw.kafka.brokers.as_deref()
    );
    let topics = raw.kafka.topics.clone().expect("topics");
    assert_eq!(
        trigger["metadata"]["topic"].as_str(),
        topics.first().map(String::as_str)
    );
    // The correlator's group is not the match members' (KEDA must not count its lag).
    assert_ne!(raw.incidents.group_id, raw.kafka.group_id);
}
