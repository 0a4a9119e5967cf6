//! Events, incidents and summaries to a writer, as JSON lines (the schema_version 1 contract) or as text
//! for people.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::enrich::{MatchEvent, SCHEMA_VERSION};
use crate::incident::IncidentEvent;
use crate::record::is_invisible;
use crate::unknown::{JobTemplates, UnknownEvent};

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

/// A writer for terminals: every control character but newline and tab, DEL, C1 controls and
/// the characters that reorder or hide text are shown visibly (`␛` for ESC, `[U+202E]` for a
/// bidi override), so a job id, host or line can neither move the cursor, recolour the screen
/// nor disguise itself. Every text output for people writes through it; JSON output escapes
/// them itself.
pub struct TerminalSafe<W: Write>(pub W);

impl<W: Write> Write for TerminalSafe<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write_all(&terminal_safe(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// `text` with its control and invisible characters shown ([`TerminalSafe`]); borrowed when
/// there is none (the common case: printable ASCII).
pub fn terminal_safe(text: &[u8]) -> Cow<'_, [u8]> {
    if text
        .iter()
        .all(|&b| (0x20..0x7f).contains(&b) || b == b'\n' || b == b'\t')
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in String::from_utf8_lossy(text).chars() {
        match c {
            '\n' | '\t' => out.push(c),
            '\u{0}'..='\u{1f}' => out.push(char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}')),
            '\u{7f}' => out.push('\u{2421}'),
            c if is_invisible(c) => out.push_str(&format!("[U+{:04X}]", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out.into_bytes())
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
            Format::Text => write_event_text(&mut TerminalSafe(&mut self.out), event),
        }
    }

    /// Writes one incident change.
    pub fn incident(&mut self, incident: &IncidentEvent) -> io::Result<()> {
        match self.format {
            Format::Json => self.json(incident),
            Format::Text => write_incident_text(&mut TerminalSafe(&mut self.out), incident),
        }
    }

    /// Writes one `unknown` event (text: one short block, for `--matches`).
    pub fn unknown(&mut self, event: &UnknownEvent) -> io::Result<()> {
        match self.format {
            Format::Json => self.json(event),
            Format::Text => {
                crate::unknown::write_event_text(&mut TerminalSafe(&mut self.out), event)
            }
        }
    }

    /// Text only: each job's unknown error templates (JSON carries the `unknown` events).
    pub fn unrecognised(&mut self, jobs: &[JobTemplates]) -> io::Result<()> {
        match self.format {
            Format::Json => Ok(()),
            Format::Text => crate::unknown::write_section(&mut TerminalSafe(&mut self.out), jobs),
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
                    TerminalSafe(&mut self.out),
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
    write_event_head(out, e)?;
    let d = &e.diagnosis;
    for w in d.verified_workarounds().take(3) {
        let rate = w.rate_text().map(|r| format!(" ({r})")).unwrap_or_default();
        writeln!(out, "  try: {}{rate}", w.text)?;
    }
    for d in d.verified_dead_ends().take(2) {
        writeln!(out, "  don't: {} ({})", d.action, d.why)?;
    }
    writeln!(out)
}

/// The first lines of an event for people: where, which entry, the line, its captures, what
/// failed and why (`kb explain` adds the review trail and the advice after them).
pub fn write_event_head(out: &mut impl Write, e: &MatchEvent) -> io::Result<()> {
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
    writeln!(out, "  why: {}", d.root_cause.replace('\n', " "))
}

/// An incident for people, one block per failure: the headline (code and title), where (job,
/// host, GPU, ranks), the summary line, the first evidence lines, the cascade, the two first
/// workarounds and the first dead end, then how the headline was chosen.
pub fn write_incident_text(out: &mut impl Write, i: &IncidentEvent) -> io::Result<()> {
    let r = &i.root;
    let d = &i.diagnosis;
    let status = match i.resolution {
        Some(res) => format!("resolved ({})", serde_plain(&res)),
        None => serde_plain(&i.status),
    };
    let known = if i.root_known { "" } else { "root unknown: " };
    writeln!(out, "== {known}{} {}", r.error_code, d.title)?;
    let mut where_ = vec![format!("job {}", i.job_id)];
    let hosts: Vec<&str> = if i.culprit.hosts.is_empty() {
        r.host.iter().map(String::as_str).collect()
    } else {
        i.culprit.hosts.iter().map(String::as_str).collect()
    };
    if !hosts.is_empty() {
        where_.push(format!("host {}", hosts.join(", ")));
    }
    if let Some(gpu) = &r.gpu {
        where_.push(format!("GPU {gpu}"));
    }
    let ranks: Vec<u32> = if i.culprit.ranks.is_empty() {
        r.rank.into_iter().collect()
    } else {
        i.culprit.ranks.clone()
    };
    if !ranks.is_empty() {
        let text: Vec<String> = ranks.iter().map(u32::to_string).collect();
        where_.push(format!("rank {}", text.join(", ")));
    }
    writeln!(
        out,
        "   {} · {status} · {} match(es) · {} ({})",
        where_.join(" · "),
        i.counts.matches,
        i.fingerprint,
        d.verification.replace('_', " ")
    )?;
    writeln!(out, "   {}", i.summary)?;
    writeln!(out, "   why: {}", first_sentence(&d.root_cause))?;
    writeln!(out, "   evidence:")?;
    let mut seen_root = false;
    for line in i.context.lines.iter().take(6) {
        seen_root |= line.text == r.line;
        writeln!(out, "     | {}", line.text)?;
    }
    if !seen_root {
        writeln!(out, "     | {}", r.line)?;
    }
    writeln!(out, "     ({})", source_text(&r.source))?;
    for c in i.contributing.iter().take(3) {
        let role = if c.consequence {
            "consequence"
        } else {
            "also a root"
        };
        let mut at = String::new();
        if let Some(rank) = c.rank {
            at.push_str(&format!(" rank {rank}"));
        }
        if let Some(h) = &c.host {
            at.push_str(&format!(" on {h}"));
        }
        writeln!(out, "   {role}: {}{at}", c.error_code)?;
    }
    if let Some(cascade) = &i.cascades.summary {
        writeln!(out, "   cascade: {cascade}")?;
    }
    if !i.unrecognised.is_empty() {
        let seen: Vec<String> = i
            .unrecognised
            .iter()
            .map(|u| format!("{}x {}", u.count, u.template))
            .collect();
        writeln!(
            out,
            "   unrecognised errors near the failure: {}",
            seen.join(" | ")
        )?;
    }
    for w in d.verified_workarounds().take(2) {
        let rate = w.rate_text().map(|t| format!(" ({t})")).unwrap_or_default();
        writeln!(out, "   try: {}{rate}", w.text)?;
        if let Some(cmd) = &w.command {
            writeln!(out, "        $ {}", cmd.lines().next().unwrap_or(""))?;
        }
    }
    if let Some(dead) = d.verified_dead_ends().next() {
        writeln!(out, "   don't: {} ({})", dead.action, dead.why)?;
    }
    if i.restart_loop {
        writeln!(
            out,
            "   restart loop: this root came back {} times in this job",
            i.recurrence
        )?;
    }
    if let (Some(host), Some(score)) = (&i.blamed_host, i.bad_node_score) {
        if score >= 2.0 {
            writeln!(out, "   bad node: {host} (score {score:.1})")?;
        }
    }
    writeln!(out, "   why this headline: {}", i.grouping_info.explanation)?;
    writeln!(out)
}

/// The first sentence of a text (up to its first `. ` after a few words), on one line.
fn first_sentence(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.match_indices(". ").find(|(at, _)| *at > 40) {
        Some((at, _)) => flat[..=at].to_string(),
        None => flat,
    }
}

/// Where a line was read, for people.
fn source_text(source: &crate::record::Provenance) -> String {
    match source {
        crate::record::Provenance::File { path, line } => format!("{path}:{line}"),
        crate::record::Provenance::Kafka {
            topic,
            partition,
            offset,
            line,
        } => format!("{topic}/{partition}@{offset} line {line}"),
    }
}

/// A unit enum's JSON spelling, without quotes.
fn serde_plain<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
