//! The envelope decoder (publishes and acks from NATS clients): any bytes
//! decode or fail, never panic; a decoded message re-encodes to bytes that
//! decode to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use liftbridge::wire::envelope;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = envelope::decode_message(data) {
        let again = envelope::decode_message(&envelope::encode_message(&m)).expect("re-encoded");
        assert_eq!(again, m);
    }
    if let Ok(a) = envelope::decode_ack(data) {
        let again = envelope::decode_ack(&envelope::encode_ack(&a)).expect("re-encoded");
        assert_eq!(again, a);
    }
});
