//! Integration tests: one binary, one module per area.

mod alertmanager;
mod ansi;
mod architecture;
mod cli;
mod compose;
mod corpus;
mod correlation;
mod docs;
mod eval;
mod fuzz_corpus;
mod incident_page;
mod incidents;
mod isolation;
mod kafka;
mod kb;
mod kb_explain;
mod kubernetes;
mod limits;
mod observability;
mod recognition;
mod redact;
mod redact_envelopes;
mod report;
mod report_page;
mod scan;
mod support;
mod telemetry;
mod templates;
/// The ticket system of the unit tests: the same file, compiled into this binary too.
#[path = "../../src/sink/ticket_server.rs"]
mod ticket_server;
mod tls;
mod unknown;
