//! A record that kills the process (an abort, as a crash in native code would: no panic handler
//! catches it), out of process: the pipeline runs in a child process of this test binary, with
//! the abort injected through `pipeline::start_with_faults` (which `faultline run` never calls)
//! and the crash notes under `pipeline.state_dir`. Each crash leaves its note; the children
//! narrow the suspect down to the record, and the fourth one dead-letters it (reason
//! `crashed_process`) and moves on: the partition progresses after at most three restarts.

use std::process::{Command, Stdio};

use faultline::pipeline::{self, FaultInjection, FaultPoint};
use faultline::sink::kafka::headers;

use super::out_of_process::{broker, Topics};
use super::*;

const MARKER: &str = "@@ABORT@@";
/// The child's inputs, one environment variable each (empty in a normal test run).
const ENV: [&str; 6] = [
    "FAULTLINE_POISON_BROKERS",
    "FAULTLINE_POISON_GROUP",
    "FAULTLINE_POISON_INPUT",
    "FAULTLINE_POISON_OUTPUT",
    "FAULTLINE_POISON_DLQ",
    "FAULTLINE_POISON_STATE",
];
const RECORDS: i64 = 40;
/// The offset of the record that aborts the process.
const POISON: i64 = 23;

/// The child: a pipeline that aborts on the marked record, until killed. Run only by
/// [`a_record_that_aborts_the_process_is_dead_lettered_after_three_crashes`], which starts this
/// test binary again on itself (`--exact`) with the inputs in [`ENV`]: their presence makes
/// the test run as the child.
async fn poison_child() {
    let var = |i: usize| std::env::var(ENV[i]).expect("started by the poison-record test");
    let (bootstrap, group, input, output, dlq, state) =
        (var(0), var(1), var(2), var(3), var(4), var(5));
    let kb = test_kb();
    let mut raw = test_config(&bootstrap, &group, &input, &output, &dlq, kb.path());
    raw.pipeline.state_dir = Some(state.into());
    let cfg = config(raw);
    let loaded = pipeline::load_kb(&cfg).expect("test KB loads");
    let faults = FaultInjection {
        marker: MARKER.as_bytes().to_vec(),
        point: FaultPoint::Abort,
        times: None,
    };
    let running = pipeline::start_with_faults(cfg, loaded, Some(faults))
        .await
        .expect("pipeline starts");
    // Runs until the parent kills it, or the marked record aborts it.
    let report = running.wait().await;
    panic!("the pipeline stopped on its own: {report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_aborts_the_process_is_dead_lettered_after_three_crashes() {
    if std::env::var_os(ENV[0]).is_some() {
        return poison_child().await;
    }
    let (mut broker, bootstrap) = broker();
    let t = Topics::made(&mut broker, &bootstrap).await;
    let records: Vec<Out> = (0..RECORDS)
        .map(|i| {
            let marker = if i == POISON { MARKER } else { "" };
            Out::new(0, "job", format!("BOOM {i} {marker}"))
        })
        .collect();
    produce(&bootstrap, &t.input, &records).await;
    let state = tempfile::tempdir().expect("state dir");

    let exe = std::env::current_exe().expect("the test binary");
    let mut crashes = 0;
    let mut logs = Vec::new();
    loop {
        assert!(
            crashes <= 3,
            "the partition did not progress after {crashes} crashes: {logs:#?}"
        );
        let values = [
            bootstrap.as_str(),
            &t.group,
            &t.input,
            &t.output,
            &t.dlq,
            &state.path().display().to_string(),
        ]
        .map(str::to_string);
        let mut cmd = Command::new(&exe);
        cmd.args([
            "kafka::poison::a_record_that_aborts_the_process_is_dead_lettered_after_three_crashes",
            "--exact",
        ])
        .args(["--nocapture", "--test-threads", "1"])
        .env("FAULTLINE_LOG", "warn")
        .stdout(Stdio::null());
        for (k, v) in ENV.iter().zip(values) {
            cmd.env(k, v);
        }
        let mut child = super::crash_loop::Member::spawn(&mut cmd);
        let mut exit = None;
        wait_for("the child to crash or commit every record", || {
            exit = child.child.try_wait().expect("try_wait");
            exit.is_some() || committed(&bootstrap, &t.group, &t.input, 1) == vec![RECORDS]
        })
        .await;
        match exit {
            Some(status) => {
                use std::os::unix::process::ExitStatusExt;
                assert_eq!(
                    status.signal(),
                    Some(6),
                    "the child died of SIGABRT: {:#?}",
                    child.finish()
                );
                crashes += 1;
                logs.push(child.finish().join("\n"));
            }
            None => {
                child.kill();
                break;
            }
        }
    }
    eprintln!("the partition progressed after {crashes} crashes");
    assert!(crashes >= 1, "the marked record never aborted the process");

    let dead = consume_until(&bootstrap, &t.dlq, 1, |r| !r.is_empty());
    assert_eq!(dead.len(), 1, "one dead letter: {dead:#?}");
    assert_eq!(
        dead[0].header(headers::REASON).as_deref(),
        Some("crashed_process")
    );
    assert!(
        String::from_utf8_lossy(&dead[0].payload).contains(MARKER),
        "the dead letter is the marked record"
    );
    let events = consume_all(&bootstrap, &t.output, 1);
    let offsets: std::collections::BTreeSet<i64> = events
        .iter()
        .map(|e| e.json()["source"]["offset"].as_i64().expect("offset"))
        .collect();
    let expected: std::collections::BTreeSet<i64> = (0..RECORDS).filter(|&o| o != POISON).collect();
    assert_eq!(
        offsets, expected,
        "every other record matched, the marked one never"
    );
}
