//! One object's copy-on-write block-pointer tree: reading blocks through the synced tree,
//! buffering dirty level-0 blocks, SEEK_DATA/SEEK_HOLE searches, the bottom-up sync that
//! writes new blocks and frees the replaced ones, and a bounded iterative walk.
//!
//! Level-0 blocks are the only dirty buffers kept between syncs: indirect blocks are rebuilt
//! at sync from the old indirect block and the new children, which is the same work ZFS does
//! when it syncs a dirty indirect buffer, without holding a second copy in memory.
//!
//! A dirty level-0 block is whole bytes, a hole, a clone, or pieces (`pieces`: partial writes
//! of a data object's record laid over its committed block or zeros). Pieces are merged
//! where the whole record is needed: at sync (`Level0::sync`, over the committed block read
//! through the cache), by a write-ahead, by a read not inside them, and by an edit that must
//! see the record (a punch or zero write, so that a record of zeros becomes a hole as
//! before). The write that makes pieces over a committed block reads that block first
//! (`write_piece`), so an unreadable record fails the write, not the sync (`crate` docs,
//! failure model).

use crate::cache::BlockCache;
use crate::pieces::Pieces;
use crate::readout::ReadOut;
use crate::{BlockContext, BlockRole, ObjectError, ObjsetWriteConfig, SyncEstimate};
use std::collections::BTreeMap;
use std::sync::Arc;
use tarn_base::limits::INDIRECTION_LEVELS_MAX;
use tarn_base::{ObjectId, Txg};
use tarn_format::dnode::{
    BLKPTR_SHIFT, DNODE_FLAG_METADATA, Dnode, OBJECT_TYPE_META_DNODE, tree_capacity,
};
use tarn_format::{BlockPtr, BlockType};
use tarn_zio::{BlockStore, WriteProps};

/// Levels a tree may have (`nlevels <= TREE_LEVELS_MAX`).
pub(crate) const TREE_LEVELS_MAX: u8 = INDIRECTION_LEVELS_MAX as u8;
const _: () = assert!(INDIRECTION_LEVELS_MAX <= u8::MAX as usize);

/// A dirty level-0 block: new contents, a hole (punched or written with zeros), a clone
/// of an existing block (`ObjectSet::clone_blocks`: the sync makes a new reference to the
/// pointed-to block instead of writing bytes), or the pieces partial writes left over the
/// record's committed block or zeros (`pieces`; merged at sync).
///
/// Whole bytes are shared (`Arc`): a pre-write (`ObjectSet::prewrite_candidates`) holds a
/// reference while it writes them without the pool lock, and an edit of the record meanwhile
/// copies first (`Arc::unwrap_or_clone`), so the pre-write's bytes never change under it and
/// its adoption can tell an unchanged record by pointer identity.
#[derive(Debug, Clone)]
pub(crate) enum Dirty {
    Data(Arc<Vec<u8>>),
    Hole,
    Clone(BlockPtr),
    Pieces(Pieces),
}

impl Dirty {
    /// Whether the block holds data (a clone does: it names a block that is not a hole;
    /// pieces do: all-zero pieces over zeros become a hole, and a zero write over the
    /// committed block is merged at once, as before pieces existed).
    pub(crate) fn is_data(&self) -> bool {
        !matches!(self, Dirty::Hole)
    }

    /// Whether a reader of the whole block needs its committed block (pieces over it).
    pub(crate) fn reads_committed(&self) -> bool {
        matches!(self, Dirty::Pieces(pieces) if !pieces.over_zero())
    }

    /// Bytes of memory the entry holds, as the dirty limit counts them.
    fn cost(&self) -> u64 {
        match self {
            Dirty::Data(bytes) => bytes.len() as u64,
            Dirty::Pieces(pieces) => pieces.cost(),
            Dirty::Hole | Dirty::Clone(_) => 0,
        }
    }

    /// Whether the sync writes a level-0 block of data for the entry.
    fn writes_block(&self) -> bool {
        matches!(self, Dirty::Data(_) | Dirty::Pieces(_))
    }
}

/// In-memory state of one allocated object. `dnode.root`, `dnode.nlevels` and
/// `dnode.used_bytes` describe the last synced tree; every other field is current.
#[derive(Debug, Clone)]
pub(crate) struct ObjState {
    pub(crate) dnode: Dnode,
    pub(crate) dirty: BTreeMap<u64, Dirty>,
    /// Dirty data blocks already written ahead of the sync (`ObjectSet::write_ahead`): the
    /// sync adopts the block pointer instead of writing the block again. Any change of the
    /// block drops its entry (`set_dirty`), so an entry always holds the dirty bytes.
    pub(crate) written_ahead: BTreeMap<u64, BlockPtr>,
    /// Sum of the entries' [`Dirty::cost`].
    pub(crate) dirty_bytes: u64,
    /// Entries that write a data block at sync (whole or pieced), for the sync estimate.
    pub(crate) dirty_blocks: u64,
    pub(crate) dnode_dirty: bool,
}

/// Contents of one level-0 block as seen by a reader.
pub(crate) enum BlockRef<'a> {
    Zero,
    Dirty(&'a [u8]),
    Clean(Arc<Vec<u8>>),
    /// A pieced record's bytes, merged for this reader.
    Merged(Vec<u8>),
}

impl BlockRef<'_> {
    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        match self {
            BlockRef::Zero => None,
            BlockRef::Dirty(bytes) => Some(bytes),
            BlockRef::Clean(bytes) => Some(bytes.as_slice()),
            BlockRef::Merged(bytes) => Some(bytes.as_slice()),
        }
    }
}

