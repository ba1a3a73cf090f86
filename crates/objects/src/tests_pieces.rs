//! Tests of records kept as pieces (`pieces`, `tree::write_piece`): what partial writes cost
//! the dirty limit, what readers, punches, write-ahead and the sync see, when the committed
//! block is read, and a model test with damaged blocks and crashes.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;

use crate::pieces::PIECE_OVERHEAD;
use crate::testing::{MemStore, check_space};
use crate::{BlockContext, ObjectError, ObjectSet, ObjsetKind, ReadOut};
use tarn_base::{ObjectId, SeededRng, Txg};
use tarn_format::BlockPtr;
use tarn_format::dnode::{DNODE_SIZE, OBJECT_TYPE_PLAIN};
use tarn_zio::{BlockStore, WriteProps, ZioError};

const RECORD: u32 = 128 << 10;
const RECORDS: u64 = 8;

/// A [`MemStore`] that counts reads and, with `keep`, frees nothing (an older root stays
/// readable, as a snapshot keeps its blocks).
struct Counting<'a> {
    inner: &'a mut MemStore,
    reads: Cell<u64>,
    read: RefCell<Vec<BlockPtr>>,
    keep: bool,
}

impl BlockStore for Counting<'_> {
    fn txg(&self) -> Txg {
        self.inner.txg()
    }
    fn write_block(&mut self, data: &[u8], props: &WriteProps) -> Result<BlockPtr, ZioError> {
        self.inner.write_block(data, props)
    }
    fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        self.reads.set(self.reads.get() + 1);
        self.read.borrow_mut().push(*bp);
        self.inner.read_block(bp)
    }
    fn free_block(&mut self, bp: &BlockPtr) {
        if !self.keep {
            self.inner.free_block(bp);
        }
    }
}

fn counting(store: &mut MemStore) -> Counting<'_> {
    Counting {
        inner: store,
        reads: Cell::new(0),
        read: RefCell::new(Vec::new()),
        keep: false,
    }
}

/// A synced object of `RECORDS` random records (the last one a hole) and its bytes, opened
/// again with a cache of `cache` bytes (nothing cached).
fn setup(store: &mut MemStore, cache: u64) -> (ObjectSet, ObjectId, Vec<u8>, BlockPtr) {
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set
        .allocate_object(store, OBJECT_TYPE_PLAIN, RECORD, 0, 0)
        .expect("allocate");
    let mut data = vec![0u8; (RECORDS * u64::from(RECORD)) as usize];
    SeededRng::new(3).fill(&mut data);
    let last = ((RECORDS - 1) * u64::from(RECORD)) as usize;
    data[last..].fill(0);
    set.write(store, id, 0, &data).expect("write");
    let root = set.sync(store).expect("sync");
    store.next_txg();
    let set = ObjectSet::open(store, &root)
        .expect("open")
        .with_cache_limit(cache);
    (set, id, data, root)
}

fn read_all(set: &mut ObjectSet, store: &dyn BlockStore, id: ObjectId, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    set.read(store, id, 0, &mut buf).expect("read");
    buf
}

/// The committed data block of record `blkid` of `id` under `root`.
fn data_block(store: &MemStore, root: &BlockPtr, id: ObjectId, blkid: u64) -> BlockPtr {
    let mut found = None;
    crate::visit_object_set(store, root, &mut |bp: &BlockPtr, at: BlockContext| {
        if at.object == id && at.level == 0 && at.blkid == blkid {
            found = Some(*bp);
        }
    })
    .expect("visit");
    found.expect("record has a block")
}

