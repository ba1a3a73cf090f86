//! What a send stream needs from an object: its committed dnode, its level-0 blocks in
//! order (all of them, or only those born after a txg, with the holes under changed
//! parents) and their contents. The walk keeps an explicit stack of at most
//! `TREE_LEVELS_MAX` frames and skips every subtree born in or before the txg whole, so an
//! incremental send reads what changed, not the object.

use crate::tree;
use crate::{META_DNODE_OBJECT, ObjectError, ObjectSet};
use std::sync::Arc;
use tarn_base::{ObjectId, Txg};
use tarn_format::BlockPtr;
use tarn_format::dnode::{BLKPTR_SHIFT, Dnode};
use tarn_zio::BlockStore;

/// One step of [`ObjectSet::visit_changes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockChange {
    /// Level-0 block `blkid` holds data (born after the txg, when one was given).
    Data {
        /// Block id.
        blkid: u64,
        /// Its block pointer.
        bp: BlockPtr,
    },
    /// `count` level-0 blocks from `blkid` are holes under a parent born after the txg
    /// (reported only when a txg was given: a full send has nothing to punch).
    Hole {
        /// First block id.
        blkid: u64,
        /// How many.
        count: u64,
    },
}

struct Frame {
    level: u8,
    /// Block id of this indirect block at its level.
    blkid: u64,
    children: Vec<BlockPtr>,
    next: usize,
}

impl ObjectSet {
    /// The dnode of `id` as it is now (`None`: a free slot); object 0 is the meta-dnode.
    pub fn dnode(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
    ) -> Result<Option<Dnode>, ObjectError> {
        if id == META_DNODE_OBJECT {
            return Ok(Some(self.meta_dnode()));
        }
        self.check_usable()?;
        self.current_dnode(store, id)
    }

    /// Calls `visit` for the level-0 blocks of `id`'s committed tree from block `start` on,
    /// in ascending order: with `after`, only data born after it and the holes under parents
    /// born after it; without, every data block. `visit` returns false to stop early.
    /// Returns false when it was stopped. Object 0 walks the meta-dnode (its blocks are the
    /// dnode blocks).
    pub fn visit_changes(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        after: Option<Txg>,
        start: u64,
        visit: &mut dyn FnMut(BlockChange) -> Result<bool, ObjectError>,
    ) -> Result<bool, ObjectError> {
        let Some(dnode) = self.dnode(store, id)? else {
            return Err(ObjectError::NoSuchObject { object: id });
        };
        let bits = u32::from(dnode.indirect_shift - BLKPTR_SHIFT);
        let span = |level: u8| 1u128 << (u32::from(level) * bits);
        let changed = |bp: &BlockPtr| after.is_none_or(|txg| bp.birth > txg);
        let mut stack: Vec<Frame> = Vec::with_capacity(usize::from(tree::TREE_LEVELS_MAX));
        let mut pending = Some((dnode.root, dnode.nlevels - 1, 0u64));
        loop {
            let (bp, level, blkid) = match pending.take() {
                Some(next) => next,
                None => {
                    let Some(frame) = stack.last_mut() else {
                        return Ok(true);
                    };
                    if frame.next == frame.children.len() {
                        stack.pop();
                        continue;
                    }
                    let index = frame.next;
                    frame.next += 1;
                    let child = (frame.blkid << bits) | index as u64;
                    (frame.children[index], frame.level - 1, child)
                }
            };
            let first = u128::from(blkid) * span(level);
            let end = first + span(level);
            if end <= u128::from(start) {
                continue;
            }
            let from = u64::try_from(first.max(u128::from(start))).unwrap_or(u64::MAX);
            let step = match () {
                () if bp.is_hole() && after.is_none() => None,
                () if bp.is_hole() => Some(BlockChange::Hole {
                    blkid: from,
                    count: u64::try_from(end - u128::from(from)).unwrap_or(u64::MAX),
                }),
                () if !changed(&bp) => None,
                () if level == 0 => Some(BlockChange::Data { blkid, bp }),
                () => {
                    let cache = &mut self.cache;
                    let frame = Self::indirect_frame(store, cache, id, &dnode, (bp, level, blkid))?;
                    stack.push(frame);
                    assert!(
                        stack.len() <= usize::from(tree::TREE_LEVELS_MAX),
                        "send walk stack overflow"
                    );
                    None
                }
            };
            if let Some(step) = step
                && !visit(step)?
            {
                return Ok(false);
            }
        }
    }

