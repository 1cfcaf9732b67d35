//! Generated prost types of `proto/wire.proto` (compiled by build.rs with
//! protox): the envelope payloads `Message` and `Ack`, `AckPolicy`, and the
//! stored cursor value `Cursor`. No tonic: these are bytes formats.
//!
//! Nothing is hand-written here; field numbers live in the .proto file.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/wire/proto.rs"));
