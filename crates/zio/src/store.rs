//! The block-level interface the object layer writes through. The pipeline in this crate
//! implements it for a real pool; tests of higher layers may implement it in memory.

use std::sync::Arc;

use tarn_base::Txg;
use tarn_format::{BlockPtr, BlockType, ChecksumKind, CompressSetting, Dva, FormatError};

/// How to write one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteProps {
    /// Kind of block (recorded in the block pointer).
    pub block_type: BlockType,
    /// Level in its tree (0 = data).
    pub level: u8,
    /// Checksum algorithm.
    pub checksum: ChecksumKind,
    /// Compression to try (kept only if it saves >= 12.5%).
    pub compression: CompressSetting,
    /// Number of copies (1..=3), each on a different top-level vdev where possible.
    pub copies: u8,
    /// Number of non-hole level-0 blocks beneath (1 for data blocks).
    pub fill: u64,
    /// The dataset's `special_small_blocks`: a file or volume data block whose physical size
    /// is at most this goes to the special class (0: data blocks never do).
    pub special_small_blocks: u64,
}

impl WriteProps {
    /// The allocation class a block of `psize` physical bytes asks for: ZFS's write policy.
    /// Metadata (everything but level-0 file and volume data: indirect blocks, dnodes,
    /// object-set roots, ZAPs, the space log) always asks for the special class; data asks
    /// for it only when `psize <= special_small_blocks`. The allocator falls back to the
    /// normal class when the pool has no special vdev or it is full.
    #[must_use]
    pub fn alloc_class(&self, psize: u64) -> AllocClass {
        let data = self.block_type == BlockType::Data && self.level == 0;
        if !data {
            AllocClass::Special { small_data: false }
        } else if psize <= self.special_small_blocks {
            AllocClass::Special { small_data: true }
        } else {
            AllocClass::Normal
        }
    }
}

/// The class of top-level vdevs a block is allocated from (ZFS's metaslab classes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocClass {
    /// Data vdevs.
    Normal,
    /// Log devices: intent-log blocks only.
    Log,
    /// Special vdevs: metadata, and data blocks up to `special_small_blocks`.
    Special {
        /// A small file data block: it goes to the special class only while that class has
        /// more than its metadata reserve free (ZFS keeps 25% for metadata).
        small_data: bool,
    },
}

/// Why a block could not be written, read or freed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ZioError {
    /// Every copy and every reconstruction failed its checksum or could not be read: the block
    /// is lost. Names the block so the caller can report exactly what was lost.
    #[error("block at {dva} (birth txg {birth}) is unrecoverable: {why}")]
    Unrecoverable {
        /// First DVA of the block, printed as `vdev:offset:asize`.
        dva: String,
        /// Birth txg of the block.
        birth: Txg,
        /// What failed last.
        why: String,
        /// The copies the read tried (every DVA of the block); empty when the block is bad
        /// in itself whatever the devices (e.g. born after the txg read), so that callers
        /// can tell a block lost to missing devices or damage from one that never was.
        copies: Box<[Dva]>,
    },
    /// No top-level vdev has room for the block.
    #[error("out of space allocating {size} bytes")]
    NoSpace {
        /// Allocated size asked for.
        size: u64,
    },
    /// The block could not be written to enough devices to survive.
    #[error("write failed: {0}")]
    WriteFailed(String),
    /// The stored bytes decoded badly although their checksum matched (a bug or a collision).
    #[error("block decodes badly: {0}")]
    Format(#[from] FormatError),
    /// The pool is suspended after a failed commit; nothing is written until it is cleared.
    #[error("pool I/O is suspended")]
    Suspended,
}

