//! Events, incidents and summaries to a writer, as JSON lines (the schema_version 1 contract) or as text
//! for people.

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::enrich::{MatchEvent, SCHEMA_VERSION};
use crate::incident::{CulpritMethod, IncidentEvent};

/// Output format of `scan` and `kb explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One JSON object per line.
    Json,
    /// Readable text.
    Text,
}

/// What one job produced over a scan.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobSummary {
    /// Always `summary` (`type` in JSON).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Version of the output contract, [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The job summarised.
    pub job_id: String,
    /// Matches of the job.
    pub matches: u64,
    /// Matches per error code.
    pub by_error_code: BTreeMap<String, u64>,
    /// Matches per role.
    pub by_role: BTreeMap<String, u64>,
    /// Distinct ranks that printed a match.
    pub ranks: Vec<u32>,
    /// Earliest match timestamp, compared as text.
    pub first_timestamp: Option<String>,
    /// Latest match timestamp, compared as text.
    pub last_timestamp: Option<String>,
}

impl JobSummary {
    /// An empty summary of `job_id`.
    pub fn new(job_id: &str) -> Self {
        JobSummary {
            kind: "summary",
            schema_version: SCHEMA_VERSION,
            job_id: job_id.to_string(),
            ..Default::default()
        }
    }

    /// Counts one match of the job.
    pub fn add(&mut self, event: &MatchEvent) {
        self.matches += 1;
        *self
            .by_error_code
            .entry(event.error_code.clone())
            .or_default() += 1;
        *self.by_role.entry(event.role.to_string()).or_default() += 1;
        if let Some(rank) = event.rank {
            if let Err(at) = self.ranks.binary_search(&rank) {
                self.ranks.insert(at, rank);
            }
        }
        if let Some(ts) = &event.timestamp {
            if self.first_timestamp.as_ref().is_none_or(|f| ts < f) {
                self.first_timestamp = Some(ts.clone());
            }
            if self.last_timestamp.as_ref().is_none_or(|l| ts > l) {
                self.last_timestamp = Some(ts.clone());
            }
        }
    }
}

/// Writes events in one format.
pub struct StdoutSink<W: Write> {
    out: W,
    format: Format,
}

impl<W: Write> StdoutSink<W> {
    /// Writes to `out` in `format`.
    pub fn new(out: W, format: Format) -> Self {
        StdoutSink { out, format }
    }

    /// Writes one match event.
    pub fn event(&mut self, event: &MatchEvent) -> io::Result<()> {
        match self.format {
            Format::Json => self.json(event),
            Format::Text => write_event_text(&mut self.out, event),
        }
    }

    /// Writes one incident change.
    pub fn incident(&mut self, incident: &IncidentEvent) -> io::Result<()> {
        match self.format {
            Format::Json => self.json(incident),
            Format::Text => write_incident_text(&mut self.out, incident),
        }
    }

    /// Writes one job summary.
    pub fn summary(&mut self, summary: &JobSummary) -> io::Result<()> {
        match self.format {
            Format::Json => self.json(summary),
            Format::Text => {
                let codes: Vec<String> = summary
                    .by_error_code
                    .iter()
                    .map(|(c, n)| format!("{c}={n}"))
                    .collect();
                writeln!(
                    self.out,
                    "== job {}: {} match(es) from {} rank(s): {}",
                    summary.job_id,
                    summary.matches,
                    summary.ranks.len(),
                    codes.join(" ")
                )
            }
        }
    }

    /// Any serialisable record as one JSON line.
    pub fn json<T: Serialize>(&mut self, value: &T) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, value).map_err(io::Error::from)?;
        self.out.write_all(b"\n")
    }

    /// Flushes the writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The writer back.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// An event for people: where, what, why, and what to do.
