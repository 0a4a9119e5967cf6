//! `faultline bench report`: how fast `faultline report` reads a big fleet's scan output.
//!
//! Writes `incidents` incidents with the facts the report reads about their jobs as
//! `faultline scan --format json` lines, then times reading them back
//! ([`crate::report::input::read_json_file`]) and building the report
//! ([`crate::report::build`]), pinned to one core. The lines are the real output of an
//! in-process scan of a small job log (start-up, progress, checkpoint, an Xid on a node, the
//! job's NCCL timeouts), copied with each job's id, hosts, times and root: every line has the
//! size and shape of a real one (match lines carry their diagnosis by reference, as `scan`
//! prints them with incidents on; incidents their culprit, cascades, context and whole
//! diagnosis).
//!
//! Per incident, in time order: the attempt's rank-0 start-up line, a progress line, a
//! checkpoint save, then the incident in its final state; every fourth incident's root is an Xid
//! on a node, whose node line comes first. Jobs have `attempts` attempts, each ended by its
//! incident. A scan's other matches (the cascades and symptoms of each failure) are not
//! written: the reader skips them by their role before parsing, so they cost only their bytes.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use crate::engine::Engine;
use crate::incident::IncidentConfig;
use crate::kb::KnowledgeBase;
use crate::report::input::{self, Input};
use crate::report::{self, Options};
use crate::scan::{self, ScanOptions};
use crate::sink::stdout::{self, StdoutSink};
use crate::source::file;
use crate::time::{format_ms, Millis};

/// `faultline bench report`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ReportBenchArgs {
    /// Incidents to write (each with its job's facts).
    #[arg(long, default_value_t = 1_000_000)]
    pub incidents: usize,
    /// Attempts per job (each ends in one incident).
    #[arg(long, default_value_t = 8)]
    pub attempts: usize,
    /// Write the lines to FILE and keep it (a temporary file otherwise); an existing FILE
    /// written by an earlier run with the same counts is read again without writing.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Do not pin the measurement to one core.
    #[arg(long)]
    pub no_pin: bool,
    /// Print the figures as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct ReportBench {
    /// Incidents written.
    pub incidents: usize,
    /// Lines written.
    pub lines: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Whether the measurement ran pinned to one core.
    pub pinned: bool,
    /// Seconds reading the lines into the report's input.
    pub read_seconds: f64,
    /// Seconds building the report from it.
    pub build_seconds: f64,
    /// Both.
    pub total_seconds: f64,
    /// Incidents per second, both steps.
    pub incidents_per_second: f64,
    /// The report's interruptions (equal to `incidents`: every attempt ends in one).
    pub interruptions: usize,
}

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReportBenchError {
    /// Writing or reading the file failed.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// The template scan failed.
    #[error("making the line templates: {0}")]
    Template(String),
    /// The lines could not be read back.
    #[error(transparent)]
    Input(#[from] input::InputError),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ReportBenchError {
    let what = what.into();
    move |source| ReportBenchError::Io { what, source }
}

/// A JSON line with holes: literal parts and, between them, the names of what fills them.
#[derive(Debug, Clone)]
struct Template {
    parts: Vec<String>,
    slots: Vec<String>,
}

const MARK: &str = "@@";

impl Template {
    /// `value` serialized with its top-level keys in the order of `keys` (the scan's own
    /// order: a reader may stop once it has the fields it needs), each string field set to
    /// [`hole`]`(NAME)` (quotes included) becoming a hole named NAME.
    fn of((value, keys): &(Value, KeyOrder)) -> Template {
        let fields: Vec<String> = keys
            .0
            .iter()
            .filter_map(|k| Some(format!("{}:{}", quoted(k), value.get(k)?)))
            .collect();
        let text = format!("{{{}}}", fields.join(","));
        let text = text
            .replace(&format!("\"{MARK}"), MARK)
            .replace(&format!("{MARK}\""), MARK);
        let mut parts = Vec::new();
        let mut slots = Vec::new();
        for (i, piece) in text.split(MARK).enumerate() {
            match i % 2 {
                0 => parts.push(piece.to_string()),
                _ => slots.push(piece.to_string()),
            }
        }
        Template { parts, slots }
    }

    /// Writes the line with `fill` giving each hole's JSON text (a quoted string, a number, a
    /// boolean).
    fn write(&self, out: &mut impl Write, fill: &dyn Fn(&str) -> String) -> io::Result<u64> {
        let mut n = 0;
        for (i, part) in self.parts.iter().enumerate() {
            out.write_all(part.as_bytes())?;
            n += part.len();
            if let Some(slot) = self.slots.get(i) {
                let v = fill(slot);
                out.write_all(v.as_bytes())?;
                n += v.len();
            }
        }
        out.write_all(b"\n")?;
        Ok(n as u64 + 1)
    }
}

/// The lines of one template job, from a real scan.
struct Templates {
    start: Template,
    progress: Template,
    checkpoint: Template,
    node_root: Template,
    incident: Template,
}

/// The top-level keys of a JSON object in the order they are written.
#[derive(Debug, Clone, Default)]
struct KeyOrder(Vec<String>);

impl<'de> serde::Deserialize<'de> for KeyOrder {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = KeyOrder;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<KeyOrder, A::Error> {
                let mut keys = Vec::new();
                while let Some((k, serde::de::IgnoredAny)) = map.next_entry::<String, _>()? {
                    keys.push(k);
                }
                Ok(KeyOrder(keys))
            }
        }
        d.deserialize_map(Keys)
    }
}

