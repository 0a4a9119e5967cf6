//! Crash loops, out of process: `faultline run` killed with SIGKILL again and again while a
//! stream flows, several times right after its assignment, with the default commit settings.
//! Nothing may be lost, and the duplicates must stay a small share of the matches: each member
//! commits as soon as its first records are done, whatever time it has left.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use rdkafka::producer::FutureProducer;

use super::out_of_process::{
    broker, make_topic, produced_through, run_over, signal, sum_ends, wait_exit, Topics,
};
use super::*;

/// A running `faultline` process whose stderr is read line by line.
pub(super) struct Member {
    pub(super) child: Child,
    lines: mpsc::Receiver<String>,
    /// Every line so far, escape codes removed.
    pub(super) log: Vec<String>,
}

impl Member {
    pub(super) fn spawn(cmd: &mut Command) -> Member {
        let mut child = cmd
            .stderr(Stdio::piped())
            .spawn()
            .expect("faultline starts");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(strip_ansi(&line)).is_err() {
                    break;
                }
            }
        });
        Member {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// Takes the lines written so far; whether one of them contains `needle`.
    pub(super) fn saw(&mut self, needle: &str) -> bool {
        while let Ok(l) = self.lines.try_recv() {
            self.log.push(l);
        }
        self.log.iter().any(|l| l.contains(needle))
    }

    /// Reads the rest of stderr after the process exited.
    pub(super) fn finish(&mut self) -> &[String] {
        while let Ok(l) = self.lines.recv_timeout(DEADLINE) {
            self.log.push(l);
        }
        &self.log
    }

    pub(super) fn kill(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }
}

/// A log line without its terminal colour codes.
pub(super) fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `faultline run` with the default commit, batch and queue settings; only the group's
/// membership timeouts are the fast hand-over ones of docs/kafka.md ("Kubernetes").
fn default_run(bootstrap: &str, t: &Topics, kb: &Path) -> Command {
    let mut c = run_over(bootstrap, t, "off");
    c.env("FAULTLINE_LOG", "info,faultline::source=debug")
        .arg("--kb")
        .arg(kb)
        .args(["--consumer-option", "session.timeout.ms=6000"])
        .args(["--consumer-option", "heartbeat.interval.ms=500"]);
    c
}

const PARTS: i32 = 3;
/// Duplicates measured on this test with offsets committed by librdkafka's 5 s timer alone (the
/// behaviour before `source::commit`), for the closing line: not asserted.
const BEFORE: usize = 4_836;
const RECORDS: usize = 20_000;
/// One record in ten matches: 2,000 matches.
const EVERY: usize = 10;

fn record(i: usize) -> Out {
    let payload = if i.is_multiple_of(EVERY) {
        format!("[rank1]: BOOM {i}")
    } else {
        format!("step {i} loss 0.{} ok", i % 97)
    };
    Out::new(
        (i % PARTS as usize) as i32,
        &format!("job-{}", i % 11),
        payload,
    )
}

/// Produces the stream at a steady pace (a training fleet's logs, not a backlog): 40 records
/// every 200 ms (100 s in all), so that the kills below happen while it flows.
async fn stream(bootstrap: String, topic: String) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let mut ticks = tokio::time::interval(Duration::from_millis(200));
    for chunk in (0..RECORDS).collect::<Vec<_>>().chunks(40) {
        ticks.tick().await;
        let mut deliveries = Vec::new();
        for &i in chunk {
            let r = record(i);
            let fr = rdkafka::producer::FutureRecord::to(&topic)
                .partition(r.partition)
                .key(r.key.as_deref().unwrap_or_default())
                .payload(&r.payload);
            deliveries.push(
                producer
                    .send_result(fr)
                    .map_err(|(e, _)| e)
                    .expect("queued"),
            );
        }
        for d in deliveries {
            d.await.expect("not cancelled").expect("delivered");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_sigkills_in_a_crash_loop_lose_nothing_and_duplicate_little() {
    let (mut broker, bootstrap) = broker();
    let t = Topics::unique();
    for (name, parts) in [(&t.input, PARTS), (&t.output, PARTS), (&t.dlq, 1)] {
        make_topic(&mut broker, &bootstrap, name, parts).await;
    }
    let kb = test_kb();
    let flow = tokio::spawn(stream(bootstrap.clone(), t.input.clone()));

    let mut window = 0i64;
    for kill in 0..8 {
        let mut member = Member::spawn(&mut default_run(&bootstrap, &t, kb.path()));
        wait_for("partitions assigned", || {
            member.saw(&format!("partitions assigned partitions={PARTS}"))
        })
        .await;
        let assigned = Instant::now();
        // The backlog that piled up while no member was alive: caught up once every
        // partition's last match before its end at the assignment has an event.
        let ends = end_offsets(&bootstrap, &t.input, PARTS);
        wait_for("the member caught up with the backlog", || {
            let through = produced_through(&consume_all(&bootstrap, &t.output, PARTS));
            (0..PARTS)
                .all(|p| through.get(&(p as i64)).copied().unwrap_or(0) + EVERY as i64 >= ends[&p])
        })
        .await;
        // Then even kills strike right away (10 live events later, under half a second at
        // the stream's pace), odd ones a couple of seconds later (60 events): all well within
        // the 5 s that a timer-only commit needs for its first commit.
        let grown = if kill % 2 == 0 { 10 } else { 60 };
        let before = sum_ends(&bootstrap, &t.output, PARTS);
        wait_for("live events", || {
            flow.is_finished() || sum_ends(&bootstrap, &t.output, PARTS) >= before + grown
        })
        .await;
        let lived = assigned.elapsed();
        member.kill();
        member.finish();
        let committed = committed(&bootstrap, &t.group, &t.input, PARTS);
        let through = produced_through(&consume_all(&bootstrap, &t.output, PARTS));
        let w: i64 = (0..PARTS)
            .map(|p| {
                (through.get(&(p as i64)).copied().unwrap_or(0) - committed[p as usize].max(0))
                    .max(0)
            })
            .sum();
        eprintln!(
            "kill {kill}, {} ms after the assignment: committed {committed:?}, uncommitted \
             window {w} records",
            lived.as_millis()
        );
        window += w;
    }
    flow.await.expect("the stream was produced");

    let mut last = Member::spawn(&mut default_run(&bootstrap, &t, kb.path()));
    wait_for("everything committed", || {
        committed(&bootstrap, &t.group, &t.input, PARTS)
            .iter()
            .sum::<i64>()
            == RECORDS as i64
    })
    .await;
    signal(&last.child, "TERM");
    assert!(wait_exit(&mut last.child).success(), "SIGTERM exits 0");

    let events = consume_all(&bootstrap, &t.output, PARTS);
    let mut seen = std::collections::HashSet::new();
    for e in &events {
        let n: usize = e.json()["captures"]["n"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("capture");
        seen.insert(n);
    }
    let matches = RECORDS / EVERY;
    let missing: Vec<usize> = (0..RECORDS)
        .step_by(EVERY)
        .filter(|i| !seen.contains(i))
        .collect();
    assert!(missing.is_empty(), "lost: {missing:?}");
    let duplicates = events.len() - seen.len();
    eprintln!(
        "{RECORDS} records, {matches} matches, {} events, {duplicates} duplicates \
         ({:.1}% of the matches; before, with the 5 s commit timer alone: {BEFORE} on this \
         test); uncommitted windows at the kills: {window} records in all",
        events.len(),
        duplicates as f64 * 100.0 / matches as f64
    );
    assert!(
        duplicates * 10 < matches,
        "{duplicates} duplicates: not below 10% of the {matches} matches"
    );
}
