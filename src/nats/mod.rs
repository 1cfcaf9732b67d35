//! The embedded NATS server.
//!
//! Our own implementation of the NATS client protocol, behaving as
//! nats-server 2.x does on the wire (see `spec/nats.md`).
//!
//! - [`proto`]: I/O-free parser and encoder;
//! - [`sublist`]: the subscription trie with its match cache;
//! - [`account`]: accounts (one sublist each), imports and exports;
//! - [`client`]: one connection (reader, writer, delivery);
//! - [`server`]: listener, INFO/TLS/auth, lame duck, shutdown ([`NatsServer`]);
//! - [`route`]: the cluster mesh (routes to our nodes and Go nats-server);
//! - [`ws`]: NATS clients over WebSocket (a second client listener);
//! - [`leaf`]: leaf nodes, both roles (hub and leaf of a hub);
//! - [`mapping`]: subject mappings (a publish delivered on another subject);
//! - [`external`]: the bridge to an external NATS system (external mode);
//! - [`handle`]: the in-process client used by the log layer ([`LocalClient`]);
//! - [`monitor`]: `/varz`, `/connz`, `/subsz`, `/healthz` bodies;
//! - [`reload`]: applying a new configuration to the running server;
//! - [`jwt`], [`resolver`], `claims`: operator (decentralized JWT) mode;
//! - `sysreq`: the system account's `$SYS.REQ.SERVER…` requests.

pub mod account;
pub mod auth;
mod claims;
pub mod client;
pub mod external;
pub mod handle;
pub mod jwt;
pub mod leaf;
pub mod mapping;
pub mod monitor;
pub mod proto;
pub mod reload;
mod replies;
pub mod resolver;
pub mod restrict;
pub mod route;
pub mod s2;
pub mod server;
pub mod subject;
pub mod sublist;
mod sysreq;
pub mod ws;

pub use handle::{LocalClient, LocalMsg, LocalSubscription};
pub use server::{NatsError, NatsServer};
