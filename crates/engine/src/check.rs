//! Whole-pool checkers for the simulator and tests (STYLE.md §7: "every reachable block
//! verifies", "space closes", "birth txg <= current txg"), plus the one knob tarn-sim turns
//! that the engine does not yet expose as a property (the root dataset's write config).
//!
//! [`verify_pool`] works from the last committed uberblock, not from in-memory state, so what
//! it checks is what an import would find:
//!
//! ```text
//!  uberblock ─► MOS object set ─► root dataset bp ─► data object set      (visit_object_set)
//!                               └─► snapshot roots and dead lists of each dataset
//!           └─► space log: delta(T) ─► ... ─► base(B) | hole               (walked via prev)
//!
//!  reachable R = every DVA of every block above        (must not overlap: no double use;
//!                a block a snapshot shares with the head or another snapshot counts once)
//!              + the first intent-log block each committed dataset header names
//!  live      L = replay of the space log's records      (alloc adds, free removes)
//!  deferred  D = frees the log recorded in the last TXG_DEFER txgs
//!  open      O = intent-log blocks allocated since the commit (SpaceManager::open_allocated)
//!  checks:   R == L (nothing leaked, nothing reachable that is free)
//!            SpaceManager::allocated() == |R| + |D| + |O|
//!            the engine's log chains in memory hold exactly the committed first blocks
//!            plus O
//!            every filesystem's used-by counts == a scan of its committed inodes
//!            dead lists == blocks of snapshots the head does not reference, each once,
//!            and their space == usedbysnapshots
//! ```
//! The deferred set is not exposed by tarn-space, so it is derived from the log the way
//! `SpaceManager::load` derives it (a free of an extent allocated in the same txg is released
//! at once, never deferred; a base's frees are frees of the base's txg, in whichever of its
//! blocks they are). The running pool keeps every free a base lists exactly that long too
//! (tarn-space I2), so the check is exact, also right after a condense. Only a running scan,
//! which holds every free, makes allocated a range (`deferred_exact` is then false).

use tarn_base::Txg;
use tarn_format::{BlockPtr, BlockType};
use tarn_objects::{ObjectSet, ObjsetWriteConfig, visit_object_set};
use tarn_space::log::{LogBlock, LogKind};
use tarn_space::range_tree::RangeTree;
use tarn_space::{CHAIN_BLOCKS_MAX, TXG_DEFER};

use tarn_format::uberblock::Uberblock;

use crate::mos::Mos;
use crate::{Engine, EngineError, Imported};

/// What [`verify_pool`] measured on a pool that passed every check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// Txg of the last committed uberblock.
    pub txg: Txg,
    /// Reachable blocks read and verified (MOS, data object set, space log).
    pub blocks: u64,
    /// Sum of the allocated size of every DVA of every reachable block.
    pub referenced_bytes: u64,
    /// Frees of the last `TXG_DEFER` txgs as the space log records them.
    pub deferred_bytes: u64,
    /// `SpaceManager::allocated()`.
    pub allocated_bytes: u64,
    /// False while a scan holds frees (then allocated was only checked to lie between
    /// referenced plus deferred and referenced plus every free the chain records).
    pub deferred_exact: bool,
}

/// The txg of the last committed uberblock of pool `name` (`None` before the first commit).
pub fn committed_txg(engine: &Engine, name: &str) -> Result<Option<Txg>, EngineError> {
    let handle = engine.pool(name)?;
    let inner = handle.lock_open();
    Ok(inner.pool.last_uberblock().map(|ub| ub.txg))
}

/// The txg whose uberblock the import of `name` opened (`None` if it was created here).
pub fn imported_txg(engine: &Engine, name: &str) -> Result<Option<Txg>, EngineError> {
    let handle = engine.pool(name)?;
    let inner = handle.lock_open();
    Ok(inner.pool.imported_txg())
}

/// Sets how the root dataset writes blocks from now on (checksum, compression, copies).
/// Not persistent: an import starts from the default again. Dataset properties will replace
/// this hook; until then it lets the simulator vary what the pipeline writes.
pub fn set_data_write_config(
    engine: &Engine,
    name: &str,
    config: ObjsetWriteConfig,
) -> Result<(), EngineError> {
    let handle = engine.pool(name)?;
    let mut inner = handle.lock();
    inner.root_objset().set_write_config(config)?;
    Ok(())
}

/// Sets what the root dataset's clean-block cache keeps (as `primarycache` would), without
/// a txg: the simulator's way to send reads to the devices and cache devices. Not
/// persistent, like [`set_data_write_config`].
pub fn set_data_cache_policy(
    engine: &Engine,
    name: &str,
    policy: tarn_objects::CachePolicy,
) -> Result<(), EngineError> {
    let handle = engine.pool(name)?;
    let mut inner = handle.lock();
    inner.root_objset().set_cache_policy(policy);
    Ok(())
}

/// Makes the next sync of pool `name` condense its space log into a base (tests: a base
/// carries every extent, deferred free and clone reference).
pub fn condense_next_sync(engine: &Engine, name: &str) -> Result<(), EngineError> {
    let handle = engine.pool(name)?;
    handle.lock().pool.space_mut().condense_next_sync();
    Ok(())
}

/// One reachable block and where it was found (for messages).
#[derive(Clone)]
struct Reached {
    bp: BlockPtr,
    origin: &'static str,
}

