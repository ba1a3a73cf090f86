//! Multihost heartbeat decoding: garbage never panics, and a decoded heartbeat round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_format::heartbeat::Heartbeat;

fuzz_target!(|data: &[u8]| {
    if let Ok(beat) = Heartbeat::decode(data) {
        let again = Heartbeat::decode(&beat.encode()).expect("a decoded heartbeat re-encodes");
        assert_eq!(again, beat, "heartbeat round trip");
    }
});
