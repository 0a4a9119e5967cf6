//! An incident's timeline as inline SVG: one row per rank (or host) in the order they first
//! spoke, time across; the root and the contributing roots marked, the cascade shaded.
//!
//! Pure text, no script, no external asset: it renders offline and in a ticket system that
//! shows HTML. Every label from a log goes through [`super::html::esc`]. Rows come from the
//! incident's timeline ([`crate::incident::timeline`], at most 512); past about 40 rows the rows
//! shrink (to 1 px) and lose their labels, the hover titles stay.

use std::fmt::Write;

use super::html::esc;
use crate::incident::timeline::{TimelineRow, TimelineView};
use crate::incident::{Contributor, IncidentEvent};
use crate::kb::Role;
use crate::time::{format_ms, Millis};

const WIDTH: f64 = 960.0;
const LEFT: f64 = 180.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 34.0;
const MAX_PLOT_HEIGHT: f64 = 520.0;
const LABELLED_ROW: f64 = 14.0;

/// Fill colour of a first match by its role.
fn colour(role: Role) -> &'static str {
    match role {
        Role::Root => "#c62828",
        Role::Symptom => "#ef6c00",
        Role::Cascade => "#8d6e63",
        Role::Info => "#78909c",
    }
}

/// "+2 min 30 s" after the start.
pub fn offset(ms: Millis) -> String {
    let ms = ms.max(0);
    if ms < 10_000 {
        return format!("+{:.1} s", ms as f64 / 1000.0);
    }
    let s = ms / 1000;
    match s {
        0..=59 => format!("+{s} s"),
        60..=3599 if s % 60 == 0 => format!("+{} min", s / 60),
        60..=3599 => format!("+{} min {} s", s / 60, s % 60),
        _ => format!("+{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// Whether timeline row `row` is where `rank`/`host` spoke.
fn is_row(row: &TimelineRow, rank: Option<u32>, host: Option<&str>) -> bool {
    match rank {
        Some(r) => row.rank == Some(r),
        None => row.rank.is_none() && row.host.as_deref() == host,
    }
}

fn who(rank: Option<u32>, host: Option<&str>) -> String {
    match (rank, host) {
        (Some(r), Some(h)) => format!("rank {r} on {h}"),
        (Some(r), None) => format!("rank {r}"),
        (None, Some(h)) => h.to_string(),
        (None, None) => "unknown source".into(),
    }
}

struct Scale {
    t0: Millis,
    span: f64,
    row: f64,
}

impl Scale {
    fn x(&self, t: Millis) -> f64 {
        LEFT + (t - self.t0) as f64 / self.span * (WIDTH - LEFT - RIGHT)
    }
    fn y(&self, k: usize) -> f64 {
        TOP + k as f64 * self.row
    }
}

/// The timeline of `i` as an `<svg>` element (an empty-state paragraph without rows).
pub fn timeline(i: &IncidentEvent) -> String {
    let t: &TimelineView = &i.timeline;
    let Some((t0, t1)) = t.span() else {
        return "<p class=\"empty\">No timeline: no match carried a rank, a host or a time.</p>"
            .into();
    };
    let n = t.rows.len();
    let row = if n as f64 * LABELLED_ROW <= MAX_PLOT_HEIGHT {
        LABELLED_ROW
    } else {
        (MAX_PLOT_HEIGHT / n as f64).max(1.0)
    };
    let s = Scale {
        t0,
        span: ((t1 - t0).max(1)) as f64,
        row,
    };
    let plot_h = row * n as f64;
    let height = TOP + plot_h + 100.0;
    let mut out = String::with_capacity(256 + n * 320);
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"timeline\" class=\"timeline\" \
         viewBox=\"0 0 {WIDTH} {height:.0}\" width=\"{WIDTH}\" height=\"{height:.0}\" role=\"img\" \
         aria-labelledby=\"timeline-title\" font-family=\"sans-serif\" font-size=\"11\">\
         <title id=\"timeline-title\">{} ranks or hosts by first match over {}</title>\
         <rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height:.0}\" fill=\"#fff\"/>",
        n,
        esc(&offset(t1 - t0)),
    );
    cascade_band(&mut out, t, &s, plot_h, i.cascades.summary.as_deref());
    for (k, r) in t.rows.iter().enumerate() {
        draw_row(&mut out, r, k, &s, t0);
    }
    if row < LABELLED_ROW {
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">{n} rows,</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">by first match</text>",
            LEFT - 8.0,
            TOP + 12.0,
            LEFT - 8.0,
            TOP + 26.0
        );
    }
    marks(&mut out, i, &s);
    axis(&mut out, &s, t0, t1, plot_h);
    legend(&mut out, TOP + plot_h + 46.0, t.untracked);
    out.push_str("</svg>");
    out
}

fn cascade_band(out: &mut String, t: &TimelineView, s: &Scale, plot_h: f64, summary: Option<&str>) {
    let cascade: Vec<&TimelineRow> = t.rows.iter().filter(|r| r.role == Role::Cascade).collect();
    let (Some(a), Some(b)) = (
        cascade.iter().map(|r| r.first_ms).min(),
        cascade.iter().map(|r| r.last_ms.max(r.first_ms)).max(),
    ) else {
        return;
    };
    let (x0, x1) = (s.x(a), s.x(b));
    let _ = write!(
        out,
        "<rect class=\"cascade-band\" x=\"{:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{plot_h:.1}\" \
         fill=\"#ffb74d\" fill-opacity=\"0.22\"><title>cascade: {}</title></rect>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{}\" fill=\"#a65f00\">cascade: {} rows</text>",
        x0 - 2.0,
        (x1 - x0).max(0.0) + 4.0,
        esc(summary.unwrap_or("cascade-role matches")),
        // The label reads from the band's left edge, or up to its right one near the end.
        if x0 > WIDTH / 2.0 { x1 + 2.0 } else { x0 },
        TOP - 6.0,
        if x0 > WIDTH / 2.0 { "end" } else { "start" },
        cascade.len()
    );
}

fn draw_row(out: &mut String, r: &TimelineRow, k: usize, s: &Scale, t0: Millis) {
    let y = s.y(k);
    let mid = y + s.row / 2.0;
    let (x0, x1) = (s.x(r.first_ms), s.x(r.last_ms.max(r.first_ms)));
    let place = who(r.rank, r.host.as_deref());
    let _ = write!(
        out,
        "<g class=\"row\" data-role=\"{}\"><title>{}: {} {} ({}), {} match(es)</title>",
        r.role.as_str(),
        esc(&place),
        esc(&r.error_code),
        if r.timed {
            format!("at {}", esc(&format_ms(r.first_ms)))
        } else {
            "without a time in the log (drawn at the start)".to_string()
        },
        esc(&offset(r.first_ms - t0)),
        r.matches
    );
    if s.row >= 4.0 {
        let _ = write!(
            out,
            "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" \
             fill-opacity=\"0.35\"/><circle cx=\"{x0:.1}\" cy=\"{mid:.1}\" r=\"{:.1}\" fill=\"{}\"/>",
            mid - 1.5,
            (x1 - x0).max(1.0),
            3.0,
            colour(r.role),
            (s.row / 2.0 - 1.0).clamp(1.5, 4.5),
            colour(r.role)
        );
    } else {
        let _ = write!(
            out,
            "<rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/>",
            (x1 - x0).max(3.0),
            s.row.max(1.0),
            colour(r.role)
        );
    }
    if s.row >= LABELLED_ROW {
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#333\">{}</text>",
            LEFT - 8.0,
            mid + 4.0,
            esc(&truncate(&place, 28))
        );
    }
    out.push_str("</g>");
}

