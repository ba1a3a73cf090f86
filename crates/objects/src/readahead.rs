//! Reading records together and ahead of a sequential reader.
//!
//! A read of an object's data first gathers the synced level-0 blocks it covers that are
//! neither dirty nor cached, and reads them with one [`BlockStore::read_blocks`] call, which
//! a pool over devices with their own I/O threads serves with several blocks in flight (and
//! every block's columns in flight together). When the read starts where the previous read
//! of the same object ended ([`Streams`]), the records after it, up to
//! `READAHEAD_BYTES_MAX` (and at most `READS_IN_FLIGHT_MAX` records), join the same batch.
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
use tarn_base::limits::{READAHEAD_BYTES_MAX, READAHEAD_STREAMS_MAX, READS_IN_FLIGHT_MAX};
use tarn_format::BlockPtr;
use tarn_zio::ZioError;

use crate::cache::CacheDomain;
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
    let Some((batch, feed_l2)) = choose(ctx, state, offset, len, ahead, 2) else {
        return;
    };
    let results = ctx.store.read_blocks_l2(&batch, feed_l2);
    fill(
        ctx.cache.domain(),
        &batch,
        results,
        u64::from(state.dnode.data_block_size),
    );
}

/// The blocks a read of `[offset, offset + len)` (with `ahead`, and its read-ahead) needs
/// from the devices, and whether they may feed the cache devices; `None` when they are
/// fewer than `at_least` or the batch would not be kept or not be read in parallel.
fn choose(
    ctx: &mut ReadCtx<'_>,
    state: &ObjState,
    offset: u64,
    len: u64,
    ahead: bool,
    at_least: usize,
) -> Option<(Vec<BlockPtr>, bool)> {
    if len == 0 {
        return None;
    }
    let block_size = u64::from(state.dnode.data_block_size);
    assert!(block_size > 0, "a data object has a block size");
    let first = offset / block_size;
    let last = (offset.saturating_add(len) - 1) / block_size;
    if !ahead && first == last && at_least > 1 {
        // One record and nothing ahead: never a batch (below), so not even the walk to find
        // out, which the caller's read does anyway. This is every small random read.
        return None;
    }
    if !ctx.cache.keeps_data() || !ctx.store.reads_in_parallel() {
        return None;
    }
    let window = if ahead {
        (READAHEAD_BYTES_MAX / block_size).clamp(1, READS_IN_FLIGHT_MAX as u64)
    } else {
        0
    };
    let wanted = missing(ctx, state, first..last + 1);
    let ahead_missing = missing(ctx, state, last + 1..last + 1 + window);
    let mut batch = wanted;
    if !batch.is_empty() || ahead_missing.len() as u64 * 2 >= window.max(1) {
        batch.extend(ahead_missing);
    }
    if batch.len() < at_least {
        // One record gains nothing from a batch: the caller's own read fetches it.
        return None;
    }
    let feed_l2 = batch.iter().all(|bp| ctx.cache.feeds_l2(bp));
    Some((batch, feed_l2))
}

/// Puts the blocks of `batch` that read whole into the cache of `domain`.
fn fill(
    domain: &CacheDomain,
    batch: &[BlockPtr],
    results: Vec<Result<Vec<u8>, ZioError>>,
    block_size: u64,
) {
    assert_eq!(results.len(), batch.len(), "one result per block");
    for (bp, result) in batch.iter().zip(results) {
        if let Ok(bytes) = result
            && bytes.len() as u64 == block_size
        {
            domain.insert(bp, Arc::new(bytes));
        }
    }
}

/// The blocks one read needs from the devices, chosen while the caller holds the object set
/// (the pool lock) and read without it: [`crate::ObjectSet::plan_read`] makes it, the caller
/// reads [`Fetch::blocks`] with its store's batch read, and [`Fetch::fill`] puts what
/// verified into the cache, where the read that follows finds it. The block pointers stay
/// valid only while the caller keeps their space from being reused (the pool pins the txg
/// they were found in); a block that no longer verifies is simply not cached.
#[derive(Debug)]
pub struct Fetch {
    blocks: Vec<BlockPtr>,
    feed_l2: bool,
    block_size: u64,
    domain: CacheDomain,
}

