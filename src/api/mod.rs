//! The Liftbridge gRPC service `proto.API`.
//!
//! `proto` holds the generated types, `envelope` the NATS framing of
//! publishes and acks. The service itself translates requests into metadata
//! proposals, NATS publishes (one path into the log: every publish goes
//! through NATS to the partition leader's stenographer) and reads from the
//! partition logs; error → gRPC status mapping happens in one place
//! (`ApiError` → `tonic::Status`).

pub mod envelope;
pub mod proto;
pub mod service;

pub use service::{ApiError, ApiOptions, ApiService};
