//! Reading records together and ahead of a sequential reader.
//!
//! A read of an object's data first gathers the synced level-0 blocks it covers that are
//! neither dirty nor cached, and reads them with one [`BlockStore::read_blocks`] call, which
//! a pool over devices with their own I/O threads serves with several blocks in flight (and
//! every block's columns in flight together). When the read starts where the previous read
//! of the same object ended ([`Streams`]), the records after it, up to
//! `READAHEAD_BYTES_MAX` (and at most `BLOCKS_IN_FLIGHT_MAX` records), join the same batch.
//! Everything read goes into the clean-block cache only after the store verified it (the
//! store returns nothing else), so the reader that reaches those records later gets verified
//! bytes from the cache. A record that fails to read here is left out: the reader's own read
//! of it reports the error with its usual context.
//!
//! The batch is issued only when a record the caller asked for is missing from the cache,
//! or when at least half of the read-ahead window is: a sequential reader then refills the
//! window in batches of several records instead of one record per request. Stores whose
//! reads are synchronous (`BlockStore::reads_in_parallel` false: the simulator, in-memory
//! test stores) get none of this, so their runs issue exactly the reads they always did.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use tarn_base::ObjectId;
use tarn_base::limits::{BLOCKS_IN_FLIGHT_MAX, READAHEAD_BYTES_MAX, READAHEAD_STREAMS_MAX};
use tarn_format::BlockPtr;

use crate::tree::{ObjState, ReadCtx, synced_bp};

/// Where the last read of each recently read object ended, to recognise sequential access.
/// At most `READAHEAD_STREAMS_MAX` objects; the least recently read is forgotten first.
#[derive(Debug, Default)]
pub(crate) struct Streams {
    /// Object -> (end of its last read, tick of that read).
    ends: BTreeMap<u64, (u64, u64)>,
    tick: u64,
}

impl Streams {
    /// Records a read of `len` bytes at `offset` of `object`; returns whether it continues
    /// the previous read of that object (or starts the object), i.e. whether to read ahead.
    pub(crate) fn note(&mut self, object: ObjectId, offset: u64, len: u64) -> bool {
        self.tick += 1;
        let sequential = offset == 0
            || self
                .ends
                .get(&object.0)
                .is_some_and(|&(end, _)| end == offset);
        if !self.ends.contains_key(&object.0) && self.ends.len() >= READAHEAD_STREAMS_MAX {
            let oldest = self
                .ends
                .iter()
                .min_by_key(|(_, (_, tick))| *tick)
                .map(|(&id, _)| id);
            if let Some(oldest) = oldest {
                self.ends.remove(&oldest);
            }
        }
        self.ends
            .insert(object.0, (offset.saturating_add(len), self.tick));
        assert!(
            self.ends.len() <= READAHEAD_STREAMS_MAX,
            "read-ahead streams bounded"
        );
        sequential
    }
}

/// Reads into the cache, in one batch, the records of `[offset, offset + len)` and (with
/// `ahead`) the records after them (module docs). Never fails: what it cannot read is left
/// for the caller's read to report.
pub(crate) fn prefetch(
    ctx: &mut ReadCtx<'_>,
    state: &ObjState,
    offset: u64,
    len: u64,
    ahead: bool,
) {
    if len == 0 || !ctx.store.reads_in_parallel() {
        return;
    }
    let block_size = u64::from(state.dnode.data_block_size);
    assert!(block_size > 0, "a data object has a block size");
    let first = offset / block_size;
    let last = (offset.saturating_add(len) - 1) / block_size;
    let window = if ahead {
        (READAHEAD_BYTES_MAX / block_size).clamp(1, BLOCKS_IN_FLIGHT_MAX as u64)
    } else {
        0
    };
    let wanted = missing(ctx, state, first..last + 1);
    let ahead_missing = missing(ctx, state, last + 1..last + 1 + window);
    let mut batch = wanted;
    if !batch.is_empty() || ahead_missing.len() as u64 * 2 >= window.max(1) {
        batch.extend(ahead_missing);
    }
    if batch.len() < 2 {
        // One record gains nothing from a batch: the caller's own read fetches it.
        return;
    }
    let results = ctx.store.read_blocks(&batch);
    assert_eq!(results.len(), batch.len(), "one result per block");
    for (bp, result) in batch.iter().zip(results) {
        if let Ok(bytes) = result
            && bytes.len() as u64 == block_size
        {
            ctx.cache.insert(bp, Arc::new(bytes));
        }
    }
}

/// The synced block pointers of the records `blkids` that are not dirty, not holes and not
/// cached, and that are what the tree says they are (level 0, the object's block size, born
/// no later than the store's txg; anything else is left to the caller's checked read).
fn missing(ctx: &mut ReadCtx<'_>, state: &ObjState, blkids: Range<u64>) -> Vec<BlockPtr> {
    let block_size = u64::from(state.dnode.data_block_size);
    let mut bps = Vec::new();
    for blkid in blkids {
        if blkid > state.dnode.maxblkid {
            break;
        }
        if state.dirty.contains_key(&blkid) {
            continue;
        }
        let Ok(bp) = synced_bp(ctx, &state.dnode, 0, blkid) else {
            break;
        };
        let usable = !bp.is_hole()
            && bp.level == 0
            && u64::from(bp.lsize) == block_size
            && bp.birth <= ctx.store.txg();
        if usable && !ctx.cache.contains(&bp) {
            bps.push(bp);
        }
    }
    bps
}
