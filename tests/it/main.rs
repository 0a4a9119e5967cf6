//! Integration tests: one binary, one module per area.

mod cli;
mod corpus;
mod incidents;
mod kb;
mod scan;
mod support;
