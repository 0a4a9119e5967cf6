//! Leaves that every driver and stage may use: the shutdown signal, the bounded queue between
//! threads, the health that `/readyz` reports, and giving freed memory back. Nothing here knows
//! about Kafka, the KB or the pipeline, so sources and sinks depend on this module instead of on
//! the driver.

pub mod health;
pub mod memory;
pub mod queue;
pub mod shutdown;

pub use health::{Health, Stats};
pub use shutdown::Shutdown;
