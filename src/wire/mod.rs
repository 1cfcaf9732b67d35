//! Liftbridge's wire formats: what travels between processes over NATS and
//! what is stored as bytes, independent of how it is served.
//!
//! - [`envelope`]: the Liftbridge envelope (magic `B9 0E 43 B4`) around
//!   publish (`Message`) and ack (`Ack`) payloads;
//! - [`pb`]: the prost types of `proto/wire.proto` those payloads and the
//!   `__cursors` records carry, re-exported here under their own names;
//! - [`replication`]: what nodes exchange to replicate partitions (fetch
//!   requests and answers, leader-epoch offsets, notifications).
//!
//! This module sits below `partition` and `api`: it imports neither, nor
//! tonic, nor any I/O. Pure code: bytes in, values out.

pub mod envelope;
pub mod pb;
pub mod replication;

pub use pb::ack::Error as AckError;
pub use pb::{Ack, AckPolicy, Cursor, Message};
