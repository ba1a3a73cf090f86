//! Vdev tree decoding (nested TLV with a depth bound): garbage never panics, and a decoded
//! tree round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_format::label::VdevTree;

fuzz_target!(|data: &[u8]| {
    if let Ok(tree) = VdevTree::decode(data) {
        let again = VdevTree::decode(&tree.encode()).expect("a decoded tree re-encodes");
        assert_eq!(again, tree, "vdev tree round trip");
    }
});