impl Fetch {
    /// The blocks to read, in the order [`Fetch::fill`] takes their results.
    #[must_use]
    pub fn blocks(&self) -> &[BlockPtr] {
        &self.blocks
    }

    /// Whether the reads may copy these blocks to the cache devices (`secondarycache`).
    #[must_use]
    pub fn feeds_l2(&self) -> bool {
        self.feed_l2
    }

    /// Caches what read whole; a failed block is left for the read itself to report.
    pub fn fill(&self, results: Vec<Result<Vec<u8>, ZioError>>) {
        fill(&self.domain, &self.blocks, results, self.block_size);
    }
}

/// [`Fetch`] of a read of `[offset, offset + len)` (module docs), including a single
/// missing record, so that no device read of it is left for the caller's lock.
pub(crate) fn plan(
    ctx: &mut ReadCtx<'_>,
    state: &ObjState,
    offset: u64,
    len: u64,
    ahead: bool,
) -> Option<Fetch> {
    let (blocks, feed_l2) = choose(ctx, state, offset, len, ahead, 1)?;
    Some(Fetch {
        blocks,
        feed_l2,
        block_size: u64::from(state.dnode.data_block_size),
        domain: ctx.cache.domain().clone(),
    })
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
        // A pieced record over its committed block reads that block; other dirty blocks
        // need none.
        if state
            .dirty
            .get(&blkid)
            .is_some_and(|entry| !entry.reads_committed())
        {
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

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use tarn_base::{SeededRng, Txg};
    use tarn_format::BlockPtr;
    use tarn_format::dnode::OBJECT_TYPE_PLAIN;
    use tarn_zio::{BlockStore, WriteProps, ZioError};

    use crate::testing::MemStore;
    use crate::{ObjectSet, ObjsetKind};

    const RECORD: u32 = 128 << 10;
    const RECORDS: u64 = 24;

    /// Reads through a [`MemStore`], saying whether it reads in parallel, and logging every
    /// batch (`read_blocks`: its length) and every single read (`read_block`: 1, negated).
    struct Logged<'a> {
        inner: &'a MemStore,
        parallel: bool,
        log: RefCell<Vec<i64>>,
        fail: Option<BlockPtr>,
    }

    impl BlockStore for Logged<'_> {
        fn txg(&self) -> Txg {
            self.inner.txg()
        }
        fn write_block(&mut self, _: &[u8], _: &WriteProps) -> Result<BlockPtr, ZioError> {
            unreachable!("the test writes through the MemStore")
        }
        fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
            self.log.borrow_mut().push(-1);
            self.inner.read_block(bp)
        }
        fn read_blocks(&self, bps: &[BlockPtr]) -> Vec<Result<Vec<u8>, ZioError>> {
            self.log.borrow_mut().push(bps.len() as i64);
            bps.iter()
                .map(|bp| match self.fail {
                    Some(bad) if bad == *bp => Err(ZioError::Suspended),
                    _ => self.inner.read_block(bp),
                })
                .collect()
        }
        fn reads_in_parallel(&self) -> bool {
            self.parallel
        }
        fn free_block(&mut self, _: &BlockPtr) {
            unreachable!("reads only")
        }
    }

    /// An object of `RECORDS` random 128K records (record 5 a hole), synced and reopened so
    /// nothing is cached, and its bytes.
    fn setup() -> (MemStore, BlockPtr, tarn_base::ObjectId, Vec<u8>) {
        let mut store = MemStore::new();
        let mut set = ObjectSet::create(ObjsetKind::Filesystem);
        let id = set
            .allocate_object(&store, OBJECT_TYPE_PLAIN, RECORD, 0, 0)
            .unwrap();
        let mut data = vec![0u8; (RECORDS * u64::from(RECORD)) as usize];
        SeededRng::new(5).fill(&mut data);
        let hole = 5 * RECORD as usize..6 * RECORD as usize;
        data[hole].fill(0);
        set.write(&store, id, 0, &data).unwrap();
        let root = set.sync(&mut store).unwrap();
        store.next_txg();
        (store, root, id, data)
    }

    fn read(set: &mut ObjectSet, store: &Logged<'_>, id: tarn_base::ObjectId, at: u64) -> Vec<u8> {
        let mut buf = vec![0u8; RECORD as usize];
        set.read(store, id, at, &mut buf).unwrap();
        buf
    }

    /// Goal: a sequential reader gets its next records read ahead in batches (several
    /// records per `read_blocks`), the hole never fetched, and every byte right; after the
    /// first request most requests need no read at all. Method: read the object record by
    /// record through a logging store that reads "in parallel".
    #[test]
    fn sequential_reads_are_read_ahead_in_batches() {
        let (store, root, id, data) = setup();
        let logged = Logged {
            inner: &store,
            parallel: true,
            log: RefCell::new(Vec::new()),
            fail: None,
        };
        let mut set = ObjectSet::open(&logged, &root).unwrap();
        logged.log.borrow_mut().clear();
        let record = u64::from(RECORD);
        for blkid in 0..RECORDS {
            let at = blkid * record;
            let got = read(&mut set, &logged, id, at);
            assert!(
                got == data[at as usize..(at + record) as usize],
                "record {blkid}"
            );
        }
        let log = logged.log.borrow();
        let batched: i64 = log.iter().filter(|&&n| n > 1).sum();
        assert_eq!(
            batched,
            RECORDS as i64 - 1,
            "every data record once, in batches: {log:?}"
        );
        assert!(
            log.iter().filter(|&&n| n > 1).count() <= 6,
            "records come several per batch: {log:?}"
        );
    }

    /// Goal: a random reader gets no read-ahead (only the record asked for is read), and a
    /// synchronous store is asked exactly as before (one `read_block` per record, no batch).
    #[test]
    fn random_and_synchronous_reads_are_not_read_ahead() {
        let (store, root, id, data) = setup();
        for parallel in [true, false] {
            let logged = Logged {
                inner: &store,
                parallel,
                log: RefCell::new(Vec::new()),
                fail: None,
            };
            let mut set = ObjectSet::open(&logged, &root).unwrap();
            let record = u64::from(RECORD);
            // Warm the indirect blocks, then read out of order.
            read(&mut set, &logged, id, 20 * record + 4096);
            logged.log.borrow_mut().clear();
            for blkid in [3u64, 17, 9, 14] {
                let at = blkid * record + 512;
                let got = read(&mut set, &logged, id, at);
                assert!(got == data[at as usize..(at + record) as usize]);
            }
            let log = logged.log.borrow();
            if parallel {
                // Each unaligned request spans two records: one batch of two.
                assert_eq!(*log, vec![2, 2, 2, 2], "no read-ahead for a random reader");
            } else {
                assert!(
                    log.iter().all(|&n| n == -1),
                    "no batch on a synchronous store"
                );
            }
        }
    }

    /// Goal: a record that fails in the read-ahead batch is not cached and the reader's own
    /// read of it reports the store's error, while the others of the batch were cached.
    #[test]
    fn a_failed_read_ahead_record_is_left_to_the_reader() {
        let (store, root, id, data) = setup();
        let probe = Logged {
            inner: &store,
            parallel: false,
            log: RefCell::new(Vec::new()),
            fail: None,
        };
        let mut probe_set = ObjectSet::open(&probe, &root).unwrap();
        read(&mut probe_set, &probe, id, 0);
        let record = u64::from(RECORD);
        let bad = probe_set
            .inspect(&probe, id, |ctx, state| {
                super::synced_bp(ctx, &state.dnode, 0, 3)
            })
            .unwrap();
        let logged = Logged {
            inner: &store,
            parallel: true,
            log: RefCell::new(Vec::new()),
            fail: Some(bad),
        };
        let mut set = ObjectSet::open(&logged, &root).unwrap();
        let got = read(&mut set, &logged, id, 0);
        assert!(got == data[..record as usize]);
        // Record 3 failed in the batch, so it was not cached: reaching it, the reader puts it
        // in a batch again (which fails again) and then reads it alone (which works here,
        // because only the batch path of this store fails), getting the right bytes.
        logged.log.borrow_mut().clear();
        for blkid in 1..4u64 {
            let at = blkid * record;
            let got = read(&mut set, &logged, id, at);
            assert!(
                got == data[at as usize..(at + record) as usize],
                "record {blkid}"
            );
        }
        let log = logged.log.borrow();
        assert_eq!(log.iter().filter(|&&n| n == -1).count(), 1, "{log:?}");
        assert_eq!(
            log.last(),
            Some(&-1),
            "the reader's own read comes last: {log:?}"
        );
    }
}
