//! Integration tests: one binary, one module per area.

mod cli;
mod compose;
mod corpus;
mod kb;
mod observability;
mod scan;
mod support;
mod telemetry;
