//! The liftbridge.yaml loader: any text is a configuration or an error
//! naming the key, never a panic.
//! The body is `liftbridge::fuzz::liftbridge_yaml` (run by the main crate's tests too).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| liftbridge::fuzz::liftbridge_yaml(data));
