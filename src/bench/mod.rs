//! Load generators and side-by-side benchmarks.

pub mod nats;
pub mod store;
