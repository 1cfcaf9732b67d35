//! The stored record and chunk encodings (bytes read back from disk): any
//! bytes decode or fail, never panic; a decoded record re-encodes to the
//! same bytes (the encoding is canonical) and its length is `encoded_len`.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use liftbridge::store::codec;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = codec::decode(0, Bytes::copy_from_slice(data)) {
        let rr = codec::RecordRef::from_record(&r);
        let enc = codec::encode(&rr).expect("a decoded record encodes");
        assert_eq!(enc.len(), codec::encoded_len(&rr));
        assert_eq!(&enc[..], data);
    }
    let _ = codec::peek_key(data);
    let _ = codec::peek_timestamp(data);
    let _ = codec::peek_epoch(data);
    if let Ok(entries) = codec::chunk_entry_list(data) {
        for e in entries {
            let _ = codec::decode(e.offset, Bytes::copy_from_slice(&data[e.start..e.end]));
        }
    }
});