fn truncate(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_string();
    }
    let mut s: String = text.chars().take(chars - 1).collect();
    s.push('\u{2026}');
    s
}

/// A diamond (root) or a triangle (contributing) at `x`, `y`.
fn mark(out: &mut String, class: &str, x: f64, y: f64, fill: &str, title: &str) {
    let d = if class == "root" {
        format!("M{x:.1},{:.1} l6,6 l-6,6 l-6,-6 z", y - 6.0)
    } else {
        format!("M{x:.1},{:.1} l5,9 l-10,0 z", y - 5.0)
    };
    let _ = write!(
        out,
        "<path class=\"mark {class}\" d=\"{d}\" fill=\"{fill}\" stroke=\"#fff\" stroke-width=\"1\">\
         <title>{}</title></path>",
        esc(title)
    );
}

fn marks(out: &mut String, i: &IncidentEvent, s: &Scale) {
    let rows = &i.timeline.rows;
    let root = &i.root;
    if let Some((k, r)) = rows
        .iter()
        .enumerate()
        .find(|(_, r)| is_row(r, root.rank, root.host.as_deref()))
    {
        let t = r.root_ms.filter(|_| i.root_known).unwrap_or(r.first_ms);
        let x = s.x(t);
        let _ = write!(
            out,
            "<line class=\"root-time\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{TOP}\" y2=\"{:.1}\" \
             stroke=\"#c62828\" stroke-dasharray=\"3,3\"/>",
            TOP + s.row * rows.len() as f64
        );
        let what = if i.root_known {
            "root"
        } else {
            "initiator (root unknown)"
        };
        let title = format!(
            "{what}: {} ({}) on {} at {}",
            root.error_code,
            root.kb_id,
            who(root.rank, root.host.as_deref()),
            format_ms(t)
        );
        mark(out, "root", x, s.y(k) + s.row / 2.0, "#c62828", &title);
    }
    for c in &i.contributing {
        contributor(out, c, rows, s);
    }
}

fn contributor(out: &mut String, c: &Contributor, rows: &[TimelineRow], s: &Scale) {
    let Some((k, r)) = rows
        .iter()
        .enumerate()
        .find(|(_, r)| is_row(r, c.rank, c.host.as_deref()))
    else {
        return;
    };
    let t = r.root_ms.unwrap_or(r.first_ms);
    let title = format!(
        "contributing{}: {} on {} at {}",
        if c.consequence {
            " (a consequence of the root)"
        } else {
            ""
        },
        c.error_code,
        who(c.rank, c.host.as_deref()),
        format_ms(t)
    );
    mark(
        out,
        "contributing",
        s.x(t),
        s.y(k) + s.row / 2.0,
        "#6a1b9a",
        &title,
    );
}

