//! Uberblock decoding: garbage never panics (the fuzzer rarely gets past the sha256, so it
//! mostly exercises the magic, length and checksum checks), and a decoded uberblock round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_format::uberblock::Uberblock;

fuzz_target!(|data: &[u8]| {
    if let Ok(ub) = Uberblock::decode(data) {
        let again = Uberblock::decode(&ub.encode()).expect("a decoded uberblock re-encodes");
        assert_eq!(again, ub, "uberblock round trip");
    }
});
