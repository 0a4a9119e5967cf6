//! `faultline kb import`: entries of other formats -> [`EntrySpec`] TOML.
//!
//! Reads the seed's Markdown format and deadends.dev JSON entries (one object, an array, or
//! NDJSON). Neither carries patterns, so a first pattern is derived from the title: regex
//! metacharacters escaped, then numbers, ranks, collective names and durations generalised into
//! named groups. An example (the title) and a near-miss negative example are derived too; the
//! importer's output is a draft for a person to sharpen, and it passes `kb check` as it is.

use crate::kb::spec::{DeadEndSpec, EntrySpec, SeedSpec, VersionSpec, WorkaroundSpec};

/// Errors of the importers; `field` names what was missing or malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ImportError {
    /// What was missing or malformed: a field, a section or `json entry N`.
    pub field: String,
    /// What was wrong with it.
    pub message: String,
}

fn err(field: &str, message: impl Into<String>) -> ImportError {
    ImportError {
        field: field.to_string(),
        message: message.into(),
    }
}

/// Parses one entry in the seed's Markdown format.
pub fn from_markdown(text: &str) -> Result<EntrySpec, ImportError> {
    let mut title = None;
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut sections: Vec<(String, Vec<&str>)> = Vec::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            sections.push((h.trim().to_string(), Vec::new()));
        } else if let Some(h) = line.strip_prefix("# ") {
            if title.is_none() {
                title = Some(h.trim().to_string());
            }
        } else if let Some((_, body)) = sections.last_mut() {
            body.push(line);
        } else if let Some(rest) = line.trim().strip_prefix("- **") {
            if let Some((key, value)) = rest.split_once(":**") {
                fields.push((key.trim().to_lowercase(), unquote(value.trim())));
            }
        }
    }
    let title = title.ok_or_else(|| err("title", "no `# ` title line"))?;
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let required =
        |name: &str| field(name).ok_or_else(|| err(name, "missing bullet `- **Name:** value`"));
    let section = |name: &str| {
        sections
            .iter()
            .find(|(h, _)| h.eq_ignore_ascii_case(name))
            .map(|(_, body)| body.as_slice())
    };

    let id = required("id")?;
    let fix_rate = field("fix rate")
        .map(|r| parse_percent(&r, "fix_rate"))
        .transpose()?;
    let root_cause = section("Root Cause")
        .map(|b| {
            b.iter()
                .map(|l| l.trim())
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|s| !s.is_empty())
        .ok_or_else(|| err("root_cause", "missing `## Root Cause` section"))?;
    let versions = section("Version Compatibility")
        .map(parse_versions)
        .transpose()?
        .unwrap_or_default();
    let workarounds = section("Workarounds")
        .map(parse_workarounds)
        .transpose()?
        .unwrap_or_default();
    let dead_ends = section("Dead Ends")
        .map(parse_dead_ends)
        .transpose()?
        .unwrap_or_default();
    Ok(draft(DraftParts {
        id,
        title,
        domain: required("domain")?,
        category: required("category")?,
        error_code: required("error code")?,
        verification: field("verification").unwrap_or_else(|| "ai_generated".into()),
        fix_rate,
        root_cause,
        versions,
        workarounds,
        dead_ends,
        origin: "Markdown".into(),
    }))
}

/// A deadends.dev entry as published (`schema_version` 1.0.0), reduced to what maps onto a KB
/// entry. Unknown fields are ignored: the format is someone else's and grows.
#[derive(Debug, serde::Deserialize)]
struct DeadendsEntry {
    id: String,
    #[serde(default)]
    url: Option<String>,
    error: DeadendsError,
    #[serde(default)]
    environment: Option<DeadendsEnvironment>,
    verdict: DeadendsVerdict,
    #[serde(default)]
    dead_ends: Vec<DeadendsDeadEnd>,
    #[serde(default)]
    workarounds: Vec<DeadendsWorkaround>,
    #[serde(default)]
    metadata: Option<DeadendsMetadata>,
}

#[derive(Debug, serde::Deserialize)]
struct DeadendsError {
    signature: String,
    #[serde(default)]
    regex: Option<String>,
    domain: String,
    category: String,
}

