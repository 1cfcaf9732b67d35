//! The S2 stream decoder of compressed routes and leaf links: any bytes,
//! split anywhere, decode or fail, never panic; decoded bytes re-encode to
//! a stream that decodes to the same bytes.
//! The body is `liftbridge::fuzz::s2_stream` (run by the main crate's tests too).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| liftbridge::fuzz::s2_stream(data));