/// Goal: overlapping and adjacent partial writes cost the dirty limit their bytes, not
/// their records, a whole-record write replaces the pieces, and reads before and after the
/// sync (and after reopening) return the bytes a byte array written the same way holds.
#[test]
fn partial_writes_cost_their_bytes_and_read_back() {
    let mut store = MemStore::new();
    let (mut set, id, mut model, _) = setup(&mut store, 64 << 20);
    let base = set.dirty_bytes() + DNODE_SIZE as u64;
    let writes: [(u64, usize, u8); 6] = [
        (4096, 4096, 1),            // record 0
        (8192, 4096, 2),            // adjacent: one range of 8K
        (6000, 3000, 3),            // overlapping both
        (3 * 131_072 + 10, 100, 4), // record 3
        (7 * 131_072 + 50, 70, 5),  // record 7, a hole: pieces over zeros
        (2 * 131_072 - 20, 40, 6),  // across records 1 and 2
    ];
    for (offset, len, byte) in writes {
        set.write(&store, id, offset, &vec![byte; len])
            .expect("write");
        model[offset as usize..offset as usize + len].fill(byte);
    }
    let ranges = 5; // record 0: one range; 3, 7: one each; 1 and 2: one each
    let bytes = 8192 + 100 + 70 + 40;
    assert_eq!(
        set.dirty_bytes() - base,
        bytes + ranges * PIECE_OVERHEAD,
        "pieces cost their bytes"
    );
    assert!(
        read_all(&mut set, &store, id, model.len()) == model,
        "read before sync"
    );
    set.write(&store, id, 131_072 * 3, &vec![9u8; RECORD as usize])
        .expect("whole record");
    model[131_072 * 3..131_072 * 4].fill(9);
    assert_eq!(
        set.dirty_bytes() - base,
        bytes - 100 + 4 * PIECE_OVERHEAD + u64::from(RECORD),
        "a whole-record write replaces the pieces"
    );
    let root = set.sync(&mut store).expect("sync");
    store.next_txg();
    check_space(&store, &root);
    assert!(
        read_all(&mut set, &store, id, model.len()) == model,
        "read after sync"
    );
    let mut set = ObjectSet::open(&store, &root).expect("open");
    assert!(
        read_all(&mut set, &store, id, model.len()) == model,
        "read after reopen"
    );
}

/// Goal: a read wholly inside pieces reads no block; a read that is not reads the committed
/// block and lays the pieces over it; pieces that end up covering the record need no base.
#[test]
fn reads_inside_pieces_need_no_device_read() {
    let mut store = MemStore::new();
    let (mut set, id, mut model, _) = setup(&mut store, 0);
    let store = counting(&mut store);
    set.write(&store, id, 1000, &[7u8; 5000]).expect("write");
    model[1000..6000].fill(7);
    assert!(
        store
            .read
            .borrow()
            .iter()
            .any(|bp| bp.level == 0 && bp.lsize == RECORD),
        "the write read the committed record"
    );
    let reads = store.reads.get();
    let mut buf = vec![0u8; 4000];
    set.read(&store, id, 1500, &mut buf).expect("read");
    assert_eq!(buf, model[1500..5500], "covered read");
    assert_eq!(store.reads.get(), reads, "a covered read reads nothing");
    set.read(&store, id, 500, &mut buf).expect("read");
    assert_eq!(buf, model[500..4500], "merged read");
    assert!(
        store.reads.get() > reads,
        "an uncovered read reads the committed block"
    );
    let reads = store.reads.get();
    set.write(&store, id, 0, &[8u8; 1000]).expect("write");
    set.write(&store, id, 6000, &vec![8u8; RECORD as usize - 6000])
        .expect("write");
    model[..1000].fill(8);
    model[6000..RECORD as usize].fill(8);
    assert_eq!(store.reads.get(), reads, "writes into pieces read nothing");
    set.read(&store, id, 0, &mut buf).expect("read");
    assert_eq!(buf, model[..4000], "record covered by its pieces");
    assert_eq!(store.reads.get(), reads, "a covered record reads no base");
}