/// Verifies pool `name` from its last committed uberblock: every reachable block reads back
/// through the pipeline with a good checksum, none is born after that txg, no two reachable
/// blocks share space, the space log's live set equals the reachable set, and the space
/// manager's allocated bytes equal referenced plus deferred. Returns the first broken check.
pub fn verify_pool(engine: &Engine, name: &str) -> Result<CheckReport, String> {
    let handle = engine.pool(name).map_err(|e| e.to_string())?;
    let inner = handle.lock();
    let pool = &inner.pool;
    if let Some(why) = pool.suspended() {
        return Err(format!("pool is suspended: {why}"));
    }
    let ub = *pool.last_uberblock().ok_or("pool has no committed txg")?;
    if ub.root.birth != ub.txg {
        return Err(format!(
            "uberblock {} names a MOS root born in txg {}",
            ub.txg, ub.root.birth
        ));
    }
    let (reached, chain, log_heads) = reach(&inner, &ub)?;
    let vdevs = pool.tops().len();
    let mut reachable = check_blocks(pool, &reached, ub.txg, vdevs)?;
    let open_bytes = check_log_blocks(&inner, &mut reachable, &log_heads)?;
    let (
        live,
        Deferred {
            bytes: deferred_bytes,
            all: all_frees,
        },
        brt,
    ) = replay_chain(&chain, ub.txg, vdevs)?;
    compare_sets(&reachable, &live)?;
    if !brt
        .iter()
        .map(|(d, r)| (*d, *r))
        .eq(pool.space().brt().entries())
    {
        return Err("the block reference table differs from the space log's replay".into());
    }
    check_brt_space(pool.space().brt(), &brt)?;
    check_usedby(&inner)?;
    let referenced_bytes: u64 = reachable.iter().map(RangeTree::total).sum();
    let allocated_bytes = pool.space().allocated();
    // A running scan holds every free (none becomes reusable until it ends), so frees
    // older than TXG_DEFER txgs may still count as allocated: any free the chain records.
    // Intent-log blocks written since the commit (open) are allocated but in no delta yet.
    let held = pool.space().hold_deferred();
    let deferred_exact = !held;
    let exact = referenced_bytes + open_bytes + deferred_bytes;
    let closes = if held {
        (exact..=referenced_bytes + open_bytes + all_frees).contains(&allocated_bytes)
    } else {
        allocated_bytes == exact
    };
    if !closes {
        return Err(format!(
            "space does not close: allocated {allocated_bytes} != referenced {referenced_bytes} \
             + deferred {deferred_bytes} + open log {open_bytes} (txg {})",
            ub.txg
        ));
    }
    Ok(CheckReport {
        txg: ub.txg,
        blocks: reached.len() as u64,
        referenced_bytes,
        deferred_bytes,
        allocated_bytes,
        deferred_exact,
    })
}

/// Every block pointer reachable from the last committed uberblock of `name` (MOS, every
/// dataset's object set, the space log), for tests that check where blocks were allocated.
pub fn reachable_blocks(engine: &Engine, name: &str) -> Result<Vec<BlockPtr>, String> {
    let handle = engine.pool(name).map_err(|e| e.to_string())?;
    let inner = handle.lock();
    let ub = *inner
        .pool
        .last_uberblock()
        .ok_or("pool has no committed txg")?;
    let (reached, _, _) = reach(&inner, &ub)?;
    Ok(reached.into_iter().map(|r| r.bp).collect())
}

/// The block pointers of every dataset's object sets (heads and snapshots, hidden datasets'
/// too) reachable from the last committed uberblock of `name`: [`reachable_blocks`] without
/// the MOS and the space log, for tests that check a step left no dataset blocks behind.
pub fn dataset_blocks(engine: &Engine, name: &str) -> Result<Vec<BlockPtr>, String> {
    let handle = engine.pool(name).map_err(|e| e.to_string())?;
    let inner = handle.lock();
    let ub = *inner
        .pool
        .last_uberblock()
        .ok_or("pool has no committed txg")?;
    let (reached, _) = reach_tree(&inner, &ub)?;
    Ok(reached
        .into_iter()
        .filter(|r| r.origin != "MOS")
        .map(|r| r.bp)
        .collect())
}

/// Where every copy of the object-set root of dataset `name` (as its header records it)
/// lies: each leaf's path and device byte range (labels counted), for tests that damage
/// exactly that block in device files.
pub fn objset_root_places(
    engine: &Engine,
    name: &str,
) -> Result<Vec<(String, std::ops::Range<u64>)>, String> {
    let (pool, id) = engine.find_dataset(name).map_err(|e| e.to_string())?;
    let root = {
        let handle = engine.pool(&pool).map_err(|e| e.to_string())?;
        let inner = handle.lock();
        inner.datasets.node(id).header.objset
    };
    let mut places = Vec::new();
    for dva in root.dvas.iter().filter(|dva| dva.asize > 0) {
        let placement = engine
            .block_placement(&pool, dva)
            .map_err(|e| e.to_string())?;
        for child in placement.children {
            let leaves = child.leaves.into_iter();
            places.extend(leaves.map(|leaf| (leaf, child.range.clone())));
        }
    }
    Ok(places)
}

/// Reads `buf.len()` bytes at `offset` of `object` in snapshot `full` (`tank@monday`) of
/// the pool's root-level naming, from the snapshot's committed object set: what tests
/// compare with the bytes the dataset held when the snapshot was taken.
pub fn snapshot_read(
    engine: &Engine,
    full: &str,
    object: tarn_base::ObjectId,
    offset: u64,
    buf: &mut [u8],
) -> Result<(), String> {
    let (dataset, snap) = full.split_once('@').ok_or("not a snapshot name")?;
    let pool_name = dataset.split('/').next().unwrap_or(dataset);
    let handle = engine.pool(pool_name).map_err(|e| e.to_string())?;
    let inner = handle.lock();
    let id = inner.datasets.by_name(dataset).ok_or("no such dataset")?;
    let (_, snapshot) = inner
        .datasets
        .node(id)
        .snapshot(snap)
        .ok_or("no such snapshot")?;
    let reader = inner.pool.reader();
    let mut objset =
        ObjectSet::open(&reader, &snapshot.header.objset).map_err(|e| e.to_string())?;
    objset
        .read(&reader, object, offset, buf)
        .map_err(|e| e.to_string())
}