/// What a reader needs besides the object: the store, the cache and the object's id.
pub(crate) struct ReadCtx<'a> {
    pub(crate) store: &'a dyn BlockStore,
    pub(crate) cache: &'a mut BlockCache,
    pub(crate) object: ObjectId,
}

pub(crate) fn corrupt(object: ObjectId, why: &'static str) -> ObjectError {
    ObjectError::Corrupt {
        object,
        why,
        source: None,
    }
}

pub(crate) fn bits_per_level(dnode: &Dnode) -> u32 {
    u32::from(dnode.indirect_shift - BLKPTR_SHIFT)
}

/// Checks, before it is read, that block `bp` of the synced tree of `object` is what its
/// parent says it is: at `level`, of `size` logical bytes.
pub(crate) fn check_tree_pointer(
    store: &dyn BlockStore,
    object: ObjectId,
    bp: &BlockPtr,
    level: u8,
    size: u64,
) -> Result<(), ObjectError> {
    assert!(
        !bp.is_hole(),
        "read_tree_block: hole at level {level} of object {}",
        object.0
    );
    assert!(
        bp.birth <= store.txg(),
        "temporal incursion: block born in txg {} read in txg {} (object {})",
        bp.birth,
        store.txg(),
        object.0
    );
    if bp.level != level {
        return Err(corrupt(
            object,
            "block pointer level does not match its place in the tree",
        ));
    }
    if u64::from(bp.lsize) != size {
        return Err(corrupt(
            object,
            "block pointer size does not match the dnode",
        ));
    }
    Ok(())
}

/// Reads a block of the synced tree (through the cache when one is given), checking that it
/// is what its parent says it is.
pub(crate) fn read_tree_block(
    store: &dyn BlockStore,
    cache: Option<&mut BlockCache>,
    object: ObjectId,
    bp: &BlockPtr,
    level: u8,
    size: u64,
) -> Result<Arc<Vec<u8>>, ObjectError> {
    check_tree_pointer(store, object, bp, level, size)?;
    let mut cache = cache;
    if let Some(cache) = cache.as_deref_mut()
        && let Some(hit) = cache.get(bp)
    {
        return Ok(hit);
    }
    let feed_l2 = cache.as_deref().is_none_or(|cache| cache.feeds_l2(bp));
    let bytes = store
        .read_block_l2(bp, feed_l2)
        .map_err(|source| ObjectError::Io {
            object,
            offset: 0,
            source,
        })?;
    if bytes.len() as u64 != size {
        return Err(corrupt(object, "store returned a block of the wrong size"));
    }
    let bytes = Arc::new(bytes);
    if let Some(cache) = cache {
        cache.insert(bp, Arc::clone(&bytes));
    }
    Ok(bytes)
}

/// Decodes child `index` of an indirect block.
pub(crate) fn child_bp(
    object: ObjectId,
    block: &[u8],
    index: u64,
) -> Result<BlockPtr, ObjectError> {
    let start = usize::try_from(index)
        .unwrap_or(usize::MAX)
        .saturating_mul(128);
    let bytes = block
        .get(start..)
        .ok_or_else(|| corrupt(object, "indirect block too short"))?;
    BlockPtr::decode_bytes(bytes).map_err(|source| ObjectError::Corrupt {
        object,
        why: "bad block pointer in an indirect block",
        source: Some(source),
    })
}

/// Decodes every child of an indirect block.
fn children_of(object: ObjectId, block: &[u8], count: u64) -> Result<Vec<BlockPtr>, ObjectError> {
    (0..count)
        .map(|index| child_bp(object, block, index))
        .collect()
}

/// The synced block pointer at (`level`, `blkid`), a hole when outside the tree.
pub(crate) fn synced_bp(
    ctx: &mut ReadCtx<'_>,
    dnode: &Dnode,
    level: u8,
    blkid: u64,
) -> Result<BlockPtr, ObjectError> {
    let top = dnode.nlevels - 1;
    if level > top {
        return Ok(BlockPtr::hole(Txg(0)));
    }
    let bits = bits_per_level(dnode);
    let above = u32::from(top - level) * bits;
    if above < 64 && blkid >> above != 0 {
        return Ok(BlockPtr::hole(Txg(0)));
    }
    let mask = (1u64 << bits) - 1;
    let indirect_size = 1u64 << dnode.indirect_shift;
    let mut bp = dnode.root;
    let mut node_level = top;
    while node_level > level {
        if bp.is_hole() {
            return Ok(BlockPtr::hole(Txg(0)));
        }
        let block = read_tree_block(
            ctx.store,
            Some(ctx.cache),
            ctx.object,
            &bp,
            node_level,
            indirect_size,
        )?;
        let shift = u32::from(node_level - 1 - level) * bits;
        let index = blkid.checked_shr(shift).unwrap_or(0) & mask;
        bp = child_bp(ctx.object, &block, index)?;
        node_level -= 1;
    }
    Ok(bp)
}

/// The current contents of level-0 block `blkid`.
pub(crate) fn block_data<'s>(
    ctx: &mut ReadCtx<'_>,
    state: &'s ObjState,
    blkid: u64,
) -> Result<BlockRef<'s>, ObjectError> {
    let size = u64::from(state.dnode.data_block_size);
    // Say where in the object a block failed (`read_tree_block` knows only the pointer), so
    // that the error log can name the damaged range (or, for a dnode block, the objects).
    let at = |error: ObjectError| error.at_offset(blkid.saturating_mul(size));
    let bp = match state.dirty.get(&blkid) {
        Some(Dirty::Data(bytes)) => return Ok(BlockRef::Dirty(bytes)),
        Some(Dirty::Hole) => return Ok(BlockRef::Zero),
        Some(Dirty::Pieces(pieces)) => {
            let bytes = merge_pieces(ctx, &state.dnode, blkid, pieces).map_err(at)?;
            return Ok(BlockRef::Merged(bytes));
        }
        // A clone not yet synced reads the block it names.
        Some(Dirty::Clone(bp)) => *bp,
        None => synced_bp(ctx, &state.dnode, 0, blkid).map_err(at)?,
    };
    if bp.is_hole() {
        return Ok(BlockRef::Zero);
    }
    let block = read_tree_block(ctx.store, Some(ctx.cache), ctx.object, &bp, 0, size);
    Ok(BlockRef::Clean(block.map_err(at)?))
}

