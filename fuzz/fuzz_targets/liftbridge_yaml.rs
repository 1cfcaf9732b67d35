//! The liftbridge.yaml loader: any text is a configuration or an error
//! naming the key, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use liftbridge::config::liftbridge;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = liftbridge::from_yaml_str(text, Path::new("fuzz.yaml"));
    }
});
