//! Dnode and object-set root decoding: garbage never panics; what decodes re-encodes to the
//! same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_format::dnode::Dnode;
use tarn_format::objset::ObjsetPhys;

fuzz_target!(|data: &[u8]| {
    if let Ok(dnode) = Dnode::decode(data) {
        let again = Dnode::decode(&dnode.encode()).expect("a decoded dnode re-encodes");
        assert_eq!(again, dnode, "dnode round trip");
    }
    let _ = ObjsetPhys::decode(data);
});
