//! liftbridge: a durable, replayable log for NATS in one binary.
//!
//! The crate is laid out so that each piece of state has one owner,
//! protocol/storage code stays free of I/O, and dependencies point one way:
//! `cli → node → {api, admin/http} → service → {partition, cluster} →
//! {wire, store, nats}`. gRPC and HTTP are adapters that convert; the
//! layers from `service` down never speak `proto::*` or `tonic`.
//!
//! ```text
//! cli/        the command line (serve, nats-server mode, cert, bench, stream, pub, sub)
//! node.rs     one node: starts NATS, metadata, partitions, service, gRPC and HTTP
//! api/        gRPC adapter: `proto.API` (tonic), proto <-> domain conversions, Status mapping
//! admin/      HTTP adapter: the admin JSON API (`/api/v1/…`), HTTP status mapping
//! http/       the HTTP server: routing, auth, TLS, NATS monitoring JSON, UI assets
//! service/    the use cases (streams, publish, subscribe, cursors, groups), ServiceError,
//!             the shared ack inbox
//! partition/  a partition's life: the stenographer (recording), acks, high watermark, readers
//! cluster/    openraft metadata (streams, partitions, leaders, ISR) with redb storage
//! wire/       Liftbridge's wire formats: the envelope and its protobuf payloads
//! store/      redb-backed partition log: append, read, time index, retention, compaction
//! nats/       the embedded NATS server (parser, sublist, connections, monitoring, in-process client)
//! config/     typed configuration; loaders for flags, NATS .conf and liftbridge.yaml; durations
//! metrics/    Prometheus registry, collectors and the gRPC metrics layer
//! bench/      load generators for the `bench` command
//! time.rs     the one wall clock reading (`now_ns`)
//! ```
//!
//! The log layer talks to NATS through the in-process client in
//! `nats::handle`, never through TCP to itself.

pub mod admin;
pub mod api;
pub mod bench;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod crypt;
pub mod fuzz;
pub mod http;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod nats;
pub mod node;
pub mod partition;
pub mod service;
pub mod store;
pub mod systemd;
pub mod time;
pub mod tls;
pub mod wire;
