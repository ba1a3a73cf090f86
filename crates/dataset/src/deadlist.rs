//! Dead lists (ZFS's `dsl_deadlist`): the blocks a snapshot still holds that the next
//! snapshot (or the head) no longer references, kept in buckets keyed by birth txg so that
//! destroying a snapshot frees exactly the blocks only it held, in time proportional to the
//! buckets it visits and the blocks it frees, never to the dataset's size.
//!
//! ```text
//!  dead list = MOS ZAP   "%016x" bucket key -> [u64 block list object; 1..=128]
//!  block list = MOS object of type BLOCK_LIST: 128-byte block pointers, appended;
//!               bonus: count, deflated bytes, logical bytes, physical bytes (u64 each)
//! ```
//! A block born in txg `b` and killed while the dataset has snapshots with txgs
//! `t1 < t2 < ... < tn` (`b <= tn`) goes to the bucket keyed by the smallest `ti >= b`: the
//! first snapshot that holds it. Buckets of one key may hold several block lists (merged from
//! another dead list by moving object ids, never by copying block pointers). The kill rule is
//! [`KillStore`], a `BlockStore` wrapper the sync of a dataset with snapshots writes through.

use tarn_base::{ObjectId, Txg};
use tarn_format::BlockPtr;
use tarn_format::wire::{Reader, Writer};
use tarn_objects::ObjectSet;
use tarn_zio::{BlockStore, WriteProps, ZioError};

use crate::DatasetError;

/// Object type of a block list (an array of block pointers) in the MOS.
pub const TYPE_BLOCK_LIST: u8 = 19;
/// Bonus length of a block list: count, deflated, logical and physical bytes.
const LIST_BONUS_LEN: u16 = 32;
/// Data block size of a block list object (128 block pointers per block).
const LIST_BLOCK_SIZE: u32 = 16 << 10;
/// Encoded size of one block pointer.
const BP_SIZE: u64 = 128;
/// Most block lists one bucket names (a ZAP value holds 1024 bytes).
const LISTS_PER_BUCKET_MAX: usize = 128;
/// Most block pointers one list may claim (a larger count on disk is corruption).
const LIST_ENTRIES_MAX: u64 = 1 << 40;

/// Space of a set of dead blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeadSpace {
    /// Block pointers.
    pub blocks: u64,
    /// Deflated allocated bytes (what `used` counts).
    pub used: u64,
    /// Logical bytes.
    pub logical: u64,
    /// Physical bytes.
    pub physical: u64,
}

impl DeadSpace {
    fn add(&mut self, other: DeadSpace) {
        self.blocks += other.blocks;
        self.used += other.used;
        self.logical += other.logical;
        self.physical += other.physical;
    }

    fn of(bps: &[BlockPtr], sizer: &dyn Fn(&BlockPtr) -> u64) -> DeadSpace {
        let mut space = DeadSpace::default();
        for bp in bps {
            space.blocks += 1;
            space.used += sizer(bp);
            space.logical += u64::from(bp.lsize);
            space.physical += u64::from(bp.psize);
        }
        space
    }

    fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        for value in [self.blocks, self.used, self.logical, self.physical] {
            w.u64(value);
        }
        w.finish()
    }

    fn decode(bytes: &[u8]) -> Result<DeadSpace, DatasetError> {
        let corrupt = |e: tarn_format::FormatError| DatasetError::Corrupt(e.to_string());
        let mut r = Reader::new(bytes, "block list bonus");
        let mut next = || r.u64().map_err(corrupt);
        let space = DeadSpace {
            blocks: next()?,
            used: next()?,
            logical: next()?,
            physical: next()?,
        };
        if space.blocks > LIST_ENTRIES_MAX {
            return Err(DatasetError::Corrupt(format!(
                "block list claims {} entries",
                space.blocks
            )));
        }
        Ok(space)
    }
}

/// A dead list bucket: its key (a birth-txg bound) and its block lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Blocks born in txgs up to this one (and after the previous snapshot's).
    pub key: u64,
    /// Block list objects.
    pub lists: Vec<ObjectId>,
}

fn bucket_name(key: u64) -> String {
    format!("{key:016x}")
}

