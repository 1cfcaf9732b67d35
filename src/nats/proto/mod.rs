//! The NATS client protocol as pure code: a parser for what clients send
//! and an encoder for what the server sends.
//!
//! No tokio, no sockets: [`Parser::parse`] takes the connection's read
//! buffer and either returns one whole operation (splitting its bytes off
//! the buffer without copying), reports that more bytes are needed
//! ([`Parsed::Incomplete`] leaves the buffer untouched), or returns a
//! [`ParseError`] that the connection translates into nats-server's exact
//! wire reaction (see `spec/nats.md` §1.1, §1.4, §1.8).
//!
//! [`route`] holds the server-to-server (route) protocol, also pure.
//!
//! Invariants: the parser never panics on any input; a valid byte stream
//! yields the same operations however it is split across reads; the
//! encoder always emits upper-case op names (clients match them
//! case-sensitively).

mod encode;
mod headers;
mod parse;
pub mod route;

pub use encode::*;
pub use headers::parse_headers;
pub use parse::*;
