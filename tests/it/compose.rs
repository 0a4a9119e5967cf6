//! docker-compose.yml, checked without Docker: it parses, every file it mounts or builds from
//! exists, and the service names and ports it uses agree with the configuration files under
//! deploy/ and dashboards/ (Prometheus scrapes faultline's admin port, the collector exports
//! to Jaeger, Grafana reads the Prometheus service...).

use std::collections::BTreeSet;
use std::path::Path;

use serde_norway::Value;

use crate::support;

fn yaml(rel: &str) -> Value {
    let text =
        std::fs::read_to_string(support::repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{rel} is not YAML: {e}"))
}

fn compose() -> Value {
    yaml("docker-compose.yml")
}

fn service<'a>(compose: &'a Value, name: &str) -> &'a Value {
    let s = &compose["services"][name];
    assert!(!s.is_null(), "no service {name}");
    s
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

fn env(service: &Value, key: &str) -> String {
    let v = &service["environment"][key];
    assert!(!v.is_null(), "environment {key} missing");
    text(v)
}

fn list(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| s.iter().map(text).collect())
        .unwrap_or_default()
}

/// `(host path, container path)` of a service's bind mounts.
fn mounts(service: &Value) -> Vec<(String, String)> {
    list(&service["volumes"])
        .into_iter()
        .filter(|v| v.starts_with("./"))
        .map(|v| {
            let mut parts = v.split(':');
            let host = parts.next().unwrap_or_default().to_string();
            let container = parts.next().expect("a container path").to_string();
            (host, container)
        })
        .collect()
}

/// The repository file mounted at `container` in `service`.
fn mounted_at(service: &Value, container: &str) -> String {
    mounts(service)
        .into_iter()
        .find(|(_, c)| c == container)
        .map(|(h, _)| h.trim_start_matches("./").to_string())
        .unwrap_or_else(|| panic!("nothing is mounted at {container}"))
}

/// `host:port` of an URL or address (`http://otel-collector:4317`, `0.0.0.0:9477`).
fn host_port(s: &str) -> (String, u16) {
    let rest = s.split("://").last().unwrap_or(s);
    let authority = rest.split('/').next().unwrap_or(rest);
    let (host, port) = authority.rsplit_once(':').expect("a port");
    (host.to_string(), port.parse().expect("a numeric port"))
}