/// The committed bytes of level-0 block `blkid` (the synced tree's, through the cache),
/// `None` for a hole; an error names the block's offset.
pub(crate) fn committed_block(
    ctx: &mut ReadCtx<'_>,
    dnode: &Dnode,
    blkid: u64,
) -> Result<Option<Arc<Vec<u8>>>, ObjectError> {
    let size = u64::from(dnode.data_block_size);
    let at = |error: ObjectError| error.at_offset(blkid.saturating_mul(size));
    let bp = synced_bp(ctx, dnode, 0, blkid).map_err(at)?;
    if bp.is_hole() {
        return Ok(None);
    }
    let block = read_tree_block(ctx.store, Some(ctx.cache), ctx.object, &bp, 0, size);
    block.map(Some).map_err(at)
}

/// The current bytes of pieced block `blkid`: its pieces over its base.
pub(crate) fn merge_pieces(
    ctx: &mut ReadCtx<'_>,
    dnode: &Dnode,
    blkid: u64,
    pieces: &Pieces,
) -> Result<Vec<u8>, ObjectError> {
    if pieces.over_zero() {
        return Ok(pieces.merge(None));
    }
    let base = committed_block(ctx, dnode, blkid)?;
    Ok(pieces.merge(base.as_deref().map(Vec::as_slice)))
}

/// Copies bytes `within..` of pieced block `blkid` into `target`: the base is read only
/// when the pieces do not cover the range.
fn read_pieced(
    ctx: &mut ReadCtx<'_>,
    dnode: &Dnode,
    blkid: u64,
    pieces: &Pieces,
    within: usize,
    target: &mut [u8],
) -> Result<(), ObjectError> {
    if !pieces.covers(within, target.len()) {
        let base = if pieces.over_zero() {
            None
        } else {
            committed_block(ctx, dnode, blkid)?
        };
        match base {
            None => target.fill(0),
            Some(base) => target.copy_from_slice(&base[within..within + target.len()]),
        }
    }
    pieces.overlay(within, target);
    Ok(())
}

/// Writes one block of a tree at sync and puts its logical bytes in the cache, so that the
/// next reader of the object finds the data and the indirect blocks it walks through there.
/// They are exactly the bytes the block pointer's checksum was computed from (after the
/// store's compression, which the store undoes on every read it verifies). The store gets
/// them shared ([`BlockStore::write_block_shared`]): cached bytes are never changed in place.
/// `whole`: a record written whole, which the cache keeps only briefly unless it is read
/// (tarn-objects `cache`, "Records written whole").
fn write_cached(
    store: &mut dyn BlockStore,
    cache: &mut BlockCache,
    object: ObjectId,
    offset: u64,
    bytes: Arc<Vec<u8>>,
    props: &WriteProps,
    whole: bool,
) -> Result<BlockPtr, ObjectError> {
    // Shared with the store, which keeps uncompressed bytes as they are instead of a copy.
    let bp = store
        .write_block_shared(&bytes, props)
        .map_err(|source| ObjectError::Io {
            object,
            offset,
            source,
        })?;
    if !bp.is_hole() {
        assert_eq!(
            u64::from(bp.lsize),
            bytes.len() as u64,
            "written block's size"
        );
        cache.insert_synced(&bp, bytes, whole);
    }
    Ok(bp)
}

/// Calls `f(blkid, within, range)` for each block a read of `len` bytes at `offset` touches,
/// in order: the block, where in it the read's part starts, and the part's place in the read.
fn each_block(
    state: &ObjState,
    offset: u64,
    len: usize,
    mut f: impl FnMut(u64, usize, std::ops::Range<usize>) -> Result<(), ObjectError>,
) -> Result<(), ObjectError> {
    let block_size = u64::from(state.dnode.data_block_size);
    let mut done = 0usize;
    while done < len {
        let position = offset + done as u64;
        let within = usize::try_from(position % block_size).unwrap_or(0);
        let take = (len - done).min(block_size as usize - within);
        f(position / block_size, within, done..done + take)?;
        done += take;
    }
    Ok(())
}

/// Copies `buf.len()` bytes from `offset`; holes and unwritten ranges read as zeros.
pub(crate) fn read(
    ctx: &mut ReadCtx<'_>,
    state: &ObjState,
    offset: u64,
    buf: &mut [u8],
) -> Result<(), ObjectError> {
    each_block(state, offset, buf.len(), |blkid, within, range| {
        let take = range.len();
        let target = &mut buf[range];
        if let Some(Dirty::Pieces(pieces)) = state.dirty.get(&blkid) {
            return read_pieced(ctx, &state.dnode, blkid, pieces, within, target);
        }
        match block_data(ctx, state, blkid)?.bytes() {
            None => target.fill(0),
            Some(bytes) => target.copy_from_slice(&bytes[within..within + take]),
        }
        Ok(())
    })
}