/// The committed level-0 blocks of the lists (the MOS objects holding block pointers) of the
/// dead list of snapshot `full` (`tank/ds@snap`): what tests rot to make that dead list
/// unreadable. Committed only: sync first.
pub fn deadlist_blocks(engine: &Engine, full: &str) -> Result<Vec<BlockPtr>, String> {
    let (dataset, snap) = full.split_once('@').ok_or("not a snapshot name")?;
    let pool_name = dataset.split('/').next().unwrap_or(dataset);
    let handle = engine.pool(pool_name).map_err(|e| e.to_string())?;
    let mut guard = handle.lock();
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = &mut *guard;
    let id = datasets.by_name(dataset).ok_or("no such dataset")?;
    let (_, snapshot) = datasets.node(id).snapshot(snap).ok_or("no such snapshot")?;
    let reader = pool.reader();
    let mos = mos.objset();
    let buckets = tarn_dataset::deadlist::buckets(mos, &reader, snapshot.header.deadlist)
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for list in buckets.into_iter().flat_map(|b| b.lists) {
        let info = mos.object_info(&reader, list).map_err(|e| e.to_string())?;
        let bps = mos
            .block_pointers(&reader, list, 0, info.maxblkid + 1)
            .map_err(|e| e.to_string())?
            .ok_or("a dead list is dirty: sync first")?;
        out.extend(bps.into_iter().filter(|bp| !bp.is_hole()));
    }
    Ok(out)
}

/// Makes the scans of pool `name` list at most `limit` blocks at a time, in rounds (tests of
/// a scan whose queue is smaller than the pool; the default is `scrub::SCAN_QUEUE_MAX`).
pub fn set_scan_queue_limit(engine: &Engine, name: &str, limit: usize) -> Result<(), String> {
    let handle = engine.pool(name).map_err(|e| e.to_string())?;
    handle.lock().scan.set_queue_limit(limit);
    Ok(())
}

/// Every filesystem's per-owner counts, as committed, equal a scan of its committed inodes
/// (datasets without counts, or whose filesystem cannot be read, are skipped: the block
/// checks above judge the bytes).
fn check_usedby(inner: &Imported) -> Result<(), String> {
    let reader = inner.pool.reader();
    let scale = crate::datasets::used_scale(&crate::datasets::deflate_table(&inner.pool));
    for id in inner.datasets.all() {
        let node = inner.datasets.node(id);
        // A receive in progress keeps no counts until its END (`send_ops`).
        if node.header.objset.is_hole() || node.receiving {
            continue;
        }
        let mut os = ObjectSet::open(&reader, &node.header.objset)
            .map_err(|e| format!("dataset {}: {e}", node.name))?;
        let config = tarn_posix::FsConfig::default();
        let now = tarn_posix::Timespec::default();
        let mut fs = tarn_posix::Fs::new(&mut os, &reader, now, config);
        if let Ok(Some(why)) = fs.usedby_mismatch(scale) {
            return Err(format!("dataset {}: {why}", node.name));
        }
    }
    Ok(())
}

/// The blocks of `dataset`'s intent-log chain in memory (first block, blocks written since,
/// the pre-allocated next one), for tests that damage them on disk.
pub fn log_blocks(
    engine: &Engine,
    pool: &str,
    dataset: crate::DatasetId,
) -> Result<Vec<tarn_format::Dva>, EngineError> {
    Ok(engine.pool(pool)?.lock().logs.blocks(dataset))
}

/// The blocks (volume or file data) of `dataset` written ahead of the open txg by
/// `logbias=throughput` commits and not yet adopted or freed, for tests.
pub fn written_ahead(
    engine: &Engine,
    pool: &str,
    dataset: crate::DatasetId,
) -> Result<Vec<BlockPtr>, EngineError> {
    Ok(engine.pool(pool)?.lock().logs.written_ahead(dataset))
}

/// Adds the committed intent-log first blocks to the reachable set and checks that the
/// engine's chains in memory hold exactly those plus the blocks allocated since the commit;
/// returns the bytes of the latter (allocated, in no committed delta).
fn check_log_blocks(
    inner: &Imported,
    reachable: &mut [RangeTree],
    log_heads: &[tarn_format::Dva],
) -> Result<u64, String> {
    let head_bytes = add_log_heads(reachable, log_heads)?;
    let open_bytes = inner.pool.space().open_allocated();
    // Blocks written ahead by a pre-write are open allocations too, until a sync takes them.
    let prewritten = inner.lane.prewrite.allocated_bytes();
    if inner.logs.allocated_bytes() + prewritten != head_bytes + open_bytes {
        return Err(format!(
            "intent-log blocks in memory ({} bytes) + pre-written blocks ({prewritten}) != \
             committed first blocks ({head_bytes}) + open allocations ({open_bytes})",
            inner.logs.allocated_bytes()
        ));
    }
    Ok(open_bytes)
}

