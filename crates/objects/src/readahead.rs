//! Reading records together and ahead of a sequential reader.
//!
//! A read of an object's data first gathers the synced level-0 blocks it covers that are
//! neither dirty nor cached, and reads them with one [`BlockStore::read_blocks`] call, which
//! a pool over devices with their own I/O threads serves with several blocks in flight (and
//! every block's columns in flight together). When the read starts where an earlier read
//! of the same object ended (a stream, [`Streams`]: several per object, one per reader of
//! its own range), the records after it, up to the stream's distance (which grows from
//! `READAHEAD_BYTES_MIN` to `READAHEAD_BYTES_MAX` as the stream goes on; at most
//! `READAHEAD_RECORDS_MAX` records and an eighth of the cache), join the same batch.
//! Everything read goes into the clean-block cache only after the store verified it (the
//! store returns nothing else), so the reader that reaches those records later gets verified
//! bytes from the cache. A record that fails to read here is left out: the reader's own read
//! of it reports the error with its usual context.
//!
//! The batch is issued only when a record the caller asked for is missing from the cache,
//! or when at least half of the read-ahead window is: a sequential reader then refills the
//! window in batches of several records instead of one record per request. Whether half is
//! missing is read from the window's middle block first (`middle_present`: what a stream's
//! window lacks is a run at its far end), so a request that issues no batch looks up its
//! own blocks and one of its window, not every block of the window. Stores whose
//! reads are synchronous (`BlockStore::reads_in_parallel` false: the simulator, in-memory
//! test stores) get none of this, so their runs issue exactly the reads they always did.
//!
//! # Read-ahead that does not wait
//! A read planned off the caller's lock ([`plan`], [`Fetch`]) splits its batch: the
//! records it was asked for are read by the caller, and the records ahead become an
//! [`Ahead`] batch that the caller hands to another thread and does not wait for, so a
//! sequential reader's next requests find their records read (or on their way) while it
//! copies the current ones. Until its blocks are cached (or failed), the batch is noted in
//! the cache domain under each of its blocks' keys; a later read that needs one of them
//! waits for the batch instead of reading the block a second time, and a batch no thread
//! has started yet is run by the first reader that needs it (so a busy reader pool delays
//! nothing: no timeouts, no lost wake-ups). A running batch caches each block as soon as
//! that block is read and verified (the store finishes a batch's blocks in order), and a
//! reader waits only until the last of its own blocks in the batch is done, not for the
//! whole batch: a sequential reader's request no longer waits for the blocks the window
//! holds for the requests after it. Each batch carries its own reader, which holds
//! the pool's pin of the txg its block pointers were found in (tarn-space `pins`), so
//! whichever thread runs it reads blocks whose space cannot have been reused. An export
//! ends every batch first ([`CacheDomain::finish_reads_ahead`]). The synchronous read path
//! ([`prefetch`], under the caller's lock) never waits for a batch: a block one is reading
//! is left to the caller's own read.
//!
//! Memory: a batch that waits holds only its block pointers; its buffers exist while a
//! thread runs it (at most `READS_IN_FLIGHT_MAX` blocks in flight, then in the cache, which
//! is bounded). So read-ahead holds at most one window per running thread: the read-ahead
//! threads' and the readers' (a reader runs a batch only when it needs one of its blocks).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use tarn_base::ObjectId;
use tarn_base::limits::{
    READAHEAD_BYTES_MAX, READAHEAD_BYTES_MIN, READAHEAD_RECORDS_MAX, READAHEAD_STREAMS_MAX,
};
use tarn_format::BlockPtr;
use tarn_zio::ZioError;

use crate::cache::CacheDomain;
use crate::tree::{ObjState, ReadCtx, synced_bp};

/// Where the recent sequential streams of reads stand: each is an object and the end of the
/// last read that continued it (ZFS's zfetch streams), so that several readers of one file
/// (each its own range) are each recognised as sequential. At most
/// `READAHEAD_STREAMS_MAX` streams, and [`STREAMS_PER_OBJECT`] per object; the least
/// recently continued one goes first.
///
/// Each stream also has its read-ahead *distance*: [`READAHEAD_BYTES_MIN`] when it starts,
/// growing by [`DISTANCE_GROWTH`] times the bytes of each read that continues it, up to
/// [`READAHEAD_BYTES_MAX`] (ZFS's zfetch distance). A short sequential run (a small file,
/// two adjacent random reads) reads little ahead; a long stream soon has enough records in
/// flight to keep every device of a wide raidz busy (docs/PERFORMANCE.md, "A read-ahead
/// distance that grows").
#[derive(Debug, Default)]
pub(crate) struct Streams {
    /// (object, end of the stream's last read) -> that stream.
    ends: BTreeMap<(u64, u64), Stream>,
    tick: u64,
}

/// One sequential stream of [`Streams`].
#[derive(Clone, Copy, Debug)]
struct Stream {
    /// When it was last continued.
    tick: u64,
    /// Bytes to read ahead of its reader.
    distance: u64,
}

/// Bytes a stream's read-ahead distance grows by per byte its reader consumes.
const DISTANCE_GROWTH: u64 = 4;

/// Streams remembered per object: one per reader of a file read by several at once.
const STREAMS_PER_OBJECT: usize = 8;

const _: () = assert!(STREAMS_PER_OBJECT <= READAHEAD_STREAMS_MAX);