/// [`read`] of `len` bytes as the blocks they lie in (module `readout`): clean blocks are
/// shared with the cache, not copied; dirty data and pieces are copied now.
pub(crate) fn read_out(
    ctx: &mut ReadCtx<'_>,
    state: &ObjState,
    offset: u64,
    len: usize,
) -> Result<ReadOut, ObjectError> {
    let mut out = ReadOut::default();
    each_block(state, offset, len, |blkid, within, range| {
        let take = range.len();
        if let Some(Dirty::Pieces(pieces)) = state.dirty.get(&blkid) {
            let mut bytes = tarn_base::buf::zeroed(take);
            read_pieced(ctx, &state.dnode, blkid, pieces, within, &mut bytes)?;
            out.push_copied(bytes);
            return Ok(());
        }
        match block_data(ctx, state, blkid)? {
            BlockRef::Zero => out.push_zeros(take),
            BlockRef::Dirty(bytes) => out.push_copied(bytes[within..within + take].to_vec()),
            BlockRef::Clean(block) => out.push_block(block, within, take),
            BlockRef::Merged(bytes) => out.push_block(Arc::new(bytes), within, take),
        }
        Ok(())
    })?;
    Ok(out)
}

impl ObjState {
    pub(crate) fn new(dnode: Dnode) -> Self {
        ObjState {
            dnode,
            dirty: BTreeMap::new(),
            written_ahead: BTreeMap::new(),
            dirty_bytes: 0,
            dirty_blocks: 0,
            dnode_dirty: false,
        }
    }

    /// Replaces the dirty entry of `blkid`, keeping `dirty_bytes` exact.
    pub(crate) fn set_dirty(&mut self, blkid: u64, entry: Dirty) {
        if let Dirty::Data(bytes) = &entry {
            assert_eq!(
                bytes.len() as u64,
                u64::from(self.dnode.data_block_size),
                "dirty block {blkid} has the wrong size"
            );
        }
        self.replace(blkid, Some(entry));
    }

    /// Replaces (or with `None` removes) the dirty entry of `blkid` and returns the old one,
    /// keeping `dirty_bytes` and `dirty_blocks` exact; a block written ahead is dropped (its
    /// bytes are no longer the block's).
    pub(crate) fn replace(&mut self, blkid: u64, entry: Option<Dirty>) -> Option<Dirty> {
        self.written_ahead.remove(&blkid);
        if let Some(entry) = &entry {
            self.dirty_bytes += entry.cost();
            self.dirty_blocks += u64::from(entry.writes_block());
        }
        let old = match entry {
            Some(entry) => self.dirty.insert(blkid, entry),
            None => self.dirty.remove(&blkid),
        };
        if let Some(old) = &old {
            self.dirty_bytes -= old.cost();
            self.dirty_blocks -= u64::from(old.writes_block());
        }
        old
    }

    /// An upper bound of what syncing this object writes besides its dnode: its dirty
    /// level-0 blocks and, for each level above them, at most one indirect block per dirty
    /// block and never more than the dirty range spans at that level (sequential writes share
    /// their parents). Holes write no block of their own, only their parents.
    pub(crate) fn estimate(&self) -> SyncEstimate {
        let mut estimate = SyncEstimate::default();
        let size = u64::from(self.dnode.data_block_size).max(1);
        // A pieced record writes a whole block at sync, whatever its pieces cost.
        let blocks = self.dirty_blocks;
        if self.dnode.flags & DNODE_FLAG_METADATA != 0 {
            estimate = estimate.with_meta(blocks, size);
        } else {
            estimate.data_blocks = blocks;
            estimate.data_bytes = blocks * size;
        }
        let (Some(&first), Some(&last)) = (self.dirty.keys().next(), self.dirty.keys().next_back())
        else {
            return estimate;
        };
        let mut levels = self.dnode.nlevels.max(1);
        let highest = self.dnode.maxblkid.max(last);
        while levels < TREE_LEVELS_MAX
            && tree_capacity(levels, self.dnode.indirect_shift).is_some_and(|cap| highest >= cap)
        {
            levels += 1;
        }
        let bits = bits_per_level(&self.dnode);
        let count = self.dirty.len() as u64;
        let indirect = 1u64 << self.dnode.indirect_shift;
        for level in 1..u32::from(levels) {
            let shift = bits * level;
            let span = last.checked_shr(shift).unwrap_or(0) - first.checked_shr(shift).unwrap_or(0);
            estimate = estimate.with_meta(count.min(span + 1), indirect);
        }
        estimate
    }

    /// Marks `blkid` as written up to the tree's depth limit.
    pub(crate) fn note_written(&mut self, blkid: u64) {
        if blkid > self.dnode.maxblkid {
            self.dnode.maxblkid = blkid;
            self.dnode_dirty = true;
        }
    }
}

/// Highest block id any tree of this object may hold, plus one (`None`: unbounded in u64).
pub(crate) fn blkid_limit(dnode: &Dnode) -> Option<u64> {
    tree_capacity(TREE_LEVELS_MAX, dnode.indirect_shift)
}

/// Rewrites level-0 block `blkid` with `edit` applied to its current contents.
pub(crate) fn modify_block(
    ctx: &mut ReadCtx<'_>,
    state: &mut ObjState,
    blkid: u64,
    edit: impl FnOnce(&mut [u8]),
) -> Result<(), ObjectError> {
    let block_size = state.dnode.data_block_size as usize;
    // Whole bytes first (a clone read through, pieces merged), so that a read error leaves
    // the entry as it was; the edit turns a clone or pieces into a copy.
    let bytes = if let Some(Dirty::Data(_)) = state.dirty.get(&blkid) {
        match state.replace(blkid, None) {
            // Copies only when a pre-write still holds the bytes (`Dirty` docs).
            Some(Dirty::Data(bytes)) => Some(Arc::unwrap_or_clone(bytes)),
            _ => None,
        }
    } else {
        block_data(ctx, state, blkid)?.bytes().map(<[u8]>::to_vec)
    };
    let mut bytes = bytes.unwrap_or_else(|| tarn_base::buf::zeroed(block_size));
    edit(&mut bytes);
    if tarn_format::compress::is_all_zero(&bytes) {
        state.set_dirty(blkid, Dirty::Hole);
    } else {
        state.set_dirty(blkid, Dirty::Data(Arc::new(bytes)));
    }
    Ok(())
}