/// Adds the committed intent-log first blocks to the reachable set (they have no block
/// pointer to read them by: their contents are checked by replay) and returns their bytes.
fn add_log_heads(reachable: &mut [RangeTree], heads: &[tarn_format::Dva]) -> Result<u64, String> {
    let mut bytes = 0;
    for dva in heads {
        let vdevs = reachable.len();
        let tree = reachable
            .get_mut(dva.vdev.0 as usize)
            .ok_or_else(|| format!("intent-log block names vdev {} of {vdevs}", dva.vdev.0))?;
        if dva.asize == 0 || tree.intersects(dva.offset, dva.asize) {
            return Err(format!(
                "intent-log block {} overlaps a reachable block",
                tarn_zio::dva_name(dva)
            ));
        }
        tree.add(dva.offset, dva.asize);
        bytes += dva.asize;
    }
    Ok(bytes)
}

/// The reached blocks, the space-log chain and the committed intent-log first blocks.
type Reach = (Vec<Reached>, Chain, Vec<tarn_format::Dva>);

/// Every block reachable from `ub` (MOS, root dataset, space log), the decoded space-log
/// chain, oldest first, and the first block of every committed intent-log chain. The
/// in-memory chain and dataset root must match what is on disk.
fn reach(inner: &Imported, ub: &Uberblock) -> Result<Reach, String> {
    let (mut reached, log_heads) = reach_tree(inner, ub)?;
    let pool = &inner.pool;
    let chain = read_chain(pool, &ub.space_log)?;
    let on_disk: Vec<BlockPtr> = chain.iter().map(|(bp, _)| *bp).collect();
    if pool.space().chain() != on_disk.as_slice() {
        return Err(format!(
            "space log chain in memory ({} blocks) differs from the one on disk ({} blocks)",
            pool.space().chain().len(),
            on_disk.len()
        ));
    }
    reached.extend(on_disk.iter().map(|bp| Reached {
        bp: *bp,
        origin: "space log",
    }));
    Ok((reached, chain, log_heads))
}

/// Every space an import of `inner`'s committed txg finds in use without its space log: each
/// copy of every block the MOS and the datasets reach, and the first block of each committed
/// intent-log chain (ZFS's leak-check walk; `tarn_pool::Pool::rebuild_space`).
pub(crate) fn live_space(inner: &Imported) -> Result<Vec<tarn_format::Dva>, String> {
    let ub = *inner
        .pool
        .last_uberblock()
        .ok_or("pool has no committed txg")?;
    let (reached, log_heads) = reach_tree(inner, &ub)?;
    let mut live: Vec<tarn_format::Dva> = reached
        .iter()
        .flat_map(|r| r.bp.copies().copied())
        .collect();
    live.extend(log_heads);
    Ok(live)
}

/// [`reach`] without the space log: the blocks of the MOS and of every dataset, and the
/// committed intent-log first blocks.
fn reach_tree(
    inner: &Imported,
    ub: &Uberblock,
) -> Result<(Vec<Reached>, Vec<tarn_format::Dva>), String> {
    let pool = &inner.pool;
    let reader = pool.reader();
    let mut reached = Vec::new();
    let mut visit_mos = |bp: &BlockPtr, _| {
        reached.push(Reached {
            bp: *bp,
            origin: "MOS",
        })
    };
    visit_object_set(&reader, &ub.root, &mut visit_mos).map_err(|e| format!("MOS walk: {e}"))?;
    let mut mos = Mos::open(&reader, &ub.root).map_err(|e| format!("MOS open: {e}"))?;
    let tree = crate::datasets::Tree::load(mos.objset(), &reader, "check")
        .map_err(|e| format!("dataset tree: {e}"))?;
    let committed = tree.all();
    if committed != inner.datasets.all() {
        return Err("the committed dataset tree differs from the open one".into());
    }
    let log_heads = committed
        .iter()
        .map(|id| tree.node(*id).header.log.first)
        .filter(|first| !first.is_empty())
        .map(|first| first.dva)
        .collect();
    for id in committed {
        let data_root = tree.node(id).objset.root();
        if data_root != inner.datasets.node(id).objset.root() {
            return Err(format!(
                "dataset {}: committed object-set pointer differs from the open one",
                id.0
            ));
        }
        let node = tree.node(id);
        if (node.origin, node.origin_dead)
            != (
                inner.datasets.node(id).origin,
                inner.datasets.node(id).origin_dead,
            )
        {
            return Err(format!(
                "{}: the open origin differs from the committed one",
                node.name
            ));
        }
        let deflate = crate::datasets::deflate_table(pool);
        let snapshots = SnapshotWalk {
            root: data_root,
            header: &node.header,
            snapshots: &node.snapshots,
            deflate: &deflate,
            floor: node.floor(),
            shared: node.shared(),
            brt: pool.space().brt(),
        };
        reached.extend(snapshots.reach(mos.objset(), &reader, &node.name)?);
    }
    Ok((reached, log_heads))
}

/// One dataset's head and snapshots as committed, for [`reach`].
struct SnapshotWalk<'a> {
    root: BlockPtr,
    header: &'a tarn_dataset::DatasetHeader,
    snapshots: &'a [tarn_dataset::snapshot::Snapshot],
    deflate: &'a crate::datasets::Deflate,
    /// A clone's origin txg (0 otherwise): blocks born up to it are the origin's.
    floor: u64,
    /// What the dataset says a clone shares with its origin.
    shared: u64,
    /// The pool's block reference table: which blocks may be named more than once.
    brt: &'a tarn_space::Brt,
}

/// Dead blocks by their first DVA and birth, with how many dead-list entries name each (more
/// than one only for a block cloned more than once in one txg).
type DeadBlocks = std::collections::BTreeMap<(u32, u64, u64), (BlockPtr, u64)>;

/// Pointers per block (by [`walk_key`]).
type PointerCounts = std::collections::BTreeMap<(u32, u64, u64), u64>;

