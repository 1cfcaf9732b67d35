//! The nats-server configuration parser (the embedded server's config file
//! and `liftbridge nats-server -c`): any text parses or fails with an
//! error, never a panic.
//! The body is `liftbridge::fuzz::nats_conf` (run by the main crate's tests too).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| liftbridge::fuzz::nats_conf(data));