fn decode_lists(name: &str, value: &[u8]) -> Result<Vec<ObjectId>, DatasetError> {
    let lists = value.len() / 8;
    if value.is_empty() || !value.len().is_multiple_of(8) || lists > LISTS_PER_BUCKET_MAX {
        return Err(DatasetError::Corrupt(format!(
            "dead list bucket {name} has a {}-byte value",
            value.len()
        )));
    }
    Ok(value
        .chunks_exact(8)
        .map(|c| {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            ObjectId(u64::from_le_bytes(word))
        })
        .collect())
}

fn encode_lists(lists: &[ObjectId]) -> Vec<u8> {
    assert!(
        !lists.is_empty() && lists.len() <= LISTS_PER_BUCKET_MAX,
        "D1: a bucket names 1..={LISTS_PER_BUCKET_MAX} block lists, not {}",
        lists.len()
    );
    lists.iter().flat_map(|id| id.0.to_le_bytes()).collect()
}

/// Makes a new, empty dead list.
pub fn create(mos: &mut ObjectSet, store: &dyn BlockStore) -> Result<ObjectId, DatasetError> {
    Ok(mos.zap_create(store, tarn_format::dnode::OBJECT_TYPE_ZAP)?)
}

/// The buckets of `list`, by key.
pub fn buckets(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    list: ObjectId,
) -> Result<Vec<Bucket>, DatasetError> {
    let mut out = Vec::new();
    for (name, value) in mos.zap_list_sorted(store, list)? {
        let key = u64::from_str_radix(&name, 16)
            .map_err(|_| DatasetError::Corrupt(format!("dead list bucket key '{name}'")))?;
        out.push(Bucket {
            key,
            lists: decode_lists(&name, &value)?,
        });
    }
    out.sort_by_key(|b| b.key);
    Ok(out)
}

fn list_space(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    list: ObjectId,
) -> Result<DeadSpace, DatasetError> {
    DeadSpace::decode(&mos.bonus(store, list)?)
}

/// Appends `bps` (all of one bucket `key`) to `list`.
pub fn insert(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    list: ObjectId,
    key: u64,
    bps: &[BlockPtr],
    sizer: &dyn Fn(&BlockPtr) -> u64,
) -> Result<DeadSpace, DatasetError> {
    let added = DeadSpace::of(bps, sizer);
    if bps.is_empty() {
        return Ok(added);
    }
    let name = bucket_name(key);
    let target = match mos.zap_lookup(store, list, &name)? {
        Some(value) => decode_lists(&name, &value)?[0],
        None => {
            let id =
                mos.allocate_object(store, TYPE_BLOCK_LIST, LIST_BLOCK_SIZE, 0, LIST_BONUS_LEN)?;
            mos.set_metadata(store, id, true)?;
            mos.set_bonus(store, id, &DeadSpace::default().encode())?;
            mos.zap_insert(store, list, &name, &encode_lists(&[id]))?;
            id
        }
    };
    let mut space = list_space(mos, store, target)?;
    let mut w = Writer::new();
    for bp in bps {
        bp.encode_into(&mut w);
    }
    mos.write(store, target, space.blocks * BP_SIZE, &w.finish())?;
    space.add(added);
    mos.set_bonus(store, target, &space.encode())?;
    Ok(added)
}

/// Every block pointer of block list `list`.
fn read_list(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    list: ObjectId,
) -> Result<Vec<BlockPtr>, DatasetError> {
    let space = list_space(mos, store, list)?;
    let mut out = Vec::new();
    let chunk = u64::from(LIST_BLOCK_SIZE);
    let total = space.blocks * BP_SIZE;
    let mut offset = 0;
    while offset < total {
        let len = chunk.min(total - offset);
        let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
        mos.read(store, list, offset, &mut buf)?;
        let mut r = Reader::new(&buf, "dead list entry");
        while r.remaining() > 0 {
            let bp = BlockPtr::decode(&mut r)
                .map_err(|e| DatasetError::Corrupt(format!("dead list entry: {e}")))?;
            out.push(bp);
        }
        offset += len;
    }
    Ok(out)
}

/// Space of the buckets of `list` whose key is in `(after, upto]`.
pub fn space_in(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    list: ObjectId,
    after: u64,
    upto: u64,
) -> Result<DeadSpace, DatasetError> {
    let mut space = DeadSpace::default();
    for bucket in buckets(mos, store, list)? {
        if bucket.key > after && bucket.key <= upto {
            for id in bucket.lists {
                space.add(list_space(mos, store, id)?);
            }
        }
    }
    Ok(space)
}

