//! `faultline` as a separate process: killed with SIGKILL mid-stream and restarted, stopped with
//! SIGTERM, `--check-config`, and `faultline demo`. The broker runs in a process of its own
//! (`faultline-mock-broker`) so that it outlives the killed consumer.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use super::*;

/// The mock broker process; killed on drop.
pub(super) struct BrokerProcess {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    bootstrap: String,
}

impl BrokerProcess {
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_faultline-mock-broker"))
            .args(["--brokers", "1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("mock broker starts");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let stdin = child.stdin.take().expect("stdin");
        let mut line = String::new();
        stdout.read_line(&mut line).expect("bootstrap line");
        let bootstrap = line
            .trim()
            .strip_prefix("bootstrap=")
            .expect("bootstrap=...")
            .to_string();
        BrokerProcess {
            child,
            stdin,
            stdout,
            bootstrap,
        }
    }

    /// Sends one command and checks the answer.
    pub(super) fn command(&mut self, cmd: &str) {
        use std::io::Write;
        writeln!(self.stdin, "{cmd}").expect("command sent");
        let mut answer = String::new();
        self.stdout.read_line(&mut answer).expect("answer");
        assert_eq!(answer.trim(), "ok", "{cmd}");
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A broker for out-of-process tests: the real one when configured, else a mock process.
pub(super) fn broker() -> (Option<BrokerProcess>, String) {
    match std::env::var("FAULTLINE_TEST_BROKERS") {
        Ok(b) if !b.is_empty() => (None, b),
        _ => {
            let p = BrokerProcess::start();
            let b = p.bootstrap.clone();
            (Some(p), b)
        }
    }
}

pub(super) fn faultline() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_faultline"));
    // Only what the test sets: no FAULTLINE_* from the developer's shell.
    c.env_clear().env("FAULTLINE_LOG", "warn");
    c
}

pub(super) struct Topics {
    pub(super) input: String,
    pub(super) output: String,
    pub(super) dlq: String,
    pub(super) group: String,
}

impl Topics {
    /// Fresh names, and their input, output and dead-letter topics made with one partition
    /// each.
    pub(super) async fn made(broker: &mut Option<BrokerProcess>, bootstrap: &str) -> Self {
        Topics::made_with(broker, bootstrap, 1).await
    }

    /// Fresh names, their input and output topics made with `parts` partitions each and the
    /// dead-letter topic with one.
    pub(super) async fn made_with(
        broker: &mut Option<BrokerProcess>,
        bootstrap: &str,
        parts: i32,
    ) -> Self {
        let t = Topics::unique();
        for (name, n) in [(&t.input, parts), (&t.output, parts), (&t.dlq, 1)] {
            make_topic(broker, bootstrap, name, n).await;
        }
        t
    }

    /// Fresh names: no test sees another's topics or group.
    pub(super) fn unique() -> Self {
        Topics {
            input: unique("logs"),
            output: unique("events"),
            dlq: unique("dead"),
            group: unique("group"),
        }
    }
}

/// Creates a topic on the mock broker process, or on the real broker when one is configured.
pub(super) async fn make_topic(
    broker: &mut Option<BrokerProcess>,
    bootstrap: &str,
    name: &str,
    parts: i32,
) {
    match broker {
        Some(b) => b.command(&format!("topic {name} {parts}")),
        None => create_topic(None, bootstrap, name, parts).await,
    }
}

pub(super) fn run_command(bootstrap: &str, t: &Topics, kb: &Path) -> Command {
    let mut c = run_command_serving(bootstrap, t, "off");
    c.arg("--kb").arg(kb);
    c
}

/// `faultline run` over the test's topics with faultline's own defaults, the admin server on
/// `admin` (`off` for none), its standard output discarded.
pub(super) fn run_over(bootstrap: &str, t: &Topics, admin: &str) -> Command {
    let mut c = faultline();
    c.args(["run", "--brokers", bootstrap, "--group-id", &t.group])
        .args(["--topic", &t.input, "--output-topic", &t.output])
        .args(["--dead-letter-topic", &t.dlq])
        .args(["--admin-listen", admin])
        .stdout(Stdio::null());
    c
}

/// [`run_command`] with the built-in KB (no example check at start) and the admin server on
/// `admin` (`off` for none).
pub(super) fn run_command_serving(bootstrap: &str, t: &Topics, admin: &str) -> Command {
    let mut c = run_over(bootstrap, t, admin);
    c.args(["--commit-interval-ms", "200"])
        .args(["--batch-max-records", "20", "--batch-linger-ms", "10"])
        .args(["--consumer-option", "session.timeout.ms=6000"])
        .args(["--consumer-option", "heartbeat.interval.ms=500"]);
    c
}

/// Sends `child` a signal by name (`TERM`, `HUP`, ...).
pub(super) fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{name}");
}

/// Waits for the child to exit; a watchdog kills it (and the test fails, naming the threads
/// it still had) past the deadline.
pub(super) fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let pid = child.id();
    let (exited, exit_seen) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if exit_seen.recv_timeout(DEADLINE).is_ok() {
            return None;
        }
        let threads = threads_of(pid);
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        Some(threads)
    });
    let status = child.wait().expect("wait");
    let _ = exited.send(());
    let stuck = watchdog.join().expect("watchdog");
    assert!(
        stuck.is_none(),
        "faultline (pid {pid}) did not exit; its threads (name, state, kernel wait):\n{}",
        stuck.unwrap_or_default()
    );
    status
}