#[derive(Debug, serde::Deserialize)]
struct DeadendsEnvironment {
    #[serde(default)]
    runtime: Option<DeadendsRuntime>,
    #[serde(default)]
    additional: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, serde::Deserialize)]
struct DeadendsRuntime {
    name: String,
    version_range: String,
}

#[derive(Debug, serde::Deserialize)]
struct DeadendsVerdict {
    #[serde(default)]
    fix_success_rate: Option<f64>,
    summary: String,
}

#[derive(Debug, serde::Deserialize)]
struct DeadendsDeadEnd {
    action: String,
    why_fails: String,
    #[serde(default)]
    fail_rate: Option<f64>,
}

#[derive(Debug, serde::Deserialize)]
struct DeadendsWorkaround {
    action: String,
    #[serde(default)]
    how: Option<String>,
    #[serde(default)]
    success_rate: Option<f64>,
}

#[derive(Debug, serde::Deserialize)]
struct DeadendsMetadata {
    #[serde(default)]
    review_status: Option<String>,
}

/// Parses deadends.dev JSON: one entry object, an array of entries, or NDJSON (one entry per
/// line, as its `errors.ndjson` API publishes them).
pub fn from_json(text: &str) -> Result<Vec<EntrySpec>, ImportError> {
    let trimmed = text.trim_start();
    let entries: Vec<DeadendsEntry> = if trimmed.starts_with('[') {
        serde_json::from_str(trimmed).map_err(|e| err("json", e.to_string()))?
    } else {
        let mut stream = serde_json::Deserializer::from_str(trimmed).into_iter::<DeadendsEntry>();
        let mut out = Vec::new();
        for (i, item) in stream.by_ref().enumerate() {
            out.push(item.map_err(|e| err(&format!("json entry {}", i + 1), e.to_string()))?);
        }
        out
    };
    if entries.is_empty() {
        return Err(err("json", "no entries"));
    }
    Ok(entries.into_iter().map(from_deadends).collect())
}

fn from_deadends(e: DeadendsEntry) -> EntrySpec {
    let mut parts = e.id.split('/');
    let domain = slugify(parts.next().unwrap_or(&e.error.domain));
    let slug = parts
        .map(slugify)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    let slug = if slug.is_empty() {
        slugify(&e.error.signature)
    } else {
        slug
    };
    let code_source = e.id.split('/').nth(1).unwrap_or(&slug);
    let error_code = slugify(code_source).replace('-', "_").to_uppercase();
    let verification = match e.metadata.as_ref().and_then(|m| m.review_status.as_deref()) {
        Some("human_reviewed") => "expert_reviewed",
        Some("community_verified") => "community_reported",
        _ => "ai_generated",
    };
    let mut versions = Vec::new();
    if let Some(env) = &e.environment {
        if let Some(rt) = &env.runtime {
            versions.push(version_row(&rt.name, &rt.version_range));
        }
        for (key, value) in env.additional.iter().flatten() {
            if let Some(range) = value
                .as_str()
                .filter(|v| v.starts_with(['<', '>', '=', '~', '!']))
            {
                let component = key
                    .trim_end_matches("_version")
                    .trim_end_matches("_toolkit");
                versions.push(version_row(component, range));
            }
        }
    }
    let mut spec = draft(DraftParts {
        id: format!("{domain}/{slug}"),
        title: e.error.signature.clone(),
        domain,
        category: slugify(&e.error.category).replace('-', "_"),
        error_code,
        verification: verification.to_string(),
        fix_rate: e
            .verdict
            .fix_success_rate
            .filter(|r| (0.0..=1.0).contains(r)),
        root_cause: e.verdict.summary,
        versions,
        workarounds: e
            .workarounds
            .into_iter()
            .map(|w| WorkaroundSpec {
                text: w.action,
                command: w.how.filter(|h| !h.trim().is_empty()),
                success_rate: w.success_rate.filter(|r| (0.0..=1.0).contains(r)),
                n: None,
                source: None,
            })
            .collect(),
        dead_ends: e
            .dead_ends
            .into_iter()
            .map(|d| DeadEndSpec {
                action: d.action,
                why: d.why_fails,
                fail_rate: d.fail_rate.filter(|r| (0.0..=1.0).contains(r)),
                n: None,
                source: None,
            })
            .collect(),
        origin: "deadends.dev JSON".into(),
    });
    if let Some(url) = e.url {
        spec.references.insert(0, url);
    }
    // Keep the entry's own regex when both engines accept it and it matches the signature.
    if let Some(regex) = e.error.regex {
        let usable = crate::kb::compile_pattern(&regex)
            .ok()
            .filter(|re| re.is_match(spec.examples[0].as_bytes()))
            .is_some()
            && crate::matcher::HyperscanMatcher::check_one(&regex).is_ok()
            && !spec.negative_examples.iter().any(|n| {
                crate::kb::compile_pattern(&regex).is_ok_and(|re| re.is_match(n.as_bytes()))
            });
        if usable {
            spec.patterns.insert(0, regex);
        }
    }
    spec
}

