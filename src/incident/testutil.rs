//! Test support: match events without a KB.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::enrich::{Diagnosis, MatchEvent, SCHEMA_VERSION};
use crate::kb::{Role, Severity};
use crate::record::Provenance;

/// Builds a [`MatchEvent`] field by field.
pub(crate) struct EventBuilder(MatchEvent);

/// An event of `error_code` with `role` and `category`, job `job`, no rank, host or time.
pub(crate) fn event(error_code: &str, role: Role, category: &str) -> EventBuilder {
    EventBuilder(MatchEvent {
        kind: "match",
        schema_version: SCHEMA_VERSION,
        kb_id: format!("test/{}", error_code.to_ascii_lowercase().replace('_', "-")),
        error_code: error_code.to_string(),
        domain: "test".into(),
        category: category.into(),
        role,
        severity: Severity::Error,
        job_id: "job".into(),
        rank: None,
        host: None,
        pod: None,
        timestamp: None,
        source: Provenance::File {
            path: "test.log".into(),
            line: 1,
        },
        line: format!("{error_code} happened"),
        truncated: false,
        captures: BTreeMap::new(),
        kb_version: "test".into(),
        diagnosis: Arc::new(Diagnosis {
            title: format!("{error_code} title"),
            root_cause: "because".into(),
            verification: "ai_generated".into(),
            ..Default::default()
        }),
        scope: crate::enrich::Scope::Job,
        also: Vec::new(),
        cluster: None,
    })
}

impl EventBuilder {
    pub(crate) fn job(mut self, job: &str) -> Self {
        self.0.job_id = job.into();
        self
    }
    pub(crate) fn rank(mut self, rank: u32) -> Self {
        self.0.rank = Some(rank);
        self
    }
    pub(crate) fn host(mut self, host: &str) -> Self {
        self.0.host = Some(host.into());
        self
    }
    pub(crate) fn ts(mut self, ts: &str) -> Self {
        self.0.timestamp = Some(ts.into());
        self
    }
    pub(crate) fn cap(mut self, name: &str, value: &str) -> Self {
        self.0.captures.insert(name.into(), value.into());
        self
    }
    pub(crate) fn line(mut self, line: &str) -> Self {
        self.0.line = line.into();
        self
    }
    pub(crate) fn domain(mut self, domain: &str) -> Self {
        self.0.domain = domain.into();
        self
    }
    pub(crate) fn build(self) -> MatchEvent {
        self.0
    }
}
