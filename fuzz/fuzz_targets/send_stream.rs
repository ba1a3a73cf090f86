//! The send stream decoder (what `tarn receive` reads from a pipe, from anyone): any bytes
//! decode to records or a `StreamError`, never a panic, and never allocate more than one
//! record's bound; the same for a resume token (`send -t`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut reader = tarn_send::StreamReader::new(data);
    while let Ok(Some(_)) = reader.next_record() {}
    let _ = tarn_send::decode_frame(data, 0);
    let _ = tarn_send::ResumeToken::decode(&String::from_utf8_lossy(data));
});
