//! The NBD request decoder: any bytes a client sends as a request header, compact or
//! extended, decode to a request or an error, never a panic; a decoded request encodes back
//! to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_nbd::codec;

fuzz_target!(|data: &[u8]| {
    for extended in [false, true] {
        if let Ok(request) = codec::decode_request(data, extended) {
            assert_eq!(codec::encode_request(&request, extended), data);
        }
    }
});