fn hole(name: &str) -> Value {
    Value::from(format!("{MARK}{name}{MARK}"))
}

/// Scans a small job log in-process and turns its lines into templates.
fn templates() -> Result<Templates, ReportBenchError> {
    let err = |e: &dyn std::fmt::Display| ReportBenchError::Template(e.to_string());
    let kb = KnowledgeBase::embedded().map_err(|e| err(&e))?;
    let checkpoint = kb
        .entries
        .iter()
        .find(|e| e.id == "checkpoint/megatron-saved")
        .and_then(|e| e.examples.first().cloned())
        .ok_or_else(|| err(&"no checkpoint/megatron-saved example"))?;
    let engine = Engine::with_progress(kb).map_err(|e| err(&e))?;
    let dir = std::env::temp_dir().join(format!("faultline-bench-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(io_err("creating a temporary directory"))?;
    let log = dir.join("template.jsonl");
    std::fs::write(&log, template_log(&checkpoint)).map_err(io_err("writing the template log"))?;
    let (inputs, _) = file::expand(&[log.to_string_lossy().to_string()], None);
    let opts = ScanOptions {
        summary: false,
        print_matches: true,
        incidents: Some(IncidentConfig::default()),
        unknown: None,
        // As `scan --format json` prints them: matches by reference, incidents whole.
        diagnosis: crate::enrich::Detail::with_incidents(true),
        ..ScanOptions::default()
    };
    let mut json = Vec::new();
    {
        let mut sink = StdoutSink::new(&mut json, stdout::Format::Json);
        scan::scan_inputs(&engine, &inputs, &opts, &mut sink, &mut |_| {}).map_err(|e| err(&e))?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let lines: Vec<(Value, KeyOrder)> = json
        .split(|b| *b == b'\n')
        .filter_map(|l| {
            Some((
                serde_json::from_slice(l).ok()?,
                serde_json::from_slice(l).ok()?,
            ))
        })
        .collect();
    let find = |kind: &str, code: &str| -> Result<(Value, KeyOrder), ReportBenchError> {
        lines
            .iter()
            .rev()
            .find(|(v, _)| v["type"] == kind && (code.is_empty() || v["error_code"] == code))
            .cloned()
            .ok_or_else(|| err(&format!("the template scan printed no {kind} {code}")))
    };
    let job_line = |mut line: (Value, KeyOrder)| {
        let v = &mut line.0;
        v["job_id"] = hole("JOB");
        v["timestamp"] = hole("T");
        v["host"] = hole("HOST");
        Template::of(&line)
    };
    let mut start = find("match", "NCCL_INIT_COMPLETE")?;
    start.0["rank"] = Value::from(0);
    start.0["captures"]["rank"] = Value::from("0");
    start.0["captures"]["nranks"] = hole("GPUS");
    let mut node_root = find("match", "XID_79")?;
    node_root.0["timestamp"] = hole("T");
    node_root.0["host"] = hole("HOST");
    node_root.0["job_id"] = hole("NODEJOB");
    let mut incident = find("incident", "")?;
    let inc = &mut incident.0;
    inc["job_id"] = hole("JOB");
    inc["fingerprint"] = hole("FP");
    inc["id"] = hole("FP");
    inc["root_known"] = hole("KNOWN");
    inc["root"]["error_code"] = hole("CODE");
    inc["root"]["category"] = hole("CATEGORY");
    inc["root"]["timestamp"] = hole("T");
    inc["root"]["host"] = hole("HOST");
    Ok(Templates {
        start: job_line(start),
        progress: job_line(find("match", "TRAINING_PROGRESS")?),
        checkpoint: job_line(find("match", "CHECKPOINT_SAVED")?),
        node_root: Template::of(&node_root),
        incident: Template::of(&incident),
    })
}

/// A job of 64 GPUs on gpu-0001..gpu-0008 that saves, loses gpu-0003 to an Xid 79 and hangs.
fn template_log(checkpoint: &str) -> String {
    let t0: Millis = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    let line = |host: &str, job: Option<&str>, rank: Option<u32>, t: Millis, msg: &str| {
        let mut v = serde_json::json!({"timestamp": format_ms(t), "host": host, "message": msg});
        if let Some(j) = job {
            v["job_id"] = j.into();
        }
        if let Some(r) = rank {
            v["rank"] = r.into();
        }
        v.to_string() + "\n"
    };
    let job = Some("bench-1");
    let mut out = String::new();
    for r in (0..64u32).step_by(8) {
        let host = format!("gpu-{:04}", r / 8 + 1);
        let msg = format!(
            "{host}:4242:4300 [0] NCCL INFO comm 0x55d0c8a0 rank {r} nranks 64 cudaDev 0 nvmlDev \
             0 busId 18000 commId 0x7f3a1c - Init COMPLETE"
        );
        out += &line(&host, job, Some(r), t0, &msg);
    }
    let progress = " iteration      100/  100000 | consumed samples:         3200 | elapsed time \
                    per iteration (ms): 812.5 | learning rate: 1.500000E-04 | global batch size: \
                       32 | lm loss: 2.123456E+00 | loss scale: 65536.0 |";
    out += &line("gpu-0001", job, Some(0), t0 + 600_000, progress);
    out += &line("gpu-0001", job, Some(0), t0 + 1_200_000, checkpoint);
    let xid = "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python, GPU has fallen \
               off the bus.";
    out += &line("gpu-0003", None, None, t0 + 1_800_000, xid);
    for r in [0u32, 8, 40, 56] {
        let host = format!("gpu-{:04}", r / 8 + 1);
        let msg = format!(
            "[rank{r}]:[E0101 00:40:00.426415540 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog \
             caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, \
             NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before \
             timing out."
        );
        out += &line(&host, job, Some(r), t0 + 2_400_000, &msg);
    }
    out
}

/// Roots the incidents take in turn: (code, category, root known).
const ROOTS: [(&str, &str, bool); 4] = [
    ("XID_79", "gpu_hardware", true),
    ("CUDA_OOM", "device_oom", true),
    ("NCCL_TIMEOUT", "collective_timeout", false),
    ("XID_48", "gpu_memory_ecc", true),
];

const MINUTE: Millis = 60_000;

fn quoted(s: &str) -> String {
    Value::from(s).to_string()
}

/// Writes `incidents` incidents and their facts to `out`; returns (lines, bytes).
fn write_lines(
    t: &Templates,
    incidents: usize,
    attempts: usize,
    out: &mut impl Write,
) -> io::Result<(u64, u64)> {
    let attempts = attempts.max(1);
    let base: Millis = 1_767_225_600_000;
    let (mut lines, mut bytes) = (0u64, 0u64);
    for n in 0..incidents {
        let (job, attempt) = (n / attempts, n % attempts);
        let start = base + (job as Millis % 4_000) * 11 * MINUTE + attempt as Millis * 180 * MINUTE;
        let job_id = quoted(&format!("bench-{job}"));
        // Hosts and roots drawn independently (a fixed mix, no lemons by construction).
        let draw = (n as u64 ^ 0x9e37_79b9_7f4a_7c15).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let host_name = format!("gpu-{:05}", (draw >> 20) % 20_000);
        let host = quoted(&host_name);
        let (code, category, known) = ROOTS[n % ROOTS.len()];
        let failure = start + 90 * MINUTE;
        let fp = quoted(&format!("fp2:{n:016x}"));
        let at = |m: Millis| quoted(&format_ms(start + m * MINUTE));
        let job_fill = |m: Millis| {
            let ts = at(m);
            let (job_id, host) = (job_id.clone(), host.clone());
            move |slot: &str| match slot {
                "JOB" => job_id.clone(),
                "T" => ts.clone(),
                "HOST" => host.clone(),
                _ => quoted("64"),
            }
        };
        bytes += t.start.write(out, &job_fill(0))?;
        bytes += t.progress.write(out, &job_fill(10))?;
        bytes += t.checkpoint.write(out, &job_fill(60))?;
        lines += 3;
        if code == "XID_79" {
            let ts = quoted(&format_ms(failure));
            let node_job = quoted(&format!("node:{host_name}"));
            bytes += t.node_root.write(out, &|slot: &str| match slot {
                "T" => ts.clone(),
                "HOST" => host.clone(),
                _ => node_job.clone(),
            })?;
            lines += 1;
        }
        let ts = quoted(&format_ms(failure));
        bytes += t.incident.write(out, &|slot: &str| match slot {
            "JOB" => job_id.clone(),
            "FP" => fp.clone(),
            "KNOWN" => known.to_string(),
            "CODE" => quoted(code),
            "CATEGORY" => quoted(category),
            "T" => ts.clone(),
            _ => host.clone(),
        })?;
        lines += 1;
    }
    Ok((lines, bytes))
}

/// Pins this thread (and what it starts) to the first CPU it may run on; whether it could.
#[allow(unsafe_code)]
fn pin_to_one_core() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: cpu_set_t is plain data; sched_{get,set}affinity read and write only the set
    // passed, of the size passed.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(0, size, &mut set) != 0 {
            return false;
        }
        let Some(cpu) = (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set)) else {
            return false;
        };
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        libc::sched_setaffinity(0, size, &one) == 0
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

/// Writes the lines (unless `args.file` holds them already) and measures the report on them.
pub fn run(args: &ReportBenchArgs) -> Result<ReportBench, ReportBenchError> {
    let temp = args.file.is_none();
    let path = args.file.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "faultline-bench-report-{}.jsonl",
            std::process::id()
        ))
    });
    let stamp = path.with_extension("counts");
    let counts = format!("{} {}", args.incidents, args.attempts);
    let (lines, bytes) = match std::fs::read_to_string(&stamp) {
        Ok(s) if !temp && s.starts_with(&(counts.clone() + " ")) && path.exists() => {
            let mut it = s.split_whitespace().skip(2).map(|x| x.parse().unwrap_or(0));
            (it.next().unwrap_or(0), it.next().unwrap_or(0))
        }
        _ => {
            let t = templates()?;
            let f = File::create(&path).map_err(io_err(format!("creating {}", path.display())))?;
            let mut w = BufWriter::with_capacity(1 << 20, f);
            let (lines, bytes) = write_lines(&t, args.incidents, args.attempts, &mut w)
                .and_then(|n| w.flush().map(|()| n))
                .map_err(io_err(format!("writing {}", path.display())))?;
            if !temp {
                std::fs::write(&stamp, format!("{counts} {lines} {bytes}\n"))
                    .map_err(io_err(format!("writing {}", stamp.display())))?;
            }
            (lines, bytes)
        }
    };
    let result = measure(&path, args, lines, bytes);
    if temp {
        let _ = std::fs::remove_file(&path);
    }
    result
}

