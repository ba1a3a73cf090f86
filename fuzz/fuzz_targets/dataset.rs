//! Dataset decoders of outside input: the node and snapshot headers read from the MOS (bytes
//! from disk), dataset and snapshot names and `prop=value` pairs (from the command line).
//! Garbage is an error, never a panic; a header that decodes re-encodes to the same bytes'
//! value; a value that validates validates again to itself and displays.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_dataset::snapshot::{SnapshotHeader, split_name};
use tarn_dataset::{DatasetHeader, props, validate_name};

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = DatasetHeader::decode(data) {
        let again = DatasetHeader::decode(&header.encode()).expect("a decoded header re-encodes");
        assert_eq!(again, header, "dataset header round trip");
    }
    if let Ok(header) = SnapshotHeader::decode(data) {
        let again = SnapshotHeader::decode(&header.encode()).expect("a decoded header re-encodes");
        assert_eq!(again, header, "snapshot header round trip");
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = validate_name(text);
    let _ = split_name(text);
    let (name, value) = text.split_once('=').unwrap_or((text, ""));
    if let Ok(Some(normalized)) = props::validate(name, value) {
        let def = props::find(name);
        if let Some(def) = def {
            assert_eq!(
                props::validate(name, &normalized).ok().flatten().as_deref(),
                Some(normalized.as_str()),
                "a normalized value validates to itself"
            );
            let _ = props::display(def, &normalized, false);
            let _ = props::display(def, &normalized, true);
        }
    }
});
