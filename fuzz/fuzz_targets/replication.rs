//! What nodes exchange to replicate: any bytes decode or fail as a fetch
//! request, fetch answer, epoch request/answer or notification, never panic.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use liftbridge::wire::replication as r;

fuzz_target!(|data: &[u8]| {
    let _ = r::decode_fetch(data);
    let _ = r::decode_epoch_request(data);
    let _ = r::decode_epoch_response(data);
    let _ = r::decode_notification(data);
    if let Ok(resp) = r::decode_response(Bytes::copy_from_slice(data)) {
        let len: usize = resp.records.iter().map(|(_, b)| b.len() + r::ENTRY_OVERHEAD).sum();
        assert!(len <= data.len());
    }
});
