//! The NATS client protocol parser: any byte stream, split at any point,
//! parses to operations or an error, never a panic, and never consumes
//! bytes when it asks for more.
//! The body is `liftbridge::fuzz::nats_parser` (run by the main crate's tests too).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| liftbridge::fuzz::nats_parser(data));
