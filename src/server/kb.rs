//! `GET /api/v1/kb/{kb_id}` on the admin server: an entry's whole diagnosis, from the KB the
//! process holds now. A match event carries its diagnosis by reference (`kb_id` at
//! `kb_version`, [`crate::enrich::Detail`]); this is where a consumer of events alone reads the
//! rest. Guarded by the admin token when one is set, like the incident API.

use std::sync::Arc;

use serde::Serialize;

use super::{Reply, Routes};
use crate::enrich::{serialize_full_diagnosis, Diagnosis};
use crate::kb::Entry;

/// What the route answers for an entry.
#[derive(Debug, Serialize)]
pub struct EntryDiagnosis {
    /// The entry's id, as events name it.
    pub kb_id: String,
    /// Its error code.
    pub error_code: String,
    /// The content hash of the KB answering: an event of another `kb_version` may have been
    /// matched by a different wording of the entry.
    pub kb_version: String,
    /// The whole diagnosis, as incidents carry it.
    #[serde(serialize_with = "serialize_full_diagnosis")]
    pub diagnosis: Arc<Diagnosis>,
}

impl EntryDiagnosis {
    /// The answer for `entry` of the KB `kb_version`.
    pub fn new(entry: &Entry, diagnosis: &Arc<Diagnosis>, kb_version: &str) -> Self {
        EntryDiagnosis {
            kb_id: entry.id.clone(),
            error_code: entry.error_code.clone(),
            kb_version: kb_version.to_string(),
            diagnosis: Arc::clone(diagnosis),
        }
    }
}

/// Adds `/api/v1/kb/{kb_id}` to `routes`; `lookup` finds an entry in the current KB.
pub fn routes(
    routes: Routes,
    lookup: impl Fn(&str) -> Option<EntryDiagnosis> + Send + Sync + 'static,
) -> Routes {
    routes.guarded_prefix("/api/v1/kb/", move |req| {
        let id = req.path.trim_start_matches("/api/v1/kb/");
        match lookup(id) {
            Some(found) => match serde_json::to_string(&found) {
                Ok(body) => Reply::json(200, body),
                Err(e) => Reply::text(500, format!("cannot serialise the entry: {e}\n")),
            },
            None => Reply::text(404, format!("no entry {id:?} in this KB\n")),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enrich::{Detail, Enricher};
    use crate::kb::KnowledgeBase;
    use crate::server::Get;

    #[test]
    fn an_entry_answers_with_its_whole_diagnosis_and_an_unknown_id_is_404() {
        let kb = Arc::new(KnowledgeBase::embedded().expect("embedded KB"));
        // Events by reference: the route still gives the whole diagnosis.
        let enricher = Enricher::new(Arc::clone(&kb)).with_detail(Detail::Reference);
        let version = kb.version.clone();
        let routes = routes(Routes::new(), move |id| {
            let (entry, d) = enricher.entry(id)?;
            Some(EntryDiagnosis::new(entry, d, &version))
        });
        let entry = kb
            .entries
            .iter()
            .find(|e| e.error_code == "XID_79")
            .expect("an Xid 79 entry");
        let get = |path: &str| routes.dispatch(&hyper::Method::GET, &Get::new(path, None), None);
        let reply = get(&format!("/api/v1/kb/{}", entry.id));
        assert_eq!(reply.status, 200);
        let v: serde_json::Value = serde_json::from_str(&reply.body).expect("JSON");
        assert_eq!(v["kb_id"], entry.id.as_str());
        assert_eq!(v["error_code"], "XID_79");
        assert_eq!(v["kb_version"], kb.version.as_str());
        assert_eq!(v["diagnosis"]["root_cause"], entry.root_cause.as_str());
        assert!(v["diagnosis"]["workarounds"].as_array().is_some());
        let missing = get("/api/v1/kb/no/such-entry");
        assert_eq!(missing.status, 404);
    }
}