/// Writes `source` at `within` of block `blkid` of a data object as a piece (module docs):
/// the block is clean, a hole or already pieced, and `source` is not all zeros (a zero write
/// goes through [`modify_block`], which keeps a record of zeros a hole as it always did).
/// A clean record that is not a hole is read first, through the cache, as ZFS reads a
/// block before dirtying part of it: an unreadable record fails this write and dirties
/// nothing, and the sync's merge finds a block that was readable in this txg.
fn write_piece(
    ctx: &mut ReadCtx<'_>,
    state: &mut ObjState,
    blkid: u64,
    within: usize,
    source: &[u8],
) -> Result<(), ObjectError> {
    let block_size = state.dnode.data_block_size as usize;
    if let Some(Dirty::Pieces(pieces)) = state.dirty.get_mut(&blkid) {
        let before = pieces.cost();
        pieces.insert(within, source);
        state.dirty_bytes = state.dirty_bytes - before + pieces.cost();
        state.written_ahead.remove(&blkid);
    } else {
        let over_zero = match state.dirty.get(&blkid) {
            Some(Dirty::Hole) => true,
            _ => committed_block(ctx, &state.dnode, blkid)?.is_none(),
        };
        let mut pieces = Pieces::new(block_size, over_zero);
        pieces.insert(within, source);
        state.set_dirty(blkid, Dirty::Pieces(pieces));
    }
    // P3: pieces that cover the record are the record (and not all zeros: the last piece
    // is not).
    if let Some(Dirty::Pieces(pieces)) = state.dirty.get(&blkid)
        && pieces.covers_record()
    {
        let bytes = pieces.merge(None);
        state.set_dirty(blkid, Dirty::Data(Arc::new(bytes)));
    }
    Ok(())
}

/// Writes `data` at `offset` (callers checked the range). Partial writes into the blocks of
/// an object that is not metadata (file and volume data) keep pieces ([`write_piece`]); the
/// meta-dnode, ZAPs and other metadata objects (whose blocks are walked in place,
/// `ObjectSet::with_block`) edit a copy of the block.
pub(crate) fn write(
    ctx: &mut ReadCtx<'_>,
    state: &mut ObjState,
    offset: u64,
    data: &[u8],
) -> Result<(), ObjectError> {
    let pieced = state.dnode.object_type != OBJECT_TYPE_META_DNODE
        && state.dnode.flags & DNODE_FLAG_METADATA == 0;
    let block_size = u64::from(state.dnode.data_block_size);
    let mut done = 0usize;
    while done < data.len() {
        let position = offset + done as u64;
        let blkid = position / block_size;
        let within = (position % block_size) as usize;
        let take = (data.len() - done).min(block_size as usize - within);
        let source = &data[done..done + take];
        let pieced = pieced
            && !tarn_format::compress::is_all_zero(source)
            && matches!(
                state.dirty.get(&blkid),
                None | Some(Dirty::Hole | Dirty::Pieces(_))
            );
        if take as u64 == block_size {
            let entry = if tarn_format::compress::is_all_zero(source) {
                Dirty::Hole
            } else {
                // A ready buffer of the stock: no page faults in the copy (tarn-base `stock`).
                Dirty::Data(Arc::new(tarn_base::stock::copied(source)))
            };
            state.set_dirty(blkid, entry);
        } else if pieced {
            write_piece(ctx, state, blkid, within, source)?;
        } else {
            modify_block(ctx, state, blkid, |bytes| {
                bytes[within..within + take].copy_from_slice(source);
            })?;
        }
        state.note_written(blkid);
        done += take;
    }
    Ok(())
}

/// Level-0 block `blkid` becomes `data` (exactly one block, checked by the caller), a hole
/// when it is all zeros: [`write`] of a whole block without the copy.
pub(crate) fn write_whole(state: &mut ObjState, blkid: u64, data: Vec<u8>) {
    let entry = if tarn_format::compress::is_all_zero(&data) {
        Dirty::Hole
    } else {
        Dirty::Data(Arc::new(data))
    };
    state.set_dirty(blkid, entry);
    state.note_written(blkid);
}

/// Punches `[offset, end)`: whole blocks become holes, partial blocks are zeroed.
pub(crate) fn free_range(
    ctx: &mut ReadCtx<'_>,
    state: &mut ObjState,
    offset: u64,
    end: u64,
) -> Result<(), ObjectError> {
    let block_size = u64::from(state.dnode.data_block_size);
    let mut position = offset;
    while position < end {
        let Some(found) = next_block(ctx, state, position / block_size, true)? else {
            return Ok(());
        };
        let start = position.max(found.saturating_mul(block_size));
        if start >= end {
            return Ok(());
        }
        let block_start = found * block_size;
        let block_end = block_start.saturating_add(block_size).min(end);
        if start == block_start && block_end - block_start == block_size {
            state.set_dirty(found, Dirty::Hole);
        } else {
            let from = (start - block_start) as usize;
            let to = (block_end - block_start) as usize;
            modify_block(ctx, state, found, |bytes| bytes[from..to].fill(0))?;
        }
        position = block_start.saturating_add(block_size);
        if position == u64::MAX {
            break;
        }
    }
    Ok(())
}