/// Goal: a punch or truncate inside a pieced record, a zero write over pieces, and a write
/// into a punched record give the bytes (and holes) they gave with whole copies.
#[test]
fn punches_within_pieced_records() {
    let mut store = MemStore::new();
    let (mut set, id, mut model, _) = setup(&mut store, 64 << 20);
    set.write(&store, id, 10_000, &[1u8; 20_000])
        .expect("write");
    model[10_000..30_000].fill(1);
    set.free_range(&store, id, 15_000, 1000).expect("punch");
    model[15_000..16_000].fill(0);
    set.write(&store, id, 131_072 + 100, &[2u8; 300])
        .expect("write");
    model[131_072 + 100..131_072 + 400].fill(2);
    // Truncate inside record 1's pieces: the rest of the file goes.
    set.free_range(&store, id, 131_072 + 200, u64::MAX)
        .expect("truncate");
    model.truncate(131_072 + 200);
    // Record 0 punched whole, then written in part: pieces over zeros.
    set.free_range(&store, id, 0, 131_072).expect("punch");
    model[..131_072].fill(0);
    set.write(&store, id, 50, &[3u8; 10]).expect("write");
    model[50..60].fill(3);
    let len = 4 * RECORD as usize;
    model.resize(len, 0);
    assert!(read_all(&mut set, &store, id, len) == model, "before sync");
    assert_eq!(
        set.next_hole(&store, id, 0).expect("hole"),
        2 * u64::from(RECORD),
        "records 0 and 1 hold data"
    );
    let root = set.sync(&mut store).expect("sync");
    store.next_txg();
    check_space(&store, &root);
    let mut set = ObjectSet::open(&store, &root).expect("open");
    assert!(read_all(&mut set, &store, id, len) == model, "after sync");
}

/// Goal: a sync between pieces of one record keeps the first txg's bytes under its root (a
/// snapshot's view) while the second txg's pieces merge over the first's block.
#[test]
fn snapshot_between_pieces() {
    let mut mem = MemStore::new();
    let (mut set, id, mut model, _) = setup(&mut mem, 64 << 20);
    let mut store = counting(&mut mem);
    store.keep = true;
    set.write(&store, id, 100, &[1u8; 100]).expect("write");
    model[100..200].fill(1);
    let first = set.sync(&mut store).expect("sync");
    store.inner.next_txg();
    let snapshot = model.clone();
    set.write(&store, id, 150, &[2u8; 100]).expect("write");
    model[150..250].fill(2);
    let second = set.sync(&mut store).expect("sync");
    store.inner.next_txg();
    let len = model.len();
    let mut old = ObjectSet::open(&store, &first).expect("open first");
    assert!(
        read_all(&mut old, &store, id, len) == snapshot,
        "first root"
    );
    let mut new = ObjectSet::open(&store, &second).expect("open second");
    assert!(read_all(&mut new, &store, id, len) == model, "second root");
}

/// Goal: the sync merges pieces over the committed block from the cache when it holds it
/// (no device read), from the devices when it does not, and fails (poisoning the set, the
/// last root intact) when the block went bad since the write read it; a partial write into
/// a damaged record fails and dirties nothing, as before pieces.
#[test]
fn sync_merges_cached_uncached_and_unreadable_bases() {
    for (cache, rot) in [(64u64 << 20, false), (0, false), (0, true)] {
        let mut mem = MemStore::new();
        let (mut set, id, mut model, root) = setup(&mut mem, cache);
        let block = data_block(&mem, &root, id, 2);
        let mut store = counting(&mut mem);
        set.write(&store, id, 2 * 131_072 + 7, &[5u8; 9])
            .expect("write");
        model[2 * 131_072 + 7..2 * 131_072 + 16].fill(5);
        if rot {
            store.inner.corrupt_block(block.dvas[0].offset);
        }
        store.read.borrow_mut().clear();
        let synced = set.sync(&mut store);
        if rot {
            assert!(matches!(synced, Err(ObjectError::Io { offset, .. }) if offset == 262_144));
            assert!(matches!(
                set.write(&store, id, 0, &[1]),
                Err(ObjectError::Poisoned)
            ));
            let mut set = ObjectSet::open(&store, &root).expect("the last root opens");
            let error = set.write(&store, id, 2 * 131_072, &[6u8; 10]);
            assert!(matches!(error, Err(ObjectError::Io { .. })), "{error:?}");
            assert_eq!(
                set.sync_estimate().data_blocks,
                0,
                "a failed write dirties nothing"
            );
            continue;
        }
        let root = synced.expect("sync");
        let base_read = store.read.borrow().contains(&block);
        assert_eq!(
            base_read,
            cache == 0,
            "the base is read at sync when not cached"
        );
        store.inner.next_txg();
        check_space(store.inner, &root);
        let mut set = ObjectSet::open(&store, &root).expect("open");
        assert!(read_all(&mut set, &store, id, model.len()) == model);
    }
}

