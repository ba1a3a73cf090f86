//! Decompression of garbage for every compression kind: never panics, and a success yields
//! exactly `logical_size` bytes. The same input, taken as plain data, must survive a
//! compress/decompress round trip with every setting.
//!
//! Input layout: byte 0 picks the kind (mod 4), bytes 1..4 give the logical size (LE, capped
//! at 256 KiB so runs stay fast), the rest is the compressed block.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_format::compress::{CompressKind, CompressSetting, compress, decompress};

const LOGICAL_MAX: usize = 256 << 10;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Some((size, block)) = rest.split_first_chunk::<3>() else {
        return;
    };
    let logical = (usize::from(size[0]) | usize::from(size[1]) << 8 | usize::from(size[2]) << 16)
        % (LOGICAL_MAX + 1);
    let kind = CompressKind::from_u8(selector % 4).expect("0..4 are kinds");
    if let Ok(out) = decompress(kind, block, logical) {
        assert_eq!(out.len(), logical, "{kind:?} output size");
    }
    for setting in [
        CompressSetting::Lz4,
        CompressSetting::Zstd(1),
        CompressSetting::Zle,
    ] {
        if let Some(compressed) = compress(setting, block) {
            let back = decompress(setting.kind(), &compressed, block.len()).expect("round trip");
            assert_eq!(back, block, "{setting:?} round trip");
        }
    }
});
