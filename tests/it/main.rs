//! Integration tests: one test binary, one module per area.
//!
//! Each test starts the real server (in-process on port 0, or the built
//! binary) and talks to it with real clients.

mod admin_api;
mod admin_auth;
mod admin_http;
mod admin_paths;
mod api_acks;
mod api_activity;
mod api_authz;
mod api_cli;
mod api_common;
mod api_encryption;
mod api_flow;
mod api_groups;
mod api_lifecycle;
mod api_parity;
mod api_positions;
mod api_stream_names;
mod bench_cluster;
mod cluster_bad_peers;
mod cluster_crash;
mod cluster_disk;
mod cluster_interop;
mod cluster_isr;
mod cluster_meta;
mod cluster_metafiles;
mod cluster_nats;
mod cluster_partition;
mod cluster_procs;
mod cluster_replication;
mod cluster_router;
mod cluster_routes;
mod cluster_storage;
mod compat_cert;
mod compat_nats_server;
mod config_liftbridge;
mod http_limits;
mod metrics;
mod nats_auth;
mod nats_core;
mod nats_leaf;
mod nats_raw;
mod nats_support;
mod nats_ws;
mod packaging;
mod store_basic;
mod store_check;
mod store_crash;
mod store_missing_files;
mod store_model;
mod support;
mod ui_assets;
