//! `faultline demo --logs` on a simulated fleet slice (`faultline bench fleet`: restarts under
//! the same job id, Xids and other node events on the hosts' own partitions) gives `scan`'s
//! incidents. The demo produces the lines keyed as a shipper would (a job's by job, a node's by
//! host) over 12 partitions, at most about 12,000 lines ahead of its pipelines, so its match
//! member reads the partitions days of log time apart: a node's partition that sends no match
//! while it lags holds expiry through the member's progress notes, and its late Xids still
//! reach the failures they caused (without the notes, 303 of this slice's 304 failures came
//! out right, one Xid becoming an incident of its own).

use std::collections::BTreeMap;

use faultline::bench::fleet::{write_fleet, FleetOptions};
use serde_json::Value;

use super::out_of_process::faultline;

/// (job, root code, root host) of every incident: each id's last change.
fn answers(stdout: &str) -> BTreeMap<(String, String, String), usize> {
    let mut last: BTreeMap<String, Value> = BTreeMap::new();
    for line in stdout.lines().filter(|l| l.starts_with('{')) {
        let v: Value = serde_json::from_str(line).expect("a JSON line");
        if v["type"] == "incident" {
            last.insert(v["id"].as_str().expect("id").to_string(), v);
        }
    }
    let mut out = BTreeMap::new();
    for v in last.values() {
        let key = (
            v["job_id"].as_str().unwrap_or("").to_string(),
            v["root"]["error_code"].as_str().unwrap_or("").to_string(),
            v["root"]["host"].as_str().unwrap_or("").to_string(),
        );
        *out.entry(key).or_default() += 1;
    }
    out
}

#[test]
fn demo_on_a_fleet_slice_gives_scans_incidents() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = FleetOptions {
        seed: 7,
        jobs: 1_500,
        days: 10,
        hosts: 256,
    };
    write_fleet(&opts, dir.path()).expect("fleet written");
    std::fs::remove_file(dir.path().join("truth.json")).expect("truth.json");
    let scan = faultline()
        .args(["scan", "--format", "json", "--no-summary"])
        .arg(dir.path())
        .output()
        .expect("scan runs");
    crate::support::assert_success(&scan);
    let want = answers(&String::from_utf8_lossy(&scan.stdout));
    let demo = faultline()
        .arg("demo")
        .arg("--logs")
        .arg(dir.path())
        .args(["--admin-listen", "off", "--format", "json"])
        .output()
        .expect("demo runs");
    let stderr = String::from_utf8_lossy(&demo.stderr);
    assert!(demo.status.success(), "{stderr}");
    let got = answers(&String::from_utf8_lossy(&demo.stdout));
    // The slice is larger than what the demo lets its producer run ahead (so partitions are
    // read apart), and its failures include node roots that reach their jobs.
    let lines: usize = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| std::fs::read_to_string(e.expect("entry").path()).expect("read"))
        .map(|t| t.lines().count())
        .sum();
    assert!(lines > 100_000, "{lines} lines");
    let node_roots = want
        .keys()
        .filter(|(job, code, _)| code.starts_with("XID_") && !job.starts_with("node:"))
        .count();
    assert!(
        want.len() >= 250 && node_roots >= 50,
        "{} incidents, {node_roots} Xid roots of jobs",
        want.len()
    );
    let only_scan: Vec<_> = want
        .iter()
        .filter(|(k, n)| got.get(*k) != Some(n))
        .collect();
    let only_demo: Vec<_> = got
        .iter()
        .filter(|(k, n)| want.get(*k) != Some(n))
        .collect();
    assert!(
        only_scan.is_empty() && only_demo.is_empty(),
        "{} incidents from scan, {} from the demo\nonly scan: {only_scan:?}\nonly demo: \
         {only_demo:?}",
        want.len(),
        got.len()
    );
}
