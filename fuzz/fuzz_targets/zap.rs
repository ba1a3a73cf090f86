//! ZAP objects (directories, property lists) whose blocks hold arbitrary bytes that still pass
//! their checksums (the worst case: a bug or a collision wrote them): lookups, listing, counting,
//! inserting, updating in place and removing must return errors, never panic, never loop
//! without bound.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use tarn_base::{Txg, VdevId};
use tarn_format::dnode::OBJECT_TYPE_ZAP;
use tarn_format::{BlockPtr, Dva};
use tarn_objects::{ObjectSet, ObjsetKind};
use tarn_zio::{BlockStore, WriteProps, ZioError};

/// Blocks in memory, returned as stored (no checksum check: the fuzzer's bytes are "valid").
#[derive(Default)]
struct Store {
    next: u64,
    blocks: HashMap<u64, Vec<u8>>,
}

impl BlockStore for Store {
    fn txg(&self) -> Txg {
        Txg(2)
    }

    fn write_block(&mut self, data: &[u8], props: &WriteProps) -> Result<BlockPtr, ZioError> {
        self.next += 1;
        let offset = self.next * 1_048_576;
        self.blocks.insert(offset, data.to_vec());
        let mut bp = BlockPtr {
            lsize: data.len() as u32,
            psize: data.len() as u32,
            block_type: props.block_type,
            level: props.level,
            birth: Txg(2),
            fill: props.fill.max(1),
            checksum_kind: props.checksum,
            ..BlockPtr::default()
        };
        let asize = (data.len() as u64).next_multiple_of(512);
        bp.dvas[0] = Dva { vdev: VdevId(0), offset, asize };
        Ok(bp)
    }

    fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        if bp.is_hole() {
            return Ok(vec![0u8; bp.lsize as usize]);
        }
        let mut data = self.blocks.get(&bp.dvas[0].offset).cloned().unwrap_or_default();
        data.resize(bp.lsize as usize, 0);
        Ok(data)
    }

    fn free_block(&mut self, bp: &BlockPtr) {
        self.blocks.remove(&bp.dvas[0].offset);
    }
}

fuzz_target!(|input: &[u8]| {
    if input.len() < 3 {
        return;
    }
    let mut store = Store::default();
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let Ok(zap) = set.zap_create(&store, OBJECT_TYPE_ZAP) else { return };
    let entries = usize::from(input[0]) * 2;
    for i in 0..entries {
        let _ = set.zap_insert_u64(&store, zap, &format!("entry-{i}"), i as u64);
    }
    let Ok(root) = set.sync(&mut store) else { return };
    let mut zap_blocks = Vec::new();
    let _ = set.visit_blocks(&store, &mut |bp: &BlockPtr, context| {
        if context.object == zap && context.level == 0 && !bp.is_hole() {
            zap_blocks.push(bp.dvas[0].offset);
        }
    });
    if zap_blocks.is_empty() {
        return;
    }
    let victim = zap_blocks[usize::from(input[1]) % zap_blocks.len()];
    if let Some(block) = store.blocks.get_mut(&victim) {
        let fuzz = &input[2..];
        for (i, byte) in block.iter_mut().enumerate() {
            *byte = fuzz.get(i % fuzz.len().max(1)).copied().unwrap_or(0);
        }
    }
    let Ok(mut set) = ObjectSet::open(&store, &root) else { return };
    let _ = set.zap_lookup(&store, zap, "entry-1");
    let _ = set.zap_lookup_u64(&store, zap, "entry-7");
    let _ = set.zap_count(&store, zap);
    let _ = set.zap_list(&store, zap, None, 64);
    let _ = set.zap_list_sorted(&store, zap);
    let _ = set.zap_insert(&store, zap, "new-entry", b"value");
    let _ = set.zap_update_u64(&store, zap, "entry-5", 55);
    let _ = set.zap_add_u64(&store, zap, "entry-9", -3);
    let _ = set.zap_remove(&store, zap, "entry-3");
    let _ = set.sync(&mut store);
});