impl Streams {
    /// Records a read of `len` bytes at `offset` of `object`; when it continues a stream of
    /// that object (or starts the object), returns how many bytes to read ahead of it.
    pub(crate) fn note(&mut self, object: ObjectId, offset: u64, len: u64) -> Option<u64> {
        self.tick += 1;
        let continued = self.ends.remove(&(object.0, offset));
        let of_object = (object.0, 0)..=(object.0, u64::MAX);
        if self.ends.range(of_object.clone()).count() >= STREAMS_PER_OBJECT {
            self.forget_oldest(of_object);
        } else if self.ends.len() >= READAHEAD_STREAMS_MAX {
            self.forget_oldest(..);
        }
        let distance = match continued {
            Some(stream) => (stream.distance)
                .saturating_add(len.saturating_mul(DISTANCE_GROWTH))
                .min(READAHEAD_BYTES_MAX),
            None => self.neighbour_distance(object, offset),
        };
        let stream = Stream {
            tick: self.tick,
            distance,
        };
        self.ends
            .insert((object.0, offset.saturating_add(len)), stream);
        assert!(
            self.ends.len() <= READAHEAD_STREAMS_MAX,
            "read-ahead streams bounded"
        );
        (continued.is_some() || offset == 0).then_some(distance)
    }

    /// The distance a stream starting at `offset` of `object` begins with: that of a stream
    /// of the object ending within its own distance of `offset` (several connections or
    /// session threads of one sequential reader deliver its requests a little out of
    /// order, and each such request starts a stream of its own: it goes on at the pace
    /// the reader had), else [`READAHEAD_BYTES_MIN`].
    fn neighbour_distance(&self, object: ObjectId, offset: u64) -> u64 {
        let near = (object.0, offset.saturating_sub(READAHEAD_BYTES_MAX))
            ..=(object.0, offset.saturating_add(READAHEAD_BYTES_MAX));
        (self.ends.range(near))
            .filter(|((_, end), stream)| end.abs_diff(offset) <= stream.distance)
            .map(|(_, stream)| stream.distance)
            .max()
            .unwrap_or(READAHEAD_BYTES_MIN)
    }

    /// Forgets the least recently continued stream of those in `which` (one object's, or
    /// all: a random reader makes a stream per read, so this runs for most of its reads).
    fn forget_oldest(&mut self, which: impl std::ops::RangeBounds<(u64, u64)>) {
        let oldest = self
            .ends
            .range(which)
            .min_by_key(|(_, stream)| stream.tick)
            .map(|(key, _)| *key);
        if let Some(oldest) = oldest {
            self.ends.remove(&oldest);
        }
    }
}

/// Reads into the cache, in one batch, the records of `[offset, offset + len)` and (with
/// `ahead`, a stream's distance in bytes: [`Streams::note`]) the records after them (module
/// docs). Never fails: what it cannot read is left
/// for the caller's read to report. Blocks a read-ahead batch is reading now are left to it
/// (the caller's read of such a block reads it again if it is not cached by then).
pub(crate) fn prefetch(
    ctx: &mut ReadCtx<'_>,
    state: &ObjState,
    offset: u64,
    len: u64,
    ahead: Option<u64>,
) {
    let block_size = u64::from(state.dnode.data_block_size);
    if ahead.is_none()
        && len > 0
        && offset / block_size == (offset.saturating_add(len) - 1) / block_size
    {
        // One record and nothing ahead: never a batch (below), so not even the walk to find
        // out, which the caller's read does anyway. This is every small random read.
        return;
    }
    let Some(mut chosen) = choose(ctx, state, offset, len, ahead) else {
        return;
    };
    chosen.blocks.append(&mut chosen.ahead);
    if chosen.blocks.len() < 2 {
        // One record gains nothing from a batch: the caller's own read fetches it.
        return;
    }
    let results = ctx.store.read_blocks_l2(&chosen.blocks, chosen.feed_l2);
    fill(ctx.cache.domain(), &chosen.blocks, results, block_size);
}

/// What one read needs from the devices ([`choose`]).
struct Chosen {
    /// The read's own records that are neither cached nor being read ahead.
    blocks: Vec<BlockPtr>,
    /// Records after them to read ahead (none unless at least half the window is missing
    /// or the read itself missed).
    ahead: Vec<BlockPtr>,
    /// The read-ahead batches that are reading some of the read's own records, each with
    /// the place in it of the last of them.
    waits: Vec<(Arc<Ahead>, usize)>,
    feed_l2: bool,
}

/// Records read ahead of a stream `distance` bytes ahead, of `block_size` each, from a
/// cache of `cache_limit` bytes: never more than an eighth of the cache (a window that
/// evicts itself before its reader gets there is read twice), nor more than
/// [`READAHEAD_RECORDS_MAX`] records; at least one.
fn window(distance: u64, block_size: u64, cache_limit: u64) -> u64 {
    (distance.min(cache_limit / 8) / block_size).clamp(1, READAHEAD_RECORDS_MAX)
}

