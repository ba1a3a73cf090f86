//! The daemon's socket protocol: any line a client (or anything else that can open the socket)
//! sends decodes to a request or an error, never a panic; the same for replies and the cache
//! file the daemon reads at start.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tarn_proto::decode_request(data);
    let _ = tarn_proto::decode_server_line(data);
    let _ = tarn_proto::decode_cache_file(data);
});
