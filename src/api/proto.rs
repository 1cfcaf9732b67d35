//! Generated protobuf types and the tonic service/client for `proto.API`
//! (from proto/api.proto, compiled by build.rs with protox).
//!
//! Nothing is hand-written here; field numbers live in the .proto file.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

tonic::include_proto!("proto");