fn version_row(component: &str, range: &str) -> VersionSpec {
    VersionSpec {
        component: component.to_string(),
        range: range.to_string(),
        status: "active".to_string(),
        introduced: None,
        deprecated: None,
    }
}

/// Lowercase `a-z0-9-` with single dashes: a valid id part.
fn slugify(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    out.trim_end_matches('-')
        .chars()
        .take(60)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}

/// Renders an entry in the seed's Markdown format (the inverse of [`from_markdown`]): the
/// entry's `[seed]` fields where it has them (what the seed wrote), else its own.
pub fn to_markdown(spec: &EntrySpec) -> String {
    let own = SeedSpec {
        title: spec.title.clone(),
        category: spec.category.clone(),
        error_code: spec.error_code.clone(),
        verification: spec.verification.clone(),
        fix_rate: spec.fix_rate,
        root_cause: spec.root_cause.clone(),
        versions: spec.versions.clone(),
        workarounds: spec.workarounds.clone(),
        dead_ends: spec.dead_ends.clone(),
    };
    let seed = spec.seed.as_ref().unwrap_or(&own);
    let or = |a: &'_ str, b: &'_ str| {
        if a.is_empty() {
            b.to_string()
        } else {
            a.to_string()
        }
    };
    let mut out = format!("# {}\n\n", seed.title);
    out.push_str(&format!("- **ID:** `{}`\n", spec.id));
    out.push_str(&format!("- **Domain:** {}\n", spec.domain));
    out.push_str(&format!(
        "- **Category:** {}\n",
        or(&seed.category, &spec.category)
    ));
    out.push_str(&format!(
        "- **Error Code:** `{}`\n",
        or(&seed.error_code, &spec.error_code)
    ));
    out.push_str(&format!(
        "- **Verification:** {}\n",
        or(&seed.verification, &spec.verification)
    ));
    if let Some(rate) = seed.fix_rate {
        out.push_str(&format!("- **Fix Rate:** {}%\n", percent(rate)));
    }
    out.push_str(&format!(
        "\n## Root Cause\n\n{}\n",
        or(seed.root_cause.trim(), spec.root_cause.trim())
    ));
    let spec = seed;
    if !spec.versions.is_empty() {
        out.push_str("\n## Version Compatibility\n\n| Version | Status | Introduced | Deprecated |\n|---------|--------|------------|------------|\n");
        for v in &spec.versions {
            out.push_str(&format!(
                "| {}{} | {} | {} | {} |\n",
                v.component,
                v.range,
                v.status,
                v.introduced.as_deref().unwrap_or("—"),
                v.deprecated.as_deref().unwrap_or("—")
            ));
        }
    }
    if !spec.workarounds.is_empty() {
        out.push_str("\n## Workarounds\n\n");
        for (i, w) in spec.workarounds.iter().enumerate() {
            let rate = w
                .success_rate
                .map(|r| format!(" ({}% success)", percent(r)))
                .unwrap_or_default();
            out.push_str(&format!("{}. **{}**{rate}\n", i + 1, w.text));
            out.push_str(&format!(
                "   ```\n   {}\n   ```\n",
                w.command.as_deref().unwrap_or(&w.text)
            ));
        }
    }
    if !spec.dead_ends.is_empty() {
        out.push_str("\n## Dead Ends\n\n");
        for d in &spec.dead_ends {
            let rate = d
                .fail_rate
                .map(|r| format!(" ({}% fail)", percent(r)))
                .unwrap_or_default();
            out.push_str(&format!("- **{}** — {}{rate}\n", d.action, d.why));
        }
    }
    out
}