/// Goal: a pieced record written ahead of its sync (`logbias=throughput`, fsync of a
/// volume) is written once, merged, and the sync adopts it; a later piece drops it.
#[test]
fn write_ahead_of_pieces_is_adopted() {
    let mut store = MemStore::new();
    let (mut set, id, mut model, _) = setup(&mut store, 0);
    set.write(&store, id, 300, &[4u8; 50]).expect("write");
    model[300..350].fill(4);
    let ahead = set
        .write_ahead(&mut store, id, 0)
        .expect("write ahead")
        .expect("a block");
    assert_eq!(set.written_ahead(id, 0), Some(ahead));
    set.write(&store, id, 131_072 + 1, &[4u8; 5])
        .expect("write");
    model[131_072 + 1..131_072 + 6].fill(4);
    let (written, error) = set.write_ahead_many(&mut store, id, &[0, 1, 2]);
    assert!(error.is_none());
    assert_eq!(written.len(), 1, "record 1 only: 0 is written, 2 is clean");
    let root = set.sync(&mut store).expect("sync");
    assert_eq!(data_block(&store, &root, id, 0), ahead, "record 0 adopted");
    assert_eq!(
        data_block(&store, &root, id, 1),
        written[0].1,
        "record 1 adopted"
    );
    store.next_txg();
    check_space(&store, &root);
    let mut set = ObjectSet::open(&store, &root).expect("open");
    assert!(read_all(&mut set, &store, id, model.len()) == model);
    set.write(&store, id, 10, &[1u8; 5]).expect("write");
    assert!(set.write_ahead(&mut store, id, 0).expect("ahead").is_some());
    set.write(&store, id, 20, &[1u8; 5]).expect("write");
    assert_eq!(
        set.written_ahead(id, 0),
        None,
        "a new piece drops the block"
    );
}

/// Goal: a pre-write takes only whole dirty records, by reference, and not those an
/// earlier pre-write holds; the sync adopts a pre-written record that did not change, and
/// not one edited since, whose bytes the pre-write still holds as they were (the edit
/// copied them). Method: two whole records and a piece; record 1 edited after the take.
#[test]
fn prewritten_records_adopted_unless_changed() {
    let mut store = MemStore::new();
    let (mut set, id, mut model, _) = setup(&mut store, 0);
    let record = RECORD as usize;
    let whole = vec![7u8; record];
    for blkid in 0..2 {
        set.write(&store, id, (blkid * record) as u64, &whole)
            .expect("write");
        model[blkid * record..(blkid + 1) * record].copy_from_slice(&whole);
    }
    set.write(&store, id, (2 * record + 10) as u64, &[5u8; 20])
        .expect("write");
    model[2 * record + 10..2 * record + 30].fill(5);
    let blocks = set.prewrite_candidates(u64::MAX, &|_| false);
    let blkids: Vec<u64> = blocks.iter().map(|b| b.blkid).collect();
    assert_eq!(blkids, [0, 1], "whole records only");
    assert!(set.prewrite_candidates(u64::MAX, &|_| true).is_empty());
    let bps: Vec<BlockPtr> = blocks
        .iter()
        .map(|b| store.write_block(&b.bytes, &b.props).expect("write ahead"))
        .collect();
    set.write(&store, id, (record + 5) as u64, &[9u8; 3])
        .expect("write");
    model[record + 5..record + 8].fill(9);
    assert_eq!(*blocks[1].bytes, whole, "the edit copied the record");
    assert!(set.adopt_prewritten(&blocks[0], &bps[0]));
    assert!(
        !set.adopt_prewritten(&blocks[1], &bps[1]),
        "record 1 changed"
    );
    store.free_block(&bps[1]);
    let root = set.sync(&mut store).expect("sync");
    assert_eq!(data_block(&store, &root, id, 0), bps[0], "record 0 adopted");
    assert_ne!(data_block(&store, &root, id, 1), bps[1]);
    store.next_txg();
    check_space(&store, &root);
    let mut set = ObjectSet::open(&store, &root).expect("open");
    assert!(read_all(&mut set, &store, id, model.len()) == model);
}

