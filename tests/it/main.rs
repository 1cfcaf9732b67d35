//! Integration tests: one test binary, one module per area.
//!
//! Each test starts the real server (in-process on port 0, or the built
//! binary) and talks to it with real clients.

mod cluster_crash;
mod cluster_disk;
mod cluster_meta;
mod cluster_router;
mod cluster_storage;
mod config_liftbridge;
