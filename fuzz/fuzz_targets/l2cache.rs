//! Cache-device persistent index decoding (docs/FORMAT.md section 19): a header slot and a
//! log block given garbage never panic; garbage sealed with a valid SHA-256 trailer and a
//! pointer naming it gets past the checksums into the field checks, and whatever decodes
//! re-encodes to the same block.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_format::checksum::{Checksum, ChecksumKind, checksum};
use tarn_format::l2cache::{L2_LOG_BLOCK_MAX, L2Header, L2LogBlock, L2LogPtr};

fn word(data: &[u8], at: usize) -> u64 {
    data.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = L2Header::decode(data) {
        let again = L2Header::decode(&header.encode()).expect("a decoded header re-encodes");
        assert_eq!(again, header, "header round trip");
    }
    // The input as it stands, under a pointer taken from its first bytes.
    let ptr = L2LogPtr {
        position: word(data, 0),
        length: word(data, 8) as u32,
        checksum: Checksum([word(data, 16), word(data, 24), word(data, 32), word(data, 40)]),
    };
    let _ = L2LogBlock::decode(data, &ptr);
    // The input sealed as a block would be, under the pointer naming it.
    let body = &data[..data.len().min(L2_LOG_BLOCK_MAX - 32)];
    let sum = checksum(ChecksumKind::Sha256, body);
    let mut sealed = body.to_vec();
    for w in sum.0 {
        sealed.extend_from_slice(&w.to_le_bytes());
    }
    let ptr = L2LogPtr {
        position: word(body, 32),
        length: sealed.len() as u32,
        checksum: sum,
    };
    if let Ok(block) = L2LogBlock::decode(&sealed, &ptr) {
        // Zero fields are not interpreted, so the bytes may differ; the block may not.
        let (bytes, again) = block.encode();
        assert_eq!(again.position, ptr.position, "log pointer position");
        assert_eq!(L2LogBlock::decode(&bytes, &again), Ok(block), "log block round trip");
    }
});
