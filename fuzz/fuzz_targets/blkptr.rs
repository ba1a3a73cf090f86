//! Block pointer decoding: garbage never panics, and whatever decodes re-encodes to bytes that
//! decode to the same pointer (flags, padding and reserved bytes are not round-tripped).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_format::BlockPtr;

fuzz_target!(|data: &[u8]| {
    if let Ok(bp) = BlockPtr::decode_bytes(data) {
        let again = BlockPtr::decode_bytes(&bp.encode()).expect("a decoded pointer re-encodes");
        assert_eq!(again, bp, "block pointer round trip");
    }
});