/// The blocks a read of `[offset, offset + len)` (with `ahead`, and its read-ahead) needs
/// from the devices, and whether they may feed the cache devices; `None` when there are
/// none, or the batch would not be kept or not be read in parallel.
fn choose(
    ctx: &mut ReadCtx<'_>,
    state: &ObjState,
    offset: u64,
    len: u64,
    ahead: Option<u64>,
) -> Option<Chosen> {
    if len == 0 || !ctx.cache.keeps_data() || !ctx.store.reads_in_parallel() {
        return None;
    }
    let block_size = u64::from(state.dnode.data_block_size);
    assert!(block_size > 0, "a data object has a block size");
    let first = offset / block_size;
    let last = (offset.saturating_add(len) - 1) / block_size;
    let window = match ahead {
        Some(distance) => window(distance, block_size, ctx.cache.limit()),
        None => 0,
    };
    let (blocks, waits) = missing(ctx, state, first..last + 1);
    let window_blocks = last + 1..last + 1 + window;
    let mut ahead_missing = if blocks.is_empty() && middle_present(ctx, state, &window_blocks) {
        Vec::new()
    } else {
        missing(ctx, state, window_blocks).0
    };
    if blocks.is_empty() && (ahead_missing.len() as u64) * 2 < window.max(1) {
        // The window is mostly cached or on its way: the next batch waits until half of
        // it is consumed, so batches stay large.
        ahead_missing.clear();
    }
    if blocks.is_empty() && ahead_missing.is_empty() && waits.is_empty() {
        return None;
    }
    let feed_l2 = blocks
        .iter()
        .chain(&ahead_missing)
        .all(|bp| ctx.cache.feeds_l2(bp));
    Some(Chosen {
        blocks,
        ahead: ahead_missing,
        waits,
        feed_l2,
    })
}

/// Whether the read-ahead window `blocks` is taken as more than half present (cached, on
/// its way, dirty or a hole) from one lookup, not one per block: the block at its middle is
/// present. A sequential reader's window fills in order, each batch reading what was
/// missing up to the window's end, so what is missing is a run at its far end, and that run
/// is shorter than half the window exactly when the middle block is present. A window
/// missing blocks elsewhere too (evicted from the cache meanwhile) may then wait for its far
/// half to empty before its next batch; the reader's own records are looked up one by one
/// regardless ([`choose`]), so no read misses a block it needs. `false` (look at every
/// block) when the middle is past the object's last block, where the run need not be.
fn middle_present(ctx: &mut ReadCtx<'_>, state: &ObjState, blocks: &Range<u64>) -> bool {
    if blocks.is_empty() {
        return false;
    }
    // Missing run shorter than half (`2 * run < len`) <=> the block `len / 2` from the
    // start, which is `len.div_ceil(2)` from the end, is present.
    let middle = blocks.start + (blocks.end - blocks.start) / 2;
    if middle > state.dnode.maxblkid {
        return false;
    }
    // Being read by a batch counts as present, as in the full count.
    missing(ctx, state, middle..middle + 1).0.is_empty()
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

/// Where each block's result of a [`ReadJob`] goes: its index in the batch and the result,
/// given in the order of the batch as each block is finished.
pub type EachBlock<'a> = &'a mut dyn FnMut(usize, Result<Vec<u8>, ZioError>);

/// Reads a batch of blocks (with whether they may feed the cache devices), handing each
/// block's result on as it is finished, in order: a pool's reader that keeps the batch's
/// space from being reused until it is dropped (the caller's pin), moved into the batch it
/// reads.
pub type ReadJob = Box<dyn FnOnce(&[BlockPtr], bool, EachBlock<'_>) + Send>;

/// Where a read-ahead batch is (module docs, "Read-ahead that does not wait").
enum Stage {
    /// Nobody runs it yet: its reader waits here.
    Ready(ReadJob),
    /// A thread runs it: this many of its first blocks are cached or failed, and the
    /// lowest index a waiter waits for (`usize::MAX`: nobody waits), so that the thread
    /// wakes waiters only when one of them can go on, not after every block.
    Running {
        done: usize,
        wake_past: usize,
    },
    Done,
}

/// A read-ahead batch read off every lock by whichever thread takes it first: the reader
/// thread it was handed to, a read that needs one of its blocks, or an export
/// ([`CacheDomain::finish_reads_ahead`]). Registered in its domain from when it is made until
/// its blocks are cached (or failed), so no block is read twice meanwhile.
pub struct Ahead {
    blocks: Vec<BlockPtr>,
    feed_l2: bool,
    block_size: u64,
    domain: CacheDomain,
    stage: Mutex<Stage>,
    ended: Condvar,
}

impl std::fmt::Debug for Ahead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ahead")
            .field("blocks", &self.blocks.len())
            .finish_non_exhaustive()
    }
}

impl Ahead {
    pub(crate) fn blocks(&self) -> &[BlockPtr] {
        &self.blocks
    }

    fn stage(&self) -> MutexGuard<'_, Stage> {
        // Every change of the stage is one assignment: a poisoned lock leaves it usable.
        self.stage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the batch here and caches what verified, unless another thread has taken it;
    /// then waits until that thread is done. Either way its blocks are cached or failed
    /// when this returns, and the batch no longer holds a reader of the pool.
    pub fn run(self: &Arc<Self>) {
        self.run_to(usize::MAX);
    }

