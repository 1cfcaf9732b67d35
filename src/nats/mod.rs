//! The embedded NATS server.
//!
//! Our own implementation of the NATS client protocol, behaving as
//! nats-server 2.x does on the wire (see `spec/nats.md`).

pub mod auth;
pub mod subject;
