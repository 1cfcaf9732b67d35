//! The Liftbridge gRPC service `proto.API`.
//!
//! `proto` holds the generated types (the envelope payloads among them come
//! from [`crate::wire`], which also frames publishes and acks for NATS). The service itself translates requests into metadata
//! proposals, NATS publishes (one path into the log: every publish goes
//! through NATS to the partition leader's stenographer) and reads from the
//! partition logs; error → gRPC status mapping happens in one place
//! (`ApiError` → `tonic::Status`).

pub mod convert;
pub mod proto;
pub mod service;

pub use service::{ApiError, ApiOptions, ApiService};
