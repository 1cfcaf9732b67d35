//! What nodes exchange to replicate: any bytes decode or fail as a fetch
//! request, fetch answer, epoch request/answer or notification, never panic.
//! The body is `liftbridge::fuzz::replication` (run by the main crate's tests too).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| liftbridge::fuzz::replication(data));
