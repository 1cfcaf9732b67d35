//! The nats-server configuration parser (the embedded server's config file
//! and `liftbridge nats-server -c`): any text parses or fails with an
//! error, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use liftbridge::config::nats_conf;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        // Includes are resolved against a directory that does not exist.
        let origin = Path::new("/nonexistent/fuzz.conf");
        let _ = nats_conf::parse_str(text, origin);
        let _ = nats_conf::from_str(text, origin);
    }
});