/// A block's identity in the walks: its first DVA and its birth. Clones of one block share
/// the DVA but not the birth (tarn-space `brt`), and count as separate blocks.
fn walk_key(bp: &BlockPtr) -> (u32, u64, u64) {
    (bp.dvas[0].vdev.0, bp.dvas[0].offset, bp.birth.0)
}

impl SnapshotWalk<'_> {
    /// Every block of every dead list of the dataset (each at most once, in a bucket no
    /// older than its birth, unless cloned) and their deflated space.
    fn dead_blocks(
        &self,
        mos: &mut ObjectSet,
        reader: &dyn tarn_zio::BlockStore,
        name: &str,
    ) -> Result<(DeadBlocks, u64), String> {
        let mut lists: Vec<tarn_base::ObjectId> =
            self.snapshots.iter().map(|s| s.header.deadlist).collect();
        if self.header.snap.is_present() {
            lists.push(self.header.snap.deadlist);
        }
        let mut dead = DeadBlocks::new();
        let mut dead_used = 0;
        // A bucket and its blocks' births lie between the same two snapshots (or origin):
        // destroys only widen those intervals, and a promote files blocks again by them.
        let txgs: Vec<tarn_base::Txg> = std::iter::once(tarn_base::Txg(self.floor))
            .filter(|t| t.0 > 0)
            .chain(self.snapshots.iter().map(|s| s.header.txg))
            .collect();
        let interval = |txg: u64| tarn_dataset::deadlist::bucket_of(&txgs, tarn_base::Txg(txg));
        for list in lists {
            let entries = tarn_dataset::deadlist::entries(mos, reader, list)
                .map_err(|e| format!("{name}: dead list {}: {e}", list.0))?;
            for (bucket, bp) in entries {
                if bp.birth.0 > bucket {
                    return Err(format!(
                        "{name}: dead block born in txg {} sits in bucket {bucket}",
                        bp.birth.0
                    ));
                }
                if interval(bucket) != interval(bp.birth.0) {
                    return Err(format!(
                        "{name}: dead block born in txg {} sits in bucket {bucket} of another \
                         snapshot",
                        bp.birth.0
                    ));
                }
                if bucket <= self.floor {
                    // The origin's block a clone let go of: the origin reaches it.
                    continue;
                }
                let count = &mut dead.entry(walk_key(&bp)).or_insert((bp, 0)).1;
                *count += 1;
                if *count > 1 && self.brt.refs(&bp.dvas[0]) == 0 {
                    return Err(format!(
                        "{name}: a block is on two dead lists (double free)"
                    ));
                }
                dead_used += crate::datasets::dsize(self.deflate, &bp);
            }
        }
        Ok((dead, dead_used))
    }

    /// Pointers of each block the snapshots hold and the head no longer does. A block is
    /// named more than once in one tree only when cloned more than once in its birth txg;
    /// after that txg its pointers only go, so the most any snapshot holds less what the
    /// head holds went to the dead lists (each pointer once).
    fn held_by_snapshots_only(
        &self,
        reader: &dyn tarn_zio::BlockStore,
        name: &str,
        head: &DeadBlocks,
    ) -> Result<PointerCounts, String> {
        let mut in_snapshots: PointerCounts = Default::default();
        for snapshot in self.snapshots {
            let mut counts: PointerCounts = Default::default();
            visit_object_set(reader, &snapshot.header.objset, &mut |bp: &BlockPtr, _| {
                if bp.birth.0 > self.floor {
                    *counts.entry(walk_key(bp)).or_insert(0) += 1;
                }
            })
            .map_err(|e| format!("{name}@{}: snapshot walk: {e}", snapshot.name))?;
            for (key, count) in counts {
                let most = in_snapshots.entry(key).or_insert(0);
                *most = (*most).max(count);
            }
        }
        Ok(in_snapshots
            .into_iter()
            .map(|(key, count)| {
                let held = head.get(&key).map_or(0, |(_, held)| *held);
                (key, count.saturating_sub(held))
            })
            .filter(|(_, count)| *count > 0)
            .collect())
    }

    /// Every block the head or a snapshot references, once per reference (a block cloned
    /// twice into the head is listed twice), after checking the dead lists: they hold
    /// exactly the snapshots' blocks the head no longer references, and `usedbysnapshots`
    /// is their space.
    fn reach(
        &self,
        mos: &mut ObjectSet,
        reader: &dyn tarn_zio::BlockStore,
        name: &str,
    ) -> Result<Vec<Reached>, String> {
        let mut head: DeadBlocks = std::collections::BTreeMap::new();
        let (mut shared, mut referenced) = (0, 0);
        visit_object_set(reader, &self.root, &mut |bp: &BlockPtr, _| {
            // Every pointer counts in full, a clone's too (tarn-space `brt`, as OpenZFS).
            referenced += crate::datasets::dsize(self.deflate, bp);
            if bp.birth.0 <= self.floor {
                shared += crate::datasets::dsize(self.deflate, bp);
            } else {
                head.entry(walk_key(bp)).or_insert((*bp, 0)).1 += 1;
            }
        })
        .map_err(|e| format!("dataset walk: {e}"))?;
        if referenced != self.header.referenced {
            return Err(format!(
                "{name}: its blocks take {referenced} bytes but it counts {} referenced",
                self.header.referenced
            ));
        }
        if shared != self.shared {
            return Err(format!(
                "{name}: shares {shared} bytes with its origin but counts {}",
                self.shared
            ));
        }
        let only_snapshots = self.held_by_snapshots_only(reader, name, &head)?;
        let (dead, dead_used) = self.dead_blocks(mos, reader, name)?;
        let dead_counts = dead.iter().map(|(key, (_, count))| (key, count));
        if !dead_counts.eq(only_snapshots.iter()) {
            let leaked = only_snapshots
                .iter()
                .filter(|(k, count)| dead.get(*k).map_or(0, |(_, dead)| *dead) < **count)
                .count();
            let stray = dead
                .iter()
                .filter(|(k, (_, count))| only_snapshots.get(*k).copied().unwrap_or(0) < *count)
                .count();
            return Err(format!(
                "{name}: dead lists do not match the snapshots: {leaked} snapshot blocks on \
                 no dead list, {stray} dead blocks no snapshot holds or the head still holds"
            ));
        }
        if dead_used != self.header.snap.used {
            return Err(format!(
                "{name}: usedbysnapshots {} but the dead lists hold {dead_used}",
                self.header.snap.used
            ));
        }
        let each = |(bp, count): (BlockPtr, u64), origin: &'static str| {
            std::iter::repeat_n(Reached { bp, origin }, count as usize)
        };
        Ok(head
            .into_values()
            .flat_map(|entry| each(entry, "dataset"))
            .chain(dead.into_values().flat_map(|entry| each(entry, "snapshot")))
            .collect())
    }
}

