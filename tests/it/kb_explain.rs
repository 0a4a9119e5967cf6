//! `faultline kb explain` shows diagnoses an expert can trust: on real lines (an NCCL watchdog
//! timeout, Xid 48, 74, 79, 95, an IB completion with status 12) the entry's real title, its
//! verification level and review trail, the entry's own first action first, and no percentage
//! without its sample or the word estimate; the seed's AI-written advice only with `--all`,
//! labelled. Over every KB entry: no AI-written or estimated rate is rendered as measured, in
//! text or in JSON.

use faultline::enrich::Diagnosis;
use faultline::explain;
use faultline::kb::Entry;
use serde_json::Value;

use crate::support::kb;

/// Real lines, as the KB's examples and tests/corpus/real have them.
const WATCHDOG: &str = "[rank1]:[E1003 18:37:01.832146912 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=6463, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800017 milliseconds before timing out.";
const XID_48: &str = "Dec  2 11:38:47 worker4 kernel: [  219.470994] NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1.";
const XID_74: &str = "[449410.332316] NVRM: Xid (PCI:0003:00:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)";
const XID_79: &str =
    "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.";
const XID_95: &str = "NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No";
const IB_STATUS_12: &str = "node-2:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with error 12, opcode 0, len 0, vendor err 129 (Recv)";

fn explain_cli(args: &[&str]) -> String {
    crate::support::faultline_stdout(["kb", "explain", "--kb", "kb"].iter().chain(args))
}

fn entry(id: &str) -> Entry {
    kb().entries
        .iter()
        .find(|e| e.id == id)
        .cloned()
        .unwrap_or_else(|| panic!("no entry {id}"))
}

/// The prose of every entry (titles, root causes, the advice's own words, the seed's too): a
/// percentage inside it ("alert on filesystem usage above 85%") is advice, not a rate.
fn prose() -> Vec<String> {
    let mut out = Vec::new();
    for e in &kb().entries {
        out.push(e.title.clone());
        out.push(e.root_cause.replace('\n', " "));
        let seed = e.seed.as_ref();
        out.extend(seed.map(|s| s.title.clone()));
        for w in e
            .workarounds
            .iter()
            .chain(seed.into_iter().flat_map(|s| &s.workarounds))
        {
            out.push(w.text.clone());
            out.extend(w.command.iter().flat_map(|c| c.lines().map(str::to_string)));
        }
        for d in e
            .dead_ends
            .iter()
            .chain(seed.into_iter().flat_map(|s| &s.dead_ends))
        {
            out.push(d.action.clone());
            out.push(d.why.clone());
        }
    }
    out.retain(|p| p.contains('%'));
    // Longest first, so a text is removed before any shorter text inside it.
    out.sort_by_key(|p| std::cmp::Reverse(p.len()));
    out
}

/// A percentage: `80%`, `72.5 %`.
fn percentage() -> regex::Regex {
    regex::Regex::new(r"\d+(?:\.\d+)? ?%").expect("regex")
}

/// `line` with every piece of the entries' prose in it replaced.
fn without_prose(line: &str, prose: &[String]) -> String {
    prose.iter().fold(line.to_string(), |rest, p| {
        rest.replace(p.as_str(), "<prose>")
    })
}

/// Every percentage of `text` (`80%`, `72.5 %`) outside the entries' own prose sits on a line
/// that says what backs it: a sample (`n=`) or that it is an estimate.
fn assert_percentages_qualified(text: &str) {
    let pct = percentage();
    let prose = prose();
    for line in text.lines() {
        let rest = without_prose(line, &prose);
        assert!(
            !pct.is_match(&rest) || rest.contains("n=") || rest.contains("estimate"),
            "an unqualified percentage: {line:?}"
        );
    }
}

