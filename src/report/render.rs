//! The report as text (aligned columns), Markdown (tables) or one JSON object.

use std::fmt::Write;

use super::taxonomy::BUCKETS;
use super::Report;
use crate::metrics::report::ReportFamilies;

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[allow(missing_docs)]
pub enum Format {
    Text,
    Markdown,
    Json,
    Prometheus,
}

/// Renders `report` in `format`.
pub fn render(report: &Report, format: Format) -> String {
    match format {
        Format::Json => serde_json::to_string(report).unwrap_or_default() + "\n",
        Format::Text => document(report, false),
        Format::Markdown => document(report, true),
        Format::Prometheus => prometheus(report),
    }
}

/// The Prometheus text exposition of the interruptions, GPU-hours lost and fleet ETTR.
pub fn prometheus(report: &Report) -> String {
    let names: Vec<&str> = BUCKETS.iter().map(|b| b.name()).collect();
    let Ok(families) = ReportFamilies::new(&names) else {
        // The names are fixed and distinct: registering them cannot fail.
        return String::new();
    };
    for i in report.jobs.iter().flat_map(|j| &j.interruptions) {
        families.interruption(i.bucket.name(), i.code.as_deref(), i.gpu_hours_lost);
    }
    if let Some(e) = report.fleet.ettr {
        // Registered once, with a fixed name: it cannot fail.
        let _ = families.set_ettr(e);
    }
    families.render()
}

/// `1234567.8` -> `1,234,568`.
fn thousands(x: f64) -> String {
    let n = x.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        out.insert(0, '-');
    }
    out
}

/// A table: aligned columns (the first left-aligned) or a Markdown table.
fn grid(out: &mut String, head: &[&str], rows: &[Vec<String>], markdown: bool) {
    if markdown {
        let _ = writeln!(out, "| {} |", head.join(" | "));
        let rule: Vec<&str> = head
            .iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { "---" } else { "---:" })
            .collect();
        let _ = writeln!(out, "| {} |", rule.join(" | "));
        for r in rows {
            let _ = writeln!(out, "| {} |", r.join(" | "));
        }
        out.push('\n');
        return;
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .chain([head[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let mut s = String::from(" ");
        for (i, c) in cells.iter().enumerate() {
            let pad = widths[i].saturating_sub(c.chars().count());
            if i == 0 {
                s.push(' ');
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str("  ");
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(head.to_vec()));
    for r in rows {
        let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
    }
    out.push('\n');
}

fn heading(out: &mut String, text: &str, markdown: bool) {
    if markdown {
        let _ = writeln!(out, "## {text}\n");
    } else {
        let _ = writeln!(out, "{text}");
    }
}

fn document(r: &Report, md: bool) -> String {
    let mut out = String::new();
    let f = &r.fleet;
    let ettr = f.ettr.map_or("n/a".to_string(), |e| {
        format!("{e:.3} over {} jobs", f.ettr_jobs)
    });
    if md {
        out.push_str("# Fleet report\n\n");
    }
    let _ = writeln!(
        out,
        "{} jobs, {} interruptions, {} GPU-hours lost, fleet ETTR {ettr} ({} .. {})\n",
        f.jobs,
        f.interruptions,
        thousands(f.gpu_hours_lost),
        f.first.as_deref().unwrap_or("-"),
        f.last.as_deref().unwrap_or("-"),
    );
    heading(&mut out, "Interruptions by root cause", md);
    let mut rows: Vec<Vec<String>> = r
        .table
        .iter()
        .map(|row| {
            vec![
                row.label.to_string(),
                row.count.to_string(),
                format!("{:.1}%", row.share * 100.0),
                thousands(row.gpu_hours_lost),
            ]
        })
        .collect();
    rows.push(vec![
        "total".into(),
        f.interruptions.to_string(),
        if f.interruptions > 0 { "100.0%" } else { "-" }.into(),
        thousands(f.gpu_hours_lost),
    ]);
    grid(
        &mut out,
        &["root cause", "interruptions", "share", "GPU-hours lost"],
        &rows,
        md,
    );
    mttf(&mut out, r, md);
    lemons(&mut out, r, md);
    fixes(&mut out, r, md);
    out
}

fn mttf(out: &mut String, r: &Report, md: bool) {
    if r.mttf_by_size.is_empty() {
        return;
    }
    heading(out, "Mean time to failure by job size", md);
    let rows: Vec<Vec<String>> = r
        .mttf_by_size
        .iter()
        .map(|s| {
            vec![
                s.gpus.clone(),
                s.jobs.to_string(),
                s.failures.to_string(),
                format!("{:.0}", s.runtime_hours),
                s.mttf_hours.map_or("-".into(), |m| format!("{m:.1}")),
            ]
        })
        .collect();
    grid(
        out,
        &["GPUs", "jobs", "failures", "hours run", "MTTF (h)"],
        &rows,
        md,
    );
}

fn lemons(out: &mut String, r: &Report, md: bool) {
    heading(
        out,
        "Lemon nodes (hardware blamed by more distinct jobs than chance explains)",
        md,
    );
    if r.lemon_nodes.is_empty() {
        out.push_str(if md { "None.\n\n" } else { "  none\n\n" });
        return;
    }
    let rows: Vec<Vec<String>> = r
        .lemon_nodes
        .iter()
        .map(|l| {
            let mut codes: Vec<(&str, usize)> = Vec::new();
            for e in &l.history {
                match codes.iter_mut().find(|(c, _)| *c == e.code) {
                    Some((_, n)) => *n += 1,
                    None => codes.push((e.code.as_str(), 1)),
                }
            }
            let history: Vec<String> = codes
                .iter()
                .map(|(c, n)| {
                    if *n > 1 {
                        format!("{c} x{n}")
                    } else {
                        c.to_string()
                    }
                })
                .collect();
            vec![
                l.host.clone(),
                l.jobs.to_string(),
                format!("{:.2}", l.expected),
                format!("{:.0e}", l.p_value),
                history.join(", "),
            ]
        })
        .collect();
    grid(
        out,
        &["host", "jobs", "expected", "p", "history"],
        &rows,
        md,
    );
}

fn fixes(out: &mut String, r: &Report, md: bool) {
    if r.fix_outcomes.is_empty() {
        return;
    }
    let title = format!(
        "Fix outcomes: the job's next attempt after each root code (ran on = {} h without failing)",
        r.fix_threshold_hours
    );
    heading(out, &title, md);
    let rows: Vec<Vec<String>> = r
        .fix_outcomes
        .iter()
        .map(|x| {
            vec![
                x.code.clone(),
                x.n.to_string(),
                format!("{} of {}", x.ran_on, x.n),
                x.failed_same.to_string(),
                x.failed_other.to_string(),
            ]
        })
        .collect();
    grid(
        out,
        &[
            "root code",
            "n",
            "ran on",
            "failed again, same code",
            "failed, other",
        ],
        &rows,
        md,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(1234567.8), "1,234,568");
        assert_eq!(thousands(-1000.0), "-1,000");
    }
}