fn axis(out: &mut String, s: &Scale, t0: Millis, t1: Millis, plot_h: f64) {
    let y = TOP + plot_h;
    let _ = write!(
        out,
        "<line x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#999\"/>",
        WIDTH - RIGHT
    );
    for k in 0..=4 {
        let t = t0 + (t1 - t0) * k / 4;
        let x = s.x(t);
        let anchor = match k {
            0 => "start",
            4 => "end",
            _ => "middle",
        };
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{y:.1}\" y2=\"{:.1}\" stroke=\"#999\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" fill=\"#333\">{}</text>",
            y + 4.0,
            y + 16.0,
            esc(&offset(t - t0))
        );
        if t1 == t0 {
            break;
        }
    }
    let _ = write!(
        out,
        "<text x=\"{LEFT}\" y=\"{:.1}\" fill=\"#555\">from {} (UTC)</text>",
        y + 30.0,
        esc(&format_ms(t0))
    );
}

/// What a legend entry shows.
enum Swatch {
    Diamond,
    Triangle,
    Dot(&'static str),
    Band,
}

fn legend(out: &mut String, y: f64, untracked: u64) {
    let mut entries = vec![
        (Swatch::Diamond, "root".to_string()),
        (Swatch::Triangle, "contributing root".to_string()),
        (Swatch::Band, "cascade".to_string()),
    ];
    for role in [Role::Root, Role::Symptom, Role::Cascade, Role::Info] {
        let label = format!("first match: {}", role.as_str());
        entries.push((Swatch::Dot(colour(role)), label));
    }
    let (mut x, mut y) = (LEFT, y);
    for (k, (swatch, label)) in entries.into_iter().enumerate() {
        if k == 3 {
            // The first-match colours on a second line.
            (x, y) = (LEFT, y + 16.0);
        }
        // About 6.5 px a character at 11 px, and a gap.
        let width = 34.0 + 6.5 * label.chars().count() as f64;
        let _ = match swatch {
            Swatch::Diamond => write!(
                out,
                "<path d=\"M{x:.1},{:.1} l6,6 l-6,6 l-6,-6 z\" fill=\"#c62828\"/>",
                y - 6.0
            ),
            Swatch::Triangle => write!(
                out,
                "<path d=\"M{x:.1},{:.1} l5,9 l-10,0 z\" fill=\"#6a1b9a\"/>",
                y - 5.0
            ),
            Swatch::Dot(fill) => write!(
                out,
                "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"{fill}\"/>"
            ),
            Swatch::Band => write!(
                out,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"#ffb74d\" \
                 fill-opacity=\"0.5\"/>",
                x - 5.0,
                y - 5.0
            ),
        };
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#333\">{label}</text>",
            x + 10.0,
            y + 4.0
        );
        x += width;
    }
    if untracked > 0 {
        let _ = write!(
            out,
            "<text x=\"{LEFT}\" y=\"{:.1}\" fill=\"#a00\">{untracked} more match(es) of ranks \
             past the row cap, not drawn</text>",
            y + 20.0
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incident::testutil::event;
    use crate::incident::{Correlator, IncidentConfig};

    #[test]
    fn offsets_read_like_people_write_them() {
        assert_eq!(offset(0), "+0.0 s");
        assert_eq!(offset(1_250), "+1.2 s");
        assert_eq!(offset(42_000), "+42 s");
        assert_eq!(offset(120_000), "+2 min");
        assert_eq!(offset(150_000), "+2 min 30 s");
        assert_eq!(offset(3_960_000), "+1 h 6 min");
    }

    #[test]
    fn the_root_is_marked_and_the_cascade_shaded() {
        let mut c = Correlator::new(IncidentConfig::default()).expect("config");
        let mut out = Vec::new();
        c.observe(
            &event("XID_79", Role::Root, "gpu_hardware")
                .host("node-05")
                .ts("2024-05-01T12:00:00Z")
                .build(),
            &mut out,
        );
        for rank in 0..100 {
            c.observe(
                &event("NCCL_TIMEOUT", Role::Cascade, "collective_timeout")
                    .rank(rank)
                    .host("node</svg><script>")
                    .ts(&format!("2024-05-01T12:10:{:02}Z", rank % 60))
                    .cap("elapsed_ms", "600000")
                    .build(),
                &mut out,
            );
        }
        let incident = c.current("job").expect("open");
        let svg = timeline(&incident);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("class=\"mark root\"").count(), 1);
        assert_eq!(svg.matches("class=\"row\"").count(), 101);
        assert!(svg.contains("class=\"cascade-band\""));
        assert!(!svg.contains("<script>"), "escaped");
        assert_eq!(
            svg.matches("</svg>").count(),
            1,
            "a host cannot close the chart"
        );
    }
}