/// Removes the buckets of `list` whose key is in `(after, upto]` and returns their blocks
/// (for the caller to free) and their space.
pub fn take_range(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    list: ObjectId,
    after: u64,
    upto: u64,
) -> Result<(Vec<BlockPtr>, DeadSpace), DatasetError> {
    let mut blocks = Vec::new();
    let mut space = DeadSpace::default();
    for bucket in buckets(mos, store, list)? {
        if bucket.key <= after || bucket.key > upto {
            continue;
        }
        for id in &bucket.lists {
            space.add(list_space(mos, store, *id)?);
            blocks.extend(read_list(mos, store, *id)?);
            mos.free_object(store, *id)?;
        }
        mos.zap_remove(store, list, bucket_name(bucket.key))?;
    }
    assert_eq!(
        blocks.len() as u64,
        space.blocks,
        "D2: a block list holds as many entries as its bonus counts"
    );
    Ok((blocks, space))
}

/// Moves every bucket of `from` into `into` (block list ids only, no block pointer is
/// copied unless a bucket would name too many lists) and frees `from`.
pub fn merge(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    from: ObjectId,
    into: ObjectId,
) -> Result<(), DatasetError> {
    assert_ne!(from, into, "D3: a dead list is merged into another one");
    for bucket in buckets(mos, store, from)? {
        let name = bucket_name(bucket.key);
        let mut lists = match mos.zap_lookup(store, into, &name)? {
            Some(value) => decode_lists(&name, &value)?,
            None => Vec::new(),
        };
        for id in bucket.lists {
            if lists.len() < LISTS_PER_BUCKET_MAX {
                lists.push(id);
                continue;
            }
            // Rare: a bucket merged into 128 times. Copy this list's entries into the first.
            let bps = read_list(mos, store, id)?;
            let space = list_space(mos, store, id)?;
            let target = lists[0];
            let mut have = list_space(mos, store, target)?;
            let mut w = Writer::new();
            for bp in &bps {
                bp.encode_into(&mut w);
            }
            mos.write(store, target, have.blocks * BP_SIZE, &w.finish())?;
            have.add(space);
            mos.set_bonus(store, target, &have.encode())?;
            mos.free_object(store, id)?;
        }
        mos.zap_update(store, into, &name, &encode_lists(&lists))?;
    }
    mos.free_object(store, from)?;
    Ok(())
}

/// Frees `list` and its block lists, returning every block they named (for the caller to
/// free, or to keep when they are referenced again) and their space.
pub fn destroy(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    list: ObjectId,
) -> Result<(Vec<BlockPtr>, DeadSpace), DatasetError> {
    let taken = take_range(mos, store, list, 0, u64::MAX)?;
    mos.free_object(store, list)?;
    Ok(taken)
}

/// Every block of `list` with the key of its bucket (for checkers).
pub fn entries(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    list: ObjectId,
) -> Result<Vec<(u64, BlockPtr)>, DatasetError> {
    let mut out = Vec::new();
    for bucket in buckets(mos, store, list)? {
        for id in bucket.lists {
            out.extend(
                read_list(mos, store, id)?
                    .into_iter()
                    .map(|bp| (bucket.key, bp)),
            );
        }
    }
    Ok(out)
}

/// The bucket a block born in `birth` goes to: the txg of the first snapshot (of those with
/// txgs `snapshot_txgs`, ascending) that holds it, or `None` when no snapshot does (the block
/// is freed).
#[must_use]
pub fn bucket_of(snapshot_txgs: &[Txg], birth: Txg) -> Option<u64> {
    debug_assert!(snapshot_txgs.windows(2).all(|w| w[0] < w[1]));
    let at = snapshot_txgs.partition_point(|t| *t < birth);
    snapshot_txgs.get(at).map(|t| t.0)
}

/// The block-kill rule: a `BlockStore` that frees a block no snapshot holds and keeps the
/// others (with their bucket) for the dataset's dead list. Everything else passes through.
pub struct KillStore<'a> {
    inner: &'a mut dyn BlockStore,
    snapshot_txgs: &'a [Txg],
    dead: Vec<(u64, BlockPtr)>,
}

impl<'a> KillStore<'a> {
    /// A kill store over `inner` for a dataset whose snapshots have txgs `snapshot_txgs`
    /// (ascending).
    pub fn new(inner: &'a mut dyn BlockStore, snapshot_txgs: &'a [Txg]) -> Self {
        assert!(
            snapshot_txgs.windows(2).all(|w| w[0] < w[1]),
            "D4: snapshot txgs ascend"
        );
        KillStore {
            inner,
            snapshot_txgs,
            dead: Vec::new(),
        }
    }

