//! Volume intent-log records (types 32-34: write, zero, indirect write; docs/FORMAT.md
//! "Intent log") given garbage, as a replay after a crash meets them: the input is a stream
//! of length-prefixed records, each decoded and, when it decodes, replayed on a small
//! volume in memory (an indirect write with block bytes taken from the input). Decoding or
//! replaying never panics; a decoded record re-encodes to the same record; a replayed write
//! or zero lies inside the volume (L1: anything else is refused), and the volume stays
//! readable whole with its size unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_dataset::volume;
use tarn_dataset::volume_log::LogRecord;
use tarn_objects::testing::MemStore;
use tarn_objects::{ObjectSet, ObjsetKind};

/// The volume the records replay on: 16 blocks of 4 KiB.
const SIZE: u64 = 64 << 10;
const BLOCK: u32 = 4096;
/// Most records one input replays.
const RECORDS_MAX: usize = 32;

fuzz_target!(|input: &[u8]| {
    let store = MemStore::new();
    let mut objset = ObjectSet::create(ObjsetKind::Volume);
    volume::create(&mut objset, &store, SIZE, BLOCK).expect("a volume in memory");
    volume::write(&mut objset, &store, 1000, &[0x5a; 9000]).expect("a first write");
    let mut rest = input;
    for _ in 0..RECORDS_MAX {
        let Some((len, body)) = rest.split_first_chunk::<2>() else {
            break;
        };
        let len = usize::from(u16::from_le_bytes(*len)).min(body.len());
        let (bytes, after) = body.split_at(len);
        rest = after;
        let Ok(record) = LogRecord::decode(bytes) else {
            continue;
        };
        let again = LogRecord::decode(&record.encode()).expect("a decoded record re-encodes");
        assert_eq!(again, record, "volume log record round trip");
        // An indirect write's block: the next bytes of the input, as many as its pointer's
        // logical size says when there are that many (a short block must be refused too).
        let block_len = match &record {
            LogRecord::Indirect { block, .. } => (block.lsize as usize).min(rest.len()),
            _ => 0,
        };
        let (block, after) = rest.split_at(block_len);
        rest = after;
        let applied = record.apply_indirect(&mut objset, &store, block);
        if applied.is_ok() {
            let (offset, len) = match &record {
                LogRecord::Write { offset, data } => (*offset, data.len() as u64),
                LogRecord::Zero { offset, len } => (*offset, *len),
                LogRecord::Indirect { offset, len, .. } => (*offset, u64::from(*len)),
            };
            let end = offset.checked_add(len).expect("a replayed range has an end");
            assert!(end <= SIZE, "replayed {offset}+{len} past the volume (L1)");
        }
    }
    let info = volume::info(&mut objset, &store).expect("the volume's info");
    assert_eq!((info.size, info.block_size), (SIZE, BLOCK));
    let mut whole = vec![0u8; SIZE as usize];
    volume::read(&mut objset, &store, 0, &mut whole).expect("the volume reads whole");
});