fn measure(
    path: &Path,
    args: &ReportBenchArgs,
    lines: u64,
    bytes: u64,
) -> Result<ReportBench, ReportBenchError> {
    let pinned = !args.no_pin && pin_to_one_core();
    let started = Instant::now();
    let mut input = Input::default();
    input::read_json_file(path, &mut input)?;
    let read = started.elapsed().as_secs_f64();
    let built = Instant::now();
    let report = report::build(&input, &Options::default());
    let build = built.elapsed().as_secs_f64();
    Ok(ReportBench {
        incidents: args.incidents,
        lines,
        bytes,
        pinned,
        read_seconds: read,
        build_seconds: build,
        total_seconds: read + build,
        incidents_per_second: args.incidents as f64 / (read + build).max(1e-9),
        interruptions: report.fleet.interruptions,
    })
}

/// `faultline bench report`: runs and prints the figures.
pub fn command(args: &ReportBenchArgs) -> anyhow::Result<std::process::ExitCode> {
    let r = run(args)?;
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{} incidents, {} lines, {:.2} GB: read {:.2} s + build {:.2} s = {:.2} s ({:.0} \
             incidents/s{}); {} interruptions",
            r.incidents,
            r.lines,
            r.bytes as f64 / 1e9,
            r.read_seconds,
            r.build_seconds,
            r.total_seconds,
            r.incidents_per_second,
            if r.pinned {
                ", one core"
            } else {
                ", not pinned"
            },
            r.interruptions
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_fill_strings_and_raw_values() {
        let v = serde_json::json!({"a": hole("X"), "b": hole("Y"), "c": [1, hole("X")]});
        // In the order a writer put them, not serde_json's sorted one.
        let order: KeyOrder = serde_json::from_str(r#"{"c":0,"a":0,"b":0}"#).expect("keys");
        let t = Template::of(&(v, order));
        let mut out = Vec::new();
        t.write(&mut out, &|s: &str| match s {
            "X" => quoted("x"),
            _ => "true".into(),
        })
        .expect("written");
        let back: Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(
            back,
            serde_json::json!({"a": "x", "b": true, "c": [1, "x"]})
        );
        assert!(
            out.starts_with(br#"{"c":"#),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }

    #[test]
    fn every_written_incident_is_an_interruption_of_the_report() {
        let t = templates().expect("templates");
        let mut out = Vec::new();
        let (lines, _) = write_lines(&t, 40, 8, &mut out).expect("written");
        let mut input = Input::default();
        input::read_json_lines(out.as_slice(), "bench", &mut input).expect("reads");
        assert_eq!(input.incidents.len(), 40);
        // start-up, progress, checkpoint per incident, and the Xid of every fourth.
        assert_eq!(input.facts.len(), 40 * 3 + 10);
        assert_eq!(lines, 40 * 4 + 10);
        let report = report::build(&input, &Options::default());
        assert_eq!(report.fleet.jobs, 5);
        assert_eq!(report.fleet.interruptions, 40);
        let xid = report
            .table
            .iter()
            .find(|r| r.label == "GPU")
            .expect("a GPU row");
        assert_eq!(xid.count, 10);
    }
}
