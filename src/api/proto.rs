//! Generated protobuf types and the tonic service/client for `proto.API`
//! (from proto/api.proto, compiled by build.rs with protox).
//!
//! Nothing is hand-written here; field numbers live in the .proto files.
//! The types that also travel over NATS or sit in logs (`Message`, `Ack`,
//! `AckPolicy`, `Cursor`) are generated once, in [`crate::wire::pb`], and
//! re-exported here so the API's names stay `proto::…`.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

tonic::include_proto!("proto");

pub use crate::wire::pb::{ack, Ack, AckPolicy, Cursor, Message};

/// The server side of `proto.API` over the types above, except that a
/// Subscribe stream yields [`crate::api::outgoing::Outgoing`].
pub mod server {
    include!(concat!(env!("OUT_DIR"), "/server/proto.rs"));
}
