//! The incident API and pages on the admin server, read from the [`IncidentStore`]:
//!
//! - `GET /api/v1/incidents?job=&code=&host=&status=open|resolved&limit=`: JSON, open incidents
//!   first, then resolved ones, newest first (`limit` 100 by default, at most 1,000);
//! - `GET /api/v1/incidents/{id}`: the incident object with its `timeline` (a fingerprint is
//!   taken too);
//! - `GET /incidents` and `/incidents/{id}`: the same as HTML ([`super::page`]).
//!
//! Every route is guarded by the admin token when one is set ([`super::config`]).

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use super::store::{Filter, IncidentStore, StatusFilter};
use super::{page, Get, Reply, Routes};
use crate::incident::{IncidentEvent, Status};

/// Incidents a list returns unless `limit` says otherwise.
pub const DEFAULT_LIMIT: usize = 100;
/// The most incidents one list returns.
pub const MAX_LIMIT: usize = 1_000;

/// The path of an incident's page under the admin server's base URL.
pub fn page_path(id: &str) -> String {
    format!("/incidents/{id}")
}

/// Adds the incident API and pages to `routes`.
pub fn routes(routes: Routes, store: Arc<IncidentStore>) -> Routes {
    let (a, b, c, d) = (
        Arc::clone(&store),
        Arc::clone(&store),
        Arc::clone(&store),
        store,
    );
    routes
        .guarded("/api/v1/incidents", move |req| list_json(&a, req))
        .guarded_prefix("/api/v1/incidents/", move |req| {
            detail_json(&b, req.path.trim_start_matches("/api/v1/incidents/"))
        })
        .guarded("/incidents", move |req| list_html(&c, req))
        .guarded_prefix("/incidents/", move |req| {
            detail_html(&d, req.path.trim_start_matches("/incidents/"))
        })
}

/// A list request: its filter and limit, or what is wrong with it.
pub fn query_of(req: &Get) -> Result<(Filter, usize), String> {
    let status = match req.param("status") {
        None | Some("all") => None,
        Some("open") => Some(StatusFilter::Open),
        Some("resolved") => Some(StatusFilter::Resolved),
        Some(other) => return Err(format!("status={other:?}: expected open, resolved or all")),
    };
    let limit = match req.param("limit") {
        None => DEFAULT_LIMIT,
        Some(n) => match n.parse::<usize>() {
            Ok(n) if n > 0 => n.min(MAX_LIMIT),
            _ => return Err(format!("limit={n:?}: expected a positive number")),
        },
    };
    let own = |k: &str| req.param(k).map(str::to_string);
    Ok((
        Filter {
            job: own("job"),
            code: own("code"),
            host: own("host"),
            status,
        },
        limit,
    ))
}

/// One incident in a list.
#[derive(Debug, Serialize)]
struct Item<'a> {
    id: &'a str,
    fingerprint: &'a str,
    status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    resolution: Option<crate::incident::Resolution>,
    job_id: &'a str,
    cluster: Option<&'a str>,
    summary: &'a str,
    error_code: &'a str,
    category: &'a str,
    severity: &'static str,
    root_known: bool,
    host: Option<&'a str>,
    rank: Option<u32>,
    culprit_ranks: &'a [u32],
    culprit_hosts: &'a [String],
    matches: u64,
    ranks: u64,
    first_seen: Option<&'a str>,
    last_seen: Option<&'a str>,
    ticket: bool,
    path: String,
}

fn item(i: &IncidentEvent) -> Item<'_> {
    Item {
        id: &i.id,
        fingerprint: &i.fingerprint,
        status: i.status,
        resolution: i.resolution,
        job_id: &i.job_id,
        cluster: i.timeline.cluster.as_deref(),
        summary: &i.summary,
        error_code: &i.root.error_code,
        category: &i.root.category,
        severity: i.root.severity.as_str(),
        root_known: i.root_known,
        host: i.root.host.as_deref(),
        rank: i.root.rank,
        culprit_ranks: &i.culprit.ranks,
        culprit_hosts: &i.culprit.hosts,
        matches: i.counts.matches,
        ranks: i.counts.ranks,
        first_seen: i.first_seen.as_deref(),
        last_seen: i.last_seen.as_deref(),
        ticket: i.ticket.raised,
        path: page_path(&i.id),
    }
}

fn list_json(store: &IncidentStore, req: &Get) -> Reply {
    let (filter, limit) = match query_of(req) {
        Ok(q) => q,
        Err(e) => return Reply::text(400, format!("{e}\n")),
    };
    let found = store.query(&filter, limit);
    let (open, resolved) = store.len();
    let items: Vec<Item<'_>> = found.iter().map(|i| item(i)).collect();
    let body = serde_json::json!({
        "incidents": items,
        "count": items.len(),
        "limit": limit,
        "held": {"open": open, "resolved": resolved},
    });
    Reply::json(200, body.to_string())
}