    /// The kept blocks, grouped by bucket key (ascending).
    #[must_use]
    pub fn into_dead(mut self) -> Vec<(u64, Vec<BlockPtr>)> {
        self.dead.sort_by_key(|(key, _)| *key);
        let mut out: Vec<(u64, Vec<BlockPtr>)> = Vec::new();
        for (key, bp) in self.dead {
            match out.last_mut() {
                Some((last, bps)) if *last == key => bps.push(bp),
                _ => out.push((key, vec![bp])),
            }
        }
        out
    }
}

impl BlockStore for KillStore<'_> {
    fn txg(&self) -> Txg {
        self.inner.txg()
    }

    fn write_block(&mut self, data: &[u8], props: &WriteProps) -> Result<BlockPtr, ZioError> {
        self.inner.write_block(data, props)
    }

    fn write_block_shared(
        &mut self,
        data: &std::sync::Arc<Vec<u8>>,
        props: &WriteProps,
    ) -> Result<BlockPtr, ZioError> {
        self.inner.write_block_shared(data, props)
    }

    fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        self.inner.read_block(bp)
    }

    fn read_blocks(&self, bps: &[BlockPtr]) -> Vec<Result<Vec<u8>, ZioError>> {
        self.inner.read_blocks(bps)
    }

    fn read_block_l2(&self, bp: &BlockPtr, feed_l2: bool) -> Result<Vec<u8>, ZioError> {
        self.inner.read_block_l2(bp, feed_l2)
    }

    fn read_blocks_l2(&self, bps: &[BlockPtr], feed_l2: bool) -> Vec<Result<Vec<u8>, ZioError>> {
        self.inner.read_blocks_l2(bps, feed_l2)
    }

    fn reads_in_parallel(&self) -> bool {
        self.inner.reads_in_parallel()
    }

    fn free_block(&mut self, bp: &BlockPtr) {
        if bp.is_hole() {
            self.inner.free_block(bp);
            return;
        }
        assert!(
            bp.birth <= self.inner.txg(),
            "D5: a freed block was born before the syncing txg"
        );
        match bucket_of(self.snapshot_txgs, bp.birth) {
            Some(key) => self.dead.push((key, *bp)),
            None => self.inner.free_block(bp),
        }
    }

    fn keeps_freed(&self, bp: &BlockPtr) -> bool {
        let dead = !bp.is_hole() && bucket_of(self.snapshot_txgs, bp.birth).is_some();
        dead || self.inner.keeps_freed(bp)
    }

    /// A clone is born in this txg (its pointer's birth), so no snapshot holds it yet: the
    /// dead lists see it only when it is freed, by that birth, as any new block.
    fn adopt_block(&mut self, bp: &BlockPtr) {
        self.inner.adopt_block(bp);
    }

    fn clone_block(&mut self, bp: &BlockPtr) -> Result<BlockPtr, ZioError> {
        self.inner.clone_block(bp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_goes_to_the_first_snapshot_that_holds_it() {
        let txgs = [Txg(5), Txg(9), Txg(20)];
        assert_eq!(bucket_of(&txgs, Txg(1)), Some(5));
        assert_eq!(bucket_of(&txgs, Txg(5)), Some(5));
        assert_eq!(bucket_of(&txgs, Txg(6)), Some(9));
        assert_eq!(bucket_of(&txgs, Txg(20)), Some(20));
        assert_eq!(bucket_of(&txgs, Txg(21)), None);
        assert_eq!(bucket_of(&[], Txg(1)), None);
    }

    #[test]
    fn bucket_values_round_trip_and_garbage_is_an_error() {
        let lists = [ObjectId(7), ObjectId(9)];
        let bytes = encode_lists(&lists);
        assert_eq!(decode_lists("k", &bytes).unwrap(), lists);
        assert!(decode_lists("k", &bytes[..5]).is_err());
        assert!(decode_lists("k", &[]).is_err());
        assert!(DeadSpace::decode(&[0u8; 31]).is_err());
        let mut huge = DeadSpace::default().encode();
        huge[7] = 0xff;
        assert!(DeadSpace::decode(&huge).is_err());
    }
}
