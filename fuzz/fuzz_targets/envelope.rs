//! The envelope decoder (publishes and acks from NATS clients): any bytes
//! decode or fail, never panic; a decoded message re-encodes to bytes that
//! decode to the same message.
//! The body is `liftbridge::fuzz::envelope` (run by the main crate's tests too).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| liftbridge::fuzz::envelope(data));