/// First block id `>= start` of the synced tree that holds data (`want_data`) or is a hole.
/// Uses fill counts to skip whole subtrees; restarts from the root after exhausting a node,
/// so the walk needs no stack.
fn synced_next(
    ctx: &mut ReadCtx<'_>,
    dnode: &Dnode,
    start: u64,
    want_data: bool,
) -> Result<Option<u64>, ObjectError> {
    let bits = bits_per_level(dnode);
    let top = dnode.nlevels - 1;
    let fanout = 1u128 << bits;
    let span_of = |level: u8| 1u128 << (u32::from(level) * bits);
    // The root at level `top` covers span_of(top) level-0 blocks.
    let capacity = span_of(top);
    let cap_u64 = |value: u128| u64::try_from(value).unwrap_or(u64::MAX);
    let qualifies = |bp: &BlockPtr, level: u8| {
        if want_data {
            if level == 0 {
                !bp.is_hole()
            } else {
                bp.fill > 0
            }
        } else {
            bp.is_hole() || (level > 0 && u128::from(bp.fill) < span_of(level))
        }
    };
    let indirect_size = 1u64 << dnode.indirect_shift;
    let mut start = u128::from(start);
    loop {
        if start >= capacity {
            return Ok(if want_data {
                None
            } else {
                Some(cap_u64(start))
            });
        }
        if !qualifies(&dnode.root, top) {
            return Ok(if want_data {
                None
            } else {
                Some(cap_u64(capacity))
            });
        }
        let mut bp = dnode.root;
        let mut level = top;
        let mut base = 0u128;
        let exhausted = loop {
            if level == 0 {
                return Ok(Some(cap_u64(start.max(base))));
            }
            if bp.is_hole() {
                // Only a hole search reaches a hole indirect: its first block is the answer.
                assert!(
                    !want_data,
                    "data search descended into a hole (object {})",
                    ctx.object.0
                );
                return Ok(Some(cap_u64(start.max(base))));
            }
            let block = read_tree_block(
                ctx.store,
                Some(ctx.cache),
                ctx.object,
                &bp,
                level,
                indirect_size,
            )?;
            let child_span = span_of(level - 1);
            let first = (start - base) / child_span;
            let mut found = None;
            for index in first..fanout {
                let child = child_bp(ctx.object, &block, index as u64)?;
                if qualifies(&child, level - 1) {
                    found = Some((index, child));
                    break;
                }
            }
            match found {
                None => break base + fanout * child_span,
                Some((index, child)) => {
                    base += index * child_span;
                    start = start.max(base);
                    bp = child;
                    level -= 1;
                }
            }
        };
        start = exhausted;
    }
}

/// First block id `>= start` that holds data (`want_data`) or is a hole, counting dirty
/// blocks. A hole search always finds one (past the end everything is a hole).
pub(crate) fn next_block(
    ctx: &mut ReadCtx<'_>,
    state: &ObjState,
    start: u64,
    want_data: bool,
) -> Result<Option<u64>, ObjectError> {
    let mut from = start;
    loop {
        let synced = synced_next(ctx, &state.dnode, from, want_data)?;
        let limit = synced.unwrap_or(u64::MAX);
        for (&blkid, entry) in state.dirty.range(from..=limit) {
            let is_data = entry.is_data();
            if is_data == want_data {
                return Ok(Some(blkid));
            }
        }
        let Some(candidate) = synced else {
            return Ok(None);
        };
        match state.dirty.get(&candidate) {
            // A dirty entry of the other kind overrides the synced block; keep looking.
            Some(entry) if entry.is_data() != want_data => {
                if candidate == u64::MAX {
                    return Ok(None);
                }
                from = candidate + 1;
            }
            _ => return Ok(Some(candidate)),
        }
    }
}

/// Write properties for a block of `dnode` at `level`.
pub(crate) fn write_props(
    config: &ObjsetWriteConfig,
    dnode: &Dnode,
    level: u8,
    level0_type: BlockType,
    fill: u64,
) -> WriteProps {
    let block_type = if level > 0 {
        BlockType::Indirect
    } else if dnode.flags & DNODE_FLAG_METADATA != 0 && level0_type == BlockType::Data {
        BlockType::Metadata
    } else {
        level0_type
    };
    let role = if block_type == BlockType::Data {
        BlockRole::Data
    } else if level0_type == BlockType::Dnode {
        BlockRole::Critical
    } else if level == 1 && dnode.flags & DNODE_FLAG_METADATA == 0 && level0_type == BlockType::Data
    {
        BlockRole::DataIndirect
    } else {
        BlockRole::Metadata
    };
    WriteProps {
        block_type,
        level,
        checksum: dnode.checksum_override().unwrap_or(config.checksum),
        compression: dnode.compression_override().unwrap_or(config.compression),
        copies: config.copies_for(role),
        fill,
        special_small_blocks: config.special_small_blocks,
    }
}

/// The new pointer of level-0 block `blkid` that is a clone of `source` (block cloning):
/// a new reference to the same bytes, born in the syncing txg.
fn clone_level0(
    store: &mut dyn BlockStore,
    object: ObjectId,
    blkid: u64,
    block_size: u64,
    source: &BlockPtr,
) -> Result<BlockPtr, ObjectError> {
    assert_eq!(
        u64::from(source.lsize),
        block_size,
        "a cloned block's size is the object's block size"
    );
    store.clone_block(source).map_err(|error| ObjectError::Io {
        object,
        offset: blkid.saturating_mul(block_size),
        source: error,
    })
}

/// One dirty level-0 block at sync.
struct Level0 {
    object: ObjectId,
    blkid: u64,
    block_size: u64,
    props: WriteProps,
    /// The block written ahead for this txg, if any.
    ahead: Option<BlockPtr>,
}