pub fn write_event_text(out: &mut impl Write, e: &MatchEvent) -> io::Result<()> {
    let mut who = format!("job={}", e.job_id);
    if let Some(rank) = e.rank {
        who.push_str(&format!(" rank={rank}"));
    }
    if let Some(host) = &e.host {
        who.push_str(&format!(" host={host}"));
    }
    writeln!(
        out,
        "{} [{}] {} ({}, {}) {}",
        e.source,
        e.severity.as_str().to_uppercase(),
        e.error_code,
        e.kb_id,
        e.role,
        who
    )?;
    writeln!(out, "  | {}", e.line)?;
    if !e.captures.is_empty() {
        let caps: Vec<String> = e.captures.iter().map(|(k, v)| format!("{k}={v}")).collect();
        writeln!(out, "  captures: {}", caps.join(" "))?;
    }
    let d = &e.diagnosis;
    writeln!(out, "  what: {}", d.title)?;
    writeln!(out, "  why: {}", d.root_cause.replace('\n', " "))?;
    for w in d.verified_workarounds().take(3) {
        let rate = w.rate_text().map(|r| format!(" ({r})")).unwrap_or_default();
        writeln!(out, "  try: {}{rate}", w.text)?;
    }
    for d in d.verified_dead_ends().take(2) {
        writeln!(out, "  don't: {} ({})", d.action, d.why)?;
    }
    writeln!(out)
}

/// An incident for people: what started it, who is to blame, how big it is, what to do.
pub fn write_incident_text(out: &mut impl Write, i: &IncidentEvent) -> io::Result<()> {
    let status = match i.resolution {
        Some(r) => format!("resolved ({})", serde_plain(&r)),
        None => serde_plain(&i.status),
    };
    writeln!(
        out,
        "== incident {} job={} {status}, {} match(es) from {} rank(s)",
        i.fingerprint, i.job_id, i.counts.matches, i.counts.ranks
    )?;
    let r = &i.root;
    let mut where_ = String::new();
    if let Some(rank) = r.rank {
        where_.push_str(&format!(" rank={rank}"));
    }
    if let Some(host) = &r.host {
        where_.push_str(&format!(" host={host}"));
    }
    if let Some(gpu) = &r.gpu {
        where_.push_str(&format!(" gpu={gpu}"));
    }
    let known = if i.root_known {
        "root"
    } else {
        "root unknown, started by"
    };
    writeln!(
        out,
        "  {known}: {} ({}){where_} at {}",
        r.error_code, r.kb_id, r.source
    )?;
    writeln!(out, "  | {}", r.line)?;
    let c = &i.culprit;
    if c.method == CulpritMethod::Unknown {
        writeln!(out, "  culprit: unknown: {}", c.explanation)?;
    } else {
        let ranks: Vec<String> = c.ranks.iter().map(u32::to_string).collect();
        writeln!(
            out,
            "  culprit: rank(s) [{}] host(s) [{}]: {}",
            ranks.join(", "),
            c.hosts.join(", "),
            c.explanation
        )?;
    }
    writeln!(out, "  election: {}", i.grouping_info.explanation)?;
    if i.cascades.matches > 0 {
        writeln!(
            out,
            "  cascades: {} match(es) on {} rank(s)",
            i.cascades.matches, i.cascades.ranks
        )?;
    }
    if !i.context.lines.is_empty() {
        writeln!(out, "  context:")?;
        for (n, line) in i.context.lines.iter().enumerate() {
            if i.context.omitted_at == Some(n) {
                writeln!(out, "    ... {} line(s) left out", i.context.omitted_lines)?;
            }
            writeln!(out, "    | {}", line.text)?;
        }
    }
    writeln!(out, "  what: {}", i.diagnosis.title)?;
    for w in i.diagnosis.verified_workarounds().take(2) {
        writeln!(out, "  try: {}", w.text)?;
    }
    if i.restart_loop {
        writeln!(
            out,
            "  restart loop: this root came back {} times in this job",
            i.recurrence
        )?;
    }
    if let (Some(host), Some(score)) = (&i.blamed_host, i.bad_node_score) {
        if score >= 2.0 {
            writeln!(out, "  bad node: {host} (score {score})")?;
        }
    }
    writeln!(out)
}

/// A unit enum's JSON spelling, without quotes.
fn serde_plain<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