fn percent(rate: f64) -> String {
    let p = rate * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{}", p.round() as i64)
    } else {
        format!("{p}")
    }
}

fn unquote(s: &str) -> String {
    s.trim_matches('`').trim().to_string()
}

fn parse_percent(s: &str, field: &str) -> Result<f64, ImportError> {
    let n = s.trim().trim_end_matches('%').trim();
    let value: f64 = n
        .parse()
        .map_err(|_| err(field, format!("`{s}` is not a percentage")))?;
    if !(0.0..=100.0).contains(&value) {
        return Err(err(field, format!("`{s}` is outside 0-100%")));
    }
    Ok(value / 100.0)
}

/// `(80% success)` / `(70% fail)` at the end of a line -> (rest, rate).
fn trailing_rate<'a>(line: &'a str, word: &str) -> (&'a str, Option<&'a str>) {
    let suffix = format!("% {word})");
    if let Some(body) = line.trim_end().strip_suffix(suffix.as_str()) {
        if let Some(open) = body.rfind('(') {
            return (body[..open].trim_end(), Some(&body[open + 1..]));
        }
    }
    (line, None)
}

fn parse_versions(body: &[&str]) -> Result<Vec<VersionSpec>, ImportError> {
    let none = |s: &str| {
        let s = s.trim();
        (!(s.is_empty() || s == "—" || s == "-")).then(|| s.to_string())
    };
    let mut rows = Vec::new();
    for line in body.iter().map(|l| l.trim()).filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() < 2 || cells[0].eq_ignore_ascii_case("version") || cells[0].starts_with("--")
        {
            continue;
        }
        let split = cells[0]
            .find(['<', '>', '=', '!', '~'])
            .ok_or_else(|| err("versions", format!("`{}` has no version range", cells[0])))?;
        rows.push(VersionSpec {
            component: cells[0][..split].trim().to_string(),
            range: cells[0][split..].trim().to_string(),
            status: cells[1].to_string(),
            introduced: cells.get(2).and_then(|c| none(c)),
            deprecated: cells.get(3).and_then(|c| none(c)),
        });
    }
    Ok(rows)
}

fn parse_workarounds(body: &[&str]) -> Result<Vec<WorkaroundSpec>, ImportError> {
    let mut out: Vec<WorkaroundSpec> = Vec::new();
    let mut in_code = false;
    let mut code = Vec::new();
    for line in body {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            if in_code {
                let command = code.join("\n");
                if let Some(last) = out.last_mut() {
                    if command != last.text && !command.is_empty() {
                        last.command = Some(command);
                    }
                }
                code.clear();
            }
            in_code = !in_code;
            continue;
        }
        if in_code {
            code.push(trimmed.to_string());
            continue;
        }
        let Some(dot) = trimmed.find(". ") else {
            continue;
        };
        if dot == 0 || !trimmed[..dot].bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let item = &trimmed[dot + 2..];
        let (text, rate) = trailing_rate(item, "success");
        out.push(WorkaroundSpec {
            text: strip_bold(text),
            command: None,
            success_rate: rate
                .map(|r| parse_percent(r, "workarounds.success_rate"))
                .transpose()?,
            n: None,
            source: None,
        });
    }
    Ok(out)
}