    /// [`Ahead::run`], except that when another thread runs the batch, this waits only until
    /// its blocks up to index `last` are cached or failed (the batch finishes its blocks in
    /// order).
    pub(crate) fn run_to(self: &Arc<Self>, last: usize) {
        let job = {
            let mut stage = self.stage();
            let running = Stage::Running {
                done: 0,
                wake_past: usize::MAX,
            };
            match std::mem::replace(&mut *stage, running) {
                Stage::Ready(job) => job,
                other => {
                    *stage = other;
                    drop(stage);
                    return self.wait_to(last);
                }
            }
        };
        job(&self.blocks, self.feed_l2, &mut |index, result| {
            let bp = &self.blocks[index];
            fill(
                &self.domain,
                std::slice::from_ref(bp),
                vec![result],
                self.block_size,
            );
            let mut stage = self.stage();
            if let Stage::Running { done, wake_past } = &mut *stage {
                assert_eq!(*done, index, "a batch's blocks are finished in order");
                *done = index + 1;
                if *done > *wake_past {
                    // Every waiter wakes, and those not done yet register again.
                    *wake_past = usize::MAX;
                    self.ended.notify_all();
                }
            }
        });
        // The job (and the reader it owns) is gone: only now may an export find the batch
        // ended (its keys stay until here).
        self.domain.end_ahead(self);
        *self.stage() = Stage::Done;
        self.ended.notify_all();
    }

