//! Integration tests: one test binary, one module per area.
//!
//! Each test starts the real server (in-process on port 0, or the built
//! binary) and talks to it with real clients.
mod store_basic;
mod store_crash;
mod store_model;