/// Each thread of process `pid` as `name state wchan`, one per line, from `/proc`: which stage
/// of a process that will not exit is still running, and on what it waits.
fn threads_of(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return "(no /proc entry)".to_string();
    };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        let read = |f: &str| {
            std::fs::read_to_string(t.path().join(f))
                .unwrap_or_default()
                .trim()
                .to_string()
        };
        let stat = read("stat");
        // The state follows the parenthesised name, which may itself hold spaces.
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split(' ').next())
            .unwrap_or("?")
            .to_string();
        out.push(format!("  {} {state} {}", read("comm"), read("wchan")));
    }
    out.sort();
    out.join("\n")
}

pub(super) fn sum_ends(bootstrap: &str, topic: &str, partitions: i32) -> i64 {
    end_offsets(bootstrap, topic, partitions).values().sum()
}

/// For each partition, one past the highest input offset that has an event so far.
pub(super) fn produced_through(events: &[In]) -> HashMap<i64, i64> {
    let mut out = HashMap::new();
    for e in events {
        let v = e.json();
        let p = v["source"]["partition"].as_i64().expect("partition");
        let o = v["source"]["offset"].as_i64().expect("offset");
        let slot = out.entry(p).or_insert(0);
        *slot = (*slot).max(o + 1);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_stream_and_restart_lose_nothing() {
    const PARTS: i32 = 3;
    let (mut broker, bootstrap) = broker();
    let t = Topics::made_with(&mut broker, &bootstrap, PARTS).await;
    let kb = test_kb();
    let wave = |from: usize, to: usize| -> Vec<Out> {
        (from..to)
            .map(|i| {
                Out::new(
                    (i % PARTS as usize) as i32,
                    &format!("job-{}", i % 11),
                    format!("[rank1]: BOOM {i}"),
                )
            })
            .collect()
    };
    let mut produced = 2000;
    produce(&bootstrap, &t.input, &wave(0, produced)).await;

    // Kill it three times, each time after it produced some output; more input meanwhile.
    let mut window = 0i64;
    for kill in 0..3 {
        let before = sum_ends(&bootstrap, &t.output, PARTS);
        let mut child = run_command(&bootstrap, &t, kb.path())
            .spawn()
            .expect("faultline starts");
        wait_for("output grows", || {
            sum_ends(&bootstrap, &t.output, PARTS) >= before + 200
        })
        .await;
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        // What the next run may produce again: events beyond the committed offsets.
        let committed = committed(&bootstrap, &t.group, &t.input, PARTS);
        let events = consume_all(&bootstrap, &t.output, PARTS);
        let through = produced_through(&events);
        let w: i64 = (0..PARTS)
            .map(|p| {
                (through.get(&(p as i64)).copied().unwrap_or(0) - committed[p as usize].max(0))
                    .max(0)
            })
            .sum();
        eprintln!(
            "kill {kill}: committed {committed:?}, {} events so far, uncommitted window {w}",
            events.len()
        );
        window += w;
        produce(&bootstrap, &t.input, &wave(produced, produced + 1000)).await;
        produced += 1000;
    }

    // The last run finishes the backlog and stops gracefully on SIGTERM.
    let mut child = run_command(&bootstrap, &t, kb.path())
        .spawn()
        .expect("faultline starts");
    wait_for("everything committed", || {
        committed(&bootstrap, &t.group, &t.input, PARTS)
            .iter()
            .sum::<i64>()
            == produced as i64
    })
    .await;
    signal(&child, "TERM");
    assert!(wait_exit(&mut child).success(), "SIGTERM exits 0");

    let events = consume_all(&bootstrap, &t.output, PARTS);
    let mut seen = std::collections::HashSet::new();
    for e in &events {
        let n: usize = e.json()["captures"]["n"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("capture");
        seen.insert(n);
    }
    let missing: Vec<usize> = (0..produced).filter(|i| !seen.contains(i)).collect();
    assert!(missing.is_empty(), "lost: {missing:?}");
    let duplicates = events.len() as i64 - produced as i64;
    eprintln!(
        "{produced} records, {} events, {duplicates} duplicates, bound {window}",
        events.len()
    );
    assert!(
        duplicates <= window,
        "{duplicates} duplicates, more than the uncommitted windows at the kills ({window})"
    );
}

/// `--exit-at-end`: a replay stops by itself once every assigned partition is read to its end
/// (one of them empty), with every record's event produced and its offset committed; run again
/// in the same group, it finds nothing left, exits at once and produces nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_at_end_stops_after_the_backlog_with_everything_committed() {
    const PARTS: i32 = 3;
    let (mut broker, bootstrap) = broker();
    let t = Topics::made_with(&mut broker, &bootstrap, PARTS).await;
    let kb = test_kb();
    // Partitions 0 and 1 hold the backlog; partition 2 stays empty.
    let records: Vec<Out> = (0..300)
        .map(|i| {
            Out::new(
                i % 2,
                &format!("job-{}", i % 7),
                format!("[rank1]: BOOM {i}"),
            )
        })
        .collect();
    produce(&bootstrap, &t.input, &records).await;

    let mut child = run_command(&bootstrap, &t, kb.path())
        .arg("--exit-at-end")
        .spawn()
        .expect("faultline starts");
    assert!(wait_exit(&mut child).success(), "exits 0 by itself");
    let committed = committed(&bootstrap, &t.group, &t.input, PARTS);
    assert_eq!(
        &committed[..2],
        &[150, 150],
        "both partitions committed to their end"
    );
    let events = consume_all(&bootstrap, &t.output, PARTS);
    let seen: std::collections::HashSet<String> = events
        .iter()
        .filter_map(|e| e.json()["captures"]["n"].as_str().map(String::from))
        .collect();
    assert_eq!(seen.len(), 300, "one event for every record");

    let before = sum_ends(&bootstrap, &t.output, PARTS);
    let mut again = run_command(&bootstrap, &t, kb.path())
        .arg("--exit-at-end")
        .spawn()
        .expect("faultline starts");
    assert!(
        wait_exit(&mut again).success(),
        "a finished replay exits 0 at once"
    );
    assert_eq!(
        sum_ends(&bootstrap, &t.output, PARTS),
        before,
        "nothing read again"
    );
}

#[test]
fn check_config_validates_and_redacts() {
    let kb = test_kb();
    let out = faultline()
        .args([
            "run",
            "--check-config",
            "--brokers",
            "b:9092",
            "--topic",
            "logs",
        ])
        .args([
            "--kafka-option",
            "sasl.password=hunter2",
            "--kafka-option",
            "sasl.username=alice",
        ])
        .arg("--kb")
        .arg(kb.path())
        .output()
        .expect("runs");
    crate::support::assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("configuration OK"), "{stdout}");
    assert!(
        stdout.contains("\"sasl.password\" = \"[redacted]\""),
        "{stdout}"
    );
    assert!(stdout.contains("alice"));
    assert!(!stdout.contains("hunter2"));

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("faultline.toml");
    std::fs::write(
        &file,
        "[kafka]\ntopics = [\"bad topic\"]\n[input]\nenvelope = \"xml\"\n",
    )
    .expect("write");
    let out = faultline()
        .args(["run", "--check-config", "--config"])
        .arg(&file)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for field in ["kafka.brokers", "kafka.topics[0]", "input.envelope"] {
        assert!(stderr.contains(field), "{field} not named in {stderr}");
    }
    // Environment variables are settings too.
    let out = faultline()
        .args(["run", "--check-config", "--config"])
        .arg(&file)
        .env("FAULTLINE_KAFKA_BROKERS", "b:1")
        .env("FAULTLINE_KAFKA_TOPICS", "good")
        .env("FAULTLINE_INPUT_ENVELOPE", "json")
        .env("FAULTLINE_KB", kb.path())
        .output()
        .expect("runs");
    crate::support::assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("envelope = \"json\""));
}