    /// The children of an indirect block, read through the clean-block cache: a walk in
    /// batches (`send`, `diff`) starts each batch from the root again, and without the
    /// cache every batch read the same indirect blocks from the devices, one at a time
    /// (docs/PERFORMANCE.md, "Send at the read's rate").
    fn indirect_frame(
        store: &dyn BlockStore,
        cache: &mut crate::cache::BlockCache,
        id: ObjectId,
        dnode: &Dnode,
        (bp, level, blkid): (BlockPtr, u8, u64),
    ) -> Result<Frame, ObjectError> {
        let bits = u32::from(dnode.indirect_shift - BLKPTR_SHIFT);
        let size = 1u64 << dnode.indirect_shift;
        let block = tree::read_tree_block(store, Some(cache), id, &bp, level, size)?;
        let children = (0..1u64 << bits)
            .map(|index| tree::child_bp(id, &block, index))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Frame {
            level,
            blkid,
            children,
            next: 0,
        })
    }

    /// The logical contents of level-0 block `bp` of object `id` (verified by the store;
    /// not kept in the clean-block cache: a send reads each block once).
    pub fn read_data_block(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        bp: &BlockPtr,
    ) -> Result<Vec<u8>, ObjectError> {
        let Some(dnode) = self.dnode(store, id)? else {
            return Err(ObjectError::NoSuchObject { object: id });
        };
        let size = u64::from(dnode.data_block_size);
        let bytes = tree::read_tree_block(store, None, id, bp, 0, size)?;
        Ok(Arc::unwrap_or_clone(bytes))
    }

    /// [`ObjectSet::read_data_block`] of several level-0 blocks of `id` at once, results in
    /// order: the store reads them together where its devices serve reads in parallel
    /// (`BlockStore::read_blocks`), which is what keeps a send streaming from device files
    /// opened without the page cache, whose read-ahead a block-at-a-time send relied on.
    pub fn read_data_blocks(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        bps: &[BlockPtr],
    ) -> Result<Vec<Result<Vec<u8>, ObjectError>>, ObjectError> {
        let Some(dnode) = self.dnode(store, id)? else {
            return Err(ObjectError::NoSuchObject { object: id });
        };
        let size = u64::from(dnode.data_block_size);
        for bp in bps {
            check_data_block(store, id, bp, size)?;
        }
        let results = store.read_blocks(bps).into_iter();
        Ok(results
            .map(|read| data_block_read(id, size, read))
            .collect())
    }

    /// The bytes of level-0 block `bp` as the pool stored them, when they are compressed
    /// and the store can read them so (`send -c`); `None` otherwise.
    pub fn read_stored_block(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        bp: &BlockPtr,
    ) -> Result<Option<Vec<u8>>, ObjectError> {
        let mut read = self.read_stored_blocks(store, id, std::slice::from_ref(bp));
        read.pop().expect("one result per block")
    }

    /// [`ObjectSet::read_stored_block`] of several level-0 blocks of `id` at once, results in
    /// order (`None` for a block not stored compressed, or when the store cannot read
    /// stored bytes): the store reads them together where its devices serve reads in
    /// parallel, as [`ObjectSet::read_data_blocks`] does for `send`'s logical reads.
    pub fn read_stored_blocks(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        bps: &[BlockPtr],
    ) -> Vec<Result<Option<Vec<u8>>, ObjectError>> {
        let wanted: Vec<BlockPtr> = bps
            .iter()
            .filter(|bp| stored_compressed(bp))
            .copied()
            .collect();
        let mut read = store.read_blocks_physical(&wanted).into_iter();
        bps.iter()
            .map(|bp| match stored_compressed(bp) {
                false => Ok(None),
                true => match read.next().flatten() {
                    None => Ok(None),
                    Some(read) => stored_block_read(id, read).map(Some),
                },
            })
            .collect()
    }

    /// Makes object `id` (free now) an empty ZAP of `object_type`: what a receive does for
    /// the objects whose contents the receiving side keeps itself.
    pub fn zap_create_at(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        object_type: u8,
    ) -> Result<(), ObjectError> {
        let zap = crate::zap::ZAP_BLOCK_SIZE;
        self.claim_object(store, id, object_type, zap, 0, 0)?;
        self.set_metadata(store, id, true)?;
        self.write(store, id, 0, &crate::zap::empty_micro())
    }
}

/// What [`ObjectSet::read_data_blocks`] checks of level-0 block `bp` of object `id` (whose
/// blocks are `size` bytes) before reading it, as `tree::read_tree_block` does. A reader that
/// reads the block later, without the object set (`send`'s readers, off the pool lock),
/// checks it here first, under the lock, and takes what the store returned through
/// [`data_block_read`] (or [`stored_block_read`]): the results are then exactly those of
/// `read_data_blocks` (`read_stored_blocks`).
pub fn check_data_block(
    store: &dyn BlockStore,
    id: ObjectId,
    bp: &BlockPtr,
    size: u64,
) -> Result<(), ObjectError> {
    tree::check_tree_pointer(store, id, bp, 0, size)
}

/// A level-0 block of object `id` (blocks of `size` bytes) as the store read it, as
/// [`ObjectSet::read_data_blocks`] returns it: a block of another size is corrupt.
pub fn data_block_read(
    id: ObjectId,
    size: u64,
    read: Result<Vec<u8>, tarn_zio::ZioError>,
) -> Result<Vec<u8>, ObjectError> {
    match read {
        Ok(bytes) if bytes.len() as u64 == size => Ok(bytes),
        Ok(_) => Err(tree::corrupt(
            id,
            "store returned a block of the wrong size",
        )),
        Err(source) => Err(ObjectError::Io {
            object: id,
            offset: 0,
            source,
        }),
    }
}

/// A level-0 block of object `id` read as stored, as [`ObjectSet::read_stored_blocks`]
/// returns it.
pub fn stored_block_read(
    id: ObjectId,
    read: Result<Vec<u8>, tarn_zio::ZioError>,
) -> Result<Vec<u8>, ObjectError> {
    read.map_err(|source| ObjectError::Io {
        object: id,
        offset: 0,
        source,
    })
}

/// Whether level-0 block `bp` is stored compressed, so that `send -c` sends it as stored.
#[must_use]
pub fn stored_compressed(bp: &BlockPtr) -> bool {
    bp.compression != tarn_format::CompressKind::Off && bp.psize < bp.lsize
}