/// A decoded space-log chain, oldest block first.
type Chain = Vec<(BlockPtr, LogBlock)>;

/// Reads the space-log chain ending at `head`, oldest block first.
fn read_chain(pool: &tarn_pool::Pool, head: &BlockPtr) -> Result<Chain, String> {
    let mut chain = Vec::new();
    let mut bp = *head;
    while !bp.is_hole() {
        if chain.len() >= CHAIN_BLOCKS_MAX {
            return Err("space log chain is longer than CHAIN_BLOCKS_MAX".into());
        }
        if bp.block_type != BlockType::SpaceLog {
            return Err(format!("space log chain names a {:?} block", bp.block_type));
        }
        let bytes = pool
            .pipeline()
            .read_block(&bp)
            .map_err(|e| format!("space log block: {e}"))?;
        let block = LogBlock::decode(&bytes).map_err(|e| format!("space log block: {e}"))?;
        let (prev, is_base) = (block.prev, block.kind == LogKind::Base);
        chain.push((bp, block));
        if is_base {
            break;
        }
        bp = prev;
    }
    chain.reverse();
    Ok(chain)
}

/// Reads every reached block through the pipeline and collects its DVAs per top-level vdev,
/// refusing late births, unreadable blocks and overlaps.
fn check_blocks(
    pool: &tarn_pool::Pool,
    reached: &[Reached],
    txg: Txg,
    vdevs: usize,
) -> Result<Vec<RangeTree>, String> {
    let mut reachable = vec![RangeTree::new(); vdevs];
    let brt = pool.space().brt();
    // References found of each cloned block (tarn-space `brt`): one more than its count.
    let mut clones: std::collections::BTreeMap<tarn_format::Dva, u64> = Default::default();
    for Reached { bp, origin } in reached {
        if bp.birth > txg {
            return Err(format!(
                "{origin} block born in txg {} after committed txg {txg}",
                bp.birth
            ));
        }
        if let Err(e) = pool.pipeline().read_block(bp) {
            return Err(format!(
                "{origin} block (birth {}) does not verify: {e}",
                bp.birth
            ));
        }
        for dva in bp.copies() {
            // Allocation classes: a log device holds intent-log blocks only, never a block
            // a committed tree reaches.
            if pool.is_log_vdev(dva.vdev.0 as usize) {
                return Err(format!(
                    "{origin} block {} lives on log device {}",
                    tarn_zio::dva_name(dva),
                    dva.vdev.0
                ));
            }
            let Some(tree) = reachable.get_mut(dva.vdev.0 as usize) else {
                return Err(format!(
                    "{origin} block names vdev {} of {vdevs}",
                    dva.vdev.0
                ));
            };
            if brt.refs(dva) > 0 {
                let found = clones.entry(*dva).or_insert(0);
                *found += 1;
                if *found > 1 {
                    continue;
                }
            }
            if dva.asize == 0 || tree.intersects(dva.offset, dva.asize) {
                return Err(format!(
                    "{origin} block {} overlaps another reachable block (double allocation)",
                    tarn_zio::dva_name(dva)
                ));
            }
            tree.add(dva.offset, dva.asize);
        }
    }
    for (dva, refs) in brt.entries() {
        let found = clones.get(&dva).copied().unwrap_or(0);
        if found != refs + 1 {
            return Err(format!(
                "cloned block {} has {refs} clone references in the table but {found} \
                 block pointers name it",
                tarn_zio::dva_name(&dva)
            ));
        }
    }
    Ok(reachable)
}

/// `bcloneused` and `bclonesaved` as the table keeps them equal its entries as replayed from
/// the space log: each cloned block's size once, and its size times its clone references.
fn check_brt_space(brt: &tarn_space::Brt, replayed: &ClonedRefs) -> Result<(), String> {
    let used: u64 = replayed.keys().map(|dva| dva.asize).sum();
    let saved: u64 = replayed.iter().map(|(dva, refs)| dva.asize * refs).sum();
    if (brt.used(), brt.saved()) != (used, saved) {
        return Err(format!(
            "bcloneused {} and bclonesaved {} but the cloned blocks take {used} and save \
             {saved}",
            brt.used(),
            brt.saved()
        ));
    }
    Ok(())
}

/// Bytes the space log says are freed but not yet reusable.
struct Deferred {
    /// Frees recorded in the last `TXG_DEFER` txgs, as `SpaceManager::load` keeps them.
    bytes: u64,
    /// Every free the chain records (at most what a scan's hold can keep allocated).
    all: u64,
}

/// Clone references per DVA as the space log's records add and drop them.
type ClonedRefs = std::collections::BTreeMap<tarn_format::Dva, u64>;

