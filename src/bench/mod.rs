//! Load generators and side-by-side benchmarks.

pub mod lb;
pub mod nats;
pub mod store;