#[test]
fn demo_processes_the_samples_and_exits() {
    let kb = test_kb();
    let logs = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        logs.path().join("train-42.log"),
        "starting\n[rank0]: BOOM 1\nstep 1\n[rank5]: BOOM 2\n",
    )
    .expect("write");
    std::fs::write(logs.path().join("other.log"), "BOOM 3\nok\n").expect("write");
    let out = faultline()
        .arg("demo")
        .arg("--kb")
        .arg(kb.path())
        .arg("--logs")
        .arg(logs.path())
        .args(["--admin-listen", "127.0.0.1:0"])
        .args(["--matchers", "2", "--matches", "--format", "json"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    // Every match event, from whichever member matched it.
    let matches: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|v| v["error_code"] == "TEST_BOOM")
        .collect();
    assert_eq!(matches.len(), 3, "{stdout}");
    assert!(
        matches
            .iter()
            .any(|v| v["job_id"] == "train-42" && v["rank"] == 5),
        "{stdout}"
    );
    // One incident per failed job, each rooted in the job's first BOOM.
    let mut incidents: Vec<(String, String)> = lines
        .iter()
        .filter(|v| v["type"] == "incident")
        .map(|v| {
            (
                v["job_id"].as_str().unwrap_or("").to_string(),
                v["root"]["error_code"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    incidents.sort();
    incidents.dedup();
    assert_eq!(
        incidents,
        [
            ("other".to_string(), "TEST_BOOM".to_string()),
            ("train-42".to_string(), "TEST_BOOM".to_string())
        ],
        "{stdout}"
    );
    assert!(
        stderr.contains("6 records, 3 match events, 2 incident(s)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_kb_and_sigint_drains_and_exits_0() {
    let (mut broker, bootstrap) = broker();
    let t = Topics::made(&mut broker, &bootstrap).await;
    let kb = test_kb();
    let mut child = run_command(&bootstrap, &t, kb.path())
        .args(["--kb-watch-interval-ms", "0"])
        .spawn()
        .expect("faultline starts");
    produce(&bootstrap, &t.input, &[Out::new(0, "j", "BOOM 0")]).await;
    consume_until(&bootstrap, &t.output, 1, |r| !r.is_empty());

    // The directory is not watched: only SIGHUP brings the new entry in.
    write_entry(kb.path(), "zap", "ZAP");
    signal(&child, "HUP");
    let mut produced = 1;
    let deadline = Instant::now() + DEADLINE;
    loop {
        produce(
            &bootstrap,
            &t.input,
            &[Out::new(0, "j", format!("ZAP {produced}"))],
        )
        .await;
        produced += 1;
        let events = consume_all(&bootstrap, &t.output, 1);
        if events.iter().any(|e| e.json()["error_code"] == "TEST_ZAP") {
            break;
        }
        assert!(Instant::now() < deadline, "SIGHUP did not reload the KB");
    }
    signal(&child, "INT");
    assert!(wait_exit(&mut child).success(), "SIGINT drains and exits 0");
    assert_eq!(
        committed(&bootstrap, &t.group, &t.input, 1),
        vec![produced as i64],
        "everything read was committed on the way out"
    );
}

/// A SIGTERM that arrives while the KB is still loading is a graceful stop, as a pod stopped
/// during start-up expects: exit status 0 and the clean stop's summary, never death by the
/// signal's default action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_the_kb_loads_stops_cleanly() {
    let (mut broker, bootstrap) = broker();
    let t = Topics::made(&mut broker, &bootstrap).await;
    let mut cmd = run_over(&bootstrap, &t, "off");
    cmd.env("FAULTLINE_LOG", "info");
    let mut member = super::crash_loop::Member::spawn(&mut cmd);
    // Logged once the handlers are in place, before the KB (seconds in a debug build) loads.
    wait_for("the KB load to begin", || {
        member.saw("loading the knowledge base")
    })
    .await;
    signal(&member.child, "TERM");
    let status = wait_exit(&mut member.child);
    let log = member.finish();
    assert!(
        status.success(),
        "SIGTERM during start-up: {status:?}\n{log:#?}"
    );
    assert!(
        log.iter().any(|l| l.contains("stopped cleanly")),
        "{log:#?}"
    );
}

/// Tickets survive a crash: the first half of the 64-rank Xid 79 scenario, SIGKILL while its
/// incident is open, a restart, the second half. The commit waited at the Xid's record, so the
/// restarted service correlates the same incident again: one fingerprint on the incidents topic,
/// one ticket at the receiver, and the replayed changes carry the idempotency keys the receiver
/// already saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_incident_and_restart_keep_one_ticket() {
    use super::incidents::{distinct, incidents, records};
    use crate::ticket_server::TicketServer;

    let (mut broker, bootstrap) = broker();
    let t = Topics::unique();
    let topic = unique("incidents");
    for name in [&t.input, &t.output, &t.dlq, &topic] {
        make_topic(&mut broker, &bootstrap, name, 1).await;
    }
    let tickets = TicketServer::accepting();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("faultline.toml");
    std::fs::write(
        &file,
        format!(
            "[incidents]\ntopic = \"{topic}\"\n[webhook]\nurl = \"{}\"\ninitial_backoff_ms = 50\n",
            tickets.url
        ),
    )
    .expect("write");
    // The built-in KB: the repository's, without the example check at start.
    let start = || {
        run_command_serving(&bootstrap, &t, "off")
            .arg("--config")
            .arg(&file)
            .spawn()
            .expect("faultline starts")
    };

    let job = "llm-pretrain-7";
    let lines = crate::incidents::xid_job(job, 0);
    let xid = lines
        .iter()
        .position(|l| l.contains("Xid"))
        .expect("the Xid line");
    let half = xid + 1 + 31;
    produce(&bootstrap, &t.input, &records(&lines[..half], job)).await;
    let mut child = start();
    wait_for("a ticket, and the commit held at the Xid's record", || {
        !tickets.requests().is_empty()
            && committed(&bootstrap, &t.group, &t.input, 1) == vec![xid as i64]
    })
    .await;
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let before = tickets.requests();
    assert_eq!(
        before[0].status, "open",
        "the first change opens the ticket"
    );

    let mut child = start();
    produce(&bootstrap, &t.input, &records(&lines[half..], job)).await;
    let full = |i: &serde_json::Value| i["cascades"]["matches"] == 63;
    wait_for("the ticket carries all 63 cascades", || {
        tickets.requests().iter().any(|r| full(&r.body["incident"]))
    })
    .await;
    let on_topic = consume_until(&bootstrap, &topic, 1, |r| r.iter().any(|m| full(&m.json())));
    signal(&child, "TERM");
    assert!(wait_exit(&mut child).success(), "SIGTERM exits 0");
    assert_eq!(
        committed(&bootstrap, &t.group, &t.input, 1),
        vec![xid as i64],
        "the open incident still holds the commit after a graceful stop"
    );

    let requests = tickets.requests();
    let ticket_keys = distinct(requests.iter().map(|r| r.fingerprint.clone()));
    assert_eq!(ticket_keys.len(), 1, "one ticket: {ticket_keys:?}");
    let all = incidents(&on_topic);
    let fingerprints = distinct(all.iter().map(|i| i["fingerprint"].to_string()));
    assert_eq!(fingerprints.len(), 1, "one incident: {fingerprints:?}");
    let fingerprint = all[0]["fingerprint"].as_str().expect("string");
    assert_eq!(
        ticket_keys.iter().next().map(String::as_str),
        Some(fingerprint)
    );
    let record_keys = distinct(
        on_topic
            .iter()
            .map(|m| String::from_utf8(m.key.clone().expect("keyed")).expect("utf8")),
    );
    assert_eq!(record_keys.len(), 1);
    let last = all.iter().rfind(|i| full(i)).expect("the full incident");
    assert_eq!(last["root"]["error_code"], "XID_79");
    assert_eq!(last["root"]["host"], "node-05");
    assert_eq!(last["culprit"]["ranks"], serde_json::json!([17]));
    // The restart replayed the incident from its first record: its first change came again,
    // with the key the receiver had applied before the crash.
    let first_key = &before[0].idempotency_key;
    assert!(
        requests[before.len()..]
            .iter()
            .any(|r| &r.idempotency_key == first_key),
        "{first_key} not sent again after the restart"
    );
    assert!(
        all.iter().filter(|i| i["revision"] == 1).count() >= 2,
        "the open change was produced before the crash and again after it"
    );
}

/// `demo --follow` prints each incident change as it arrives: a line produced while it runs
/// has its incident on standard output within seconds, not at exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_follow_prints_an_incident_as_it_opens_and_metrics_count_its_match() {
    use std::sync::mpsc;
    let kb = test_kb();
    let logs = tempfile::tempdir().expect("tempdir");
    std::fs::write(logs.path().join("quiet.log"), "starting\nstep 1\n").expect("write");
    let mut child = faultline()
        .arg("demo")
        .arg("--kb")
        .arg(kb.path())
        .arg("--logs")
        .arg(logs.path())
        .args(["--admin-listen", "127.0.0.1:0", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("demo starts");
    let lines = |r: Box<dyn std::io::Read + Send>| {
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        rx
    };
    let stderr = lines(Box::new(child.stderr.take().expect("stderr")));
    let stdout = lines(Box::new(child.stdout.take().expect("stdout")));
    let mut bootstrap = None;
    let mut admin: Option<std::net::SocketAddr> = None;
    let mut following = false;
    while !following {
        let line = stderr
            .recv_timeout(DEADLINE)
            .expect("the demo reports its start");
        if let Some(rest) = line.split("embedded Kafka broker at ").nth(1) {
            bootstrap = rest.split(';').next().map(str::to_string);
        }
        if let Some(rest) = line.split("admin endpoints at http://").nth(1) {
            admin = rest.split('/').next().and_then(|a| a.parse().ok());
        }
        following = line.contains("following;");
    }
    let bootstrap = bootstrap.expect("the broker's address");
    let admin = admin.expect("the admin endpoint's address");
    let mut out = Out::new(0, "my-job", "[rank3]: BOOM 77");
    out.headers.push(("job".to_string(), "my-job".to_string()));
    produce(&bootstrap, faultline::demo::LOGS_TOPIC, &[out]).await;
    let printed = loop {
        let line = stdout
            .recv_timeout(DEADLINE)
            .expect("the incident is printed while the demo runs");
        if line.contains("incident open") {
            break line;
        }
    };
    assert!(printed.contains("TEST_BOOM"), "{printed}");
    assert!(printed.contains("job my-job"), "{printed}");
    // The demo's one /metrics serves the match members' counts beside the correlator's.
    let matched = |body: &str| {
        body.lines()
            .find(|l| l.starts_with("faultline_matches_total{") && l.contains("TEST_BOOM"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    let (count, body) = crate::observability::wait_for(30, "the match counted on /metrics", || {
        let (status, body) = crate::observability::http_get(admin, "/metrics")?;
        assert_eq!(status, 200);
        matched(&body).filter(|n| *n >= 1.0).map(|n| (n, body))
    });
    assert_eq!(count, 1.0, "one line, one match");
    assert!(
        body.contains("faultline_incidents_opened_total"),
        "the correlator's families are there too"
    );
    signal(&child, "INT");
    wait_exit(&mut child);
}