/// Replays the log's records: the live set per vdev, the deferred frees and the block
/// reference table.
fn replay_chain(
    chain: &[(BlockPtr, LogBlock)],
    txg: Txg,
    vdevs: usize,
) -> Result<(Vec<RangeTree>, Deferred, ClonedRefs), String> {
    let mut live = vec![RangeTree::new(); vdevs];
    let mut deferred = Deferred { bytes: 0, all: 0 };
    let mut brt: std::collections::BTreeMap<tarn_format::Dva, u64> = Default::default();
    // Extents allocated in the txg being replayed: freeing one in the same txg releases it at
    // once (nothing committed can name it), as `SpaceManager` does, so it is never deferred.
    // A base's frees (in any of its blocks) are the frees still deferred when it was written.
    let mut born_now = (Txg(0), vec![RangeTree::new(); vdevs]);
    let mut in_base = false;
    for (_, block) in chain {
        if born_now.0 != block.txg {
            born_now = (block.txg, vec![RangeTree::new(); vdevs]);
            in_base = block.kind == LogKind::Base;
        }
        for record in &block.records {
            let Some(tree) = live.get_mut(record.vdev.0 as usize) else {
                return Err(format!(
                    "space log record names vdev {} of {vdevs}",
                    record.vdev.0
                ));
            };
            let what = format!(
                "vdev {} [{:#x}, +{:#x})",
                record.vdev.0, record.offset, record.asize
            );
            if record.clone_ref {
                replay_clone_ref(&mut brt, tree, record, &what, block.txg)?;
                continue;
            }
            if record.alloc {
                if tree.intersects(record.offset, record.asize) {
                    return Err(format!(
                        "space log txg {} allocates {what} twice",
                        block.txg
                    ));
                }
                tree.add(record.offset, record.asize);
                born_now.1[record.vdev.0 as usize].add(record.offset, record.asize);
            } else {
                if !tree.contains(record.offset, record.asize) {
                    return Err(format!(
                        "space log txg {} frees unallocated {what}",
                        block.txg
                    ));
                }
                tree.remove(record.offset, record.asize);
                deferred.all += record.asize;
                let born = &mut born_now.1[record.vdev.0 as usize];
                if !in_base && born.contains(record.offset, record.asize) {
                    born.remove(record.offset, record.asize);
                } else if block.txg.0 + TXG_DEFER > txg.0 {
                    deferred.bytes += record.asize;
                }
            }
        }
    }
    brt.retain(|_, refs| *refs > 0);
    Ok((live, deferred, brt))
}

/// Applies a clone-reference record (op 3 or 4) to `brt`: an add names allocated space, a
/// drop a reference that was added.
fn replay_clone_ref(
    brt: &mut ClonedRefs,
    tree: &RangeTree,
    record: &tarn_space::log::Record,
    what: &str,
    txg: Txg,
) -> Result<(), String> {
    let dva = tarn_format::Dva {
        vdev: record.vdev,
        offset: record.offset,
        asize: record.asize,
    };
    let refs = brt.entry(dva).or_insert(0);
    if record.alloc && tree.contains(record.offset, record.asize) {
        *refs += 1;
    } else if !record.alloc && *refs > 0 {
        *refs -= 1;
    } else {
        return Err(format!(
            "space log txg {txg} changes a clone reference of {what} wrongly"
        ));
    }
    Ok(())
}

