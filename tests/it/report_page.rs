//! The report page: the correlator's live report input (what `faultline run` keeps for
//! `/report`) gives the same report as `faultline report` on the same lines, and the page
//! renders in headless Chromium with its charts and the report's numbers; `faultline report
//! --format html` writes the same page.

use std::sync::Arc;

use faultline::bench::fleet::{write_fleet, FleetOptions};
use faultline::cli::report::scan_logs;
use faultline::incident::{Correlator, IncidentConfig};
use faultline::report::{self, Options, Report};
use faultline::scan::ScanOptions;
use faultline::server::{self, store::IncidentStore, Routes};

use crate::alertmanager::installed;
use crate::incident_page::chromium;
use crate::support::{faultline_stdout, hyperscan, scan_paths};

/// A small simulated fleet (40 jobs over 2 days on 64 hosts) in `dir`.
fn small_fleet(dir: &std::path::Path) {
    let opts = FleetOptions {
        seed: 3,
        jobs: 40,
        days: 2,
        hosts: 64,
    };
    write_fleet(&opts, dir).expect("fleet written");
}

/// The store a correlator of `faultline run` feeds: every match event it consumes, every
/// incident change it makes.
fn live_store(dir: &std::path::Path) -> Arc<IncidentStore> {
    let (events, _) = scan_paths(&hyperscan(), &[dir], &ScanOptions::default());
    let store = IncidentStore::new(10_000, 10_000);
    let mut correlator = Correlator::new(IncidentConfig::default()).expect("config");
    let mut changes = Vec::new();
    for e in &events {
        correlator.observe(e, &mut changes);
        store.observe_match(e);
        for c in changes.drain(..) {
            store.record(&c);
        }
    }
    correlator.flush(&mut changes);
    for c in changes.drain(..) {
        store.record(&c);
    }
    store
}

fn summary(r: &Report) -> serde_json::Value {
    serde_json::json!({"fleet": r.fleet, "table": r.table, "lemons": r.lemon_nodes,
        "fixes": r.fix_outcomes, "mttf": r.mttf_by_size})
}

/// The number in the element with `id` of a page.
fn figure(html: &str, id: &str) -> String {
    let at = html
        .find(&format!("id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no #{id}"));
    let rest = &html[at + id.len() + 6..];
    rest[..rest.find('<').expect("closes")].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_report_page_renders_with_its_charts_and_the_reports_numbers() {
    let dir = tempfile::tempdir().expect("tmp");
    small_fleet(dir.path());
    let store = live_store(dir.path());
    let logs = dir.path().to_string_lossy().to_string();
    let (input, _) = scan_logs(std::slice::from_ref(&logs), None).expect("scanned");
    let offline = report::build(&input, &Options::default());
    let live = store.report(&Options::default());
    assert!(offline.fleet.interruptions >= 3, "{:?}", offline.fleet);
    assert_eq!(
        summary(&live),
        summary(&offline),
        "the live input gives the report the lines give"
    );

    // `faultline report --format html` writes the page of the same report.
    let html = faultline_stdout(["report", "--format", "html", logs.as_str()]);
    assert_eq!(
        figure(&html, "interruptions"),
        offline.fleet.interruptions.to_string()
    );

    let test = "report_page::the_live_report_page_renders_with_its_charts_and_the_reports_numbers";
    let Some(binary) = installed("chromium", "chromium", test) else {
        return;
    };
    let listener = server::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let routes = server::report::routes(Routes::new(), Arc::clone(&store));
    let serving = tokio::spawn(server::serve(listener, routes, stopped));
    // Half the range: the jobs that started in the first day.
    let first = offline.fleet.first.clone().expect("a first start");
    let start = faultline::time::parse(&first)
        .and_then(|s| s.millis())
        .expect("time");
    let until = faultline::time::format_ms(start + 86_400_000);
    let half = store.report(&Options {
        until: faultline::time::parse(&until).and_then(|s| s.millis()),
        ..Options::default()
    });
    assert!(half.fleet.jobs < live.fleet.jobs, "{:?}", half.fleet);
    let profile = dir.path().join("profile");
    let (page, ranged) = tokio::task::spawn_blocking(move || {
        let url = |path: &str| format!("http://{addr}{path}");
        let page = chromium(&binary, &profile, &["--dump-dom"], &url("/report"));
        let ranged = chromium(
            &binary,
            &profile,
            &["--dump-dom"],
            &url(&format!("/report?until={until}")),
        );
        (page, ranged)
    })
    .await
    .expect("joins");
    let _ = stop.send(true);
    let _ = serving.await;

    for chart in ["chart-table", "chart-over-time", "chart-ettr"] {
        let at = page
            .find(&format!("<svg id=\"{chart}\""))
            .unwrap_or_else(|| panic!("{chart} missing: {page}"));
        let svg = &page[at..at + page[at..].find("</svg>").expect("closes")];
        assert!(svg.contains("class=\"bar\""), "{chart} has no bar");
    }
    if !live.lemon_nodes.is_empty() {
        assert!(page.contains("<svg id=\"chart-lemons\""));
    }
    assert_eq!(
        page.matches("<tr><td><span class=\"swatch\"").count(),
        live.table.len(),
        "one table row per bucket"
    );
    assert_eq!(
        figure(&page, "interruptions"),
        live.fleet.interruptions.to_string()
    );
    assert_eq!(
        figure(&page, "gpu-hours-lost"),
        format!("{:.1}", live.fleet.gpu_hours_lost)
    );
    assert_eq!(figure(&ranged, "jobs"), half.fleet.jobs.to_string());
}