    /// Waits until the thread running the batch has finished its blocks up to `last`.
    fn wait_to(&self, last: usize) {
        let ready = |stage: &Stage| {
            matches!(*stage, Stage::Done)
                || matches!(*stage, Stage::Running { done, .. } if done > last)
        };
        if ready(&self.stage()) {
            return;
        }
        // A front end's request thread hands on its duty to read requests before it waits
        // for the devices (tarn-base `wait`), so that other requests, other readers' above
        // all, go on meanwhile. No lock is held while it is told.
        tarn_base::wait::before_wait();
        let mut stage = self.stage();
        while !ready(&stage) {
            if let Stage::Running { wake_past, .. } = &mut *stage {
                *wake_past = (*wake_past).min(last);
            }
            stage = self
                .ended
                .wait(stage)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// The blocks one read needs from the devices, chosen while the caller holds the object set
/// (the pool lock) and read without it: [`crate::ObjectSet::plan_read`] makes it, the caller
/// reads [`Fetch::blocks`] with its store's batch read, and [`Fetch::fill`] puts what
/// verified into the cache, where the read that follows finds it. The block pointers stay
/// valid only while the caller keeps their space from being reused (the pool pins the txg
/// they were found in); a block that no longer verifies is simply not cached.
///
/// The records after the read go to a separate batch ([`Fetch::start_ahead`]) that the
/// caller hands to another thread and does not wait for; the read waits only for the
/// batches already reading its own records ([`Fetch::wait`]).
#[derive(Debug)]
pub struct Fetch {
    blocks: Vec<BlockPtr>,
    ahead: Vec<BlockPtr>,
    waits: Vec<(Arc<Ahead>, usize)>,
    feed_l2: bool,
    block_size: u64,
    domain: CacheDomain,
}

impl Fetch {
    /// The read's own blocks to read, in the order [`Fetch::fill`] takes their results.
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

    /// Whether there are records to read ahead ([`Fetch::start_ahead`]).
    #[must_use]
    pub fn reads_ahead(&self) -> bool {
        !self.ahead.is_empty()
    }

    /// The read-ahead as a batch that `job` reads, noted in the cache as being read (call
    /// it before the caller's lock is released, so no other read plans the same blocks),
    /// for the caller to run on another thread ([`Ahead::run`]). `None`: nothing to read
    /// ahead (`job` is dropped).
    pub fn start_ahead(&mut self, job: ReadJob) -> Option<Arc<Ahead>> {
        if self.ahead.is_empty() {
            return None;
        }
        let ahead = Arc::new(Ahead {
            blocks: std::mem::take(&mut self.ahead),
            feed_l2: self.feed_l2,
            block_size: self.block_size,
            domain: self.domain.clone(),
            stage: Mutex::new(Stage::Ready(job)),
            ended: Condvar::new(),
        });
        self.domain.start_ahead(&ahead);
        Some(ahead)
    }

    /// Waits for the read-ahead batches that are reading the read's own records, each
    /// until the last of those records is done (running a batch here if no thread has
    /// taken it yet).
    pub fn wait(&self) {
        for (ahead, last) in &self.waits {
            ahead.run_to(*last);
        }
    }
}

/// [`Fetch`] of a read of `[offset, offset + len)` (module docs), including a single
/// missing record, so that no device read of it is left for the caller's lock.
pub(crate) fn plan(
    ctx: &mut ReadCtx<'_>,
    state: &ObjState,
    offset: u64,
    len: u64,
    ahead: Option<u64>,
) -> Option<Fetch> {
    let chosen = choose(ctx, state, offset, len, ahead)?;
    Some(Fetch {
        blocks: chosen.blocks,
        ahead: chosen.ahead,
        waits: chosen.waits,
        feed_l2: chosen.feed_l2,
        block_size: u64::from(state.dnode.data_block_size),
        domain: ctx.cache.domain().clone(),
    })
}

/// The synced block pointers of the records `blkids` that are not dirty, not holes and not
/// cached, and that are what the tree says they are (level 0, the object's block size, born
/// no later than the store's txg; anything else is left to the caller's checked read);
/// those a read-ahead batch is reading are left out, and that batch is named instead (once,
/// with the place in it of the last such block).
fn missing(
    ctx: &mut ReadCtx<'_>,
    state: &ObjState,
    blkids: Range<u64>,
) -> (Vec<BlockPtr>, Vec<(Arc<Ahead>, usize)>) {
    let block_size = u64::from(state.dnode.data_block_size);
    let mut bps = Vec::new();
    let mut waits: Vec<(Arc<Ahead>, usize)> = Vec::new();
    for blkid in blkids {
        if blkid > state.dnode.maxblkid {
            break;
        }
        #[cfg(test)]
        tests::LOOKUPS.with(|n| n.set(n.get() + 1));
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
        if !usable || ctx.cache.contains(&bp) {
            continue;
        }
        match ctx.cache.domain().in_flight(&bp) {
            Some((ahead, place)) => match waits.iter_mut().find(|(w, _)| Arc::ptr_eq(w, &ahead)) {
                Some((_, last)) => *last = (*last).max(place),
                None => waits.push((ahead, place)),
            },
            None => bps.push(bp),
        }
    }
    (bps, waits)
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

    thread_local! {
        /// Blocks `missing` looked up on this thread (the cost of a read-ahead decision).
        pub(super) static LOOKUPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// Reads through a [`MemStore`], saying whether it reads in parallel, and logging every
    /// batch (`read_blocks`: its length) and every single read (`read_block`: 1, negated).
    struct Logged<'a> {
        inner: &'a MemStore,
        parallel: bool,
        log: RefCell<Vec<i64>>,
        fail: Option<BlockPtr>,
    }

    impl<'a> Logged<'a> {
        fn new(inner: &'a MemStore, parallel: bool) -> Self {
            Logged {
                inner,
                parallel,
                log: RefCell::new(Vec::new()),
                fail: None,
            }
        }
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

    /// Goal: the single blocks of many small objects come in one batch
    /// (`ObjectSet::prefetch_single_blocks`), and reading the objects then needs no device
    /// read. Method: 40 objects of one 4 KiB block and one of two records, synced and
    /// reopened (nothing cached); a prefetch of all 41 through the logging store, then each
    /// read. Negative control: without the prefetch there was no batch (the first
    /// assertion).
    #[test]
    fn single_blocks_of_many_objects_come_in_one_batch() {
        let mut store = MemStore::new();
        let mut set = ObjectSet::create(ObjsetKind::Filesystem);
        let mut ids = Vec::new();
        for i in 0..41u8 {
            let id = set
                .allocate_object(&store, OBJECT_TYPE_PLAIN, 4096, 0, 0)
                .unwrap();
            let len = if i == 40 { 8192 } else { 4096 };
            set.write(&store, id, 0, &vec![i | 1; len]).unwrap();
            ids.push(id);
        }
        let root = set.sync(&mut store).unwrap();
        store.next_txg();
        let logged = Logged::new(&store, true);
        let mut set = ObjectSet::open(&logged, &root).unwrap();
        set.prefetch_single_blocks(&logged, &ids);
        let batches: Vec<i64> = logged
            .log
            .borrow()
            .iter()
            .copied()
            .filter(|&n| n > 1)
            .collect();
        assert_eq!(batches, [40], "one batch of the 40 single blocks");
        logged.log.borrow_mut().clear();
        for (i, &id) in ids.iter().enumerate().take(40) {
            let mut buf = vec![0u8; 4096];
            set.read(&logged, id, 0, &mut buf).unwrap();
            assert!(buf.iter().all(|&b| b == (i as u8) | 1), "object {i}");
        }
        assert!(
            logged.log.borrow().is_empty(),
            "reads after the prefetch: {:?}",
            logged.log
        );
    }

    /// Goal: a sequential reader gets its next records read ahead in batches (several
    /// records per `read_blocks`), the hole never fetched, and every byte right; after the
    /// first request most requests need no read at all. Method: read the object record by
    /// record through a logging store that reads "in parallel".
    #[test]
    fn sequential_reads_are_read_ahead_in_batches() {
        let (store, root, id, data) = setup();
        let logged = Logged::new(&store, true);
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

    /// Goal: a sequential reader's read-ahead decision looks up about one block of its
    /// window per request while the window is more than half present, not every block of
    /// it, and still issues the same batches (every data record once, several per batch).
    /// Method: 4K records, so the window is the full `READAHEAD_RECORDS_MAX` records from the
    /// first request; read five windows' worth of records one by one and count `missing`'s
    /// lookups (the record itself, the window's middle, and the whole window only when a
    /// batch is due) while the window lies inside the object.
    #[test]
    fn a_read_ahead_decision_probes_the_window_middle() {
        const SMALL: u32 = 4096;
        const COUNT: u64 = 5 * tarn_base::limits::READAHEAD_RECORDS_MAX;
        let mut store = MemStore::new();
        let mut set = ObjectSet::create(ObjsetKind::Filesystem);
        let id = set
            .allocate_object(&store, OBJECT_TYPE_PLAIN, SMALL, 0, 0)
            .unwrap();
        let mut data = vec![0u8; (COUNT * u64::from(SMALL)) as usize];
        SeededRng::new(6).fill(&mut data);
        set.write(&store, id, 0, &data).unwrap();
        let root = set.sync(&mut store).unwrap();
        store.next_txg();
        let logged = Logged::new(&store, true);
        let mut set = ObjectSet::open(&logged, &root).unwrap();
        logged.log.borrow_mut().clear();
        LOOKUPS.with(|n| n.set(0));
        let mut buf = vec![0u8; SMALL as usize];
        let window = tarn_base::limits::READAHEAD_RECORDS_MAX;
        // Counted while the whole window lies inside the object (past its end the middle
        // may be past the last block, and every block is looked at).
        let counted = COUNT - window - 1;
        let mut lookups = 0;
        for blkid in 0..COUNT {
            if blkid == counted {
                lookups = LOOKUPS.with(std::cell::Cell::get) as u64;
            }
            let at = blkid * u64::from(SMALL);
            set.read(&logged, id, at, &mut buf).unwrap();
            assert!(buf == data[at as usize..at as usize + SMALL as usize]);
        }
        let log = logged.log.borrow();
        let batches = log.iter().filter(|&&n| n > 1).count() as u64;
        let batched: i64 = log.iter().filter(|&&n| n > 1).sum();
        assert_eq!(
            batched, COUNT as i64,
            "every record once, in batches: {log:?}"
        );
        assert!(batches <= COUNT / 8, "several records per batch: {log:?}");
        // Every block of the window on every request would be counted * (1 + window).
        assert!(
            lookups <= counted * 4 + batches * (window + 1),
            "{lookups} lookups for {counted} requests and {batches} batches"
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
        let probe = Logged::new(&store, false);
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

    /// One planned read of the record at `at` as the engine does it off its lock: the
    /// read's own blocks through `logged`, the read-ahead handed to `hand` (which may run it,
    /// keep it, or drop the handle unrun), the batches the read needs waited for, then the
    /// read from the cache. Every batch's block count goes into `log` (read-ahead batches
    /// as `1000 + n`).
    fn planned_read(
        set: &mut ObjectSet,
        logged: &Logged<'_>,
        id: tarn_base::ObjectId,
        at: u64,
        ahead_log: &std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
        hand: &mut dyn FnMut(std::sync::Arc<super::Ahead>),
    ) -> Vec<u8> {
        if let Some(mut fetch) = set.plan_read(logged, id, at, u64::from(RECORD)).unwrap() {
            let store = logged.inner.clone();
            let log = std::sync::Arc::clone(ahead_log);
            let ahead = fetch.start_ahead(Box::new(move |bps, _, each| {
                log.lock().unwrap().push(bps.len());
                for (i, bp) in bps.iter().enumerate() {
                    each(i, store.read_block(bp));
                }
            }));
            if !fetch.blocks().is_empty() {
                fetch.fill(logged.read_blocks(fetch.blocks()));
            }
            if let Some(ahead) = ahead {
                hand(ahead);
            }
            fetch.wait();
        }
        let mut buf = vec![0u8; RECORD as usize];
        set.read_planned(logged, id, at, &mut buf).unwrap();
        buf
    }

    /// Goal: read-ahead that the reader does not wait for still reads every record exactly
    /// once, whoever runs its batches: a thread of their own (started at once, or never, so
    /// that the reader that needs a batch runs it itself), and every byte is right; no read
    /// is ever served by a single-block read under the lock. Method: a sequential planned
    /// reader over a store that logs every read, in three hand-off modes.
    #[test]
    fn read_ahead_not_waited_for_reads_each_record_once() {
        let (store, root, id, data) = setup();
        let record = u64::from(RECORD);
        for mode in ["thread", "never", "late"] {
            let logged = Logged::new(&store, true);
            let mut set = ObjectSet::open(&logged, &root).unwrap();
            logged.log.borrow_mut().clear();
            let ahead_log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let mut threads = Vec::new();
            let mut kept = Vec::new();
            {
                let mut hand = |ahead: std::sync::Arc<super::Ahead>| match mode {
                    "thread" => threads.push(std::thread::spawn(move || ahead.run())),
                    "never" => drop(ahead),
                    _ => kept.push(ahead),
                };
                for blkid in 0..RECORDS {
                    let at = blkid * record;
                    let got = planned_read(&mut set, &logged, id, at, &ahead_log, &mut hand);
                    assert!(
                        got == data[at as usize..(at + record) as usize],
                        "{mode}: record {blkid}"
                    );
                }
            }
            for thread in threads {
                thread.join().unwrap();
            }
            for ahead in kept {
                // Run by the reader that needed it, or now: either way once.
                ahead.run();
            }
            let own: i64 = logged.log.borrow().iter().filter(|&&n| n > 0).sum();
            let ahead: usize = ahead_log.lock().unwrap().iter().sum();
            // The first plan's walk reads the dnode block and the indirect block, one at a
            // time; a data record read alone under the lock would be a third.
            assert!(
                logged.log.borrow().iter().filter(|&&n| n < 0).count() <= 2,
                "{mode}: no data record read alone under the lock: {:?}",
                logged.log.borrow()
            );
            assert_eq!(
                own + ahead as i64,
                RECORDS as i64 - 1,
                "{mode}: every data record once: own {:?}, ahead {:?}",
                logged.log.borrow(),
                ahead_log.lock().unwrap()
            );
            assert!(ahead > 0, "{mode}: records were read ahead");
        }
    }

    /// Goal: a block that failed in a read-ahead batch nobody waited for is not cached, the
    /// batch no longer counts as reading it, and the reader's own read of it fetches it
    /// again (and gets the right bytes); `finish_reads_ahead` runs a batch no thread took.
    #[test]
    fn a_failed_block_of_a_read_ahead_batch_is_read_again() {
        let (store, root, id, data) = setup();
        let record = u64::from(RECORD);
        let logged = Logged::new(&store, true);
        let domain = crate::CacheStore::new(64 << 20).domain();
        let mut set = ObjectSet::open(&logged, &root).unwrap();
        set.use_cache(&domain);
        let mut fetch = set.plan_read(&logged, id, 0, record).unwrap().unwrap();
        // The batch fails its first block (record 1).
        let ahead = fetch
            .start_ahead(Box::new(
                |bps: &[BlockPtr], _, each: super::EachBlock<'_>| {
                    for i in 0..bps.len() {
                        each(i, Err(ZioError::Suspended));
                    }
                },
            ))
            .unwrap();
        fetch.fill(logged.read_blocks(fetch.blocks()));
        assert!(
            ahead
                .blocks()
                .iter()
                .all(|bp| domain.in_flight(bp).is_some()),
            "the batch's blocks are noted as being read"
        );
        domain.finish_reads_ahead();
        assert!(
            ahead
                .blocks()
                .iter()
                .all(|bp| domain.in_flight(bp).is_none()),
            "an ended batch reads nothing any more"
        );
        let mut buf = vec![0u8; record as usize];
        set.read_planned(&logged, id, 0, &mut buf).unwrap();
        logged.log.borrow_mut().clear();
        let got = planned_read(
            &mut set,
            &logged,
            id,
            record,
            &std::sync::Arc::new(std::sync::Mutex::new(Vec::new())),
            &mut |ahead| ahead.run(),
        );
        assert!(got == data[record as usize..2 * record as usize]);
        assert_eq!(
            logged.log.borrow().first(),
            Some(&1),
            "record 1 read again by its reader: {:?}",
            logged.log.borrow()
        );
    }

    /// A read-ahead batch of the object of [`setup`] run by a thread of its own, which
    /// finishes the batch's first block and then stops until the returned sender says go on;
    /// returned once that first block is done, with the cache domain and the thread.
    fn gated_batch(
        store: &MemStore,
        root: &BlockPtr,
        id: tarn_base::ObjectId,
    ) -> (
        crate::CacheDomain,
        std::sync::Arc<super::Ahead>,
        std::thread::JoinHandle<()>,
        std::sync::mpsc::Sender<()>,
    ) {
        use std::sync::mpsc::channel;
        let logged = Logged::new(store, true);
        let domain = crate::CacheStore::new(64 << 20).domain();
        let mut set = ObjectSet::open(&logged, root).unwrap();
        set.use_cache(&domain);
        let fetch = set.plan_read(&logged, id, 0, u64::from(RECORD));
        let (started, on_start) = channel::<()>();
        let (go_on, gate) = channel::<()>();
        let inner = store.clone();
        let job = move |bps: &[BlockPtr], _: bool, each: super::EachBlock<'_>| {
            each(0, inner.read_block(&bps[0]));
            started.send(()).unwrap();
            gate.recv().unwrap();
            for (i, bp) in bps.iter().enumerate().skip(1) {
                each(i, inner.read_block(bp));
            }
        };
        let ahead = fetch.unwrap().unwrap().start_ahead(Box::new(job)).unwrap();
        assert!(ahead.blocks().len() > 2, "a batch of several blocks");
        let runner = std::thread::spawn({
            let ahead = std::sync::Arc::clone(&ahead);
            move || ahead.run()
        });
        on_start.recv().unwrap();
        (domain, ahead, runner, go_on)
    }

    /// Goal: a reader that needs the first blocks of a read-ahead batch another thread is
    /// running waits for those blocks only, not for the rest of the batch (a sequential
    /// reader's request must not wait for the window held for the requests after it); the
    /// batch still caches every block and ends. Method: [`gated_batch`]; meanwhile a reader
    /// waits for the first block (it must come back) and that block alone is cached.
    #[test]
    fn a_reader_waits_for_its_own_blocks_of_a_batch_only() {
        let (store, root, id, _) = setup();
        let (domain, ahead, runner, go_on) = gated_batch(&store, &root, id);
        let (came_back, on_back) = std::sync::mpsc::channel::<()>();
        let waiter = std::thread::spawn({
            let ahead = std::sync::Arc::clone(&ahead);
            move || {
                ahead.run_to(0);
                came_back.send(()).unwrap();
            }
        });
        let early = on_back.recv_timeout(std::time::Duration::from_secs(20));
        let cached_early = domain.store().stats().data_bytes;
        go_on.send(()).unwrap();
        runner.join().unwrap();
        waiter.join().unwrap();
        assert!(
            early.is_ok(),
            "the reader of block 0 came back while the batch's other blocks were unread"
        );
        assert_eq!(
            cached_early,
            u64::from(RECORD),
            "block 0 alone was cached before the batch went on"
        );
        assert!(
            ahead
                .blocks()
                .iter()
                .all(|bp| domain.in_flight(bp).is_none()),
            "the batch ended"
        );
        assert!(
            domain.store().stats().data_bytes >= ahead.blocks().len() as u64 * u64::from(RECORD),
            "every block of the batch is cached"
        );
    }

    /// Goal: a thread that waits for another thread's read-ahead batch tells its wait hint
    /// first (tarn-base `wait`), as it does before a device read: a FUSE session thread then
    /// lets another thread take requests meanwhile. Method: [`gated_batch`]; a reader with a
    /// counting hint waits for the batch's last block; the hint must be told while it waits.
    #[test]
    fn a_reader_waiting_for_a_batch_tells_its_wait_hint() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Count(AtomicUsize);
        impl tarn_base::wait::WaitHint for Count {
            fn before_wait(&self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (store, root, id, _) = setup();
        let (_domain, ahead, runner, go_on) = gated_batch(&store, &root, id);
        let count = std::sync::Arc::new(Count(AtomicUsize::new(0)));
        let waiter = std::thread::spawn({
            let (ahead, count) = (std::sync::Arc::clone(&ahead), std::sync::Arc::clone(&count));
            move || {
                tarn_base::wait::set_hint(Some(count));
                ahead.run_to(ahead.blocks().len() - 1);
            }
        });
        let mut told = 0;
        for _ in 0..2000 {
            told = count.0.load(Ordering::SeqCst);
            if told > 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        go_on.send(()).unwrap();
        runner.join().unwrap();
        waiter.join().unwrap();
        assert_eq!(
            told, 1,
            "the waiting reader told its hint once before it waited"
        );
    }

    /// Goal: readers of their own ranges of one object, interleaved, are each recognised as
    /// sequential (ZFS's zfetch streams), a random reader is not, and the streams stay
    /// bounded per object and in all. Method: [`super::Streams`] directly.
    #[test]
    fn interleaved_readers_of_one_object_are_each_sequential() {
        let mut streams = super::Streams::default();
        let file = tarn_base::ObjectId(7);
        let quarter = 1u64 << 28;
        let starts: Vec<u64> = (0..4).map(|i| i * quarter).collect();
        // The first read of each range is not sequential (except at 0); the rest are.
        for step in 0..6u64 {
            for (reader, start) in starts.iter().enumerate() {
                let sequential = (streams.note(file, start + step * (1 << 20), 1 << 20)).is_some();
                assert_eq!(
                    sequential,
                    step > 0 || reader == 0,
                    "reader {reader} step {step}"
                );
            }
        }
        let mut rng = SeededRng::new(9);
        let randoms = (0..100)
            .filter(|_| {
                let at = (rng.next_u64() % 1000 + 1) * 8192 + 512;
                streams.note(file, at, 4096).is_some()
            })
            .count();
        assert_eq!(randoms, 0, "random reads continue no stream");
        let of_file = streams.ends.keys().filter(|(id, _)| *id == 7).count();
        assert!(
            of_file <= super::STREAMS_PER_OBJECT,
            "{of_file} streams of one object"
        );
        for id in 0..200u64 {
            streams.note(tarn_base::ObjectId(100 + id), 4096, 4096);
        }
        assert!(streams.ends.len() <= tarn_base::limits::READAHEAD_STREAMS_MAX);
    }

    /// Goal: a stream's read-ahead distance starts at `READAHEAD_BYTES_MIN`, grows with what
    /// its reader consumes up to `READAHEAD_BYTES_MAX`, and a new stream starts small again;
    /// the window in records is bounded by the cache and by `READAHEAD_RECORDS_MAX`.
    /// Method: [`super::Streams`] and [`super::window`] directly.
    #[test]
    fn the_read_ahead_distance_grows_with_the_stream() {
        use tarn_base::limits::{READAHEAD_BYTES_MAX, READAHEAD_BYTES_MIN, READAHEAD_RECORDS_MAX};
        let mut streams = super::Streams::default();
        let file = tarn_base::ObjectId(3);
        let step = 256u64 << 10;
        let distances: Vec<u64> = (0..64u64)
            .map(|i| streams.note(file, i * step, step).unwrap())
            .collect();
        assert_eq!(distances[0], READAHEAD_BYTES_MIN);
        assert!(distances.windows(2).all(|d| d[0] <= d[1]), "{distances:?}");
        assert!(distances[1] > distances[0], "{distances:?}");
        assert_eq!(distances[63], READAHEAD_BYTES_MAX, "{distances:?}");
        // A second reader of the same object, elsewhere, starts its own stream small.
        assert_eq!(streams.note(file, 1 << 30, step), None);
        assert_eq!(
            streams.note(file, (1 << 30) + step, step),
            Some(READAHEAD_BYTES_MIN + 4 * step)
        );
        // Requests of the first reader out of order (two connections): the later one
        // starts a stream that goes on at the first stream's distance, not from the start.
        let end = 64 * step;
        assert_eq!(streams.note(file, end + step, step), None);
        assert_eq!(streams.note(file, end, step), Some(READAHEAD_BYTES_MAX));
        let next = streams.note(file, end + 2 * step, step);
        assert_eq!(next, Some(READAHEAD_BYTES_MAX));
        let big_cache = 1u64 << 32;
        assert_eq!(super::window(READAHEAD_BYTES_MAX, 64 << 10, big_cache), 256);
        assert_eq!(super::window(READAHEAD_BYTES_MIN, 64 << 10, big_cache), 32);
        assert_eq!(
            super::window(READAHEAD_BYTES_MAX, 4096, big_cache),
            READAHEAD_RECORDS_MAX
        );
        // A 16 MiB cache reads at most 2 MiB ahead; a block bigger than that still one.
        assert_eq!(super::window(READAHEAD_BYTES_MAX, 64 << 10, 16 << 20), 32);
        assert_eq!(super::window(READAHEAD_BYTES_MAX, 16 << 20, 16 << 20), 1);
    }
}
