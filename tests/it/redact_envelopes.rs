//! The second round of secret kinds (secret-named JSON/YAML fields, escaped JSON, `sk-` API
//! keys, Slack tokens, PEM private keys whole, cut and line by line, JWTs, service-account
//! documents), each inside every envelope the repository decodes: raw text, Kubernetes CRI,
//! docker's json-file, Vector, Fluent Bit and OTLP JSON. Written to a temporary directory
//! (every secret made unique per envelope, so each envelope is checked on its own), then
//! scanned with redaction off and on: off, every secret on a matching line is printed (so the
//! checks below could fail); on, none is, in the events, the text output, incidents, webhook
//! payloads, span attributes and `faultline templates`, each kind's marker is there, and the
//! diagnoses are those of the unredacted run.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use faultline::scan::ScanOptions;
use serde_json::json;

use super::redact::{diagnosis_view, downstream_text_in, printed_in, redaction_off};
use crate::support::{events_of_line, hyperscan, repo};

/// Lines longer than this are cut by the reader: the long PEM line below is.
const LINE_LIMIT: usize = 1024;

/// One way a job prints secrets.
struct Scenario {
    name: &'static str,
    /// The lines, in order; several for a block printed line by line.
    lines: Vec<String>,
    /// Secrets on lines that match a KB entry: printed without redaction.
    quoted: Vec<String>,
    /// Secrets on lines that match nothing, or past the line limit: never printed.
    never_quoted: Vec<String>,
    /// Secrets on error lines that match nothing: `faultline templates` quotes them.
    mined: Vec<String>,
    /// The markers redaction must leave.
    markers: &'static [&'static str],
}

/// `base` with its last two characters replaced by `tag` (two digits: valid in every
/// alphabet used here, hex included), so that each envelope's secrets are its own.
fn tagged(base: &str, tag: &str) -> String {
    format!("{}{tag}", &base[..base.len() - 2])
}