#[test]
fn a_percentage_outside_the_prose_must_be_qualified() {
    let e = kb()
        .entries
        .iter()
        .flat_map(|e| &e.workarounds)
        .find(|w| w.text.contains('%'))
        .map(|w| w.text.clone())
        .expect("some advice names a percentage");
    assert_percentages_qualified(&format!("  try: {e}"));
    for bad in [
        format!("  try: {e} (80% success)"),
        "  try: Restart the job (80% success)".to_string(),
        "  don't: x (y) (70 % fail)".to_string(),
    ] {
        let caught = std::panic::catch_unwind(|| assert_percentages_qualified(&bad));
        assert!(caught.is_err(), "not caught: {bad}");
    }
}

/// Each event block of the text output: (kb id, its lines).
fn blocks(text: &str) -> Vec<(String, Vec<&str>)> {
    let id = regex::Regex::new(r"\(([a-z0-9_-]+/[a-z0-9_-]+), [a-z]+\)").expect("regex");
    text.split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(|b| {
            let lines: Vec<&str> = b.lines().collect();
            let kb_id = id
                .captures(lines[0])
                .unwrap_or_else(|| panic!("an event head: {:?}", lines[0]))[1]
                .to_string();
            (kb_id, lines)
        })
        .collect()
}

/// The JSON events of `kb explain --format json` (pretty-printed, one after the other).
fn json_events(line: &str) -> Vec<Value> {
    let out = explain_cli(&["--format", "json", line]);
    serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .map(|v| v.expect("JSON"))
        .collect()
}

/// No rate without what backs it: every rate has a `rate_kind`; an estimate is the seed's; a
/// measured or reported rate has `n` and `source`, and `measured` only on a measured entry.
fn assert_json_rates_honest(diagnosis: &Value, verification: &str) {
    let items = diagnosis["workarounds"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| (w, "success_rate"))
        .chain(
            diagnosis["dead_ends"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|d| (d, "fail_rate")),
        );
    for (item, field) in items {
        let Some(rate) = item.get(field).filter(|r| !r.is_null()) else {
            assert!(
                item.get("rate_kind").is_none(),
                "a kind without a rate: {item}"
            );
            continue;
        };
        assert!(rate.is_f64(), "{item}");
        match item["rate_kind"].as_str() {
            Some("estimate") => assert_eq!(item["origin"], "seed", "{item}"),
            Some(kind @ ("measured" | "community_reported")) => {
                assert!(item["n"].as_u64().is_some_and(|n| n > 0), "{item}");
                assert!(
                    item["source"]
                        .as_str()
                        .is_some_and(|s| !s.trim().is_empty()),
                    "{item}"
                );
                assert!(item.get("origin").is_none(), "{item}");
                if kind == "measured" {
                    assert_eq!(verification, "measured", "{item}");
                }
            }
            other => panic!("a rate of kind {other:?}: {item}"),
        }
    }
    if verification != "measured" {
        assert!(diagnosis["fix_rate"].is_null(), "{diagnosis}");
    }
}

