//! Test support for this crate and the layers above it (the `testing` feature): an
//! in-memory block store that verifies checksums and tracks live blocks, and the check that
//! a store's live blocks are exactly those reachable from an object-set root.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // Test support panics.

use std::collections::{HashMap, HashSet};

use tarn_base::{Txg, VdevId};
use tarn_format::checksum::checksum;
use tarn_format::compress::{compress, decompress, is_all_zero};
use tarn_format::{BlockPtr, CompressKind, Dva};
use tarn_zio::{BlockStore, WriteProps, ZioError};

use crate::{BlockContext, visit_object_set};

/// A block store in memory: one entry per live block keyed by its first DVA's offset.
/// Freeing an unknown block panics (a double free or a free of a never-written block).
#[derive(Clone)]
pub struct MemStore {
    txg: Txg,
    next_offset: u64,
    blocks: HashMap<u64, (Vec<u8>, BlockPtr)>,
    pub writes: u64,
}

impl Default for MemStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemStore {
    /// An empty store at txg 1.
    #[must_use]
    pub fn new() -> Self {
        MemStore {
            txg: Txg(1),
            next_offset: 4096,
            blocks: HashMap::new(),
            writes: 0,
        }
    }

    pub fn next_txg(&mut self) {
        self.txg = self.txg.next();
    }

    pub fn live(&self) -> HashSet<u64> {
        self.blocks.keys().copied().collect()
    }

    /// Flips a byte of a stored block (bit rot).
    pub fn corrupt_block(&mut self, offset: u64) {
        let entry = self.blocks.get_mut(&offset).expect("block to corrupt");
        entry.0[0] ^= 0xff;
    }
}

impl BlockStore for MemStore {
    fn txg(&self) -> Txg {
        self.txg
    }

    fn write_block(&mut self, data: &[u8], props: &WriteProps) -> Result<BlockPtr, ZioError> {
        assert!(
            data.len().is_multiple_of(512),
            "block of {} bytes",
            data.len()
        );
        assert!((1..=3).contains(&props.copies), "copies {}", props.copies);
        if is_all_zero(data) {
            return Ok(BlockPtr::hole(self.txg));
        }
        let (stored, kind) = match compress(props.compression, data) {
            Some(packed) => (packed, props.compression.kind()),
            None => (data.to_vec(), CompressKind::Off),
        };
        let asize = (stored.len() as u64).div_ceil(512) * 512;
        let mut dvas = [Dva::default(); 3];
        for (copy, dva) in dvas.iter_mut().enumerate().take(usize::from(props.copies)) {
            *dva = Dva {
                vdev: VdevId(copy as u32),
                offset: self.next_offset,
                asize,
            };
        }
        let offset = self.next_offset;
        self.next_offset += asize;
        let bp = BlockPtr {
            dvas,
            lsize: data.len() as u32,
            psize: stored.len() as u32,
            compression: kind,
            checksum_kind: props.checksum,
            block_type: props.block_type,
            level: props.level,
            birth: self.txg,
            birth_physical: Txg(0),
            fill: props.fill,
            checksum: checksum(props.checksum, &stored),
        };
        self.blocks.insert(offset, (stored, bp));
        self.writes += 1;
        Ok(bp)
    }

    fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        if bp.is_hole() {
            return Ok(vec![0; bp.lsize as usize]);
        }
        let lost = |why: &str| ZioError::Unrecoverable {
            dva: format!("0:{}", bp.dvas[0].offset),
            birth: bp.birth,
            why: why.to_owned(),
            copies: Box::default(),
        };
        let (stored, original) = self
            .blocks
            .get(&bp.dvas[0].offset)
            .ok_or_else(|| lost("freed"))?;
        assert_eq!(original.birth, bp.birth, "read of a reused address");
        if checksum(bp.checksum_kind, stored) != bp.checksum {
            return Err(lost("checksum mismatch"));
        }
        Ok(decompress(bp.compression, stored, bp.lsize as usize)?)
    }

    fn read_block_physical(&self, bp: &BlockPtr) -> Option<Result<Vec<u8>, ZioError>> {
        let bytes = self.read_block(bp).map(|_| {
            let (stored, _) = &self.blocks[&bp.dvas[0].offset];
            stored.clone()
        });
        Some(bytes)
    }

    fn free_block(&mut self, bp: &BlockPtr) {
        assert!(!bp.is_hole(), "free of a hole");
        assert!(
            self.blocks.remove(&bp.dvas[0].offset).is_some(),
            "double free of {bp:?}"
        );
    }
}

/// Every reachable block's offset, asserting that no block is reachable twice.
pub fn reachable(store: &MemStore, root: &BlockPtr) -> HashSet<u64> {
    let mut seen = HashSet::new();
    visit_object_set(store, root, &mut |bp: &BlockPtr, context: BlockContext| {
        assert!(
            seen.insert(bp.dvas[0].offset),
            "block reachable twice at {context:?}"
        );
    })
    .expect("visit");
    seen
}

/// Asserts that live blocks are exactly the reachable ones (no leak, nothing freed in use).
pub fn check_space(store: &MemStore, root: &BlockPtr) {
    let reach = reachable(store, root);
    let live = store.live();
    let leaked: Vec<_> = live.difference(&reach).collect();
    let missing: Vec<_> = reach.difference(&live).collect();
    assert!(leaked.is_empty(), "leaked blocks: {leaked:?}");
    assert!(missing.is_empty(), "reachable blocks freed: {missing:?}");
}
