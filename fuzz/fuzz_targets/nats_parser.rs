//! The NATS client protocol parser: any byte stream, split at any point,
//! parses to operations or an error, never a panic, and never consumes
//! bytes when it asks for more.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use liftbridge::nats::proto::{Parsed, Parser};

fuzz_target!(|data: &[u8]| {
    // The first byte picks where the stream is split into two reads.
    let (split, data) = match data.split_first() {
        Some((s, rest)) => (*s as usize % (rest.len() + 1), rest),
        None => return,
    };
    let mut p = Parser::new(4096, 64 * 1024);
    let mut buf = BytesMut::new();
    for chunk in [&data[..split], &data[split..]] {
        buf.extend_from_slice(chunk);
        loop {
            let before = buf.len();
            match p.parse(&mut buf) {
                Ok(Parsed::Op(_)) => assert!(buf.len() < before, "an operation consumed nothing"),
                Ok(_) => {
                    assert_eq!(buf.len(), before, "waiting for more consumed bytes");
                    break;
                }
                Err(_) => return,
            }
        }
    }
});
