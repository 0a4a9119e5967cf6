//! Leaves that every driver and stage may use: the shutdown signal, the bounded queue between
//! threads, and the health that `/readyz` reports. Nothing here knows about Kafka, the KB or
//! the pipeline, so sources and sinks depend on this module instead of on the driver.

pub mod health;
pub mod queue;
pub mod shutdown;

pub use health::{Health, Stats};
pub use shutdown::Shutdown;
