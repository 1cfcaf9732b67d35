//! Load generators and side-by-side benchmarks.