/// The incident object with its timeline and page path, for the API.
pub fn detail_value(i: &IncidentEvent) -> Value {
    let mut v = serde_json::to_value(i).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut v {
        map.insert(
            "timeline".into(),
            serde_json::to_value(&*i.timeline).unwrap_or(Value::Null),
        );
        map.insert("path".into(), Value::String(page_path(&i.id)));
    }
    v
}

fn detail_json(store: &IncidentStore, fingerprint: &str) -> Reply {
    match store.get(fingerprint) {
        Some(i) => Reply::json(200, detail_value(&i).to_string()),
        None => Reply::json(
            404,
            serde_json::json!({"error": "no such incident (open, or among the recently resolved)"})
                .to_string(),
        ),
    }
}

fn list_html(store: &IncidentStore, req: &Get) -> Reply {
    match query_of(req) {
        Ok((filter, limit)) => {
            let found = store.query(&filter, limit);
            let (open, resolved) = store.len();
            Reply::html(200, page::list(&found, req, open, resolved))
        }
        Err(e) => Reply::html(400, page::problem("Bad request", &e)),
    }
}

fn detail_html(store: &IncidentStore, fingerprint: &str) -> Reply {
    match store.get(fingerprint) {
        Some(i) => Reply::html(200, page::detail(&i)),
        None => Reply::html(
            404,
            page::problem(
                "No such incident",
                &format!(
                    "{fingerprint} is neither open nor among the recently resolved incidents."
                ),
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incident::testutil::event;
    use crate::incident::{Correlator, IncidentConfig};
    use crate::kb::Role;

    fn store_with_one() -> (Arc<IncidentStore>, IncidentEvent) {
        let mut c = Correlator::new(IncidentConfig::default()).expect("config");
        let mut out = Vec::new();
        let e = event("XID_79", Role::Root, "gpu_hardware")
            .job("llm-7")
            .host("node-05")
            .ts("2024-05-01T12:00:00Z")
            .build();
        c.observe(&e, &mut out);
        let store = IncidentStore::new(10, 10);
        for change in &out {
            store.record(change);
        }
        (store, out.pop().expect("opened"))
    }

    #[test]
    fn the_api_lists_filters_and_details_incidents() {
        let (store, inc) = store_with_one();
        let routes = routes(Routes::new(), store);
        let get = |path: &str, query: Option<&str>| {
            routes.dispatch(&hyper::Method::GET, &Get::new(path, query), None)
        };
        let list = get("/api/v1/incidents", Some("code=XID_79&status=open"));
        assert_eq!((list.status, list.content_type), (200, "application/json"));
        let v: Value = serde_json::from_str(&list.body).expect("json");
        assert_eq!(v["count"], 1);
        assert_eq!(v["incidents"][0]["fingerprint"], inc.fingerprint.as_str());
        assert_eq!(v["incidents"][0]["host"], "node-05");
        assert_eq!(
            v["incidents"][0]["path"],
            format!("/incidents/{}", inc.fingerprint)
        );
        let none = get("/api/v1/incidents", Some("job=other"));
        assert_eq!(
            serde_json::from_str::<Value>(&none.body).expect("json")["count"],
            0
        );
        assert_eq!(get("/api/v1/incidents", Some("status=maybe")).status, 400);
        assert_eq!(get("/api/v1/incidents", Some("limit=0")).status, 400);

        let one = get(&format!("/api/v1/incidents/{}", inc.fingerprint), None);
        let v: Value = serde_json::from_str(&one.body).expect("json");
        assert_eq!(v["type"], "incident");
        assert_eq!(v["job_id"], "llm-7");
        assert_eq!(v["timeline"]["rows"][0]["host"], "node-05");
        assert_eq!(
            get("/api/v1/incidents/fp2:0000000000000000", None).status,
            404
        );

        let html = get(&format!("/incidents/{}", inc.fingerprint), None);
        assert_eq!(html.status, 200);
        assert!(html.content_type.starts_with("text/html"));
        assert!(html.body.contains("<svg"), "the timeline is drawn");
        assert!(html
            .headers
            .iter()
            .any(|(k, v)| *k == "Content-Security-Policy" && v.contains("default-src 'none'")));
        assert_eq!(get("/incidents/nope", None).status, 404);
        let listed = get("/incidents", Some("host=node-05"));
        assert!(listed.body.contains(&inc.fingerprint), "{}", listed.body);
    }
}