/// One operation of [`pieces_match_a_byte_array_through_faults_and_crashes`], on records
/// of 4 KiB.
struct Run {
    set: ObjectSet,
    store: MemStore,
    id: ObjectId,
    root: BlockPtr,
    /// The bytes now, and as of the last root.
    model: Vec<u8>,
    committed: Vec<u8>,
    /// Records whose committed block was damaged, and records changed since the last root.
    damaged: BTreeSet<u64>,
    touched: BTreeSet<u64>,
    /// Failed writes and syncs (a failed sync leaves its blocks allocated in the
    /// [`MemStore`], as a pool's uncommitted allocations; space is checked before one).
    failed_writes: u64,
    failed_syncs: u64,
    /// Reads by [`ObjectSet::read_out`] not joined yet, with the bytes they read: joined
    /// after later writes, syncs and crashes, they must still give those bytes.
    held: Vec<(ReadOut, Vec<u8>)>,
}

const SMALL: u64 = 4096;
const SPAN: u64 = 64 * SMALL;

impl Run {
    fn crash(&mut self) {
        self.set = ObjectSet::open(&self.store, &self.root)
            .expect("the last root opens")
            .with_cache_limit(16 * SMALL);
        self.model.clone_from(&self.committed);
        self.touched.clear();
    }

    /// Reads the range with [`ObjectSet::read`] and with [`ObjectSet::read_out`]; the
    /// latter is kept unjoined, to be joined after the steps that follow (`held`).
    fn check_read(&mut self, offset: u64, len: u64) {
        let mut buf = vec![0u8; len as usize];
        let copied = self.set.read(&self.store, self.id, offset, &mut buf);
        self.check_bytes(offset, len, copied.map(|()| buf), "read");
        let out = self
            .set
            .read_out(&self.store, self.id, offset, len as usize);
        if let Ok(out) = &out {
            let (start, end) = (offset as usize, (offset + len) as usize);
            self.held
                .push((out.clone(), self.model[start..end].to_vec()));
        }
        self.check_bytes(offset, len, out.map(ReadOut::into_vec), "read_out");
    }

    fn check_bytes(&self, offset: u64, len: u64, read: Result<Vec<u8>, ObjectError>, how: &str) {
        let records: BTreeSet<u64> = (offset / SMALL..(offset + len).div_ceil(SMALL)).collect();
        match read {
            Ok(buf) => {
                let (start, end) = (offset as usize, (offset + len) as usize);
                assert!(
                    buf == self.model[start..end],
                    "{how} {offset}+{len}: wrong bytes"
                );
            }
            Err(error) => assert!(
                !records.is_disjoint(&self.damaged),
                "{how} {offset}+{len} of intact records failed: {error:?}"
            ),
        }
    }

    /// A partial write or punch inside one record.
    fn write_step(&mut self, rng: &mut SeededRng) {
        let record = rng.below(SPAN / SMALL);
        let within = rng.below(SMALL);
        let len = 1 + rng.below(SMALL - within);
        let offset = record * SMALL + within;
        let mut data = vec![0u8; len as usize];
        if rng.chance(5, 6) {
            rng.fill(&mut data);
        }
        let punch = rng.chance(1, 10);
        let result = if punch {
            self.set.free_range(&self.store, self.id, offset, len)
        } else {
            self.set.write(&self.store, self.id, offset, &data)
        };
        match result {
            Ok(()) => {
                let range = offset as usize..(offset + len) as usize;
                self.model[range].copy_from_slice(&data);
                if punch {
                    self.model[offset as usize..(offset + len) as usize].fill(0);
                }
                self.touched.insert(record);
            }
            Err(error) => {
                assert!(
                    self.damaged.contains(&record),
                    "write into intact record {record} failed: {error:?}"
                );
                self.failed_writes += 1;
            }
        }
    }