fn scenarios(tag: &str) -> Vec<Scenario> {
    let t = |base: &str| tagged(base, tag);
    let api_key = t("Q7wE9rT2yU4iO6pA8sD0fGhJ3kL5zX1c");
    let client_secret = t("cS-4f8d2b6e1a9c3f7d5b0e2a8c");
    let token = t("tK9f3Lm2Qx7Rv5Wz1Hy8Jd4Nb6Pc0");
    let refresh = t("rF2g8Hk4Lp6Mq1Ns3Tv5Wx7Yz9Ab0");
    let access = t("yA3mL9pQ2wE8rT6uI4oP0aS7dF5gH1");
    let key_id = t("8f3e1d2c4b5a69788796a5b4c3d2e1f0a9b8c7d6");
    let openai = t("sk-proj-Xq7Lm2Rv9Tz4Wn8Kp1Hs6Jd3Fb5Gc0Ya-Nu_Me8Qi2");
    let anthropic = t("sk-ant-api03-Vb6Nm1Qw8Er3Ty7Ui2Op5As9Df4Gh0JkLz-Xc3VbA7");
    let xoxb = t("xoxb-2748613950-7391846205173-Ab3Cd5Ef7Gh9Ij1Kl3Mn5Op7");
    let xoxp = t("xoxp-2748613950-2748613951-7391846205175-0f1e2d3c4b5a6978");
    let upload = t("uP7l0aD3tK9n2Xq5Rv8Wz1Hy4Jd6");
    let xapp = t("xapp-1-A07Q3R5T9UV-7391846205174-0f1e2d3c4b5a69788796a5b4c3d2e1f0");
    let jwt = t("eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJpc3MiOiJ0cmFpbmVyIiwiZXhwIjoxNzE0NTIxNjAwfQ.k3Yp9Qx2Lm7Rv4Wz8Tn1Hs6Jd0Fb5Gc3");
    let body = |base: &str| t(base);
    let rsa = [
        body("MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi1w6Zk4pLq8Rv2Xn5Ys7Kd"),
        body("Wq0Hf3Jb6Nc9Gm2Tp5Lx8Vr1Zs4Ua7Ye0Ik3Oh6Dg9Fj2Bl5Cn8Mo1Pp"),
    ];
    // 20 body lines of 64: the line is cut inside its body, long before the END line.
    let openssh: Vec<String> = (0..20)
        .map(|i| {
            body(&format!(
                "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB{i:02}Fw0Kq7Lm2"
            ))
        })
        .collect();
    let ec = [
        body("MHcCAQEEIOa3Kp9Lq2Wm7Xn4Rv8Tz1Ys5Hd6Jb3Nc0Gf9Vk2Pl8QoAoGCCqGSM49"),
        body("AwEHoUQDQgAE7Hq2Lw9Rx4Tz6Vb1Nm8Kp3Js5Fd0Gc7Ya2Xe9Wu4Qi6Oh1Pk3"),
        body("Zr8Ly5Mt2Nv0Bw4Cx6Dz1Ea3Fb9Gc7Hd5Ie2Jf4Kg6Lh8Mi0Nj1Ok3Pl5Q="),
    ];
    let sa_key = body("MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQDfZx8Qw2Er");
    let sa_key_pretty = body("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7Mn4Bv6Cx");
    let sa_key_id = t("c4b5a69788796a5b4c3d2e1f0a9b8c7d68f3e1d2");
    let key_id_pretty = t("0a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3");
    let pem = |kind: &str, lines: &[String]| {
        format!(
            "-----BEGIN {kind}PRIVATE KEY-----\\n{}\\n-----END {kind}PRIVATE KEY-----\\n",
            lines.join("\\n")
        )
    };
    vec![
        Scenario {
            name: "JSON fields",
            lines: vec![format!(
                r#"[rank0]: ValueError: bad provider config {{"provider": "openai", "api_key": "{api_key}", "client_secret": "{client_secret}", "timeout": 30}}"#
            )],
            quoted: vec![api_key, client_secret],
            never_quoted: vec![],
            mined: vec![],
            markers: &["secret_field"],
        },
        Scenario {
            name: "JSON escaped inside a message",
            lines: vec![format!(
                r#"[rank0]: RuntimeError: webhook rejected the payload "{{\"text\": \"job 42 failed\", \"token\": \"{token}\", \"refresh_token\": \"{refresh}\"}}""#
            )],
            quoted: vec![token, refresh],
            never_quoted: vec![],
            mined: vec![],
            markers: &["secret_field"],
        },
        Scenario {
            name: "YAML fields",
            lines: vec![format!(
                r#"yaml.scanner.ScannerError: while scanning credentials.yaml line 4: "  access_token: {access}", line 5: "  private_key_id: '{key_id}'""#
            )],
            quoted: vec![access, key_id],
            never_quoted: vec![],
            mined: vec![],
            markers: &["secret_field"],
        },
        Scenario {
            name: "sk- API keys",
            lines: vec![
                format!("openai.AuthenticationError: Error code: 401 - {{'error': {{'message': 'Incorrect API key provided: {openai}.', 'type': 'invalid_request_error'}}}}"),
                format!("anthropic.AuthenticationError: Error code: 401 - invalid x-api-key {anthropic}"),
            ],
            quoted: vec![openai, anthropic],
            never_quoted: vec![],
            mined: vec![],
            markers: &["openai_api_key", "anthropic_api_key"],
        },
        Scenario {
            name: "Slack tokens",
            lines: vec![
                format!("slack_sdk.errors.SlackApiError: The request to the Slack API failed. (url: https://www.slack.com/api/chat.postMessage, token: {xoxb})"),
                format!("RuntimeError: socket mode handshake failed with app token {xapp}"),
            ],
            quoted: vec![xoxb, xapp],
            never_quoted: vec![],
            mined: vec![],
            markers: &["slack_token"],
        },
        Scenario {
            name: "a JWT",
            lines: vec![format!(
                "jwt.exceptions.ExpiredSignatureError: Signature has expired for {jwt} (iss trainer)"
            )],
            quoted: vec![jwt],
            never_quoted: vec![],
            mined: vec![],
            markers: &["jwt"],
        },
        Scenario {
            name: "a PEM key on one line",
            lines: vec![format!(
                "ValueError: Could not deserialize key data. The data may be in an incorrect format: b'{}'",
                pem("RSA ", &rsa)
            )],
            quoted: rsa.to_vec(),
            never_quoted: vec![],
            mined: vec![],
            markers: &["private_key"],
        },
        Scenario {
            name: "a PEM key cut by the line limit",
            lines: vec![format!(
                "KeyError: 'unexpected private key in config: {}'",
                pem("OPENSSH ", &openssh)
            )],
            quoted: openssh[..2].to_vec(),
            never_quoted: openssh[16..].to_vec(),
            mined: vec![],
            markers: &["private_key"],
        },
        Scenario {
            name: "a PEM key line by line",
            lines: [
                "[rank0]: ValueError: Could not deserialize key data: -----BEGIN EC PRIVATE KEY-----"
                    .to_string(),
            ]
            .into_iter()
            .chain(ec.iter().map(|l| format!("[rank0]: {l}")))
            .chain(["[rank0]: -----END EC PRIVATE KEY-----".to_string()])
            .collect(),
            quoted: vec![],
            never_quoted: ec.to_vec(),
            mined: vec![],
            markers: &["private_key"],
        },
        Scenario {
            name: "a service-account document",
            lines: vec![
                format!(
                    r#"google.auth.exceptions.MalformedError: Service account info was not in the expected format, missing fields token_uri. Info: {{"type": "service_account", "project_id": "ml-prod", "private_key_id": "{sa_key_id}", "private_key": "{}", "client_email": "trainer@ml-prod.iam.gserviceaccount.com"}}"#,
                    pem("", std::slice::from_ref(&sa_key)),
                ),
                // The same document pretty-printed: its lines match no entry.
                "{".to_string(),
                r#"  "type": "service_account","#.to_string(),
                format!(r#"  "private_key_id": "{key_id_pretty}","#),
                format!(
                    r#"  "private_key": "{}","#,
                    pem("", std::slice::from_ref(&sa_key_pretty))
                ),
                "}".to_string(),
            ],
            quoted: vec![sa_key_id, sa_key],
            never_quoted: vec![key_id_pretty, sa_key_pretty],
            mined: vec![],
            markers: &["secret_field"],
        },
        Scenario {
            name: "error lines no entry knows",
            lines: vec![
                format!(r#"level=error msg="artifact upload failed" access_token={upload} retry=3"#),
                format!("ERROR artifact upload failed: store refused token {xoxp}"),
            ],
            quoted: vec![],
            never_quoted: vec![],
            mined: vec![upload, xoxp],
            markers: &[],
        },
    ]
}

/// Wraps one message as a shipper writes it.
type Wrap = fn(&str) -> String;

/// The envelopes: a file name, and how its lines are written.
const ENVELOPES: &[(&str, Wrap)] = &[
    ("raw.log", |m| format!("[default0]:{m}")),
    ("cri.log", |m| {
        format!("2025-03-02T10:01:06.123456789Z stderr F {m}")
    }),
    ("docker.jsonl", |m| {
        json!({"log": format!("{m}\n"), "stream": "stderr", "time": "2025-03-02T10:01:06.000000000Z"})
            .to_string()
    }),
    ("vector.jsonl", |m| {
        json!({"message": m, "host": "gpu-node-07", "timestamp": "2025-03-02T10:01:06Z",
            "kubernetes": {"pod_name": "llm-worker-0",
                "pod_labels": {"training.kubeflow.org/job-name": "llm-sft-42"}}})
        .to_string()
    }),
    ("fluent-bit.jsonl", |m| {
        json!({"date": 1_740_909_666.5, "log": m,
            "kubernetes": {"host": "gpu-node-08", "pod_name": "llm-worker-1",
                "labels": {"job-name": "llm-sft-43"}}})
        .to_string()
    }),
    ("otlp.jsonl", |m| {
        json!({"resourceLogs": [{"resource": {"attributes": [
            {"key": "job.id", "value": {"stringValue": "7311"}},
            {"key": "host.name", "value": {"stringValue": "gpu-node-09"}}]},
            "scopeLogs": [{"logRecords": [{"timeUnixNano": "1740909666000000000",
                "body": {"stringValue": m}}]}]}]})
        .to_string()
    }),
];

/// Writes every scenario in every envelope to `dir`; returns, per envelope file, its scenarios.
fn write_corpus(dir: &Path) -> Vec<(&'static str, Vec<Scenario>)> {
    let mut all = Vec::new();
    for (i, (file, wrap)) in ENVELOPES.iter().enumerate() {
        let scenarios = scenarios(&format!("{i:02}"));
        let mut text = String::new();
        for s in &scenarios {
            for line in &s.lines {
                text += &wrap(line);
                text.push('\n');
            }
            // A shipper that joins a block into one message (Vector's multiline, OTLP): the
            // lines arrive as one record and are split again.
            if file.ends_with(".jsonl") && s.lines.len() > 1 {
                text += &wrap(&s.lines.join("\n"));
                text.push('\n');
            }
        }
        std::fs::write(dir.join(file), text).expect("write");
        all.push((*file, scenarios));
    }
    all
}

fn options(redact: bool) -> ScanOptions {
    let base = if redact {
        ScanOptions::default()
    } else {
        redaction_off()
    };
    ScanOptions {
        max_line_bytes: LINE_LIMIT,
        ..base
    }
}

/// What `faultline templates` prints for `path` (its examples quote unknown error lines).
fn templates(path: &Path, redact: bool) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .current_dir(repo())
        .env_remove("FAULTLINE_KB")
        .args(["templates", "--top", "0", "--format", "json"])
        .args((!redact).then_some("--no-redact"))
        .arg(path)
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf8")
}

#[test]
fn every_kind_in_every_envelope_is_redacted_everywhere() {
    let dir = tempfile::tempdir().expect("tmp");
    let corpus = write_corpus(dir.path());

    let (off_events, off) = printed_in(dir.path(), &options(false));
    let (on_events, on) = printed_in(dir.path(), &options(true));
    let downstream = downstream_text_in(dir.path(), &options(true));

    for (file, scenarios) in &corpus {
        // A template keeps one example: one run per envelope, so each shows its own.
        let mined_off = templates(&dir.path().join(file), false);
        let mined = templates(&dir.path().join(file), true);
        for s in scenarios {
            for secret in &s.quoted {
                assert!(
                    off.contains(secret.as_str()),
                    "{file}, {}: {secret} is not on a matching line",
                    s.name
                );
            }
            for secret in &s.never_quoted {
                assert!(
                    !off.contains(secret.as_str()),
                    "{file}, {}: {secret} is quoted even without redaction",
                    s.name
                );
            }
            for secret in &s.mined {
                assert!(
                    mined_off.contains(secret.as_str()),
                    "{file}, {}: {secret} is not on a mined line",
                    s.name
                );
            }
            for secret in s.quoted.iter().chain(&s.never_quoted).chain(&s.mined) {
                for (what, text) in [
                    ("the output", &on),
                    ("an incident, ticket or span", &downstream),
                    ("`faultline templates`", &mined),
                ] {
                    assert!(
                        !text.contains(secret.as_str()),
                        "{file}, {}: {secret} reached {what}",
                        s.name
                    );
                }
            }
        }
    }
    let markers: BTreeSet<&str> = corpus[0]
        .1
        .iter()
        .flat_map(|s| s.markers.iter().copied())
        .collect();
    for marker in markers {
        assert!(
            on.contains(&format!("[REDACTED:{marker}]")),
            "no [REDACTED:{marker}]"
        );
    }

    // The diagnoses are those of the unredacted lines, and each redacted line still matches
    // the entry it was matched as.
    assert!(on_events.len() >= 6 * 12, "{} events", on_events.len());
    assert_eq!(diagnosis_view(&on_events), diagnosis_view(&off_events));
    let engine = hyperscan();
    for e in on_events.iter().filter(|e| e.line.contains("[REDACTED:")) {
        let again: Vec<String> = events_of_line(&engine, &e.line)
            .into_iter()
            .map(|a| a.kb_id)
            .collect();
        assert!(
            again.contains(&e.kb_id),
            "{} no longer matches {:?} once redacted: {again:?}",
            e.line,
            e.kb_id
        );
    }
}