/// What `kb explain LINE` must show for every matched entry of a real line.
fn check_line(line: &str, expected_ids: &[&str]) {
    let text = explain_cli(&[line]);
    assert_percentages_qualified(&text);
    let blocks = blocks(&text);
    let ids: Vec<&str> = blocks.iter().map(|(id, _)| id.as_str()).collect();
    assert!(
        expected_ids.iter().any(|want| ids.contains(want)),
        "{ids:?} for {line}"
    );
    for (id, lines) in &blocks {
        let e = entry(id);
        assert!(
            lines.contains(&format!("  what: {}", e.title).as_str()),
            "the real title of {id}:\n{}",
            lines.join("\n")
        );
        let verification = lines
            .iter()
            .find(|l| l.starts_with("  verification: "))
            .unwrap_or_else(|| panic!("no verification line for {id}"));
        assert!(
            verification.contains(&e.verification.replace('_', " ")),
            "{verification}"
        );
        for r in &e.review {
            let row = format!(
                "  review: {} {} by ",
                r.part.replace('_', " "),
                r.level.replace('_', " ")
            );
            assert!(
                lines.iter().any(|l| l.starts_with(&row)),
                "review row {row:?} of {id}"
            );
        }
        // The advice shown first is the entry's own first action, not the seed's, and not an
        // escalation such as an RMA.
        let first_try = lines
            .iter()
            .find(|l| l.trim_start().starts_with("try: ") || l.contains("seed's try: "))
            .unwrap_or_else(|| panic!("no advice shown for {id}"));
        let first = e.workarounds.first().expect("the entry has advice");
        assert_eq!(
            first_try.trim_start(),
            format!("try: {}", first.text),
            "{id}"
        );
        assert!(!first.text.contains("RMA"), "{id}: {}", first.text);
        assert!(!lines.iter().any(|l| l.contains("seed's try")), "{id}");
    }
    for event in json_events(line) {
        let id = event["kb_id"].as_str().expect("kb_id");
        let e = entry(id);
        assert_eq!(event["diagnosis"]["title"], e.title.as_str());
        assert_eq!(event["diagnosis"]["verification"], e.verification.as_str());
        assert_eq!(
            event["review"].as_array().map(Vec::len),
            Some(e.review.len()),
            "{id}: the review trail is in JSON"
        );
        assert_json_rates_honest(&event["diagnosis"], &e.verification);
    }
}

#[test]
fn an_nccl_watchdog_timeout_shows_the_real_title_and_the_verified_triage_first() {
    check_line(WATCHDOG, &["pytorch/nccl-timeout-allreduce"]);
    let text = explain_cli(&[WATCHDOG]);
    let seed = entry("pytorch/nccl-timeout-allreduce");
    let s = seed.seed.as_ref().expect("the seed's fields");
    // The seed's invented title and its AI-written fixes stay out of the default view.
    assert!(!text.contains(&s.title), "{text}");
    assert!(!text.contains(&s.workarounds[0].text), "{text}");
    assert!(text.contains("kb explain --all"), "{text}");
    assert!(
        text.contains("try: Find the earliest error across all ranks and nodes"),
        "{text}"
    );
}

#[test]
fn the_seeds_advice_shows_only_with_all_after_the_verified_advice_and_labelled() {
    let text = explain_cli(&["--all", WATCHDOG]);
    assert_percentages_qualified(&text);
    let seed = entry("pytorch/nccl-timeout-allreduce");
    let s = seed.seed.as_ref().expect("the seed's fields");
    let lines: Vec<&str> = text.lines().collect();
    let last_own = lines
        .iter()
        .rposition(|l| l.starts_with("  try: ") || l.starts_with("  don't: "))
        .expect("own advice");
    let label = lines
        .iter()
        .position(|l| l.contains("the seed's AI-written advice, unverified"))
        .expect("the seed's advice is labelled");
    assert!(
        label > last_own,
        "the seed's advice comes after the entry's own"
    );
    for w in &s.workarounds {
        let line = lines
            .iter()
            .position(|l| l.starts_with(&format!("  seed's try: {}", w.text)))
            .unwrap_or_else(|| panic!("seed workaround shown: {}", w.text));
        assert!(line > label);
        assert!(
            lines[line].contains("seed's AI estimate, never measured: "),
            "{}",
            lines[line]
        );
    }
    assert!(
        text.contains("seed's AI estimate, never measured: 80% success"),
        "{text}"
    );
    // JSON always carries the seed's advice, marked, and its rates as estimates.
    let events = json_events(WATCHDOG);
    let d = &events[0]["diagnosis"];
    let seed_items: Vec<&Value> = d["workarounds"]
        .as_array()
        .expect("workarounds")
        .iter()
        .filter(|w| w["origin"] == "seed")
        .collect();
    assert_eq!(seed_items.len(), s.workarounds.len());
    assert!(seed_items.iter().all(|w| w["rate_kind"] == "estimate"));
    assert_eq!(
        d["workarounds"][0]["text"],
        seed.workarounds[0].text.as_str()
    );
}