/// Checks that the reachable set equals the live set, naming the first difference.
fn compare_sets(reachable: &[RangeTree], live: &[RangeTree]) -> Result<(), String> {
    for (vdev, (reach, alloc)) in reachable.iter().zip(live).enumerate() {
        if let Some((start, len)) = reach.iter().find(|&(s, l)| !alloc.contains(s, l)) {
            return Err(format!(
                "vdev {vdev} [{start:#x}, +{len:#x}) is reachable but free in the space log"
            ));
        }
        if reach.total() != alloc.total() {
            let leaked = alloc.iter().find(|&(s, l)| !reach.contains(s, l));
            return Err(format!(
                "vdev {vdev}: space log holds {} bytes, reachable blocks {} (leaked: {leaked:?})",
                alloc.total(),
                reach.total()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CreateOptions, CreateSpec, HostIdentity, ImportOptions, SimProvider, TopLayout};
    use crate::{DeviceProvider, TopSpec};
    use std::sync::Arc;
    use tarn_base::{ManualClock, SeededRng};
    use tarn_device::{FaultPlan, SimDevice};

    fn engine_with(layout: TopLayout, width: usize) -> (Engine, Arc<SimProvider>) {
        let provider = Arc::new(SimProvider::new());
        let mut devices = Vec::new();
        for i in 0..width {
            let path = format!("/sim/d{i}");
            provider.insert(
                &path,
                SimDevice::new(&path, 64 << 20, FaultPlan::seeded(i as u64)),
            );
            devices.push(path);
        }
        let dyn_provider: Arc<dyn DeviceProvider> = provider.clone();
        let identity = HostIdentity {
            hostid: 7,
            hostname: "check".into(),
        };
        let engine = Engine::new(dyn_provider, identity, Arc::new(ManualClock::new(1)), 3);
        let spec = CreateSpec {
            name: "tank".into(),
            tops: vec![TopSpec { layout, devices }],
            spares: vec![],
            caches: Vec::new(),
            logs: Vec::new(),
            specials: Vec::new(),
            ashift: 9,
            force: false,
        };
        engine
            .create_pool(&spec, &CreateOptions::default())
            .unwrap();
        (engine, provider)
    }

    fn fill(engine: &Engine, seed: u64) {
        let mut rng = SeededRng::new(seed);
        for _ in 0..3 {
            let id = engine.object_create("tank", 4096).unwrap();
            let mut data = vec![0u8; 300_000];
            rng.fill(&mut data);
            engine.object_write("tank", id, 0, &data).unwrap();
        }
    }

    #[test]
    fn a_healthy_pool_closes_across_syncs_and_import() {
        // Goal: on a pool nobody damaged, every check passes and the numbers add up, after
        // syncs that free blocks (overwrites) and after an export and import.
        // Method: write, sync, overwrite, sync, export, import; verify after each.
        let (engine, _provider) = engine_with(TopLayout::Raidz(1), 4);
        fill(&engine, 1);
        let first = engine.sync_pool("tank").unwrap();
        let report = verify_pool(&engine, "tank").unwrap();
        assert_eq!(report.txg, first);
        assert!(
            report.blocks > 200 && report.referenced_bytes > 900_000,
            "{report:?}"
        );
        fill(&engine, 2);
        engine
            .object_write("tank", tarn_base::ObjectId(1), 0, &[9u8; 100_000])
            .unwrap();
        engine.sync_pool("tank").unwrap();
        let report = verify_pool(&engine, "tank").unwrap();
        assert!(
            report.deferred_bytes > 0,
            "the overwrite freed blocks: {report:?}"
        );
        assert!(report.deferred_exact);
        assert_eq!(
            report.allocated_bytes,
            report.referenced_bytes + report.deferred_bytes
        );
        engine.export_pool("tank", false).unwrap();
        engine
            .import_pool(
                &["/sim".into()],
                "tank",
                &ImportOptions::default(),
                "import",
            )
            .unwrap();
        let after = verify_pool(&engine, "tank").unwrap();
        assert_eq!(committed_txg(&engine, "tank").unwrap(), Some(after.txg));
        assert_eq!(
            after.allocated_bytes,
            after.referenced_bytes + after.deferred_bytes
        );
    }

    #[test]
    fn a_condense_keeps_old_frees_as_long_as_an_import_would() {
        // Goal: a base written while older frees were deferred (seed 508 of the simulator)
        // names them as frees of its txg; the running pool must keep them exactly as long as
        // an import of the base would (it once released the oldest at the base's commit, and
        // the next txg could then allocate space an import still held: the kill loop's
        // "allocation of space that is not free"). So space closes exactly after a condense.
        // Method: overwrite across syncs so every txg frees, force a condense, verify after
        // it and after the next syncs and an import.
        let (engine, _provider) = engine_with(TopLayout::Raidz(1), 4);
        fill(&engine, 1);
        for round in 0..3u8 {
            engine
                .object_write("tank", tarn_base::ObjectId(1), 0, &[round; 100_000])
                .unwrap();
            engine.sync_pool("tank").unwrap();
        }
        engine
            .pool("tank")
            .unwrap()
            .lock()
            .pool
            .space_mut()
            .set_condense_threshold(0);
        engine
            .object_write("tank", tarn_base::ObjectId(1), 0, &[7u8; 100_000])
            .unwrap();
        engine.sync_pool("tank").unwrap();
        let report = verify_pool(&engine, "tank").unwrap();
        assert!(report.deferred_exact, "no scan holds frees: {report:?}");
        assert_eq!(
            report.allocated_bytes,
            report.referenced_bytes + report.deferred_bytes,
            "the base's frees of older txgs are still deferred after its commit: {report:?}"
        );
        engine
            .pool("tank")
            .unwrap()
            .lock()
            .pool
            .space_mut()
            .set_condense_threshold(u64::MAX);
        for round in 0..3u8 {
            engine
                .object_write("tank", tarn_base::ObjectId(2), 0, &[round; 50_000])
                .unwrap();
            engine.sync_pool("tank").unwrap();
            verify_pool(&engine, "tank").unwrap();
        }
        engine.export_pool("tank", false).unwrap();
        engine
            .import_pool(
                &["/sim".into()],
                "tank",
                &ImportOptions::default(),
                "import",
            )
            .unwrap();
        verify_pool(&engine, "tank").unwrap();
    }

    #[test]
    fn rot_beyond_redundancy_is_found() {
        // Goal: the checker can fail: a single-disk pool whose data sectors rot must not
        // pass "every reachable block verifies".
        let (engine, provider) = engine_with(TopLayout::Disk, 1);
        fill(&engine, 3);
        engine.sync_pool("tank").unwrap();
        verify_pool(&engine, "tank").unwrap();
        provider.get("/sim/d0").unwrap().rot_random(3000);
        let error = verify_pool(&engine, "tank").unwrap_err();
        assert!(
            error.contains("does not verify") || error.contains("walk"),
            "{error}"
        );
    }

    #[test]
    fn write_config_applies_and_unknown_pool_is_refused() {
        let (engine, _provider) = engine_with(TopLayout::Mirror, 2);
        let config = ObjsetWriteConfig {
            copies: 2,
            ..ObjsetWriteConfig::default()
        };
        set_data_write_config(&engine, "tank", config).unwrap();
        fill(&engine, 4);
        engine.sync_pool("tank").unwrap();
        let report = verify_pool(&engine, "tank").unwrap();
        assert!(
            report.referenced_bytes > 2 * 900_000,
            "two DVAs per data block: {report:?}"
        );
        assert!(verify_pool(&engine, "nope").is_err());
        assert!(matches!(
            committed_txg(&engine, "nope"),
            Err(EngineError::NoSuchPool)
        ));
        let bad = ObjsetWriteConfig {
            copies: 0,
            ..ObjsetWriteConfig::default()
        };
        assert!(set_data_write_config(&engine, "tank", bad).is_err());
    }
}