impl Level0 {
    /// The block's new pointer: written, adopted, cloned or a hole. Pieces are merged here
    /// over their base, `previous` (the committed block, read through the cache; the write
    /// that made them read it in this txg). A base that cannot be read now (it went bad
    /// since) fails the sync as any unreadable block read at sync does.
    fn sync(
        self,
        store: &mut dyn BlockStore,
        cache: &mut BlockCache,
        entry: Dirty,
        previous: &BlockPtr,
    ) -> Result<BlockPtr, ObjectError> {
        let offset = self.blkid.saturating_mul(self.block_size);
        let txg = store.txg();
        let whole = matches!(entry, Dirty::Data(_));
        let bytes = match entry {
            Dirty::Hole => return Ok(BlockPtr::hole(txg)),
            Dirty::Clone(source) => {
                let size = self.block_size;
                return clone_level0(store, self.object, self.blkid, size, &source);
            }
            Dirty::Data(bytes) => bytes,
            Dirty::Pieces(pieces) => {
                if let Some(bp) = self.adopt(store) {
                    return Ok(bp);
                }
                let base = if pieces.over_zero() || previous.is_hole() {
                    None
                } else {
                    let size = self.block_size;
                    let read =
                        read_tree_block(&*store, Some(cache), self.object, previous, 0, size);
                    Some(read.map_err(|error| error.at_offset(offset))?)
                };
                Arc::new(pieces.merge(base.as_deref().map(Vec::as_slice)))
            }
        };
        if let Some(bp) = self.adopt(store) {
            cache.insert_synced(&bp, bytes, whole);
            return Ok(bp);
        }
        write_cached(store, cache, self.object, offset, bytes, &self.props, whole)
    }

    /// The block written ahead, adopted by the store.
    fn adopt(&self, store: &mut dyn BlockStore) -> Option<BlockPtr> {
        let bp = self.ahead?;
        assert_eq!(
            u64::from(bp.lsize),
            self.block_size,
            "written-ahead block's size"
        );
        store.adopt_block(&bp);
        Some(bp)
    }
}

/// Frees `bp` in this txg, and drops its cached bytes unless the store keeps the block
/// readable (a snapshot, a clone): asked before the free, which may drop a clone's
/// reference.
pub(crate) fn forget_freed(store: &mut dyn BlockStore, cache: &mut BlockCache, bp: &BlockPtr) {
    let kept = store.keeps_freed(bp);
    store.free_block(bp);
    if !kept && !bp.is_hole() {
        cache.forget(bp);
    }
}

/// Writes every dirty block of `state` bottom-up, frees each replaced block once, grows the
/// tree when `maxblkid` outgrew it, and updates the root, nlevels and used bytes.
pub(crate) fn sync_tree(
    store: &mut dyn BlockStore,
    cache: &mut BlockCache,
    object: ObjectId,
    state: &mut ObjState,
    config: &ObjsetWriteConfig,
    level0_type: BlockType,
) -> Result<(), ObjectError> {
    let txg = store.txg();
    let old = state.dnode.clone();
    let mut nlevels = old.nlevels;
    while tree_capacity(nlevels, old.indirect_shift).is_some_and(|cap| old.maxblkid >= cap) {
        nlevels += 1;
    }
    assert!(
        nlevels <= TREE_LEVELS_MAX,
        "I3: object {} needs {nlevels} levels",
        object.0
    );
    if state.dirty.is_empty() && nlevels == old.nlevels {
        return Ok(());
    }
    let dirty = std::mem::take(&mut state.dirty);
    let mut written_ahead = std::mem::take(&mut state.written_ahead);
    state.dirty_bytes = 0;
    state.dirty_blocks = 0;
    let old_top = old.nlevels - 1;
    let new_top = nlevels - 1;
    let bits = bits_per_level(&old);
    let fanout = 1u64 << bits;
    let block_size = u64::from(old.data_block_size);
    let mut frees: Vec<BlockPtr> = Vec::new();
    let mut added = 0u64;
    let mut changed: BTreeMap<u64, BlockPtr> = BTreeMap::new();
    for (blkid, entry) in dirty {
        let previous = synced_bp(
            &mut ReadCtx {
                store: &*store,
                cache,
                object,
            },
            &old,
            0,
            blkid,
        )?;
        let level0 = Level0 {
            object,
            blkid,
            block_size,
            props: write_props(config, &old, 0, level0_type, 1),
            // Written ahead for this txg (ZFS's override): adopted as it is.
            ahead: written_ahead.remove(&blkid).filter(|bp| bp.birth == txg),
        };
        let new = level0.sync(store, cache, entry, &previous)?;
        assert!(
            new.is_hole() || new.birth == txg,
            "new block born in txg {} not {txg}",
            new.birth
        );
        added += new.asize_total();
        if !previous.is_hole() {
            frees.push(previous);
        }
        changed.insert(blkid, new);
    }
    for level in 1..=new_top {
        let mut parents: BTreeMap<u64, Vec<(u64, BlockPtr)>> = BTreeMap::new();
        for (blkid, bp) in changed {
            parents
                .entry(blkid >> bits)
                .or_default()
                .push((blkid & (fanout - 1), bp));
        }
        if level > old_top {
            parents.entry(0).or_default();
        }
        let mut next = BTreeMap::new();
        for (parent, kids) in parents {
            let (mut children, previous) = if level <= old_top {
                let mut ctx = ReadCtx {
                    store: &*store,
                    cache,
                    object,
                };
                let previous = synced_bp(&mut ctx, &old, level, parent)?;
                let children = if previous.is_hole() {
                    vec![BlockPtr::hole(Txg(0)); fanout as usize]
                } else {
                    let size = 1u64 << old.indirect_shift;
                    let block = read_tree_block(
                        ctx.store,
                        Some(ctx.cache),
                        object,
                        &previous,
                        level,
                        size,
                    )?;
                    children_of(object, &block, fanout)?
                };
                (children, previous)
            } else {
                let mut children = vec![BlockPtr::hole(Txg(0)); fanout as usize];
                if parent == 0 && level == old_top + 1 {
                    children[0] = old.root;
                }
                (children, BlockPtr::hole(Txg(0)))
            };
            for (index, bp) in kids {
                children[index as usize] = bp;
            }
            let fill: u64 = children.iter().map(|child| child.fill).sum();
            let new = if fill == 0 {
                BlockPtr::hole(txg)
            } else {
                let mut writer = tarn_format::wire::Writer::new();
                for child in &children {
                    child.encode_into(&mut writer);
                }
                let props = write_props(config, &old, level, level0_type, fill);
                let indirect = Arc::new(writer.finish());
                let bp = write_cached(store, cache, object, 0, indirect, &props, false)?;
                assert_eq!(
                    bp.fill, fill,
                    "store must keep the fill count of indirect blocks"
                );
                bp
            };
            added += new.asize_total();
            if !previous.is_hole() {
                frees.push(previous);
            }
            next.insert(parent, new);
        }
        changed = next;
    }
    assert!(
        changed.len() == 1 && changed.contains_key(&0),
        "I3: object {} sync ended with {} top-level pointers",
        object.0,
        changed.len()
    );
    let root = changed.remove(&0).unwrap_or_default();
    let freed: u64 = frees.iter().map(BlockPtr::asize_total).sum();
    let used = old
        .used_bytes
        .checked_add(added)
        .and_then(|sum| sum.checked_sub(freed));
    let Some(used) = used else {
        panic!(
            "I4: object {} used bytes {} + {added} - {freed} underflows",
            object.0, old.used_bytes
        );
    };
    for bp in &frees {
        forget_freed(store, cache, bp);
    }
    state.dnode.root = if root.is_hole() {
        BlockPtr::hole(root.birth)
    } else {
        root
    };
    state.dnode.nlevels = nlevels;
    state.dnode.used_bytes = used;
    state.dnode_dirty = true;
    Ok(())
}

