//! Load generators and side-by-side benchmarks.
pub mod store;
