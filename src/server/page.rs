//! The incident pages as HTML: the list (`/incidents`, with its filter form) and one incident
//! (`/incidents/{fingerprint}`): the headline, where it happened, the timeline
//! ([`super::chart`]), the diagnosis with its workarounds and dead ends in the author's order,
//! the contributing roots and the context lines.
//!
//! One self-contained document per page: inline CSS, inline SVG, no script, no font, no image,
//! nothing fetched (the server sends a `Content-Security-Policy` that forbids it anyway), so it
//! works offline and can be saved as a file. Every text from a log goes through
//! [`super::html::esc`].

use std::fmt::Write;
use std::sync::Arc;

use super::chart;
use super::html::{esc, url_component};
use super::Get;
use crate::incident::{IncidentEvent, Status};

const STYLE: &str = "
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1c1c1c;background:#f6f7f9}
header{background:#1f2937;color:#fff;padding:10px 24px}header a{color:#fff;text-decoration:none;font-weight:600}
main{padding:16px 24px;max-width:1100px}
h1{font-size:20px;margin:4px 0 8px}h2{font-size:16px;margin:22px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;width:100%;background:#fff}th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #e4e4e4;vertical-align:top}
th{background:#eef0f3;font-weight:600}
code,pre{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:12.5px}
pre{background:#fff;border:1px solid #ddd;padding:8px;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.badge{display:inline-block;border-radius:3px;padding:1px 7px;margin-right:4px;font-size:12px;background:#e0e0e0}
.open,.updated{background:#ffcdd2}.resolved{background:#c8e6c9}.critical{background:#b71c1c;color:#fff}.error{background:#e65100;color:#fff}
.where td:first-child{width:160px;color:#555}
.card{background:#fff;border:1px solid #ddd;padding:8px 12px}
.muted{color:#666}.omitted{color:#a00;font-style:italic}
form.filters{margin:8px 0 14px}form.filters input,form.filters select{margin-right:8px}
ol li,ul li{margin-bottom:4px}
";

fn document(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"referrer\" content=\"no-referrer\">\
         <title>{}</title><style>{STYLE}</style></head><body>\
         <header><a href=\"/incidents\">faultline incidents</a></header><main>{body}</main></body></html>",
        esc(title)
    )
}

/// A page that says what went wrong.
pub fn problem(title: &str, detail: &str) -> String {
    document(
        title,
        &format!("<h1>{}</h1><p>{}</p>", esc(title), esc(detail)),
    )
}

fn status_badge(i: &IncidentEvent) -> String {
    let (class, text) = match i.status {
        Status::Open | Status::Updated => ("open", "open".to_string()),
        Status::Resolved => (
            "resolved",
            match i.resolution {
                Some(r) => format!(
                    "resolved ({})",
                    serde_json::to_value(r)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                ),
                None => "resolved".into(),
            },
        ),
    };
    format!("<span class=\"badge {class}\">{}</span>", esc(&text))
}

fn place(i: &IncidentEvent) -> String {
    let r = &i.root;
    let mut s = String::new();
    if let Some(h) = &r.host {
        s.push_str(h);
    }
    if let Some(rank) = r.rank {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(&format!("rank {rank}"));
    }
    s
}

/// The list of incidents `found` for request `req` (its filters fill the form).
pub fn list(found: &[Arc<IncidentEvent>], req: &Get, open: usize, resolved: usize) -> String {
    let mut b = String::new();
    let _ = write!(
        b,
        "<h1>Incidents</h1><p class=\"muted\">{open} open, {resolved} recently resolved held; \
         showing {}.</p>",
        found.len()
    );
    let value = |k: &str| esc(req.param(k).unwrap_or(""));
    let status = req.param("status").unwrap_or("all");
    let option = |v: &str| {
        format!(
            "<option value=\"{v}\"{}>{v}</option>",
            if status == v { " selected" } else { "" }
        )
    };
    let _ = write!(
        b,
        "<form class=\"filters\" method=\"get\" action=\"/incidents\">\
         <label>job <input name=\"job\" value=\"{}\"></label>\
         <label>code <input name=\"code\" value=\"{}\"></label>\
         <label>host <input name=\"host\" value=\"{}\"></label>\
         <label>status <select name=\"status\">{}{}{}</select></label>\
         <button type=\"submit\">Filter</button> <a href=\"/incidents\">clear</a></form>",
        value("job"),
        value("code"),
        value("host"),
        option("all"),
        option("open"),
        option("resolved")
    );
    if found.is_empty() {
        b.push_str("<p id=\"no-incidents\">No incident matches.</p>");
    } else {
        b.push_str(
            "<table id=\"incidents\"><thead><tr><th>status</th><th>first seen</th><th>job</th>\
             <th>root</th><th>where</th><th>summary</th><th>ranks</th></tr></thead><tbody>",
        );
        for i in found {
            let _ = write!(
                b,
                "<tr class=\"incident\" data-id=\"{fp}\"><td>{}</td><td>{}</td><td>{}</td>\
                 <td><code>{}</code></td><td>{}</td><td><a href=\"/incidents/{fp}\">{}</a></td>\
                 <td>{}</td></tr>",
                status_badge(i),
                esc(i.first_seen.as_deref().unwrap_or("-")),
                esc(&i.job_id),
                esc(&i.root.error_code),
                esc(&place(i)),
                esc(&i.summary),
                i.counts.ranks,
                fp = esc(&url_component(&i.id)),
            );
        }
        b.push_str("</tbody></table>");
    }
    let mut api = String::from("/api/v1/incidents");
    let q: Vec<String> = req
        .query
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{}={}", url_component(k), url_component(v)))
        .collect();
    if !q.is_empty() {
        api.push('?');
        api.push_str(&q.join("&"));
    }
    let _ = write!(
        b,
        "<p class=\"muted\">As JSON: <a href=\"{0}\">{0}</a></p>",
        esc(&api)
    );
    document("faultline incidents", &b)
}

fn row(b: &mut String, label: &str, value: &str) {
    if !value.is_empty() {
        let _ = write!(b, "<tr><td>{}</td><td>{}</td></tr>", esc(label), value);
    }
}

/// One incident's page.
pub fn detail(i: &IncidentEvent) -> String {
    let mut b = String::new();
    let _ = write!(
        b,
        "<p>{}<span class=\"badge {sev}\">{sev}</span><span class=\"badge\">{}</span>{}{}</p>\
         <h1 id=\"headline\">{}</h1>",
        status_badge(i),
        esc(&i.root.category),
        if i.root_known {
            ""
        } else {
            "<span class=\"badge\">root unknown</span>"
        },
        if i.restart_loop {
            "<span class=\"badge error\">restart loop</span>"
        } else {
            ""
        },
        esc(&i.summary),
        sev = esc(i.root.severity.as_str()),
    );
    where_table(&mut b, i);
    let _ = write!(
        b,
        "<h2>Root line</h2><pre id=\"root-line\">{}</pre>",
        esc(&i.root.line)
    );
    b.push_str("<h2>Timeline</h2>");
    b.push_str(&chart::timeline(i));
    diagnosis(&mut b, i);
    contributing(&mut b, i);
    context(&mut b, i);
    let _ = write!(
        b,
        "<h2>Election</h2><p>{} <span class=\"muted\">(rule: {}, {} candidates)</span></p>",
        esc(&i.grouping_info.explanation),
        esc(&serde_json::to_value(i.grouping_info.rule)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()),
        i.grouping_info.candidates
    );
    let _ = write!(
        b,
        "<p class=\"muted\">incident <code>{id}</code> · fingerprint <code>{fp}</code> · signature <code>{}</code> · revision {} · \
         KB {} · <a href=\"/api/v1/incidents/{link}\">JSON</a></p>",
        esc(&i.signature),
        i.revision,
        esc(&i.kb_version),
        id = esc(&i.id),
        fp = esc(&i.fingerprint),
        link = esc(&url_component(&i.id)),
    );
    document(&i.summary, &b)
}

fn where_table(b: &mut String, i: &IncidentEvent) {
    b.push_str("<h2>Where</h2><table class=\"where\" id=\"where\">");
    row(b, "job", &esc(&i.job_id));
    if let Some(c) = &i.timeline.cluster {
        row(b, "cluster", &esc(c));
    }
    let r = &i.root;
    row(
        b,
        "root",
        &format!(
            "<code>{}</code> <span class=\"muted\">{}</span>",
            esc(&r.error_code),
            esc(&r.kb_id)
        ),
    );
    row(b, "host", &esc(r.host.as_deref().unwrap_or("")));
    row(
        b,
        "rank",
        &r.rank.map(|x| x.to_string()).unwrap_or_default(),
    );
    row(b, "GPU", &esc(r.gpu.as_deref().unwrap_or("")));
    let c = &i.culprit;
    let ranks: Vec<String> = c.ranks.iter().map(u32::to_string).collect();
    let mut culprit = String::new();
    if !ranks.is_empty() {
        culprit.push_str(&format!("ranks {} ", esc(&ranks.join(", "))));
    }
    if !c.hosts.is_empty() {
        culprit.push_str(&format!("on {} ", esc(&c.hosts.join(", "))));
    }
    culprit.push_str(&format!(
        "<span class=\"muted\">{}</span>",
        esc(&c.explanation)
    ));
    row(b, "culprit", &culprit);
    if let Some(h) = &i.blamed_host {
        let score = i
            .bad_node_score
            .map(|s| format!(" (bad-node score {s:.2})"))
            .unwrap_or_default();
        row(b, "blamed host", &format!("{}{}", esc(h), esc(&score)));
    }
    row(
        b,
        "seen",
        &esc(&format!(
            "{} to {}",
            i.first_seen.as_deref().unwrap_or("?"),
            i.last_seen.as_deref().unwrap_or("?")
        )),
    );
    row(
        b,
        "matches",
        &format!(
            "{} on {} rank(s) and {} host(s); {} cascade match(es)",
            i.counts.matches, i.counts.ranks, i.counts.hosts, i.cascades.matches
        ),
    );
    if let Some(s) = &i.cascades.summary {
        row(b, "cascade", &esc(s));
    }
    b.push_str("</table>");
}

fn diagnosis(b: &mut String, i: &IncidentEvent) {
    let d = &i.diagnosis;
    let _ = write!(
        b,
        "<h2>Diagnosis</h2><div class=\"card\" id=\"diagnosis\"><p><strong>{}</strong></p><p>{}</p>",
        esc(&d.title),
        esc(d.root_cause.trim())
    );
    if !d.workarounds.is_empty() {
        b.push_str("<h3>Workarounds</h3><ol id=\"workarounds\">");
        for w in &d.workarounds {
            let _ = write!(b, "<li>{}", esc(&w.text));
            if let Some(cmd) = &w.command {
                let _ = write!(b, "<pre>{}</pre>", esc(cmd));
            }
            if let (Some(rate), Some(n)) = (w.success_rate, w.n) {
                let _ = write!(
                    b,
                    " <span class=\"muted\">({:.0}% of {n})</span>",
                    rate * 100.0
                );
            }
            if w.origin.is_some() {
                b.push_str(" <span class=\"muted\">(seed advice, unverified)</span>");
            }
            b.push_str("</li>");
        }
        b.push_str("</ol>");
    }
    if !d.dead_ends.is_empty() {
        b.push_str("<h3>Dead ends</h3><ul id=\"dead-ends\">");
        for e in &d.dead_ends {
            let _ = write!(
                b,
                "<li><strong>{}</strong>: {}</li>",
                esc(&e.action),
                esc(&e.why)
            );
        }
        b.push_str("</ul>");
    }
    b.push_str("</div>");
}

fn contributing(b: &mut String, i: &IncidentEvent) {
    if i.contributing.is_empty() {
        return;
    }
    b.push_str(
        "<h2>Contributing</h2><table id=\"contributing\"><thead><tr><th>code</th><th>rank</th>\
         <th>host</th><th>time</th><th></th></tr></thead><tbody>",
    );
    for c in &i.contributing {
        let _ = write!(
            b,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&c.error_code),
            c.rank.map(|r| r.to_string()).unwrap_or_default(),
            esc(c.host.as_deref().unwrap_or("")),
            esc(c.timestamp.as_deref().unwrap_or("")),
            if c.consequence {
                "a consequence of the root"
            } else {
                ""
            }
        );
    }
    b.push_str("</tbody></table>");
}

fn context(b: &mut String, i: &IncidentEvent) {
    let ctx = &i.context;
    if ctx.lines.is_empty() {
        return;
    }
    b.push_str("<h2>Context</h2><pre id=\"context\">");
    for (k, line) in ctx.lines.iter().enumerate() {
        if ctx.omitted_at == Some(k) && ctx.omitted_lines > 0 {
            let _ = writeln!(
                b,
                "<span class=\"omitted\">… {} line(s) left out …</span>",
                ctx.omitted_lines
            );
        }
        let rank = line.rank.map(|r| format!("[{r}] ")).unwrap_or_default();
        let _ = writeln!(
            b,
            "<span class=\"muted\">{}</span>{}",
            esc(&rank),
            esc(&line.text)
        );
    }
    b.push_str("</pre>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incident::testutil::event;
    use crate::incident::{Correlator, IncidentConfig};
    use crate::kb::Role;

    const HOSTILE: &str =
        "RuntimeError: <script>alert('x')</script> \"q\" </svg></pre>\u{1b}[31m\u{7}";

    #[test]
    fn hostile_lines_render_as_text_everywhere() {
        let mut c = Correlator::new(IncidentConfig::default()).expect("config");
        let mut out = Vec::new();
        let e = event("CUDA_OOM", Role::Root, "oom")
            .job("<b>job</b>")
            .rank(3)
            .host("node\"><img src=x>")
            .line(HOSTILE)
            .ts("2024-05-01T12:00:00Z")
            .build();
        c.observe(&e, &mut out);
        let i = c.current("<b>job</b>").expect("open");
        let page = detail(&i);
        for bad in ["<script", "<img", "<b>", "\u{1b}", "\u{7}", "</pre></pre>"] {
            assert!(!page.contains(bad), "{bad:?} in the page");
        }
        assert_eq!(page.matches("</svg>").count(), 1);
        assert!(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"));
        assert!(page.contains("\u{241b}[31m"), "control pictures");
        let list = list(
            &[Arc::new(i)],
            &Get::new("/incidents", Some("job=%3Cb%3E")),
            1,
            0,
        );
        assert!(!list.contains("<b>job"), "{list}");
        assert!(
            list.contains("value=\"&lt;b&gt;\""),
            "the form echoes escaped"
        );
    }
}
