//! The stored record and chunk encodings (bytes read back from disk): any
//! bytes decode or fail, never panic; a decoded record re-encodes to the
//! same bytes (the encoding is canonical) and its length is `encoded_len`.
//! The body is `liftbridge::fuzz::record_codec` (run by the main crate's tests too).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| liftbridge::fuzz::record_codec(data));