    fn step(&mut self, rng: &mut SeededRng) {
        match rng.below(20) {
            0..=10 => self.write_step(rng),
            11..=14 => {
                let offset = rng.below(SPAN);
                let len = rng.below(SPAN - offset).min(3 * SMALL);
                self.check_read(offset, len);
            }
            15..=16 => match self.set.sync(&mut self.store) {
                Ok(root) => {
                    if self.failed_syncs == 0 {
                        check_space(&self.store, &root);
                    }
                    self.store.next_txg();
                    self.root = root;
                    self.committed.clone_from(&self.model);
                    for record in std::mem::take(&mut self.touched) {
                        self.damaged.remove(&record);
                    }
                }
                Err(error) => {
                    assert!(!self.damaged.is_empty(), "sync failed: {error:?}");
                    self.failed_syncs += 1;
                    self.crash();
                }
            },
            17 => self.crash(),
            18 => {
                // Bit rot beyond parity in a committed data block.
                let record = rng.below(SPAN / SMALL);
                let bytes = &self.committed[(record * SMALL) as usize..][..SMALL as usize];
                if !self.damaged.contains(&record) && bytes.iter().any(|byte| *byte != 0) {
                    let bp = data_block(&self.store, &self.root, self.id, record);
                    self.store.corrupt_block(bp.dvas[0].offset);
                    self.damaged.insert(record);
                }
            }
            _ => {
                let full = vec![rng.below(256) as u8; SMALL as usize];
                let record = rng.below(SPAN / SMALL);
                let at = (record * SMALL) as usize;
                self.set
                    .write(&self.store, self.id, at as u64, &full)
                    .expect("a whole-record write reads nothing");
                self.model[at..at + SMALL as usize].copy_from_slice(&full);
                self.touched.insert(record);
            }
        }
    }
}

/// Goal: through random partial and whole writes, punches, reads, syncs, crashes (the set
/// dropped and reopened from its last root) and bit rot in committed blocks, every read and
/// write that succeeds agrees with a plain byte array, every failure involves a damaged
/// record, and every sync leaves exactly the reachable blocks live; a read taken as blocks
/// (`read_out`) and joined only after the rest of the run still gives the bytes it read.
/// Method: 40 seeds of 400 steps over 64 records of 4 KiB with a cache of 16 records (so
/// bases are read at sync).
#[test]
fn pieces_match_a_byte_array_through_faults_and_crashes() {
    let (mut failed_writes, mut failed_syncs, mut clean_seeds) = (0, 0, 0);
    for seed in 0..40 {
        let mut rng = SeededRng::new(seed);
        let mut store = MemStore::new();
        let mut set = ObjectSet::create(ObjsetKind::Filesystem);
        let id = set
            .allocate_object(&store, OBJECT_TYPE_PLAIN, SMALL as u32, 0, 0)
            .expect("allocate");
        let mut model = vec![0u8; SPAN as usize];
        rng.fill(&mut model);
        set.write(&store, id, 0, &model).expect("write");
        let root = set.sync(&mut store).expect("sync");
        store.next_txg();
        let mut run = Run {
            set,
            store,
            id,
            root,
            committed: model.clone(),
            model,
            damaged: BTreeSet::new(),
            touched: BTreeSet::new(),
            failed_writes: 0,
            failed_syncs: 0,
            held: Vec::new(),
        };
        run.crash();
        for _ in 0..400 {
            run.step(&mut rng);
        }
        run.check_read(0, SPAN);
        for (out, bytes) in std::mem::take(&mut run.held) {
            assert!(out.into_vec() == bytes, "a held read joined later changed");
        }
        if let Ok(root) = run.set.sync(&mut run.store)
            && run.failed_syncs == 0
        {
            check_space(&run.store, &root);
            clean_seeds += 1;
        }
        failed_writes += run.failed_writes;
        failed_syncs += run.failed_syncs;
    }
    // The faults were met: writes into rotted records failed, and syncs whose base rotted
    // after the write read it; and most seeds checked space at every sync.
    assert!(
        failed_writes > 0 && failed_syncs > 0,
        "{failed_writes} {failed_syncs}"
    );
    assert!(
        clean_seeds >= 10,
        "{clean_seeds} seeds without a failed sync"
    );
}
