//! liftbridge: a durable, replayable log for NATS in one binary.
//!
//! The crate is laid out so that each piece of state has one owner and
//! protocol/storage code stays free of I/O:
//!
//! ```text
//! config/     typed configuration; loaders for flags, NATS .conf and liftbridge.yaml
//! nats/       the embedded NATS server (parser, sublist, connections, monitoring, in-process client)
//! store/      redb-backed partition log: append, read, time index, retention, compaction
//! cluster/    openraft metadata (streams, partitions, leaders, ISR) with redb storage
//! partition/  a partition's life: the stenographer (recording), acks, readers
//! api/        the Liftbridge gRPC service `proto.API`
//! http/       the HTTP server: routing, auth, TLS, NATS monitoring JSON
//! admin/      the admin JSON API (`/api/v1/…`) over ApiService and the logs
//! metrics/    Prometheus registry, collectors and the gRPC metrics layer
//! bench/      load generators for the `bench` command
//! cli/        the command line (serve, nats-server mode, cert, bench, stream, pub, sub)
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
pub mod http;
pub mod logging;
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
