//! `faultline kb explain LINE`: which entries match one line, and what the KB knows about each,
//! with how far it can be trusted.
//!
//! The line goes through the same [`Engine`] and [`Enricher`] as `scan`. The text shows each
//! match as `scan --format text` starts it ([`stdout::write_event_head`]), then the entry's
//! verification level and review trail, then its own advice in the author's order (first
//! action first); the seed knowledge base's AI-written advice only with `--all`, labelled as
//! the seed's and unverified. JSON carries every field: the event (the seed's advice included,
//! marked `origin = "seed"` and `rate_kind = "estimate"`), plus the review trail.

use std::io::{self, Write};
use std::sync::Arc;

use crate::engine::{ChunkInfo, Engine};
use crate::enrich::{Diagnosis, Enricher, MatchEvent};
use crate::kb::{Entry, KnowledgeBase};
use crate::matcher::{MatchError, Matcher};
use crate::record::Provenance;
use crate::sink::stdout;

/// The longest `against` shown per review row in text; JSON carries it whole.
const AGAINST_CHARS: usize = 160;

/// The events of `line` (raw text or a JSON envelope), in the order `scan` emits them.
pub fn explain<M: Matcher>(engine: &Engine<M>, line: &str) -> Result<Vec<MatchEvent>, MatchError> {
    let enricher = Enricher::new(Arc::clone(&engine.kb));
    let mut worker = engine.worker()?;
    let mut events = Vec::new();
    engine.scan_chunk(
        &mut worker,
        line.as_bytes(),
        ChunkInfo {
            first_line: 1,
            truncated: false,
        },
        &mut |hit| {
            let source = Provenance::File {
                path: "<argument>".into(),
                line: hit.line,
            };
            events.push(enricher.event(&hit, "explain", source));
        },
    )?;
    Ok(events)
}

/// One event for people: the match, the entry's verification and review trail, its advice;
/// with `all`, the seed's AI-written advice after it.
pub fn write_text(
    out: &mut impl Write,
    kb: &KnowledgeBase,
    e: &MatchEvent,
    all: bool,
) -> io::Result<()> {
    stdout::write_event_head(out, e)?;
    if let Some(entry) = kb.entries.iter().find(|x| x.id == e.kb_id) {
        write_diagnosis(out, entry, &e.diagnosis, all)?;
    }
    writeln!(out)
}

/// The trust and advice part of an entry's explanation: verification, review trail, the
/// entry's own workarounds and dead ends in order, then (with `all`) the seed's.
pub fn write_diagnosis(
    out: &mut impl Write,
    entry: &Entry,
    d: &Diagnosis,
    all: bool,
) -> io::Result<()> {
    let words = |level: &str| level.replace('_', " ");
    writeln!(
        out,
        "  verification: {} (the weakest of its reviewed parts; patterns checked against: {})",
        words(&d.verification),
        words(&entry.patterns_verified)
    )?;
    if entry.review.is_empty() {
        writeln!(out, "  review: none recorded")?;
    }
    for r in &entry.review {
        writeln!(
            out,
            "  review: {} {} by {}, against {}",
            words(&r.part),
            words(&r.level),
            r.by,
            cut(&r.against, AGAINST_CHARS)
        )?;
    }
    let advice_level = entry
        .review
        .iter()
        .find(|r| r.part == "advice")
        .map_or_else(|| words(&d.verification), |r| words(&r.level));
    if d.verified_workarounds().next().is_some() || d.verified_dead_ends().next().is_some() {
        writeln!(out, "  advice ({advice_level}), first action first:")?;
    }
    for w in d.verified_workarounds() {
        let rate = w.rate_text().map(|r| format!(" ({r})")).unwrap_or_default();
        writeln!(out, "  try: {}{rate}", w.text)?;
        if let Some(cmd) = &w.command {
            for line in cmd.lines() {
                writeln!(out, "       $ {line}")?;
            }
        }
    }
    for dead in d.verified_dead_ends() {
        let rate = dead
            .rate_text()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        writeln!(out, "  don't: {} ({}){rate}", dead.action, dead.why)?;
    }
    let seed_workarounds = d.workarounds.iter().filter(|w| w.origin.is_some());
    let seed_dead_ends = d.dead_ends.iter().filter(|x| x.origin.is_some());
    let (nw, nd) = (
        seed_workarounds.clone().count(),
        seed_dead_ends.clone().count(),
    );
    if nw + nd == 0 {
        return Ok(());
    }
    if !all {
        return writeln!(
            out,
            "  the seed's AI-written advice ({nw} workaround(s), {nd} dead end(s)) is unverified \
             and not shown: `faultline kb explain --all` shows it"
        );
    }
    writeln!(
        out,
        "  the seed's AI-written advice, unverified (kept apart from the advice above; its rates \
         are the seed's estimates, never measured):"
    )?;
    if let Some(seed) = &entry.seed {
        writeln!(out, "  seed's title: {}", seed.title)?;
    }
    for w in seed_workarounds {
        let rate = w.rate_text().map(|r| format!(" ({r})")).unwrap_or_default();
        writeln!(out, "  seed's try: {}{rate}", w.text)?;
    }
    for dead in seed_dead_ends {
        let rate = dead
            .rate_text()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        writeln!(out, "  seed's don't: {} ({}){rate}", dead.action, dead.why)?;
    }
    Ok(())
}

/// One event as JSON: every field of the event (the seed's advice included, marked), plus the
/// entry's review trail and how its patterns were checked.
pub fn to_json(kb: &KnowledgeBase, e: &MatchEvent) -> serde_json::Result<serde_json::Value> {
    let mut value = serde_json::to_value(e)?;
    if let (Some(entry), Some(map)) = (
        kb.entries.iter().find(|x| x.id == e.kb_id),
        value.as_object_mut(),
    ) {
        map.insert("review".into(), serde_json::to_value(&entry.review)?);
        map.insert(
            "patterns_verified".into(),
            serde_json::Value::String(entry.patterns_verified.clone()),
        );
    }
    Ok(value)
}

/// `text` cut to at most `max` characters, marked with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &flat[..at]),
        None => flat,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_sources_are_cut_on_a_character() {
        assert_eq!(cut("a  b\nc", 10), "a b c");
        assert_eq!(cut("ééééé", 3), "ééé…");
    }
}
