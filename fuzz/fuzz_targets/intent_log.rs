//! Intent-log decoding: a log block and a log record given garbage never panic; whatever
//! record decodes re-encodes to the same record, and a block decodes only for the chain id
//! and sequence it carries.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_format::intent_log::decode_block;
use tarn_posix::LogRecord;

fuzz_target!(|data: &[u8]| {
    if let Some((header, payload)) = decode_block(data, 1, 1) {
        assert_eq!((header.chain, header.seq), (1, 1));
        assert_eq!(payload.len(), header.payload_len as usize);
    }
    if data.len() >= 16 {
        let chain = u64::from_le_bytes(data[8..16].try_into().unwrap_or([0; 8]));
        let _ = decode_block(data, chain, 1);
    }
    if let Ok(record) = LogRecord::decode(data) {
        let again = LogRecord::decode(&record.encode()).expect("a decoded record re-encodes");
        assert_eq!(again, record, "log record round trip");
    }
});
