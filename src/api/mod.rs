//! The Liftbridge gRPC service `proto.API`: an adapter over
//! [`crate::service`].
//!
//! `proto` holds the generated types (the envelope payloads among them are
//! generated once in [`crate::wire`] and re-exported), `convert` turns proto
//! requests into domain requests and domain answers into proto, and
//! `service` implements the tonic trait: convert, call the use case,
//! convert back. Service errors become gRPC statuses in one place
//! (`impl From<ServiceError> for tonic::Status` in `service`). Nothing
//! below this module sees a proto request or tonic.

pub mod authz;
pub mod codec;
pub mod convert;
pub mod outgoing;
pub mod proto;
pub mod server;
pub mod service;

pub use service::ApiService;
