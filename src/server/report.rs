//! The report page: `/report` (HTML) and `/api/v1/report` (the JSON of `faultline report
//! --format json`), built on request from the incident store's live input
//! ([`crate::report::live`]), over `?since=&until=` (RFC 3339) when given; and the report's
//! Prometheus families for `/metrics` ([`families`]).
//!
//! The page ([`page`], also what `faultline report --format html` writes): the fleet's figures,
//! the interruption table with a bar per bucket, GPU-hours lost over time by bucket (stacked
//! bars), the distribution of the jobs' ETTR, and the lemon nodes. One self-contained
//! document, inline CSS and SVG, no script; every text from a log goes through
//! [`super::html::esc`].

use std::fmt::Write;
use std::sync::Arc;

use super::html::esc;
use super::store::IncidentStore;
use super::{Get, Reply, Routes};
use crate::report::taxonomy::{Bucket, BUCKETS};
use crate::report::{Options, Report};
use crate::time::{format_ms, Millis};

const STYLE: &str = "
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1c1c1c;background:#f6f7f9}
header{background:#1f2937;color:#fff;padding:10px 24px}header a{color:#fff;text-decoration:none;font-weight:600;margin-right:16px}
main{padding:16px 24px;max-width:1100px}
h1{font-size:20px;margin:4px 0 8px}h2{font-size:16px;margin:22px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;width:100%;background:#fff}th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #e4e4e4}
th{background:#eef0f3;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
.figures td:first-child{width:260px;color:#555}
svg{background:#fff;border:1px solid #ddd;margin:6px 0}svg text{font:11px system-ui,sans-serif;fill:#333}
.muted{color:#666}.swatch{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px}
form.range{margin:8px 0 14px}form.range input{margin-right:8px}
";

/// A colour per bucket, in [`BUCKETS`] order.
const COLOURS: [&str; 12] = [
    "#b71c1c", "#e65100", "#f9a825", "#6a1b9a", "#1565c0", "#00838f", "#546e7a", "#2e7d32",
    "#8d6e63", "#ad1457", "#283593", "#9e9e9e",
];

fn colour(b: Bucket) -> &'static str {
    let i = BUCKETS
        .iter()
        .position(|x| *x == b)
        .unwrap_or(COLOURS.len() - 1);
    COLOURS.get(i).copied().unwrap_or("#9e9e9e")
}

fn num(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// The report as one HTML document (`faultline report --format html` and `/report`).
pub fn page(r: &Report) -> String {
    let mut b = String::new();
    let range = match (&r.since, &r.until) {
        (None, None) => "all of it".to_string(),
        (s, u) => format!(
            "{} to {}",
            s.as_deref().unwrap_or("the start"),
            u.as_deref().unwrap_or("now")
        ),
    };
    let _ = write!(
        b,
        "<h1>What failures cost the fleet</h1><p class=\"muted\">Range: {}. How every number is \
         estimated: docs/report.md.</p>",
        esc(&range)
    );
    figures(&mut b, r);
    table(&mut b, r);
    over_time(&mut b, r);
    ettr(&mut b, r);
    lemons(&mut b, r);
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"referrer\" content=\"no-referrer\"><title>faultline report</title>\
         <style>{STYLE}</style></head><body><header><a href=\"/report\">faultline report</a>\
         <a href=\"/incidents\">incidents</a></header><main>{b}</main></body></html>"
    )
}

fn figures(b: &mut String, r: &Report) {
    let f = &r.fleet;
    let ettr = f.ettr.map_or("-".to_string(), |e| format!("{e:.3}"));
    let _ = write!(
        b,
        "<table class=\"figures\"><tr><td>Jobs</td><td id=\"jobs\">{}</td></tr>\
         <tr><td>Interruptions</td><td id=\"interruptions\">{}</td></tr>\
         <tr><td>GPU-hours lost</td><td id=\"gpu-hours-lost\">{:.1}</td></tr>\
         <tr><td>Fleet ETTR ({} jobs)</td><td id=\"fleet-ettr\">{}</td></tr>\
         <tr><td>From</td><td>{}</td></tr><tr><td>To</td><td>{}</td></tr></table>",
        f.jobs,
        f.interruptions,
        f.gpu_hours_lost,
        f.ettr_jobs,
        ettr,
        esc(f.first.as_deref().unwrap_or("-")),
        esc(f.last.as_deref().unwrap_or("-")),
    );
}

fn table(b: &mut String, r: &Report) {
    b.push_str("<h2>Interruptions by root cause</h2>");
    if r.table.is_empty() {
        b.push_str("<p class=\"muted\">No interruption in the range.</p>");
        return;
    }
    b.push_str(
        "<table id=\"interruption-table\"><tr><th>Root cause</th><th>Count</th><th>Share</th>\
         <th>GPU-hours lost</th></tr>",
    );
    for row in &r.table {
        let _ = write!(
            b,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{:.1}%</td><td class=\"n\">{:.1}</td></tr>",
            colour(row.bucket),
            esc(row.label),
            row.count,
            row.share * 100.0,
            row.gpu_hours_lost
        );
    }
    b.push_str("</table>");
    let bars = r.table.iter().map(|row| Bar {
        label: row.label,
        value: row.count as u64,
        fill: colour(row.bucket),
        text: row.count.to_string(),
    });
    bar_chart(
        b,
        ("chart-table", "interruptions by root cause"),
        (760.0, 200.0),
        bars,
    );
}

/// One bar of a [`bar_chart`].
struct Bar<'a> {
    label: &'a str,
    value: u64,
    fill: &'a str,
    /// Printed after the bar.
    text: String,
}

/// A horizontal bar chart as inline SVG: `(id, aria label)`, `(width, where the bars start)`,
/// one row per bar, scaled to the largest value.
fn bar_chart<'a>(
    b: &mut String,
    (id, aria): (&str, &str),
    (w, x0): (f64, f64),
    bars: impl ExactSizeIterator<Item = Bar<'a>> + Clone,
) {
    let max = bars.clone().map(|x| x.value).max().unwrap_or(1).max(1) as f64;
    let row_h = 22.0;
    let h = row_h * bars.len() as f64 + 10.0;
    let _ = write!(
        b,
        "<svg id=\"{id}\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         role=\"img\" aria-label=\"{aria}\">"
    );
    for (i, bar) in bars.enumerate() {
        let y = 5.0 + i as f64 * row_h;
        let len = (w - x0 - 60.0) * bar.value as f64 / max;
        let _ = write!(
            b,
            "<text x=\"4\" y=\"{:.1}\">{}</text><rect class=\"bar\" x=\"{x0}\" y=\"{y:.1}\" \
             width=\"{len:.1}\" height=\"{:.1}\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            y + 15.0,
            esc(bar.label),
            row_h - 6.0,
            bar.fill,
            x0 + 4.0 + len,
            y + 15.0,
            esc(&bar.text)
        );
    }
    b.push_str("</svg>");
}

/// GPU-hours lost per bucket in one time bin.
type Bin = Vec<(Bucket, f64)>;

/// The first bin's start, the bins' width, and GPU-hours lost per time bin and bucket.
fn bins(r: &Report) -> Option<(Millis, Millis, Vec<Bin>)> {
    let all: Vec<_> = r.jobs.iter().flat_map(|j| &j.interruptions).collect();
    let first = all.iter().map(|i| i.failure).min()?;
    let last = all.iter().map(|i| i.failure).max()?;
    let day = 86_400_000;
    let width = if last - first >= 2 * day {
        day
    } else {
        3_600_000
    };
    let n = (((last - first) / width) + 1).clamp(1, 400) as usize;
    let width = ((last - first) / n as Millis + 1).max(width);
    let mut out: Vec<Bin> = vec![Vec::new(); n];
    for i in all {
        let k = (((i.failure - first) / width) as usize).min(n - 1);
        match out[k].iter_mut().find(|(b, _)| *b == i.bucket) {
            Some((_, h)) => *h += i.gpu_hours_lost,
            None => out[k].push((i.bucket, i.gpu_hours_lost)),
        }
    }
    Some((first, width, out))
}

fn over_time(b: &mut String, r: &Report) {
    b.push_str("<h2>GPU-hours lost over time, by root cause</h2>");
    let Some((first, width, bins)) = bins(r) else {
        b.push_str("<p class=\"muted\">No interruption in the range.</p>");
        return;
    };
    let max = bins
        .iter()
        .map(|bin| bin.iter().map(|(_, h)| h).sum::<f64>())
        .fold(0.0, f64::max)
        .max(1e-9);
    let (w, h, left, bottom) = (900.0, 260.0, 60.0, 24.0);
    let bar = (w - left - 10.0) / bins.len() as f64;
    let _ = write!(
        b,
        "<svg id=\"chart-over-time\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         role=\"img\" aria-label=\"GPU-hours lost over time\"><text x=\"4\" y=\"14\">{}</text>\
         <text x=\"4\" y=\"{:.1}\">0</text>",
        num(max),
        h - bottom
    );
    for (k, bin) in bins.iter().enumerate() {
        let x = left + k as f64 * bar;
        let mut y = h - bottom;
        for bucket in BUCKETS {
            let Some((_, hours)) = bin.iter().find(|(x, _)| *x == bucket) else {
                continue;
            };
            let len = (h - bottom - 20.0) * hours / max;
            y -= len;
            let _ = write!(
                b,
                "<rect class=\"bar\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{len:.1}\" \
                 fill=\"{}\"><title>{}: {:.1} GPU-hours from {}</title></rect>",
                (bar - 1.0).max(0.5),
                colour(bucket),
                esc(bucket.label()),
                hours,
                esc(&format_ms(first + k as Millis * width))
            );
        }
    }
    let _ = write!(
        b,
        "<text x=\"{left}\" y=\"{:.1}\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" \
         text-anchor=\"end\">{}</text></svg>",
        h - 6.0,
        esc(&format_ms(first)),
        w - 10.0,
        h - 6.0,
        esc(&format_ms(first + bins.len() as Millis * width))
    );
}

fn ettr(b: &mut String, r: &Report) {
    b.push_str("<h2>Effective training time ratio of the jobs</h2>");
    let values: Vec<f64> = r.jobs.iter().filter_map(|j| j.ettr).collect();
    if values.is_empty() {
        b.push_str("<p class=\"muted\">No job printed progress the report recognises.</p>");
        return;
    }
    let mut counts = [0usize; 10];
    for v in &values {
        counts[((v * 10.0) as usize).min(9)] += 1;
    }
    let max = counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    let (w, h, bottom) = (620.0, 220.0, 22.0);
    let bar = (w - 20.0) / 10.0;
    let _ = write!(
        b,
        "<svg id=\"chart-ettr\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" \
         aria-label=\"ETTR distribution\">"
    );
    for (k, n) in counts.iter().enumerate() {
        let len = (h - bottom - 24.0) * *n as f64 / max;
        let x = 10.0 + k as f64 * bar;
        let _ = write!(
            b,
            "<rect class=\"bar\" x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{len:.1}\" \
             fill=\"#1565c0\"><title>{n} jobs with ETTR {:.1}-{:.1}</title></rect>\
             <text x=\"{:.1}\" y=\"{:.1}\">{n}</text><text x=\"{x:.1}\" y=\"{:.1}\">{:.1}</text>",
            h - bottom - len,
            bar - 4.0,
            k as f64 / 10.0,
            (k + 1) as f64 / 10.0,
            x + 2.0,
            h - bottom - len - 4.0,
            h - 6.0,
            k as f64 / 10.0
        );
    }
    let _ = write!(
        b,
        "</svg><p class=\"muted\">{} jobs; fleet ETTR (GPU-time weighted) {}.</p>",
        values.len(),
        r.fleet.ettr.map_or("-".to_string(), |e| format!("{e:.3}"))
    );
}

fn lemons(b: &mut String, r: &Report) {
    b.push_str("<h2>Lemon nodes</h2>");
    if r.lemon_nodes.is_empty() {
        b.push_str("<p class=\"muted\">No host was blamed by more jobs than chance explains.</p>");
        return;
    }
    let bars = r.lemon_nodes.iter().map(|l| Bar {
        label: &l.host,
        value: l.jobs as u64,
        fill: "#b71c1c",
        text: format!("{} jobs", l.jobs),
    });
    bar_chart(b, ("chart-lemons", "lemon nodes"), (620.0, 180.0), bars);
    b.push_str(
        "<table id=\"lemon-table\"><tr><th>Host</th><th>Jobs blamed</th><th>Expected</th>\
         <th>p</th><th>History</th></tr>",
    );
    for l in &r.lemon_nodes {
        let history: Vec<String> = l
            .history
            .iter()
            .take(12)
            .map(|e| {
                format!(
                    "{} {}{}",
                    esc(&e.time),
                    esc(&e.code),
                    e.job
                        .as_deref()
                        .map(|j| format!(" ({})", esc(j)))
                        .unwrap_or_default()
                )
            })
            .collect();
        let _ = write!(
            b,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{:.2}</td>\
             <td class=\"n\">{:.1e}</td><td>{}</td></tr>",
            esc(&l.host),
            l.jobs,
            l.expected,
            l.p_value,
            history.join("<br>")
        );
    }
    b.push_str("</table>");
}

/// The report's options from `?since=&until=`, or what is wrong with them.
pub fn options_of(req: &Get) -> Result<Options, String> {
    let time = |name: &str| -> Result<Option<Millis>, String> {
        let Some(text) = req.param(name) else {
            return Ok(None);
        };
        crate::time::parse(text)
            .filter(|s| s.year_known)
            .and_then(|s| s.millis())
            .map(Some)
            .ok_or_else(|| format!("{name}: `{text}` is not an RFC 3339 time"))
    };
    Ok(Options {
        since: time("since")?,
        until: time("until")?,
        ..Options::default()
    })
}

/// Adds `/report` and `/api/v1/report` (guarded by the token, as the incident pages).
pub fn routes(routes: Routes, store: Arc<IncidentStore>) -> Routes {
    let json_store = Arc::clone(&store);
    routes
        .guarded("/report", move |req| match options_of(req) {
            Ok(opts) => Reply::html(200, page(&store.report(&opts))),
            Err(e) => Reply::html(400, super::page::problem("Bad range", &e)),
        })
        .guarded("/api/v1/report", move |req| match options_of(req) {
            Ok(opts) => match serde_json::to_string(&json_store.report(&opts)) {
                Ok(body) => Reply::json(200, body),
                Err(e) => Reply::text(500, format!("{e}\n")),
            },
            Err(e) => Reply::text(400, format!("{e}\n")),
        })
}

/// The report's families (`faultline_interruptions_total`, `faultline_gpu_hours_lost_total`,
/// `faultline_fleet_ettr_ratio`) over everything the live input holds, in the text exposition
/// format, for `/metrics`.
pub fn families(store: &IncidentStore) -> String {
    crate::report::render::prometheus(&store.report(&Options::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_range_is_refused_and_a_good_one_read() {
        let bad = Get::new("/report", Some("since=yesterday"));
        assert!(options_of(&bad).is_err());
        let good = Get::new("/report", Some("since=2026-01-05T00:00:00Z"));
        assert_eq!(
            options_of(&good).expect("reads").since,
            Some(1_767_571_200_000)
        );
    }

    #[test]
    fn an_empty_report_is_a_page_that_says_so() {
        let store = IncidentStore::new(10, 10);
        let html = page(&store.report(&Options::default()));
        assert!(html.contains("No interruption in the range."));
        assert!(html.contains("id=\"interruptions\">0<"));
    }
}