#[test]
fn xid_48_shows_the_real_title_and_its_first_action_first() {
    check_line(XID_48, &["nvidia/xid-48-dbe-ecc"]);
}

#[test]
fn xid_74_shows_the_real_title_and_its_first_action_first() {
    check_line(XID_74, &["nvidia/xid-74-nvlink-error"]);
}

#[test]
fn xid_79_shows_the_real_title_and_its_first_action_first() {
    check_line(XID_79, &["nvidia/xid-79-fallen-off-bus"]);
}

#[test]
fn xid_95_shows_the_real_title_and_its_first_action_first() {
    check_line(XID_95, &["nvidia/xid-95-uncontained-ecc"]);
}

#[test]
fn ib_status_12_shows_the_real_title_and_its_first_action_first() {
    check_line(
        IB_STATUS_12,
        &["rdma/wc-retry-exceeded", "nccl/ib-completion-error"],
    );
}

/// The text of an entry's explanation with everything shown (`--all`).
fn text_of(entry: &Entry) -> String {
    let mut buf = Vec::new();
    explain::write_diagnosis(&mut buf, entry, &Diagnosis::of(entry), true).expect("writes");
    String::from_utf8(buf).expect("utf-8")
}

#[test]
fn no_entry_renders_an_estimate_as_measured_in_text_or_json() {
    let kb = kb();
    for e in &kb.entries {
        let text = text_of(e);
        assert_percentages_qualified(&text);
        let json = serde_json::to_value(Diagnosis::of(e)).expect("JSON");
        assert_json_rates_honest(&json, &e.verification);
    }
    let (prose, pct) = (prose(), percentage());
    // The same entries with an unsampled rate on every item (what an AI-written estimate looks
    // like): nothing of it is shown, in text or JSON.
    for e in &kb.entries {
        let mut guessed = e.clone();
        for w in &mut guessed.workarounds {
            w.success_rate = Some(0.8);
        }
        for d in &mut guessed.dead_ends {
            d.fail_rate = Some(0.7);
        }
        guessed.fix_rate = Some(0.75);
        let text = text_of(&guessed);
        for line in text.lines() {
            let rest = without_prose(line, &prose);
            assert!(
                !pct.is_match(&rest) || line.starts_with("  seed's "),
                "{}: {line}",
                e.id
            );
        }
        let d = Diagnosis::of(&guessed);
        assert!(d.fix_rate.is_none() || e.verification == "measured");
        assert!(d
            .verified_workarounds()
            .all(|w| w.success_rate.is_none() && w.rate_kind.is_none()));
        assert!(d.verified_dead_ends().all(|x| x.fail_rate.is_none()));
        assert_json_rates_honest(&serde_json::to_value(&d).expect("JSON"), &e.verification);
    }
    // With a sample and a source, a rate is shown with both, as reported unless the entry is
    // measured.
    for e in kb.entries.iter().filter(|e| !e.workarounds.is_empty()) {
        let mut sampled = e.clone();
        sampled.workarounds[0].success_rate = Some(0.72);
        sampled.workarounds[0].n = Some(41);
        sampled.workarounds[0].source = Some("a fleet's restarts, 2026-10".into());
        let text = text_of(&sampled);
        assert!(
            text.contains(
                "(72% success, community-reported, n=41, source: a fleet's restarts, 2026-10)"
            ) || e.verification == "measured",
            "{}: {text}",
            e.id
        );
        assert_percentages_qualified(&text);
        let json = serde_json::to_value(Diagnosis::of(&sampled)).expect("JSON");
        assert_json_rates_honest(&json, &e.verification);
        let kind = json["workarounds"][0]["rate_kind"].as_str();
        assert_ne!(kind, Some("measured"), "{}: an unmeasured entry", e.id);
    }
}