/// Writes, reads and frees blocks on behalf of the object layer. Writing returns the block
/// pointer (with checksum and birth txg) that the parent stores; reading verifies the checksum
/// before returning a byte, and returns the logical (decompressed) bytes.
pub trait BlockStore {
    /// The txg that blocks written now are born in.
    fn txg(&self) -> Txg;
    /// Writes `data` (the logical bytes). All-zero data becomes a hole and takes no space.
    fn write_block(&mut self, data: &[u8], props: &WriteProps) -> Result<BlockPtr, ZioError>;
    /// [`BlockStore::write_block`] of bytes the caller keeps shared (the object layer puts
    /// them in its cache next): a store over devices may then write and keep them without
    /// copying them when it stores them as they are (not compressed, already whole
    /// sectors), which is most of a streaming write's data (`Pipeline::write_block_shared`).
    /// The default copies, as `write_block` does.
    fn write_block_shared(
        &mut self,
        data: &Arc<Vec<u8>>,
        props: &WriteProps,
    ) -> Result<BlockPtr, ZioError> {
        self.write_block(data, props)
    }
    /// [`BlockStore::write_block`] of several blocks, results in the same order. The
    /// default writes them one after another; a store over devices that take I/O in
    /// parallel writes them at once (`Pipeline::write_blocks`).
    fn write_blocks(&mut self, blocks: &[(&[u8], &WriteProps)]) -> Vec<Result<BlockPtr, ZioError>> {
        blocks
            .iter()
            .map(|(data, props)| self.write_block(data, props))
            .collect()
    }
    /// Reads and verifies a block, returning its `lsize` logical bytes. A hole reads as zeros.
    fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError>;
    /// [`BlockStore::read_block`] of several blocks, results in the same order; a store over
    /// devices that serve reads in parallel reads them at once (file reads and read-ahead).
    /// The default reads them one after another.
    fn read_blocks(&self, bps: &[BlockPtr]) -> Vec<Result<Vec<u8>, ZioError>> {
        bps.iter().map(|bp| self.read_block(bp)).collect()
    }
    /// [`BlockStore::read_block`] that copies the block to the pool's cache devices only
    /// when `feed_l2` says so (the reading dataset's `secondarycache` admits it); a block the
    /// cache devices already hold is served from them either way. `read_block` feeds. The
    /// default, for stores without cache devices, is `read_block`; a store that wraps
    /// another passes the flag on.
    fn read_block_l2(&self, bp: &BlockPtr, feed_l2: bool) -> Result<Vec<u8>, ZioError> {
        let _ = feed_l2;
        self.read_block(bp)
    }
    /// [`BlockStore::read_blocks`] with [`BlockStore::read_block_l2`]'s `feed_l2`. The
    /// default is `read_blocks` when feeding, else one `read_block_l2` after another.
    fn read_blocks_l2(&self, bps: &[BlockPtr], feed_l2: bool) -> Vec<Result<Vec<u8>, ZioError>> {
        if feed_l2 {
            return self.read_blocks(bps);
        }
        bps.iter().map(|bp| self.read_block_l2(bp, false)).collect()
    }
    /// Reads and verifies a block's physical bytes as stored (compressed when its block
    /// pointer says so), for `send -c`; `None` from a store that cannot (the default):
    /// the caller reads the logical bytes instead.
    fn read_block_physical(&self, bp: &BlockPtr) -> Option<Result<Vec<u8>, ZioError>> {
        let _ = bp;
        None
    }
    /// [`BlockStore::read_block_physical`] of several blocks, none of them a hole, results in
    /// the same order; a store over devices that serve reads in parallel reads them at once
    /// (`send -c` reading ahead). The default reads them one after another.
    fn read_blocks_physical(&self, bps: &[BlockPtr]) -> Vec<Option<Result<Vec<u8>, ZioError>>> {
        bps.iter().map(|bp| self.read_block_physical(bp)).collect()
    }
    /// Whether [`BlockStore::read_blocks`] reads blocks in parallel, so that reading several
    /// together (and ahead) is worth it. The default, and every synchronous store, says no.
    fn reads_in_parallel(&self) -> bool {
        false
    }
    /// Frees a block that the tree no longer references as of this txg. Whether its space is
    /// reused or kept (by a snapshot, or by another clone's reference) is the store's
    /// decision.
    fn free_block(&mut self, bp: &BlockPtr);
    /// Whether `bp`, given to [`BlockStore::free_block`] in this txg, stays readable: a
    /// snapshot keeps it, or another clone's reference. Its cached bytes are then worth
    /// keeping; the default says no (a store without snapshots or clones frees it).
    fn keeps_freed(&self, bp: &BlockPtr) -> bool {
        let _ = bp;
        false
    }
    /// Takes into this txg's tree a block written ahead of it (in open context, born in this
    /// txg: a volume's `logbias=throughput` write) as the tree would take a block
    /// `write_block` returned. Stores that count what a sync adds (a dataset's space) count
    /// it here; the default does nothing (the block's space was allocated when it was
    /// written).
    fn adopt_block(&mut self, bp: &BlockPtr) {
        let _ = bp;
    }
    /// Makes a new reference to the existing block `bp` for this txg's tree (block cloning,
    /// OpenZFS 2.2's `copy_file_range`): the returned pointer names the same DVAs and bytes,
    /// is born in this txg and keeps the txg that wrote the bytes as its physical birth. The
    /// default, for stores that cannot count references, refuses.
    fn clone_block(&mut self, bp: &BlockPtr) -> Result<BlockPtr, ZioError> {
        Err(ZioError::WriteFailed(format!(
            "block of txg {} cannot be cloned here",
            bp.birth
        )))
    }
}

/// Where blocks go: implemented by the space layer (tarn-space), which sits above this crate
/// (STYLE.md §1: the lower layer defines the trait, the higher one implements it).
pub trait Allocator {
    /// Allocates `copies` DVAs for a block whose padded physical size is `psize`, each on a
    /// different top-level vdev when the pool has enough of them, preferring `class` and
    /// falling back to the normal class. Returns at least one DVA.
    fn allocate(&mut self, psize: u64, copies: u8, class: AllocClass)
    -> Result<Vec<Dva>, ZioError>;
    /// Gives back one DVA of a block born in `birth` (freed in the current txg).
    fn free(&mut self, dva: &Dva, birth: Txg);
}