fn parse_dead_ends(body: &[&str]) -> Result<Vec<DeadEndSpec>, ImportError> {
    let mut out = Vec::new();
    for line in body {
        let Some(item) = line.trim().strip_prefix("- ") else {
            continue;
        };
        let (text, rate) = trailing_rate(item, "fail");
        let (action, why) = text
            .split_once(" — ")
            .or_else(|| text.split_once(" - "))
            .ok_or_else(|| err("dead_ends", format!("`{item}` lacks `action — why`")))?;
        out.push(DeadEndSpec {
            action: strip_bold(action),
            why: why.trim().to_string(),
            fail_rate: rate
                .map(|r| parse_percent(r, "dead_ends.fail_rate"))
                .transpose()?,
            n: None,
            source: None,
        });
    }
    Ok(out)
}

fn strip_bold(s: &str) -> String {
    let s = s.trim();
    s.strip_prefix("**")
        .and_then(|s| s.strip_suffix("**"))
        .unwrap_or(s)
        .trim()
        .to_string()
}

/// The parts every importer reads; [`draft`] adds what matching needs.
pub(crate) struct DraftParts {
    pub id: String,
    pub title: String,
    pub domain: String,
    pub category: String,
    pub error_code: String,
    pub verification: String,
    pub fix_rate: Option<f64>,
    pub root_cause: String,
    pub versions: Vec<VersionSpec>,
    pub workarounds: Vec<WorkaroundSpec>,
    pub dead_ends: Vec<DeadEndSpec>,
    pub origin: String,
}

pub(crate) fn draft(p: DraftParts) -> EntrySpec {
    let pattern = pattern_from_title(&p.title);
    let negative = negative_from_title(&p.title);
    let lower = p.title.to_lowercase();
    let cascade = ["timed out", "timeout", "aborted", "remote", "watchdog"]
        .iter()
        .any(|w| lower.contains(w));
    let verification = if crate::kb::entry::VERIFICATIONS.contains(&p.verification.as_str()) {
        p.verification.clone()
    } else {
        "ai_generated".to_string()
    };
    // What the other knowledge base wrote is kept apart, rates and all: the entry's own advice
    // starts empty until someone checks it against a source.
    let seed = SeedSpec {
        title: p.title.clone(),
        category: p.category.clone(),
        error_code: p.error_code.clone(),
        verification: p.verification.clone(),
        fix_rate: p.fix_rate,
        root_cause: p.root_cause.clone(),
        versions: p.versions.clone(),
        workarounds: p.workarounds,
        dead_ends: p.dead_ends,
    };
    let verification = if verification == "ai_generated" {
        "seed_ai_generated".to_string()
    } else {
        verification
    };
    EntrySpec {
        id: p.id.clone(),
        title: p.title.clone(),
        domain: p.domain,
        category: p.category,
        error_code: p.error_code,
        aliases: Vec::new(),
        role: if cascade { "cascade" } else { "root" }.to_string(),
        severity: "error".to_string(),
        fallback: false,
        class: None,
        whole_line: false,
        supersedes: Vec::new(),
        verification,
        patterns_verified: "unverified".to_string(),
        fix_rate: None,
        root_cause: p.root_cause,
        patterns: vec![pattern],
        examples: vec![p.title],
        negative_examples: vec![negative],
        references: vec![format!(
            "imported from {} entry {}; add the source file that prints this message",
            p.origin, p.id
        )],
        versions: p.versions,
        workarounds: Vec::new(),
        dead_ends: Vec::new(),
        review: Vec::new(),
        seed: Some(seed),
    }
}

/// Collective operation names as PyTorch and NCCL print them.
const COLLECTIVES: &[&str] = &[
    "AllReduce",
    "AllGather",
    "ReduceScatter",
    "Broadcast",
    "AllToAll",
    "Barrier",
    "Reduce",
    "Gather",
    "Scatter",
    "Send",
    "Recv",
];