/// Iterative walk over every non-hole block pointer of one tree, parents before children,
/// with an explicit stack of at most `TREE_LEVELS_MAX` frames.
pub(crate) struct TreeWalk {
    object: ObjectId,
    indirect_shift: u8,
    data_block_size: u64,
    root: Option<BlockPtr>,
    top: u8,
    stack: Vec<Frame>,
    /// Subtrees whose block pointer was born in this txg or earlier are skipped.
    born_after: Option<Txg>,
}

struct Frame {
    level: u8,
    blkid: u64,
    children: Vec<BlockPtr>,
    next: usize,
}

impl TreeWalk {
    pub(crate) fn new(object: ObjectId, dnode: &Dnode) -> Self {
        TreeWalk {
            object,
            indirect_shift: dnode.indirect_shift,
            data_block_size: u64::from(dnode.data_block_size),
            root: Some(dnode.root),
            top: dnode.nlevels - 1,
            stack: Vec::with_capacity(usize::from(TREE_LEVELS_MAX)),
            born_after: None,
        }
    }

    /// A walk that skips every block born in `txg` or earlier, with everything beneath it:
    /// copy-on-write rewrites every ancestor of a block it writes, so a parent born in
    /// `txg` or earlier has no child born later.
    pub(crate) fn born_after(mut self, txg: Option<Txg>) -> Self {
        self.born_after = txg;
        self
    }

    /// The next non-hole block pointer and where it sits, or `None` at the end. Indirect
    /// blocks are read (without caching) before they are returned, so the caller may free
    /// each block as soon as it is returned.
    pub(crate) fn next(
        &mut self,
        store: &dyn BlockStore,
    ) -> Result<Option<(BlockPtr, BlockContext)>, ObjectError> {
        let bits = u32::from(self.indirect_shift - BLKPTR_SHIFT);
        loop {
            let (bp, level, blkid) = if let Some(root) = self.root.take() {
                (root, self.top, 0)
            } else {
                let Some(frame) = self.stack.last_mut() else {
                    return Ok(None);
                };
                if frame.next == frame.children.len() {
                    self.stack.pop();
                    continue;
                }
                let index = frame.next;
                frame.next += 1;
                let blkid = (frame.blkid << bits) | index as u64;
                (frame.children[index], frame.level - 1, blkid)
            };
            if bp.is_hole() || self.born_after.is_some_and(|txg| bp.birth <= txg) {
                continue;
            }
            if level > 0 {
                let size = 1u64 << self.indirect_shift;
                let block = read_tree_block(store, None, self.object, &bp, level, size)?;
                let children = children_of(self.object, &block, 1u64 << bits)?;
                let fill: u64 = children.iter().map(|child| child.fill).sum();
                if fill != bp.fill {
                    return Err(corrupt(
                        self.object,
                        "fill count does not match the children",
                    ));
                }
                self.stack.push(Frame {
                    level,
                    blkid,
                    children,
                    next: 0,
                });
                assert!(
                    self.stack.len() <= usize::from(TREE_LEVELS_MAX),
                    "walk stack overflow"
                );
            } else if u64::from(bp.lsize) != self.data_block_size {
                return Err(corrupt(
                    self.object,
                    "data block size does not match the dnode",
                ));
            }
            let context = BlockContext {
                object: self.object,
                level,
                blkid,
            };
            return Ok(Some((bp, context)));
        }
    }
}
