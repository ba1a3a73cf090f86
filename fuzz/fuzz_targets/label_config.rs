//! Label config decoding, both the checksummed region (header + payload) and the bare TLV
//! payload (which the fuzzer can reach without forging a sha256): garbage never panics, and a
//! decoded config round-trips through `encode_region`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_format::label::PoolConfig;

fuzz_target!(|data: &[u8]| {
    let _ = PoolConfig::decode_region(data);
    if let Ok(config) = PoolConfig::decode(data) {
        if let Ok(region) = config.encode_region() {
            let again = PoolConfig::decode_region(&region).expect("an encoded region decodes");
            assert_eq!(again, config, "config round trip");
        }
    }
});