/// A first pattern from a title: literal text escaped; numbers, ranks, collectives and
/// durations generalised (the first of each kind as a named group).
pub fn pattern_from_title(title: &str) -> String {
    let mut out = String::new();
    let mut named: Vec<&str> = Vec::new();
    let mut group = |name: &'static str, body: &str, out: &mut String| {
        if named.contains(&name) {
            out.push_str(&format!("(?:{body})"));
        } else {
            named.push(name);
            out.push_str(&format!("(?P<{name}>{body})"));
        }
    };
    let bytes = title.as_bytes();
    let mut i = 0;
    let mut prev_word = String::new();
    let mut last_was_space = false;
    while i < title.len() {
        let rest = &title[i..];
        if let Some(op) = COLLECTIVES.iter().find(|op| {
            // Bytes, not `&rest[..n]`: `n` may fall inside a multi-byte character (fuzzing
            // found the panic on a title with an em dash).
            rest.len() >= op.len()
                && rest.as_bytes()[..op.len()].eq_ignore_ascii_case(op.as_bytes())
                && !rest
                    .as_bytes()
                    .get(op.len())
                    .is_some_and(u8::is_ascii_alphanumeric)
        }) {
            let alternatives = COLLECTIVES.join("|");
            group("op", &format!("(?i:{alternatives}|_?[A-Z_]+)"), &mut out);
            i += op.len();
            prev_word.clear();
            last_was_space = false;
            continue;
        }
        let c = bytes[i];
        if c.is_ascii_digit() {
            let len = rest.bytes().take_while(u8::is_ascii_digit).count();
            let after = rest[len..].trim_start();
            let unit = [
                "milliseconds",
                "ms",
                "seconds",
                "sec",
                "s",
                "minutes",
                "min",
            ]
            .iter()
            .find(|u| {
                after.starts_with(**u)
                    && !after
                        .as_bytes()
                        .get(u.len())
                        .is_some_and(u8::is_ascii_alphabetic)
            });
            if let Some(unit) = unit {
                let name = if unit.starts_with('m') && unit.contains('s') && *unit != "minutes" {
                    "timeout_ms"
                } else {
                    "timeout"
                };
                group(name, r"\d+", &mut out);
                let skipped = rest.len() - after.len() - len;
                // Any whitespace, as `trim_start` skipped any (the seed_markdown fuzz harness found
                // "5  s": two spaces, and the pattern did not match its own title).
                out.push_str(r"\s*(?:ms|milliseconds|s|sec|seconds|min|minutes)");
                i += len + skipped + unit.len();
            } else if prev_word.eq_ignore_ascii_case("rank") {
                group("rank", r"\d+", &mut out);
                i += len;
            } else {
                out.push_str(r"\d+");
                i += len;
            }
            prev_word.clear();
            last_was_space = false;
            continue;
        }
        let ch = rest.chars().next().unwrap_or(' ');
        if ch.is_ascii_alphabetic() {
            if last_was_space {
                prev_word.clear();
            }
            prev_word.push(ch);
        } else if ch != ' ' {
            prev_word.clear();
        }
        last_was_space = ch == ' ';
        if "\\.+*?()|[]{}^$#&-~".contains(ch) {
            out.push('\\');
        }
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// A near miss for the derived pattern: the title without its digits, or, when it has none,
/// its first half (the pattern needs the whole title).
fn negative_from_title(title: &str) -> String {
    if title.bytes().any(|b| b.is_ascii_digit()) {
        title.chars().filter(|c| !c.is_ascii_digit()).collect()
    } else {
        let words: Vec<&str> = title.split_whitespace().collect();
        // A blank title has no half to take (the fuzzer's seed_markdown found it panicking).
        if words.is_empty() {
            return "(healthy)".to_string();
        }
        let half = (words.len() / 2).max(1);
        format!("{} (healthy)", words[..half].join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = include_str!("../../tests/fixtures/seed/pytorch-nccl-timeout-allreduce.md");

    #[test]
    fn a_blank_title_gives_a_negative_without_panicking() {
        assert_eq!(negative_from_title(""), "(healthy)");
        assert_eq!(negative_from_title(" \t "), "(healthy)");
        assert_eq!(negative_from_title("NCCL watchdog fired"), "NCCL (healthy)");
        assert_eq!(negative_from_title("Xid 79"), "Xid ");
    }

    #[test]
    fn the_seed_imports_with_every_field() {
        let spec = from_markdown(SEED).expect("imports");
        assert_eq!(spec.id, "pytorch/nccl-timeout-allreduce");
        assert_eq!(spec.error_code, "NCCL_TIMEOUT_600");
        assert_eq!(spec.versions.len(), 3);
        assert_eq!(spec.versions[0].component, "torch");
        assert_eq!(spec.versions[0].range, ">=1.10");
        // The seed's AI-written advice and numbers are kept apart, never shown as the entry's.
        assert_eq!(spec.verification, "seed_ai_generated");
        assert_eq!(spec.fix_rate, None);
        assert!(spec.workarounds.is_empty() && spec.dead_ends.is_empty());
        let seed = spec.seed.as_ref().expect("the seed's fields");
        assert_eq!(seed.fix_rate, Some(0.75));
        assert_eq!(seed.verification, "ai_generated");
        assert_eq!(seed.workarounds.len(), 3);
        assert_eq!(seed.workarounds[0].success_rate, Some(0.8));
        assert_eq!(seed.dead_ends.len(), 2);
        assert_eq!(seed.dead_ends[0].action, "export NCCL_TIMEOUT=1200");
        assert_eq!(seed.dead_ends[1].fail_rate, Some(0.5));
    }

    #[test]
    fn markdown_export_is_the_seed_verbatim() {
        let spec = from_markdown(SEED).expect("imports");
        assert_eq!(to_markdown(&spec).trim_end(), SEED.trim_end());
    }

    #[test]
    fn markdown_round_trips() {
        let spec = from_markdown(SEED).expect("imports");
        let again = from_markdown(&to_markdown(&spec)).expect("re-imports");
        assert_eq!(spec, again);
    }

    #[test]
    fn deadends_json_maps_onto_the_kb_format() {
        let one = include_str!("../../tests/fixtures/deadends/cuda-oom-example.json");
        let specs = from_json(one).expect("imports");
        assert_eq!(specs.len(), 1);
        let s = &specs[0];
        assert_eq!(s.id, "pytorch/cuda-out-of-memory-backward-torch2-4-h100");
        assert_eq!(s.error_code, "CUDA_OUT_OF_MEMORY_BACKWARD");
        assert_eq!(s.verification, "expert_reviewed");
        assert_eq!(s.fix_rate, None, "its rates have no sample size");
        let seed = s.seed.as_ref().expect("what deadends.dev wrote");
        assert_eq!(seed.fix_rate, Some(0.82));
        assert_eq!(seed.workarounds.len(), 3);
        assert_eq!(
            seed.workarounds[1].command.as_deref(),
            Some("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
        );
        assert_eq!(seed.dead_ends[0].fail_rate, Some(0.85));
        assert!(s
            .versions
            .iter()
            .any(|v| v.component == "pytorch" && v.range == ">=2.4"));
        assert!(s
            .versions
            .iter()
            .any(|v| v.component == "cuda" && v.range == ">=12.1"));
        let array = include_str!("../../tests/fixtures/deadends/two-entries.json");
        let nd = include_str!("../../tests/fixtures/deadends/two-entries.ndjson");
        assert_eq!(from_json(array).expect("array").len(), 2);
        assert_eq!(
            from_json(nd).expect("ndjson"),
            from_json(array).expect("array")
        );
        assert!(from_json("{\"id\": 1}").is_err());
    }

    #[test]
    fn title_pattern_generalises_numbers_ranks_ops_and_durations() {
        let p = pattern_from_title(
            "[Rank 0] NCCL communicator was aborted on rank 2. AllReduce timed out after 600000 ms",
        );
        let re = crate::kb::compile_pattern(&p).expect("compiles");
        let line: &[u8] = b"[Rank 7] NCCL communicator was aborted on rank 3. Broadcast timed out after 1800000 ms";
        let mut caps = re.create_captures();
        re.captures(line, &mut caps);
        assert!(caps.is_match(), "generalised");
        let group = |name: &str| caps.get_group_by_name(name).map(|s| &line[s.range()]);
        assert_eq!(group("rank"), Some(&b"7"[..]));
        assert_eq!(group("op"), Some(&b"Broadcast"[..]));
        assert_eq!(group("timeout_ms"), Some(&b"1800000"[..]));
        assert!(!re.is_match(
            b"[Rank ] NCCL communicator was aborted on rank . AllReduce timed out after  ms"
        ));
    }
}
