//! The NBD handshake decoders: client flags, option headers and every option's payload
//! decode to a value or an error, never a panic, whatever the bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_nbd::codec;

fuzz_target!(|data: &[u8]| {
    if let Some((head, payload)) = data.split_first_chunk::<16>() {
        let _ = codec::decode_option_header(*head);
        let option = u32::from_be_bytes([head[8], head[9], head[10], head[11]]);
        let _ = codec::decode_option(option % 16, payload);
    }
    if let Some((flags, _)) = data.split_first_chunk::<4>() {
        let _ = codec::decode_client_flags(*flags);
    }
});