#[test]
fn the_compose_file_names_its_services_and_pins_its_images() {
    let c = compose();
    let names: BTreeSet<String> = c["services"]
        .as_mapping()
        .expect("services")
        .keys()
        .map(text)
        .collect();
    let want: BTreeSet<String> = [
        "faultline",
        "generator",
        "grafana",
        "jaeger",
        "kafka",
        "kafka-init",
        "otel-collector",
        "prometheus",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(names, want);
    for name in &names {
        let s = service(&c, name);
        if let Some(image) = s["image"].as_str() {
            let tag = image.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
            assert!(!tag.is_empty() && tag != "latest", "{name}: pin {image}");
        }
        // depends_on names services of this file, as a list or a map.
        let deps: Vec<String> = match &s["depends_on"] {
            Value::Sequence(_) => list(&s["depends_on"]),
            Value::Mapping(m) => m.keys().map(text).collect(),
            _ => Vec::new(),
        };
        for d in deps {
            assert!(names.contains(&d), "{name} depends on unknown service {d}");
        }
    }
    assert!(service(&c, "kafka")["image"]
        .as_str()
        .is_some_and(|i| i.starts_with("apache/kafka:")));
    assert!(service(&c, "otel-collector")["image"]
        .as_str()
        .is_some_and(|i| i.starts_with("otel/opentelemetry-collector-contrib:")));
    assert!(service(&c, "jaeger")["image"]
        .as_str()
        .is_some_and(|i| i.starts_with("jaegertracing/all-in-one:")));
}

#[test]
fn every_mounted_and_built_file_exists() {
    let c = compose();
    let repo = support::repo();
    let mut checked = 0;
    for (name, s) in c["services"].as_mapping().expect("services") {
        for (host, _) in mounts(s) {
            assert!(
                repo.join(&host).exists(),
                "{}: {host} does not exist",
                text(name)
            );
            checked += 1;
        }
        if !s["build"].is_null() {
            let context = repo.join(s["build"]["context"].as_str().expect("context"));
            let dockerfile =
                context.join(s["build"]["dockerfile"].as_str().unwrap_or("Dockerfile"));
            assert!(dockerfile.is_file(), "{}", dockerfile.display());
        }
    }
    assert!(checked >= 7, "{checked} mounts");
    let dockerfile = std::fs::read_to_string(repo.join("Dockerfile")).expect("Dockerfile");
    let stages: Vec<&str> = dockerfile.split("\nFROM ").skip(1).collect();
    assert_eq!(stages.len(), 2, "a build stage and a runtime stage");
    assert!(stages[0].contains("bookworm") && stages[0].contains("libhyperscan-dev"));
    assert!(stages[1].starts_with("debian:bookworm-slim") && stages[1].contains("libhyperscan5"));
    assert!(!stages[1].contains("-dev"), "no headers at run time");
}

#[test]
fn kafka_runs_kraft_and_everyone_agrees_on_its_address() {
    let c = compose();
    let kafka = service(&c, "kafka");
    assert!(
        env(kafka, "KAFKA_PROCESS_ROLES").contains("controller"),
        "KRaft"
    );
    assert!(kafka["environment"]["KAFKA_ZOOKEEPER_CONNECT"].is_null());
    let advertised = env(kafka, "KAFKA_ADVERTISED_LISTENERS");
    let internal = advertised
        .split(',')
        .find_map(|l| l.strip_prefix("PLAINTEXT://"))
        .expect("an internal listener")
        .to_string();
    assert_eq!(host_port(&internal).0, "kafka");
    let faultline = service(&c, "faultline");
    assert_eq!(env(faultline, "FAULTLINE_KAFKA_BROKERS"), internal);
    for other in ["generator", "kafka-init"] {
        let script = list(&service(&c, other)["command"]).join("\n");
        assert!(
            script.contains(&format!("kafka:{}", host_port(&internal).1)),
            "{other} uses {internal}"
        );
    }
    // The topic the generator writes is the one faultline reads.
    let topic = env(faultline, "FAULTLINE_KAFKA_TOPICS");
    let generator = list(&service(&c, "generator")["command"]).join("\n");
    assert!(generator.contains(&format!("-t {topic}")), "{generator}");
    let init = list(&service(&c, "kafka-init")["command"]).join("\n");
    for t in [
        topic,
        env(faultline, "FAULTLINE_OUTPUT_TOPIC"),
        env(faultline, "FAULTLINE_DEAD_LETTER_TOPIC"),
    ] {
        assert!(init.contains(&t), "kafka-init creates {t}");
    }
    // After the Kafka branch lands, every FAULTLINE_* variable must be one it reads.
    let config = support::repo().join("src/config.rs");
    if let Ok(source) = std::fs::read_to_string(&config) {
        for (k, _) in faultline["environment"].as_mapping().expect("environment") {
            let k = text(k);
            if k.starts_with("FAULTLINE_") {
                assert!(
                    source.contains(&format!("\"{k}\"")),
                    "{k} is not read by src/config.rs"
                );
            }
        }
    }
}

#[test]
fn prometheus_scrapes_faultline_and_loads_the_alerts() {
    let c = compose();
    let faultline = service(&c, "faultline");
    let (_, admin_port) = host_port(&env(faultline, "FAULTLINE_ADMIN_LISTEN"));
    assert!(
        list(&faultline["ports"])
            .iter()
            .any(|p| p.ends_with(&format!(":{admin_port}"))),
        "the admin port is published"
    );
    let prom = service(&c, "prometheus");
    let flags = list(&prom["command"]);
    let config_path = flags
        .iter()
        .find_map(|f| f.strip_prefix("--config.file="))
        .expect("--config.file");
    let config = yaml(&mounted_at(prom, config_path));
    let jobs = config["scrape_configs"]
        .as_sequence()
        .expect("scrape_configs");
    let job = jobs
        .iter()
        .find(|j| j["job_name"] == "faultline")
        .expect("a faultline job (the alerts select job=\"faultline\")");
    let targets = list(&job["static_configs"][0]["targets"]);
    assert_eq!(targets, [format!("faultline:{admin_port}")]);
    for rule_file in list(&config["rule_files"]) {
        let host = mounted_at(prom, &rule_file);
        assert_eq!(host, "dashboards/alerts.yml");
    }
    // The collector's own metrics port is the one its config serves.
    let collector = yaml(&mounted_at(
        service(&c, "otel-collector"),
        "/etc/otelcol-contrib/config.yaml",
    ));
    let (_, metrics_port) = host_port(
        collector["service"]["telemetry"]["metrics"]["address"]
            .as_str()
            .expect("collector metrics address"),
    );
    let collector_job = jobs
        .iter()
        .find(|j| j["job_name"] == "otel-collector")
        .expect("an otel-collector job");
    assert_eq!(
        list(&collector_job["static_configs"][0]["targets"]),
        [format!("otel-collector:{metrics_port}")]
    );
}

#[test]
fn spans_flow_from_faultline_through_the_collector_to_jaeger() {
    let c = compose();
    let collector_service = service(&c, "otel-collector");
    let flags = list(&collector_service["command"]);
    let config_path = flags
        .iter()
        .find_map(|f| f.strip_prefix("--config="))
        .expect("--config");
    let config = yaml(&mounted_at(collector_service, config_path));
    // faultline sends to the collector's OTLP receiver for its protocol.
    let faultline = service(&c, "faultline");
    let (host, port) = host_port(&env(faultline, "OTEL_EXPORTER_OTLP_ENDPOINT"));
    assert_eq!(host, "otel-collector");
    let protocol = env(faultline, "OTEL_EXPORTER_OTLP_PROTOCOL");
    let receiver = if protocol == "grpc" { "grpc" } else { "http" };
    let (_, listen) = host_port(
        config["receivers"]["otlp"]["protocols"][receiver]["endpoint"]
            .as_str()
            .expect("receiver endpoint"),
    );
    assert_eq!(port, listen);
    // The traces pipeline uses defined parts and ends at Jaeger.
    let pipeline = &config["service"]["pipelines"]["traces"];
    for (kind, names) in [
        ("receivers", list(&pipeline["receivers"])),
        ("processors", list(&pipeline["processors"])),
        ("exporters", list(&pipeline["exporters"])),
    ] {
        assert!(!names.is_empty() || kind == "processors");
        for n in names {
            assert!(
                !config[kind][n.as_str()].is_null(),
                "{kind}.{n} is not defined"
            );
        }
    }
    let exporters = list(&pipeline["exporters"]);
    let jaeger_exporter = exporters
        .iter()
        .find(|e| e.starts_with("otlp"))
        .expect("an OTLP exporter");
    let (host, port) = host_port(
        config["exporters"][jaeger_exporter.as_str()]["endpoint"]
            .as_str()
            .expect("exporter endpoint"),
    );
    assert_eq!(host, "jaeger");
    assert_eq!(port, 4317, "Jaeger's OTLP gRPC port");
    assert_eq!(env(service(&c, "jaeger"), "COLLECTOR_OTLP_ENABLED"), "true");
}

#[test]
fn grafana_reads_prometheus_and_the_dashboard() {
    let c = compose();
    let grafana = service(&c, "grafana");
    let datasources = yaml(&format!(
        "{}/prometheus.yml",
        mounted_at(grafana, "/etc/grafana/provisioning/datasources")
    ));
    let url = datasources["datasources"][0]["url"].as_str().expect("url");
    let (host, port) = host_port(url);
    assert_eq!(host, "prometheus");
    assert!(
        list(&service(&c, "prometheus")["ports"])
            .iter()
            .any(|p| p.ends_with(&format!(":{port}"))),
        "prometheus serves {port}"
    );
    let providers = yaml(&format!(
        "{}/faultline.yml",
        mounted_at(grafana, "/etc/grafana/provisioning/dashboards")
    ));
    let dir = providers["providers"][0]["options"]["path"]
        .as_str()
        .expect("provider path");
    let dashboard = mounts(grafana)
        .into_iter()
        .find(|(h, _)| h.ends_with(".json"))
        .expect("the dashboard is mounted");
    assert_eq!(
        Path::new(&dashboard.1).parent(),
        Some(Path::new(dir)),
        "the dashboard sits in the provider's path"
    );
    assert_eq!(dashboard.0, "./dashboards/fleet-failures.json");
    assert_eq!(
        env(grafana, "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"),
        dashboard.1
    );
}
