//! Space-log block decoding: garbage never panics, and record counts are bounded by the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_space::log::LogBlock;

fuzz_target!(|data: &[u8]| {
    if let Ok(block) = LogBlock::decode(data) {
        assert!(block.records.len() * 24 <= data.len(), "records beyond the input");
    }
});
