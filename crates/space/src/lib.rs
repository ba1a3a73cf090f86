//! tarn-space: where blocks go, and the durable record of what is allocated.
//!
//! # Purpose
//! Hands out space on top-level vdevs for new blocks (one DVA per copy, copies on different
//! vdevs), takes it back when blocks are freed, keeps exact accounting, and persists the
//! allocation state through the space log so an import knows what is free.
//!
//! # Model
//! ```text
//!  SpaceManager
//!   ├─ VdevSpace (one per top-level vdev; address space [0, asize))
//!   │    └─ Metaslab x N (2^metaslab_shift bytes each; free space as a RangeTree)
//!   ├─ rotor: which vdev gets the next allocation (biased towards free space)
//!   ├─ records: allocations and frees of the syncing txg, in order (written as a delta)
//!   ├─ open records: intent-log blocks allocated or claimed between syncs (open context),
//!   │    and data blocks written ahead of their txg (`OpenAllocator`, `logbias=throughput`);
//!   │    the next txg's delta starts with them
//!   ├─ deferred: frees of the last TXG_DEFER txgs, not yet reusable (so a rewind to a
//!   │    recent txg finds its blocks intact)
//!   └─ brt: the block reference table of block cloning (module [`brt`]): a free of a DVA
//!        with an entry drops a reference instead of freeing (ops 3 and 4 of the log)
//! ```
//! Allocation inside a vdev keeps a cursor in one metaslab so that a stream of writes lands
//! sequentially on disk; when that metaslab cannot satisfy a request, the metaslab with the
//! most free space is chosen next.
//!
//! # State
//! In memory: the range trees. On disk: the space-log chain (module [`log`], docs/FORMAT.md
//! "Space log"), whose head the uberblock names.
//!
//! # Invariants
//! - I1: a byte is in at most one of {free tree, allocated, deferred}; `allocated` per vdev
//!   equals asize minus free minus deferred-free bytes.
//! - I2: a block freed in txg T becomes allocatable no earlier than T + TXG_DEFER, unless it
//!   was also born in T (then nothing on disk can reference it and it is reusable at once;
//!   an intent-log block born in T, which a committed log chain may name, is reusable once
//!   T commits). A txg that writes a base (condenses) re-dates every free not yet
//!   allocatable to itself, as the base records them: they wait until it is TXG_DEFER old,
//!   in memory as at import (else the next delta could allocate space that a load of that
//!   delta still holds deferred).
//!   While frees are held ([`SpaceManager::set_hold_deferred`], during a scrub) no deferred
//!   free becomes allocatable at all: a block the scrub listed and that was freed since must
//!   keep its contents, or the scrub would report it corrupt. Likewise no free of a txg
//!   that a reader off the pool lock has pinned, or of a later one, is released ([`pins`]).
//! - I3: replaying the chain from the newest base reproduces exactly the allocated set the
//!   syncing txg had when it wrote its delta (checked by tests and by the simulator's
//!   space-closes checker).
//! - I4: no allocation crosses a metaslab boundary or the end of the vdev.
//! - I5: every free reaches [`Allocator::free`] of each DVA, which consults the block
//!   reference table first (module [`brt`], B1-B3): a cloned block's space is freed only
//!   by its last reference, as of its physical birth.
//!
//! # Concurrency and context
//! Owned by the pool and used only in syncing context (`&mut self`).
//!
//! # Failure model
//! A space log that decodes badly at import is [`SpaceError::CorruptLog`]: the pool refuses
//! the txg (and `-F` tries an older one). A record that would double-allocate or double-free
//! is corruption, never a panic, when it comes from disk.
//!
//! # Allocation classes
//! Every top-level vdev is in one [`VdevClass`], as ZFS's metaslab classes: normal (data
//! vdevs), log ([`SpaceManager::set_log_class`]) or special. A block asks for a class
//! ([`tarn_zio::AllocClass`], decided by the pipeline from its type and level, ZFS's write
//! policy) and each class has its own rotor:
//! - log devices take only intent-log blocks ([`SpaceManager::allocate_log`]); normal
//!   allocation never picks them. Log blocks go to a log vdev when one has room, else to the
//!   normal class.
//! - special vdevs take metadata (including this crate's own space-log blocks) and the small
//!   file blocks the dataset's `special_small_blocks` sends there, and on a pool whose
//!   normal vdevs are dRAID every data block that would leave a row's data part a sector or
//!   more short (`pads_a_row`: a 4K block takes a whole row of a `draid2:8d`, 40K); small
//!   file blocks stop once less than [`SPECIAL_METADATA_RESERVE_PCT`] of the class is free,
//!   so metadata keeps room. A block the special class cannot take (full, unwritable,
//!   none) falls back to the normal class, as in ZFS.
//! - [`SpaceManager::add_vdev`] appends an empty vdev of any class (`tarn pool add`).
//!
//! While a txg syncs with the pipeline's journal armed, a block that no writable vdev can
//! take is still placed on an unwritable one of its class
//! ([`SpaceManager::set_place_on_unwritable`]): its write fails into the journal and the txg
//! stays whole in memory for `tarn pool clear` to write again (tarn-pool module `resume`).
//!
//! # Not here
//! Trim and per-metaslab on-disk maps loaded lazily: the whole free map is kept in memory.
//! Removing a top-level vdev that holds blocks (device evacuation).

pub mod brt;
pub mod log;
pub mod pins;
pub mod range_tree;

use std::collections::VecDeque;
use std::sync::Arc;

pub use brt::Brt;
use log::{LogBlock, LogKind, RECORDS_PER_BLOCK, Record, encoded_size};
pub use pins::{TxgPin, TxgPins};
use range_tree::RangeTree;
use tarn_base::{Txg, VdevId};
use tarn_format::{BlockPtr, BlockType, ChecksumKind, CompressSetting, Dva};
use tarn_zio::{AllocClass, Allocator, Pipeline, WriteProps, ZioError};

/// Txgs a freed block waits before it can be reused.
pub const TXG_DEFER: u64 = 2;
const _: () = assert!(
    METASLAB_SHIFT_MIN >= tarn_format::label::METASLAB_SHIFT_MIN
        && METASLAB_SHIFT_MAX <= tarn_format::label::METASLAB_SHIFT_MAX,
    "the shifts this layer chooses must be ones the vdev tree accepts"
);

/// Share of the special class (percent of its size) kept for metadata: small file blocks
/// go to the normal class once less than this is free (ZFS's
/// `zfs_special_class_metadata_reserve_pct`).
pub const SPECIAL_METADATA_RESERVE_PCT: u64 = 25;

/// Which blocks a top-level vdev takes (its allocation class).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VdevClass {
    /// A data vdev: every block that no other class takes (and every block when the other
    /// classes are full).
    Normal = 0,
    /// A log device: intent-log blocks only.
    Log = 1,
    /// A special vdev: metadata, and file data up to `special_small_blocks`.
    Special = 2,
}

/// Target number of metaslabs per top-level vdev.
pub const METASLABS_TARGET: u64 = 200;
/// Smallest metaslab (16 MiB)... unless the vdev itself is smaller.
pub const METASLAB_SHIFT_MIN: u8 = 24;
/// Largest metaslab (16 GiB).
pub const METASLAB_SHIFT_MAX: u8 = 34;
/// Records since the last base after which the next sync condenses.
pub const CONDENSE_RECORDS_MIN: u64 = 1 << 16;
/// Delta blocks the chain may hold beyond twice what a new base would take before the next
/// sync condenses. Every txg writes at least one delta block (in `SPACE_LOG_COPIES`), so a
/// pool committing txgs of few changes would otherwise grow its log by a block per txg
/// until the record count above is reached: on a full pool, that ate the slop space.
pub const CONDENSE_BLOCKS_MIN: u64 = 64;
/// Bytes allocated on one vdev before the rotor moves on (scaled by free space).
pub const ROTOR_QUANTUM: u64 = 4 << 20;
/// Copies of every space-log block (pool-wide metadata, as ZFS keeps three of the MOS).
pub const SPACE_LOG_COPIES: u8 = 3;
/// Copies of one block on the same top-level vdev are at least 1/this of its metaslabs
/// apart (ZFS keeps ditto blocks 1/8 of a vdev apart).
pub const DITTO_SPREAD_DIVISOR: usize = 8;
/// Longest space-log chain accepted at import (a corrupt chain cannot loop: it is checksummed
/// block to block, but it could be absurdly long).
pub const CHAIN_BLOCKS_MAX: usize = 1 << 20;

/// The metaslab shift for a vdev of `asize` bytes: about [`METASLABS_TARGET`] metaslabs.
#[must_use]
pub fn metaslab_shift_for(asize: u64) -> u8 {
    let target = (asize / METASLABS_TARGET).max(1);
    let shift = 63 - target.leading_zeros() as u8;
    shift.clamp(METASLAB_SHIFT_MIN, METASLAB_SHIFT_MAX)
}

/// What the space layer needs to know about a top-level vdev.
pub trait VdevGeometry: Send + Sync + std::fmt::Debug {
    /// Size of its address space.
    fn asize(&self) -> u64;
    /// Sector size: every allocation is aligned to it.
    fn sector_size(&self) -> u64;
    /// Bytes to allocate for a block of `psize` physical bytes (parity and padding included).
    fn allocation_size(&self, psize: u64) -> u64;
    /// False when the vdev cannot take new writes (faulted, removing).
    fn writable(&self) -> bool;
    /// Alignment of every allocation (a dRAID row; the sector size otherwise).
    fn allocation_align(&self) -> u64 {
        self.sector_size()
    }
    /// An allocation never crosses a multiple of this (a dRAID group; 0: no bound).
    fn allocation_boundary(&self) -> u64 {
        0
    }
}

impl VdevGeometry for tarn_vdev::TopVdev {
    fn asize(&self) -> u64 {
        tarn_vdev::TopVdev::asize(self)
    }

    fn sector_size(&self) -> u64 {
        1 << self.ashift()
    }

    fn allocation_size(&self, psize: u64) -> u64 {
        tarn_vdev::TopVdev::allocation_size(self, psize)
    }

    fn allocation_align(&self) -> u64 {
        tarn_vdev::TopVdev::allocation_align(self)
    }

    fn allocation_boundary(&self) -> u64 {
        tarn_vdev::TopVdev::allocation_boundary(self)
    }

    fn writable(&self) -> bool {
        matches!(
            self.health(),
            tarn_vdev::Health::Online | tarn_vdev::Health::Degraded
        )
    }
}

/// Errors of the space layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpaceError {
    /// The space log is damaged.
    #[error("space log is corrupt: {why}")]
    CorruptLog {
        /// What was wrong.
        why: &'static str,
    },
    /// A log block could not be read or written.
    #[error("space log I/O: {0}")]
    Io(#[from] ZioError),
}

#[derive(Debug)]
struct Metaslab {
    start: u64,
    size: u64,
    free: RangeTree,
}

#[derive(Debug)]
struct VdevSpace {
    geometry: Arc<dyn VdevGeometry>,
    shift: u8,
    /// Which blocks go here (log devices take only intent-log blocks).
    class: VdevClass,
    /// Being removed: nothing new is allocated here.
    removing: bool,
    metaslabs: Vec<Metaslab>,
    cursor_metaslab: usize,
    cursor: u64,
    allocated: u64,
}

impl VdevSpace {
    fn new(geometry: Arc<dyn VdevGeometry>, shift: u8) -> Self {
        let asize = geometry.asize();
        let size = 1u64 << shift;
        let count = asize.div_ceil(size);
        let metaslabs = (0..count)
            .map(|i| {
                let start = i * size;
                let len = size.min(asize - start);
                let mut free = RangeTree::new();
                free.add(start, len);
                Metaslab {
                    start,
                    size: len,
                    free,
                }
            })
            .collect();
        VdevSpace {
            geometry,
            shift,
            class: VdevClass::Normal,
            removing: false,
            metaslabs,
            cursor_metaslab: 0,
            cursor: 0,
            allocated: 0,
        }
    }

    /// Whether new blocks may go here.
    fn allocatable(&self) -> bool {
        !self.removing && self.geometry.writable()
    }

    fn free_bytes(&self) -> u64 {
        self.metaslabs.iter().map(|m| m.free.total()).sum()
    }

    fn metaslab_of(&self, offset: u64) -> Option<usize> {
        let index = (offset >> self.shift) as usize;
        (index < self.metaslabs.len()).then_some(index)
    }

    /// Allocates `asize` bytes, avoiding the metaslabs in `avoid` when possible.
    fn allocate(&mut self, asize: u64, avoid: &[usize]) -> Option<u64> {
        let align = self.geometry.allocation_align();
        let boundary = self.geometry.allocation_boundary();
        let cursor_ms = self.cursor_metaslab;
        if !avoid.contains(&cursor_ms)
            && let Some(offset) = self.metaslabs[cursor_ms].free.find_first_fit_within(
                self.cursor,
                asize,
                align,
                boundary,
            )
        {
            return Some(self.take(cursor_ms, offset, asize));
        }
        let best = self
            .metaslabs
            .iter()
            .enumerate()
            .filter(|(i, m)| !avoid.contains(i) && m.free.largest() >= asize + align)
            .max_by_key(|(_, m)| m.free.total())
            .map(|(i, _)| i)
            .or_else(|| {
                self.metaslabs
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| m.free.largest() >= asize)
                    .max_by_key(|(_, m)| m.free.total())
                    .map(|(i, _)| i)
            })?;
        let start = self.metaslabs[best].start;
        let found = self.metaslabs[best]
            .free
            .find_first_fit_within(start, asize, align, boundary);
        if let Some(offset) = found {
            return Some(self.take(best, offset, asize));
        }
        // A dRAID row alignment or group bound can make the largest free range of the
        // chosen metaslab unusable; any metaslab with a fitting place will do then.
        let (index, offset) = self.metaslabs.iter().enumerate().find_map(|(i, m)| {
            m.free
                .find_first_fit_within(m.start, asize, align, boundary)
                .map(|offset| (i, offset))
        })?;
        Some(self.take(index, offset, asize))
    }

    fn take(&mut self, index: usize, offset: u64, asize: u64) -> u64 {
        let metaslab = &mut self.metaslabs[index];
        assert!(
            offset >= metaslab.start && offset + asize <= metaslab.start + metaslab.size,
            "I4: allocation [{offset}, +{asize}) outside metaslab {index}"
        );
        metaslab.free.remove(offset, asize);
        self.allocated += asize;
        self.cursor_metaslab = index;
        self.cursor = offset + asize;
        offset
    }

    /// Returns a range to the free trees. `from_disk` ranges are checked instead of asserted.
    fn release(&mut self, offset: u64, asize: u64, from_disk: bool) -> Result<(), SpaceError> {
        let Some(index) = self.metaslab_of(offset) else {
            assert!(from_disk, "release of [{offset}, +{asize}) beyond the vdev");
            return Err(SpaceError::CorruptLog {
                why: "free beyond the end of a vdev",
            });
        };
        let metaslab = &mut self.metaslabs[index];
        let inside = offset + asize <= metaslab.start + metaslab.size;
        if !inside || metaslab.free.intersects(offset, asize) {
            assert!(from_disk, "I1: double free of [{offset}, +{asize})");
            return Err(SpaceError::CorruptLog {
                why: "free of space that is already free",
            });
        }
        metaslab.free.add(offset, asize);
        self.allocated -= asize;
        Ok(())
    }

    /// Whether `[offset, offset + asize)` lies in one metaslab and none of it is free.
    fn is_allocated(&self, offset: u64, asize: u64) -> bool {
        let Some(index) = self.metaslab_of(offset) else {
            return false;
        };
        let metaslab = &self.metaslabs[index];
        offset
            .checked_add(asize)
            .is_some_and(|end| end <= metaslab.start + metaslab.size)
            && !metaslab.free.intersects(offset, asize)
    }

    /// Marks a range allocated while replaying the log.
    fn claim(&mut self, offset: u64, asize: u64) -> Result<(), SpaceError> {
        let bad = SpaceError::CorruptLog {
            why: "allocation of space that is not free",
        };
        let index = self.metaslab_of(offset).ok_or(SpaceError::CorruptLog {
            why: "allocation beyond the end of a vdev",
        })?;
        let metaslab = &mut self.metaslabs[index];
        if !metaslab.free.contains(offset, asize) {
            return Err(bad);
        }
        metaslab.free.remove(offset, asize);
        self.allocated += asize;
        Ok(())
    }
}

/// Space accounting of one top-level vdev.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VdevUsage {
    /// Address-space size.
    pub size: u64,
    /// Allocated bytes (including deferred frees).
    pub allocated: u64,
    /// Fragmentation percentage of the free space (0 = all free space in large runs).
    pub fragmentation: u64,
}

/// The allocator and space log of one pool.
#[derive(Debug)]
pub struct SpaceManager {
    vdevs: Vec<VdevSpace>,
    /// Per [`VdevClass`]: the vdev taking allocations now and the bytes it took.
    rotor: [usize; 3],
    rotor_bytes: [u64; 3],
    txg: Txg,
    records: Vec<Record>,
    open_records: Vec<Record>,
    frees_this_txg: Vec<Dva>,
    /// Intent-log blocks allocated between the last txg and this one (their allocation is in
    /// this txg's delta).
    log_born: Vec<Dva>,
    /// Intent-log blocks born and freed in this txg: held until it commits, then released.
    release_at_commit: Vec<Dva>,
    deferred: VecDeque<(Txg, Vec<Dva>)>,
    chain: Vec<BlockPtr>,
    chain_records: u64,
    condense_min: u64,
    /// The next sync writes a base whatever the chain's length.
    condense_next: bool,
    /// Txg of the newest base in the chain (0 when none is known).
    base_txg: Txg,
    log_copies: u8,
    hold_deferred: bool,
    /// Place blocks on unwritable vdevs when no writable one can take them
    /// ([`SpaceManager::set_place_on_unwritable`]).
    place_on_unwritable: bool,
    /// True only inside the fallback allocation of `allocate_one`.
    ignore_writable: bool,
    /// Clone references of blocks named by more than one block pointer (module [`brt`]).
    brt: Brt,
    /// The chain holds (or this manager wrote) clone-reference records: the labels must
    /// list `org.tarn:block_cloning`.
    cloned: bool,
}

impl SpaceManager {
    /// A manager for a new pool: everything free, empty chain.
    #[must_use]
    pub fn new(vdevs: Vec<(Arc<dyn VdevGeometry>, u8)>) -> Self {
        let vdevs: Vec<VdevSpace> = vdevs
            .into_iter()
            .map(|(geometry, shift)| VdevSpace::new(geometry, shift))
            .collect();
        // The space log is pool-wide metadata an import reads first: three copies, on
        // different top-level vdevs or far apart on one (`allocate_in`).
        let log_copies = SPACE_LOG_COPIES;
        SpaceManager {
            vdevs,
            rotor: [0; 3],
            rotor_bytes: [0; 3],
            txg: Txg(0),
            records: Vec::new(),
            open_records: Vec::new(),
            frees_this_txg: Vec::new(),
            log_born: Vec::new(),
            release_at_commit: Vec::new(),
            deferred: VecDeque::new(),
            chain: Vec::new(),
            chain_records: 0,
            condense_min: CONDENSE_RECORDS_MIN,
            condense_next: false,
            base_txg: Txg(0),
            log_copies,
            hold_deferred: false,
            place_on_unwritable: false,
            ignore_writable: false,
            brt: Brt::default(),
            cloned: false,
        }
    }

    /// While a txg syncs with the pipeline's journal armed (tarn-zio), a block that no
    /// writable vdev can take is still placed on an unwritable (not removing) vdev of its
    /// class: its write fails and waits in the journal for `tarn pool clear`, so the txg
    /// stays whole in memory instead of failing half way (tarn-pool module `resume`).
    pub fn set_place_on_unwritable(&mut self, place: bool) {
        self.place_on_unwritable = place;
    }

    /// Whether new blocks may go on `vdev` now (see `ignore_writable`).
    fn takes_blocks(&self, vdev: &VdevSpace) -> bool {
        vdev.allocatable() || (self.ignore_writable && !vdev.removing)
    }

    /// Loads the allocation state of an existing pool by replaying the chain that ends in
    /// `head` (the uberblock's space-log pointer), committed in `head_txg`.
    pub fn load(
        vdevs: Vec<(Arc<dyn VdevGeometry>, u8)>,
        pipeline: &Pipeline,
        head: &BlockPtr,
        head_txg: Txg,
    ) -> Result<Self, SpaceError> {
        let mut manager = SpaceManager::new(vdevs);
        let blocks = read_chain(pipeline, head, &mut manager.chain)?;
        // Extents allocated by the delta being replayed: a free of one in the same txg was
        // released at once when that txg synced (see `free`), so it is not deferred here. A
        // base's later blocks carry its txg too (and the kind `Delta`): its frees are the
        // frees still deferred when it was written, never frees of its own extents.
        let mut born_now = (Txg(0), Vec::new());
        let mut in_base = false;
        for block in blocks.iter().rev() {
            if born_now.0 != block.txg {
                born_now = (block.txg, vec![RangeTree::new(); manager.vdevs.len()]);
                in_base = block.kind == LogKind::Base;
                if in_base {
                    manager.base_txg = block.txg;
                }
            }
            for record in &block.records {
                manager.chain_records += 1;
                let vdev = manager.vdevs.get_mut(record.vdev.0 as usize).ok_or(
                    SpaceError::CorruptLog {
                        why: "record names an unknown vdev",
                    },
                )?;
                if record.clone_ref {
                    manager.cloned = true;
                    manager_brt_replay(&mut manager.brt, vdev, record)?;
                    continue;
                }
                let born = &mut born_now.1[record.vdev.0 as usize];
                let same_txg =
                    !in_base && !record.alloc && born.contains(record.offset, record.asize);
                if record.alloc {
                    vdev.claim(record.offset, record.asize)?;
                    born.add(record.offset, record.asize);
                } else if same_txg {
                    born.remove(record.offset, record.asize);
                    vdev.release(record.offset, record.asize, true)?;
                } else if block.txg.0 + TXG_DEFER > head_txg.0 {
                    // Freed too recently to reuse: a rewind to that txg may still need it.
                    let dva = Dva {
                        vdev: record.vdev,
                        offset: record.offset,
                        asize: record.asize,
                    };
                    match manager.deferred.back_mut() {
                        Some((txg, list)) if *txg == block.txg => list.push(dva),
                        _ => manager.deferred.push_back((block.txg, vec![dva])),
                    }
                } else {
                    vdev.release(record.offset, record.asize, true)?;
                }
            }
        }
        manager.txg = head_txg;
        Ok(manager)
    }

    /// Rebuilds the allocation state of a pool whose space log could not be read from every
    /// block its upper layers reach (ZFS's leak-check walk), in a manager made by
    /// [`SpaceManager::new`] that nothing has allocated from: each of `live` is allocated,
    /// everything else free, nothing deferred, the chain empty, and the next sync writes a
    /// base. A DVA outside its vdev or overlapping another is an error.
    pub fn rebuild(&mut self, live: &[Dva], head_txg: Txg) -> Result<(), SpaceError> {
        assert!(
            self.allocated() == 0 && self.chain.is_empty(),
            "rebuild of a space manager in use"
        );
        let mut live = live.to_vec();
        live.sort_unstable_by_key(|dva| (dva.vdev, dva.offset, dva.asize));
        for (index, dva) in live.iter().enumerate() {
            // A block named twice is a clone (the walk lists each reference): a reference
            // of the table, not a second allocation. The next sync's base writes it.
            if index > 0 && live[index - 1] == *dva {
                self.brt.add(dva);
                continue;
            }
            self.claim_dva(dva).map_err(|_| SpaceError::CorruptLog {
                why: "a block names space that is not free or not there",
            })?;
        }
        self.txg = head_txg;
        self.condense_next = true;
        Ok(())
    }

    /// Starts recording txg `txg` (called when a txg starts syncing).
    pub fn begin_txg(&mut self, txg: Txg) {
        assert!(
            txg > self.txg,
            "txgs only move forward: {txg} after {}",
            self.txg
        );
        assert!(
            self.records.is_empty(),
            "records of txg {} were never written",
            self.txg
        );
        self.txg = txg;
        self.log_born = self
            .open_records
            .iter()
            .map(|r| Dva {
                vdev: r.vdev,
                offset: r.offset,
                asize: r.asize,
            })
            .collect();
        self.records = std::mem::take(&mut self.open_records);
    }

    /// The txg being recorded.
    #[must_use]
    pub fn txg(&self) -> Txg {
        self.txg
    }

    /// Space of the data vdevs (class [`VdevClass::Normal`]) for write admission, without
    /// walking any free tree: `(size, allocated)`, allocated including deferred frees. A
    /// vdev being removed takes no new blocks, so its free space does not count.
    #[must_use]
    pub fn normal_space(&self) -> (u64, u64) {
        self.vdevs
            .iter()
            .filter(|v| v.class == VdevClass::Normal)
            .fold((0, 0), |(size, allocated), v| {
                let usable = if v.removing {
                    v.allocated
                } else {
                    v.geometry.asize()
                };
                (size + usable, allocated + v.allocated)
            })
    }

    /// Bytes freed in the last txgs and not yet reusable (ZFS's `freeing` as a user sees it:
    /// space a delete gave back that a writer gets after the next syncs).
    #[must_use]
    pub fn freeing_bytes(&self) -> u64 {
        let held: u64 = self.frees_this_txg.iter().map(|d| d.asize).sum();
        let deferred: u64 = self
            .deferred
            .iter()
            .flat_map(|(_, d)| d)
            .map(|d| d.asize)
            .sum();
        held + deferred
    }

    /// `(size, allocated)` of every top-level vdev, as [`SpaceManager::usage`] counts them,
    /// without walking a free tree: what write admission asks on every write (the
    /// fragmentation `usage` adds visits every free segment of the pool).
    #[must_use]
    pub fn allocation(&self) -> Vec<(u64, u64)> {
        self.vdevs
            .iter()
            .map(|v| match v.class {
                VdevClass::Log => (0, 0),
                _ => (v.geometry.asize(), v.allocated),
            })
            .collect()
    }

    /// Usage of every top-level vdev. A log device is not pool capacity (as `zpool list`
    /// leaves log devices out of SIZE): it reports size and allocated 0.
    #[must_use]
    pub fn usage(&self) -> Vec<VdevUsage> {
        self.vdevs
            .iter()
            .map(|v| {
                if v.class == VdevClass::Log {
                    return VdevUsage {
                        size: 0,
                        allocated: 0,
                        fragmentation: 0,
                    };
                }
                let free = v.free_bytes();
                let large: u64 = v
                    .metaslabs
                    .iter()
                    .flat_map(|m| m.free.iter())
                    .filter(|&(_, len)| len >= 1 << 20)
                    .map(|(_, len)| len)
                    .sum();
                let fragmentation = (large * 100)
                    .checked_div(free)
                    .map_or(0, |share| 100 - share);
                VdevUsage {
                    size: v.geometry.asize(),
                    allocated: v.allocated,
                    fragmentation,
                }
            })
            .collect()
    }

    /// The allocated ranges `(offset, len)` of top-level vdev `vdev` in address order (the
    /// complement of the free trees, deferred frees included): what a sequential rebuild
    /// copies. Empty for an unknown vdev.
    #[must_use]
    pub fn allocated_ranges(&self, vdev: usize) -> Vec<(u64, u64)> {
        let mut ranges = Vec::new();
        let Some(space) = self.vdevs.get(vdev) else {
            return ranges;
        };
        for metaslab in &space.metaslabs {
            let end = metaslab.start + metaslab.size;
            let mut cursor = metaslab.start;
            for (start, len) in metaslab.free.iter().chain([(end, 0)]) {
                assert!(
                    start >= cursor,
                    "free ranges of a metaslab are sorted and disjoint"
                );
                if start > cursor {
                    ranges.push((cursor, start - cursor));
                }
                cursor = start + len;
            }
        }
        let total: u64 = ranges.iter().map(|&(_, len)| len).sum();
        assert_eq!(
            total, space.allocated,
            "allocated ranges add up to the vdev's count"
        );
        ranges
    }

    /// Blocks the current chain consists of (oldest first), for checkers and scrub.
    #[must_use]
    pub fn chain(&self) -> &[BlockPtr] {
        &self.chain
    }

    /// The next vdev of `class` for a block of `psize` bytes, avoiding `used`: the rotor of
    /// that class, biased by free space.
    fn pick_vdev(&mut self, psize: u64, used: &[VdevId], class: VdevClass) -> Option<usize> {
        let count = self.vdevs.len();
        let members = self.vdevs.iter().filter(|v| v.class == class);
        let total_free: u64 = members.clone().map(VdevSpace::free_bytes).sum();
        let mean_free = (total_free / members.count().max(1) as u64).max(1);
        let slot = class as usize;
        for step in 0..count {
            let index = (self.rotor[slot] + step) % count;
            let vdev = &self.vdevs[index];
            if used.contains(&VdevId(index as u32))
                || !self.takes_blocks(vdev)
                || vdev.class != class
            {
                continue;
            }
            let asize = vdev.geometry.allocation_size(psize);
            if vdev.free_bytes() < asize {
                continue;
            }
            if step > 0 {
                self.rotor[slot] = index;
                self.rotor_bytes[slot] = 0;
            }
            // Bias: a vdev with more free space than average keeps the rotor longer.
            let quantum = ROTOR_QUANTUM * vdev.free_bytes().min(2 * mean_free) / mean_free;
            self.rotor_bytes[slot] += asize;
            if self.rotor_bytes[slot] >= quantum.max(1) {
                self.rotor[slot] = (index + 1) % count;
                self.rotor_bytes[slot] = 0;
            }
            return Some(index);
        }
        None
    }

    /// The classes to try, in order, for a block asking for `class`: its own first (a small
    /// data block only while the special class is above its metadata reserve), then normal.
    fn classes_for(&self, class: AllocClass, psize: u64) -> Vec<VdevClass> {
        let small_data = || {
            let (size, free) = self.class_space(VdevClass::Special);
            // ZFS's zfs_special_class_metadata_reserve_pct: small blocks stop before the
            // class is 75% full, so metadata keeps room.
            let reserve = size / 100 * SPECIAL_METADATA_RESERVE_PCT;
            (free >= reserve + psize).then_some(VdevClass::Special)
        };
        let preferred = match class {
            // A data block that would waste most of a dRAID row goes to the special class
            // as if `special_small_blocks` asked for it (`pads_a_row`).
            AllocClass::Normal if self.pads_a_row(psize) => small_data(),
            AllocClass::Normal => None,
            AllocClass::Log => Some(VdevClass::Log),
            AllocClass::Special { small_data: false } => Some(VdevClass::Special),
            AllocClass::Special { small_data: true } => small_data(),
        };
        preferred
            .into_iter()
            .chain(std::iter::once(VdevClass::Normal))
            .collect()
    }

    /// Whether a data block of `psize` bytes would leave part of a row empty on every
    /// normal vdev that can take it: each is dRAID (allocations aligned to whole rows), the
    /// block fits in one row, and one more sector would still fit. Such a block pays a whole
    /// row of data and parity columns for less (a 4K block on `draid2:8d` takes 40K), so a
    /// pool with a special vdev keeps it there, as OpenZFS does only once an admin sets
    /// `special_small_blocks`.
    fn pads_a_row(&self, psize: u64) -> bool {
        let mut normal = self
            .vdevs
            .iter()
            .filter(|v| v.class == VdevClass::Normal && self.takes_blocks(v))
            .peekable();
        normal.peek().is_some()
            && normal.all(|v| {
                let g = &v.geometry;
                let (sector, row) = (g.sector_size(), g.allocation_align());
                let one_row = g.allocation_size(sector);
                row > sector
                    && g.allocation_size(psize) == one_row
                    && g.allocation_size(psize + sector) == one_row
            })
    }

    /// Address-space size and free bytes of the writable vdevs of `class`.
    fn class_space(&self, class: VdevClass) -> (u64, u64) {
        self.vdevs
            .iter()
            .filter(|v| v.class == class && self.takes_blocks(v))
            .fold((0, 0), |(size, free), v| {
                (size + v.geometry.asize(), free + v.free_bytes())
            })
    }

    /// One DVA of a block asking for `class`, on a vdev none of `used` is on when possible.
    fn allocate_one(&mut self, psize: u64, used: &[Dva], class: AllocClass) -> Option<Dva> {
        let classes = self.classes_for(class, psize);
        let found = classes
            .iter()
            .find_map(|class| self.allocate_in(psize, used, *class));
        if found.is_some() || !self.place_on_unwritable {
            return found;
        }
        self.ignore_writable = true;
        let found = classes
            .into_iter()
            .find_map(|class| self.allocate_in(psize, used, class));
        self.ignore_writable = false;
        found
    }

    fn allocate_in(&mut self, psize: u64, used: &[Dva], class: VdevClass) -> Option<Dva> {
        let used_vdevs: Vec<VdevId> = used.iter().map(|d| d.vdev).collect();
        let (index, avoid) = match self.pick_vdev(psize, &used_vdevs, class) {
            Some(index) => (index, Vec::new()),
            // Fewer writable vdevs than copies: put the extra copy on a vdev already used, at
            // least 1/8 of the vdev away from its other copies there (ZFS's ditto blocks on a
            // single-vdev pool), so that one damaged region never holds two copies.
            None => {
                let index = self.pick_vdev(psize, &[], class)?;
                let vdev = &self.vdevs[index];
                let spread = (vdev.metaslabs.len() / DITTO_SPREAD_DIVISOR).max(1);
                let avoid = used
                    .iter()
                    .filter(|d| d.vdev.0 as usize == index)
                    .filter_map(|d| vdev.metaslab_of(d.offset))
                    .flat_map(|m| m.saturating_sub(spread - 1)..=m + (spread - 1))
                    .collect();
                (index, avoid)
            }
        };
        let vdev = &mut self.vdevs[index];
        let asize = vdev.geometry.allocation_size(psize);
        let offset = vdev.allocate(asize, &avoid)?;
        let dva = Dva {
            vdev: VdevId(index as u32),
            offset,
            asize,
        };
        self.records.push(Record {
            alloc: true,
            clone_ref: false,
            vdev: dva.vdev,
            offset,
            asize,
        });
        Some(dva)
    }

    /// Writes the delta (and, when due, a new base) for the syncing txg and returns the new
    /// chain head for the uberblock. Every allocation made so far in this txg, including the
    /// log blocks' own, is in what it writes.
    pub fn sync(&mut self, pipeline: &Pipeline) -> Result<BlockPtr, SpaceError> {
        // A new base holds every extent and every free not yet allocatable.
        let base_records =
            self.extent_count() + self.pending_free_count() + self.brt.record_count();
        let condense = self.chain_records > self.condense_min.max(4 * base_records);
        let base_blocks = base_records.div_ceil(RECORDS_PER_BLOCK as u64).max(1);
        let long = self.chain.len() as u64 > 2 * base_blocks + CONDENSE_BLOCKS_MIN;
        // A base re-dates the frees it carries to its own txg (`write_base`). Another base
        // before they are released would defer them again: a pool condensing every txg
        // (a base of many frees is itself over the thresholds above) never got its
        // space back, and the log's own freed blocks piled up with it until the pool
        // suspended.
        let settled = self.txg.0 > self.base_txg.0 + TXG_DEFER;
        if self.condense_next || (settled && (condense || long)) {
            self.condense_next = false;
            return self.write_base(pipeline);
        }
        let copies = u64::from(self.log_copies);
        let per_block = RECORDS_PER_BLOCK as u64;
        let mut blocks = 1u64;
        while blocks * per_block < self.records.len() as u64 + blocks * copies {
            blocks += 1;
        }
        let total = self.records.len() as u64 + blocks * copies;
        let mut sizes = Vec::new();
        for i in 0..blocks {
            let count = if i + 1 < blocks {
                per_block
            } else {
                total - per_block * (blocks - 1)
            };
            sizes.push(count);
        }
        let mut placements = Vec::new();
        for &count in &sizes {
            placements.push(self.allocate_log_block(pipeline, encoded_size(count as usize))?);
        }
        let records = std::mem::take(&mut self.records);
        let mut remaining = records.as_slice();
        let mut prev = self.chain.last().copied().unwrap_or_default();
        // The last block can hold fewer records than planned when ditto copies fell back to
        // fewer DVAs; the encoded size only shrinks, and it was allocated for the plan.
        for (i, dvas) in placements.iter().enumerate() {
            let take = if i + 1 < placements.len() {
                per_block as usize
            } else {
                remaining.len()
            };
            let (chunk, rest) = remaining.split_at(take.min(remaining.len()));
            remaining = rest;
            let block = LogBlock {
                kind: LogKind::Delta,
                txg: self.txg,
                prev,
                records: chunk.to_vec(),
            };
            let mut bytes = block.encode();
            bytes.resize(encoded_size(sizes[i] as usize) as usize, 0);
            prev = pipeline.write_block_at(dvas, self.txg, &bytes, &log_props())?;
            self.chain.push(prev);
        }
        assert!(
            remaining.is_empty(),
            "I3: {} records left unwritten",
            remaining.len()
        );
        self.chain_records += records.len() as u64;
        Ok(prev)
    }

    fn allocate_log_block(
        &mut self,
        pipeline: &Pipeline,
        size: u64,
    ) -> Result<Vec<Dva>, SpaceError> {
        let padded = size.next_multiple_of(pipeline.sector_size());
        let mut dvas = Vec::new();
        for _ in 0..self.log_copies {
            match self.allocate_one(padded, &dvas, AllocClass::Special { small_data: false }) {
                Some(dva) => dvas.push(dva),
                None if !dvas.is_empty() => break,
                None => return Err(SpaceError::Io(ZioError::NoSpace { size: padded })),
            }
        }
        Ok(dvas)
    }

    fn extent_count(&self) -> u64 {
        self.vdevs
            .iter()
            .flat_map(|v| v.metaslabs.iter())
            .map(|m| m.free.count() as u64 + 1)
            .sum()
    }

    /// Condenses: frees the old chain and writes every allocated extent as a new base.
    ///
    /// The base records every free not yet allocatable as a free of its own txg (the format
    /// keeps no older txg for them), and an import keeps such a free until the base's txg
    /// is [`TXG_DEFER`] old. So the frees in memory are re-dated the same way first: were a
    /// free of an older txg released at its own time, the next delta could allocate it
    /// while a load of that delta still holds it deferred from the base ("allocation of
    /// space that is not free" at the import right after a condense).
    fn write_base(&mut self, pipeline: &Pipeline) -> Result<BlockPtr, SpaceError> {
        for bp in std::mem::take(&mut self.chain) {
            for dva in bp.copies() {
                self.free(dva, bp.birth);
            }
        }
        self.redate_frees_to_base();
        self.records.clear();
        // Allocation can add at most one extent per copy; plan for that many more.
        let per_block = RECORDS_PER_BLOCK as u64;
        let copies = u64::from(self.log_copies);
        let mut blocks = 1u64;
        let deferred = self.pending_free_count() + self.brt.record_count();
        while blocks * per_block < self.extent_count() + deferred + 2 * blocks * copies {
            blocks += 1;
        }
        let full = encoded_size(RECORDS_PER_BLOCK);
        let mut placements = Vec::new();
        for _ in 0..blocks {
            placements.push(self.allocate_log_block(pipeline, full)?);
        }
        self.records.clear();
        let extents = self.allocated_extents();
        assert!(
            extents.len() as u64 <= blocks * per_block,
            "base plan too small"
        );
        let mut prev = BlockPtr::default();
        let mut chunks = extents.chunks(RECORDS_PER_BLOCK);
        for dvas in &placements {
            let chunk = chunks.next().unwrap_or(&[]);
            let kind = if prev.is_hole() {
                LogKind::Base
            } else {
                LogKind::Delta
            };
            let block = LogBlock {
                kind,
                txg: self.txg,
                prev,
                records: chunk.to_vec(),
            };
            let mut bytes = block.encode();
            bytes.resize(full as usize, 0);
            prev = pipeline.write_block_at(dvas, self.txg, &bytes, &log_props())?;
            self.chain.push(prev);
        }
        self.chain_records = extents.len() as u64;
        self.base_txg = self.txg;
        Ok(prev)
    }

    /// Frees not yet allocatable: the records a new base carries besides the extents.
    fn pending_free_count(&self) -> u64 {
        let deferred: usize = self.deferred.iter().map(|(_, list)| list.len()).sum();
        (deferred + self.frees_this_txg.len() + self.release_at_commit.len()) as u64
    }

    /// Makes every free not yet allocatable a free of the txg writing a base, as the base
    /// records it (see [`SpaceManager::write_base`]): deferred frees of older txgs and
    /// intent-log blocks born and freed in this txg wait [`TXG_DEFER`] txgs from now.
    fn redate_frees_to_base(&mut self) {
        let older = std::mem::take(&mut self.deferred).into_iter();
        let older: Vec<Dva> = older.flat_map(|(_, list)| list).collect();
        let born_now = std::mem::take(&mut self.release_at_commit);
        self.frees_this_txg.extend(older);
        self.frees_this_txg.extend(born_now);
    }

    /// The records of a new base: every allocated extent (the complement of the free trees,
    /// so blocks whose free is still deferred count as allocated), followed by a free record
    /// for each deferred free. An import replays the frees as frees of this txg and so keeps
    /// them deferred: a rewind to a recent txg still finds those blocks intact.
    fn allocated_extents(&self) -> Vec<Record> {
        let mut out = Vec::new();
        for (index, vdev) in self.vdevs.iter().enumerate() {
            let mut position = 0;
            let asize = vdev.geometry.asize();
            let free = vdev.metaslabs.iter().flat_map(|m| m.free.iter());
            for (start, len) in free.chain(std::iter::once((asize, 0))) {
                if start > position {
                    out.push(Record {
                        alloc: true,
                        clone_ref: false,
                        vdev: VdevId(index as u32),
                        offset: position,
                        asize: start - position,
                    });
                }
                position = start + len;
            }
        }
        let deferred = self.deferred.iter().flat_map(|(_, list)| list);
        let frees = self.frees_this_txg.iter().chain(&self.release_at_commit);
        for dva in deferred.chain(frees) {
            out.push(Record {
                alloc: false,
                clone_ref: false,
                vdev: dva.vdev,
                offset: dva.offset,
                asize: dva.asize,
            });
        }
        // The block reference table, one add per reference (module `brt`).
        for (dva, refs) in self.brt.entries() {
            for _ in 0..refs {
                out.push(Record {
                    alloc: true,
                    clone_ref: true,
                    vdev: dva.vdev,
                    offset: dva.offset,
                    asize: dva.asize,
                });
            }
        }
        out
    }

    /// Called once the txg's uberblock is durable: frees of this txg start their deferral,
    /// and frees old enough become allocatable, except those of `pinned` (the oldest txg a
    /// reader off the pool lock holds, [`pins`]) or later.
    pub fn txg_committed(&mut self, pinned: Option<Txg>) {
        for dva in std::mem::take(&mut self.release_at_commit) {
            self.vdevs[dva.vdev.0 as usize]
                .release(dva.offset, dva.asize, false)
                .expect("I1: a log block freed in its own txg releases allocated space");
        }
        self.log_born.clear();
        let frees = std::mem::take(&mut self.frees_this_txg);
        if !frees.is_empty() {
            self.deferred.push_back((self.txg, frees));
        }
        while let Some((txg, _)) = self.deferred.front() {
            if self.hold_deferred
                || txg.0 + TXG_DEFER > self.txg.0
                || pinned.is_some_and(|oldest| *txg >= oldest)
            {
                break;
            }
            let Some((_, list)) = self.deferred.pop_front() else {
                break;
            };
            for dva in list {
                self.vdevs[dva.vdev.0 as usize]
                    .release(dva.offset, dva.asize, false)
                    .expect("I1: deferred free releases allocated space");
            }
        }
    }

    /// Condenses the space log once the chain holds more than `records` records (and more
    /// than four per extent). Tests set it low to exercise condensing; the default is
    /// [`CONDENSE_RECORDS_MIN`].
    pub fn set_condense_threshold(&mut self, records: u64) {
        self.condense_min = records;
    }

    /// Holds (`true`) or releases (`false`) deferred frees. While held, no freed block becomes
    /// allocatable (I2); releasing lets the next [`SpaceManager::txg_committed`] return every
    /// free old enough. Not persistent: an import starts unheld, and the space log replay
    /// releases what is older than `TXG_DEFER` txgs (a scrub re-lists blocks after import).
    pub fn set_hold_deferred(&mut self, hold: bool) {
        self.hold_deferred = hold;
    }

    /// Whether deferred frees are held.
    #[must_use]
    pub fn hold_deferred(&self) -> bool {
        self.hold_deferred
    }

    /// Bytes of deferred frees not yet allocatable (including held ones).
    #[must_use]
    pub fn deferred_bytes(&self) -> u64 {
        self.deferred
            .iter()
            .flat_map(|(_, list)| list)
            .map(|dva| dva.asize)
            .sum()
    }

    /// Bytes allocated on all vdevs (including deferred frees).
    #[must_use]
    pub fn allocated(&self) -> u64 {
        self.vdevs.iter().map(|v| v.allocated).sum()
    }

    /// Marks top-level vdev `index` as a log device (only intent-log blocks go there).
    pub fn set_log_class(&mut self, index: usize) {
        self.set_class(index, VdevClass::Log);
    }

    /// Puts top-level vdev `index` in `class`.
    pub fn set_class(&mut self, index: usize, class: VdevClass) {
        if let Some(vdev) = self.vdevs.get_mut(index) {
            vdev.class = class;
        }
    }

    /// The class of top-level vdev `index` (`Normal` for an unknown index).
    #[must_use]
    pub fn class(&self, index: usize) -> VdevClass {
        self.vdevs.get(index).map_or(VdevClass::Normal, |v| v.class)
    }

    /// Adds a new, empty top-level vdev of `class` at the next index (`tarn pool add`). Its
    /// allocations and frees go into the space log like any other's.
    pub fn add_vdev(&mut self, geometry: Arc<dyn VdevGeometry>, shift: u8, class: VdevClass) {
        let mut vdev = VdevSpace::new(geometry, shift);
        vdev.class = class;
        assert_eq!(vdev.allocated, 0, "a new vdev starts empty");
        self.vdevs.push(vdev);
        assert!(
            self.vdevs.len() <= tarn_base::limits::TOP_VDEVS_MAX,
            "more top-level vdevs than TOP_VDEVS_MAX"
        );
    }

    /// Stops (`true`) or resumes new allocations on top-level vdev `index` (a log device
    /// being removed). Frees still land there.
    pub fn set_removing(&mut self, index: usize, removing: bool) {
        if let Some(vdev) = self.vdevs.get_mut(index) {
            vdev.removing = removing;
        }
    }

    /// Bytes allocated on top-level vdev `index`, deferred frees included (0 when unknown).
    #[must_use]
    pub fn vdev_allocated(&self, index: usize) -> u64 {
        self.vdevs.get(index).map_or(0, |v| v.allocated)
    }

    /// Makes the next [`SpaceManager::sync`] write a new base: afterwards no record of the
    /// chain names space that is free now (a removed vdev's old records go away).
    pub fn condense_next_sync(&mut self) {
        self.condense_next = true;
    }

    /// Forgets the last top-level vdev, which must hold nothing (no allocation, no deferred
    /// or pending free, no open record) and be marked removing.
    pub fn remove_last_vdev(&mut self) {
        let index = self.vdevs.len() - 1;
        let id = VdevId(index as u32);
        let vdev = &self.vdevs[index];
        assert!(vdev.removing, "remove of vdev {index} not begun");
        assert_eq!(vdev.allocated, 0, "vdev {index} still holds blocks");
        let named = |d: &Dva| d.vdev == id;
        assert!(
            !self.deferred.iter().flat_map(|(_, l)| l).any(named)
                && !self.frees_this_txg.iter().any(named)
                && !self.release_at_commit.iter().any(named)
                && !self.open_records.iter().any(|r| r.vdev == id),
            "vdev {index} still has pending frees or open allocations"
        );
        self.vdevs.pop();
        for slot in 0..self.rotor.len() {
            if self.rotor[slot] >= self.vdevs.len() {
                self.rotor[slot] = 0;
                self.rotor_bytes[slot] = 0;
            }
        }
    }

    /// Whether top-level vdev `index` can take writes now.
    #[must_use]
    pub fn writable(&self, index: usize) -> bool {
        self.vdevs.get(index).is_some_and(|v| v.geometry.writable())
    }

    /// Whether top-level vdev `index` is a log device.
    #[must_use]
    pub fn is_log_class(&self, index: usize) -> bool {
        self.class(index) == VdevClass::Log
    }

    /// Allocates one intent-log block of `psize` bytes in open context (between syncs): on a
    /// log device with room if there is one, else in the normal class. The allocation is
    /// recorded in the next txg's delta. `None` when no vdev has room.
    pub fn allocate_log(&mut self, psize: u64) -> Option<Dva> {
        let logs = (0..self.vdevs.len()).filter(|&i| self.vdevs[i].class == VdevClass::Log);
        let on_log = logs
            .filter(|&i| self.vdevs[i].allocatable())
            .filter(|&i| {
                let vdev = &self.vdevs[i];
                vdev.free_bytes() >= vdev.geometry.allocation_size(psize)
            })
            .max_by_key(|&i| self.vdevs[i].free_bytes());
        let index = match on_log {
            Some(index) => index,
            None => self.pick_vdev(psize, &[], VdevClass::Normal)?,
        };
        let vdev = &mut self.vdevs[index];
        let asize = vdev.geometry.allocation_size(psize);
        let offset = vdev.allocate(asize, &[])?;
        let dva = Dva {
            vdev: VdevId(index as u32),
            offset,
            asize,
        };
        self.open_records.push(Record {
            alloc: true,
            clone_ref: false,
            vdev: dva.vdev,
            offset,
            asize,
        });
        Some(dva)
    }

    /// Claims an intent-log block found on disk at import (ZFS's zil_claim): marks it
    /// allocated so nothing else is put there before the log is replayed and freed. Space
    /// that is not free (or not on a vdev) is an error: that block is not part of the log.
    pub fn claim_log(&mut self, dva: &Dva) -> Result<(), SpaceError> {
        self.claim_dva(dva)?;
        self.open_records.push(Record {
            alloc: true,
            clone_ref: false,
            vdev: dva.vdev,
            offset: dva.offset,
            asize: dva.asize,
        });
        Ok(())
    }

    /// Marks `dva` allocated: it must name free space of a known vdev, with a size.
    fn claim_dva(&mut self, dva: &Dva) -> Result<(), SpaceError> {
        let vdev = self
            .vdevs
            .get_mut(dva.vdev.0 as usize)
            .ok_or(SpaceError::CorruptLog {
                why: "block on an unknown vdev",
            })?;
        if dva.asize == 0 || dva.offset.checked_add(dva.asize).is_none() {
            return Err(SpaceError::CorruptLog {
                why: "block with a bad size",
            });
        }
        vdev.claim(dva.offset, dva.asize)
    }

    /// Bytes allocated in open context since the last sync (intent-log blocks not yet in any
    /// committed delta).
    #[must_use]
    pub fn open_allocated(&self) -> u64 {
        self.open_records.iter().map(|r| r.asize).sum()
    }

    /// Frees an intent-log block in the syncing txg. The committed log chain may still name
    /// it until this txg commits, so it is never reusable before then: one born in this txg
    /// (allocated since the last txg) is released when this txg commits (as a load of the
    /// delta, which allocates and frees it in one txg, releases it at once); an older one is
    /// deferred `TXG_DEFER` txgs like any free.
    pub fn free_log_block(&mut self, dva: &Dva) {
        self.records.push(Record {
            alloc: false,
            clone_ref: false,
            vdev: dva.vdev,
            offset: dva.offset,
            asize: dva.asize,
        });
        if self.log_born.contains(dva) {
            self.release_at_commit.push(*dva);
        } else {
            self.frees_this_txg.push(*dva);
        }
    }
}

impl SpaceManager {
    /// Adds a reference to `dva` for a block pointer cloned in the syncing txg (module
    /// [`brt`]). When the block's last reference was freed earlier in this same txg (the
    /// source overwritten or deleted while the clone waited for the sync), that free is
    /// taken back instead: the block keeps exactly one reference, the clone's. A DVA that
    /// names no allocated extent is refused (a clone source is read from a committed tree,
    /// so this is damage, never a bug to assert on).
    pub fn clone_ref(&mut self, dva: &Dva) -> Result<(), SpaceError> {
        if let Some(index) = self.frees_this_txg.iter().rposition(|d| d == dva) {
            self.frees_this_txg.remove(index);
            let record = self
                .records
                .iter()
                .rposition(|r| {
                    !r.alloc && !r.clone_ref && r.vdev == dva.vdev && r.offset == dva.offset
                })
                .expect("B2: a free of this txg has its record in this txg's delta");
            self.records.remove(record);
            return Ok(());
        }
        let vdev = self
            .vdevs
            .get(dva.vdev.0 as usize)
            .ok_or(SpaceError::CorruptLog {
                why: "a cloned block names an unknown vdev",
            })?;
        if dva.asize == 0 || !vdev.is_allocated(dva.offset, dva.asize) {
            return Err(SpaceError::CorruptLog {
                why: "a cloned block names space that is not allocated",
            });
        }
        self.brt.add(dva);
        self.cloned = true;
        self.records.push(Record {
            alloc: true,
            clone_ref: true,
            vdev: dva.vdev,
            offset: dva.offset,
            asize: dva.asize,
        });
        Ok(())
    }

    /// The block reference table (module [`brt`]).
    #[must_use]
    pub fn brt(&self) -> &Brt {
        &self.brt
    }

    /// Whether the space log may hold clone-reference records (feature
    /// `org.tarn:block_cloning` active): one was replayed at load or written since.
    #[must_use]
    pub fn cloned(&self) -> bool {
        self.cloned || !self.brt.is_empty()
    }
}

/// Replays one clone-reference record of the space log into `brt` (module [`brt`]): an add
/// must name an allocated extent of `vdev`, a drop an entry.
fn manager_brt_replay(brt: &mut Brt, vdev: &VdevSpace, record: &Record) -> Result<(), SpaceError> {
    let dva = Dva {
        vdev: record.vdev,
        offset: record.offset,
        asize: record.asize,
    };
    if record.alloc {
        if !vdev.is_allocated(dva.offset, dva.asize) {
            return Err(SpaceError::CorruptLog {
                why: "a clone reference names space that is not allocated",
            });
        }
        if brt.conflicts(&dva) {
            return Err(SpaceError::CorruptLog {
                why: "clone references of one block with two sizes",
            });
        }
        brt.add(&dva);
    } else if brt.refs(&dva) == 0 || !brt.drop_ref(&dva) {
        return Err(SpaceError::CorruptLog {
            why: "a clone reference dropped that was never added",
        });
    }
    Ok(())
}

/// Allocation in open context, between txgs, for blocks written ahead of the txg that will
/// own them (ZFS's `dmu_sync`, `logbias=throughput`: a volume's data block written in place
/// and named by an intent-log record). Its allocations go to the open records, so the next
/// txg's delta starts with them, as with intent-log blocks; such a block is then either
/// adopted by that txg's tree or freed with the chain that names it
/// ([`SpaceManager::free_log_block`], never reusable before that txg commits).
#[derive(Debug)]
pub struct OpenAllocator<'a> {
    space: &'a mut SpaceManager,
}

impl SpaceManager {
    /// The allocator for blocks written ahead of their txg ([`OpenAllocator`]).
    pub fn open_allocator(&mut self) -> OpenAllocator<'_> {
        OpenAllocator { space: self }
    }
}

impl Allocator for OpenAllocator<'_> {
    fn allocate(
        &mut self,
        psize: u64,
        copies: u8,
        class: AllocClass,
    ) -> Result<Vec<Dva>, ZioError> {
        // The syncing txg's records are set aside: these allocations belong to the next one.
        let syncing = std::mem::take(&mut self.space.records);
        let result = Allocator::allocate(self.space, psize, copies, class);
        let open = std::mem::replace(&mut self.space.records, syncing);
        assert!(
            open.iter().all(|r| r.alloc),
            "an open-context allocation recorded a free"
        );
        self.space.open_records.extend(open);
        result
    }

    /// A write that failed gives its blocks back at once: nothing ever named them.
    fn free(&mut self, dva: &Dva, _birth: Txg) {
        let records = &mut self.space.open_records;
        let index = records
            .iter()
            .rposition(|r| r.alloc && r.vdev == dva.vdev && r.offset == dva.offset)
            .expect("I1: an open-context free of a block not allocated in open context");
        records.remove(index);
        self.space.vdevs[dva.vdev.0 as usize]
            .release(dva.offset, dva.asize, false)
            .expect("I1: free of a block allocated in open context");
    }
}

/// Reads the space-log chain ending at `head` back to its base (or its start): the block
/// pointers go to `chain` oldest first, the decoded blocks are returned newest first.
fn read_chain(
    pipeline: &Pipeline,
    head: &BlockPtr,
    chain: &mut Vec<BlockPtr>,
) -> Result<Vec<LogBlock>, SpaceError> {
    let mut blocks = Vec::new();
    let mut bp = *head;
    while !bp.is_hole() {
        if blocks.len() >= CHAIN_BLOCKS_MAX {
            return Err(SpaceError::CorruptLog {
                why: "chain too long",
            });
        }
        if bp.block_type != BlockType::SpaceLog {
            return Err(SpaceError::CorruptLog {
                why: "chain names a block of another type",
            });
        }
        let block = LogBlock::decode(&pipeline.read_block(&bp)?)?;
        let prev = block.prev;
        let is_base = block.kind == LogKind::Base;
        chain.push(bp);
        blocks.push(block);
        if is_base {
            break;
        }
        bp = prev;
    }
    chain.reverse();
    Ok(blocks)
}

fn log_props() -> WriteProps {
    WriteProps {
        block_type: BlockType::SpaceLog,
        level: 0,
        checksum: ChecksumKind::Fletcher4,
        compression: CompressSetting::Off,
        copies: 1,
        fill: 1,
        special_small_blocks: 0,
    }
}

impl Allocator for SpaceManager {
    fn allocate(
        &mut self,
        psize: u64,
        copies: u8,
        class: AllocClass,
    ) -> Result<Vec<Dva>, ZioError> {
        let mut dvas = Vec::new();
        for _ in 0..copies.clamp(1, 3) {
            match self.allocate_one(psize, &dvas, class) {
                Some(dva) => dvas.push(dva),
                None if !dvas.is_empty() => break,
                None => return Err(ZioError::NoSpace { size: psize }),
            }
        }
        Ok(dvas)
    }

    fn free(&mut self, dva: &Dva, birth: Txg) {
        assert!(
            birth <= self.txg,
            "free of a block born in the future: {birth} > {}",
            self.txg
        );
        // A cloned block: drop one reference, the space stays (module `brt`, B2).
        if !self.brt.is_empty() && self.brt.drop_ref(dva) {
            self.records.push(Record {
                alloc: false,
                clone_ref: true,
                vdev: dva.vdev,
                offset: dva.offset,
                asize: dva.asize,
            });
            return;
        }
        self.records.push(Record {
            alloc: false,
            clone_ref: false,
            vdev: dva.vdev,
            offset: dva.offset,
            asize: dva.asize,
        });
        if birth == self.txg {
            // Nothing committed can reference a block born in this txg.
            self.vdevs[dva.vdev.0 as usize]
                .release(dva.offset, dva.asize, false)
                .expect("I1: free of a block allocated in this txg");
        } else {
            self.frees_this_txg.push(*dva);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Deferred frees and their hold: a freed block is reusable after TXG_DEFER txgs, never
    //! while held, and right after the hold ends.
    use super::*;

    #[derive(Debug)]
    struct Flat;

    impl VdevGeometry for Flat {
        fn asize(&self) -> u64 {
            64 << 20
        }
        fn sector_size(&self) -> u64 {
            512
        }
        fn allocation_size(&self, psize: u64) -> u64 {
            psize.next_multiple_of(512)
        }
        fn writable(&self) -> bool {
            true
        }
    }

    fn manager() -> SpaceManager {
        SpaceManager::new(vec![(Arc::new(Flat) as Arc<dyn VdevGeometry>, 24)])
    }

    /// Frees `dva` (born in txg 1) in txg 2, then commits `txgs` more empty txgs.
    fn free_and_age(manager: &mut SpaceManager, dva: &Dva, txgs: u64) {
        manager.begin_txg(Txg(2));
        manager.free(dva, Txg(1));
        manager.records.clear();
        manager.txg_committed(None);
        for t in 0..txgs {
            manager.begin_txg(Txg(3 + t));
            manager.txg_committed(None);
        }
    }

    fn allocated_one() -> (SpaceManager, Dva) {
        let mut manager = manager();
        manager.begin_txg(Txg(1));
        let dva = manager.allocate(4096, 1, AllocClass::Normal).unwrap()[0];
        manager.records.clear();
        manager.txg_committed(None);
        (manager, dva)
    }

    #[test]
    fn a_cloned_block_is_freed_only_by_its_last_reference() {
        // Goal: module `brt`: a block named by three pointers survives two frees and is
        // freed (deferred as any committed block) by the third. Method: two clone references
        // in txg 2, one free each in txgs 3 to 5; the records say what each txg did.
        let (mut manager, dva) = allocated_one();
        manager.begin_txg(Txg(2));
        manager.clone_ref(&dva).unwrap();
        manager.clone_ref(&dva).unwrap();
        assert_eq!(manager.records.len(), 2);
        assert!(manager.records.iter().all(|r| r.clone_ref && r.alloc));
        manager.records.clear();
        manager.txg_committed(None);
        assert_eq!((manager.brt().used(), manager.brt().saved()), (4096, 8192));
        for txg in 3..5 {
            manager.begin_txg(Txg(txg));
            manager.free(&dva, Txg(1));
            assert!(manager.records.iter().all(|r| r.clone_ref && !r.alloc));
            assert_eq!(manager.freeing_bytes(), 0, "a reference, not space, went");
            manager.records.clear();
            manager.txg_committed(None);
        }
        assert!(manager.brt().is_empty());
        assert_eq!(manager.allocated(), 4096);
        manager.begin_txg(Txg(5));
        manager.free(&dva, Txg(1));
        assert!(manager.records.iter().all(|r| !r.clone_ref && !r.alloc));
        manager.records.clear();
        manager.txg_committed(None);
        assert_eq!(
            manager.freeing_bytes(),
            4096,
            "the last reference frees, deferred"
        );
        for txg in 6..6 + TXG_DEFER {
            manager.begin_txg(Txg(txg));
            manager.txg_committed(None);
        }
        assert_eq!(manager.allocated(), 0);
        assert!(manager.cloned(), "the feature stays active");
    }

    #[test]
    fn a_clone_takes_back_a_free_of_its_own_txg_and_refuses_free_space() {
        // Goal: the source of a clone freed earlier in the clone's own sync (overwritten in
        // the same txg) keeps its space, with one reference and no entry; a clone of space
        // that is not allocated is damage, refused. Method: free then clone in txg 2.
        let (mut manager, dva) = allocated_one();
        manager.begin_txg(Txg(2));
        manager.free(&dva, Txg(1));
        manager.clone_ref(&dva).unwrap();
        assert!(
            manager.records.is_empty(),
            "the free is taken back: {:?}",
            manager.records
        );
        assert!(manager.brt().is_empty());
        let elsewhere = Dva {
            offset: dva.offset + (1 << 20),
            ..dva
        };
        assert!(manager.clone_ref(&elsewhere).is_err());
        manager.txg_committed(None);
        for txg in 3..3 + TXG_DEFER {
            manager.begin_txg(Txg(txg));
            manager.txg_committed(None);
        }
        assert_eq!(manager.allocated(), 4096, "still the clone's");
        assert_eq!(manager.freeing_bytes(), 0);
    }

    #[test]
    fn deferred_free_is_released_after_txg_defer() {
        let (mut manager, dva) = allocated_one();
        free_and_age(&mut manager, &dva, TXG_DEFER);
        assert_eq!(manager.allocated(), 0);
        assert_eq!(manager.deferred_bytes(), 0);
    }

    #[test]
    fn held_free_stays_allocated_until_the_hold_ends() {
        let (mut manager, dva) = allocated_one();
        manager.set_hold_deferred(true);
        free_and_age(&mut manager, &dva, TXG_DEFER + 3);
        assert_eq!(
            manager.allocated(),
            4096,
            "held free must not become allocatable"
        );
        assert_eq!(manager.deferred_bytes(), 4096);
        manager.set_hold_deferred(false);
        manager.begin_txg(Txg(10));
        manager.txg_committed(None);
        assert_eq!(manager.allocated(), 0);
        assert_eq!(manager.deferred_bytes(), 0);
    }

    #[test]
    fn a_free_of_a_pinned_txg_stays_deferred_until_the_pin_goes() {
        for (pinned, kept) in [(Txg(2), true), (Txg(3), false), (Txg(1), true)] {
            let (mut manager, dva) = allocated_one();
            // Freed in txg 2 (free_and_age), then aged well past TXG_DEFER.
            manager.begin_txg(Txg(2));
            manager.free(&dva, Txg(1));
            manager.records.clear();
            manager.txg_committed(Some(pinned));
            for t in 3..3 + TXG_DEFER + 3 {
                manager.begin_txg(Txg(t));
                manager.txg_committed(Some(pinned));
            }
            // A reader that found its pointers in txg 3 or later cannot name the block.
            assert_eq!(
                manager.deferred_bytes(),
                if kept { 4096 } else { 0 },
                "pin {pinned:?}"
            );
            manager.begin_txg(Txg(20));
            manager.txg_committed(None);
            assert_eq!(manager.deferred_bytes(), 0, "released once unpinned");
            assert_eq!(manager.allocated(), 0);
        }
    }

    /// A flat vdev of `size` bytes.
    #[derive(Debug)]
    struct Sized(u64);

    impl VdevGeometry for Sized {
        fn asize(&self) -> u64 {
            self.0
        }
        fn sector_size(&self) -> u64 {
            512
        }
        fn allocation_size(&self, psize: u64) -> u64 {
            psize.next_multiple_of(512)
        }
        fn writable(&self) -> bool {
            true
        }
    }

    /// Vdev 0 normal (64 MiB), vdev 1 special of `special` bytes, in txg 1.
    fn with_special(special: u64) -> SpaceManager {
        let mut manager = SpaceManager::new(vec![
            (Arc::new(Sized(64 << 20)) as Arc<dyn VdevGeometry>, 24),
            (Arc::new(Sized(special)) as Arc<dyn VdevGeometry>, 24),
        ]);
        manager.set_class(1, VdevClass::Special);
        manager.begin_txg(Txg(1));
        manager
    }

    fn vdevs_of(dvas: &[Dva]) -> Vec<u32> {
        dvas.iter().map(|d| d.vdev.0).collect()
    }

    /// Goal: metadata goes to the special vdev (both copies, in different metaslabs of its
    /// one vdev), small data too, other data to the normal vdev. Method: one manager, one
    /// allocation of each class.
    #[test]
    fn classes_choose_their_vdevs() {
        let mut manager = with_special(64 << 20);
        let meta = AllocClass::Special { small_data: false };
        let small = AllocClass::Special { small_data: true };
        assert_eq!(vdevs_of(&manager.allocate(4096, 2, meta).unwrap()), [1, 1]);
        assert_eq!(vdevs_of(&manager.allocate(4096, 1, small).unwrap()), [1]);
        let data = manager.allocate(4096, 1, AllocClass::Normal).unwrap();
        assert_eq!(vdevs_of(&data), [0]);
        assert_eq!(manager.class(1), VdevClass::Special);
        assert_eq!(manager.class(0), VdevClass::Normal);
    }

    /// Goal: small data stops at the metadata reserve, metadata keeps going until the special
    /// vdev is full, and then falls back to the normal class. Method: a 16 MiB special vdev
    /// filled with 1 MiB blocks.
    #[test]
    fn special_class_reserve_and_fallback() {
        let mut manager = with_special(16 << 20);
        let meta = AllocClass::Special { small_data: false };
        let small = AllocClass::Special { small_data: true };
        let mut on_special = 0u64;
        while vdevs_of(&manager.allocate(1 << 20, 1, small).unwrap()) == [1] {
            on_special += 1 << 20;
        }
        assert!(
            (16 << 20) - on_special >= (16 << 20) / 4,
            "small blocks used the metadata reserve: {on_special} bytes"
        );
        let mut metadata = 0;
        while vdevs_of(&manager.allocate(1 << 20, 1, meta).unwrap()) == [1] {
            metadata += 1;
        }
        assert!(
            metadata >= 3,
            "metadata could use the reserve ({metadata} blocks)"
        );
        let usage = manager.usage();
        assert!(usage[1].size - usage[1].allocated < 1 << 20, "{usage:?}");
        // Full: metadata falls back to the normal class.
        assert_eq!(vdevs_of(&manager.allocate(4096, 1, meta).unwrap()), [0]);
    }

    /// A dRAID-like vdev: 4K sectors, rows of 10 sectors holding 8 of data.
    #[derive(Debug)]
    struct Rows;

    impl VdevGeometry for Rows {
        fn asize(&self) -> u64 {
            640 << 20
        }
        fn sector_size(&self) -> u64 {
            4096
        }
        fn allocation_size(&self, psize: u64) -> u64 {
            psize.div_ceil(8 * 4096).max(1) * 10 * 4096
        }
        fn writable(&self) -> bool {
            true
        }
        fn allocation_align(&self) -> u64 {
            10 * 4096
        }
    }

    /// Goal: on a dRAID pool with a special vdev, a data block smaller than a row's data
    /// goes to the special vdev (until its metadata reserve), a block that fills its rows
    /// stays on the dRAID; without dRAID nothing changes (`classes_choose_their_vdevs`).
    #[test]
    fn blocks_that_would_pad_a_draid_row_go_to_the_special_vdev() {
        let mut manager = SpaceManager::new(vec![
            (Arc::new(Rows) as Arc<dyn VdevGeometry>, 24),
            (Arc::new(Sized(16 << 20)) as Arc<dyn VdevGeometry>, 24),
        ]);
        manager.set_class(1, VdevClass::Special);
        manager.begin_txg(Txg(1));
        let data = AllocClass::Normal;
        for small in [512, 4096, 16384, 28672] {
            assert_eq!(
                vdevs_of(&manager.allocate(small, 1, data).unwrap()),
                [1],
                "{small}"
            );
        }
        for whole in [32768, 65536, 131_072, 30000] {
            assert_eq!(
                vdevs_of(&manager.allocate(whole, 1, data).unwrap()),
                [0],
                "{whole}"
            );
        }
        // The metadata reserve holds for steered blocks as for special_small_blocks.
        while vdevs_of(&manager.allocate(4096, 1, data).unwrap()) == [1] {}
        let usage = manager.usage();
        assert!(
            usage[1].size - usage[1].allocated >= (16 << 20) / 4,
            "{usage:?}"
        );
    }

    /// Goal: a vdev added later takes allocations, more than the half-full old one (the
    /// rotor is biased by free space), and shows in usage.
    #[test]
    fn added_vdev_takes_allocations() {
        let mut manager = manager();
        manager.begin_txg(Txg(1));
        for _ in 0..32 {
            manager.allocate(1 << 20, 1, AllocClass::Normal).unwrap();
        }
        manager.add_vdev(Arc::new(Flat), 24, VdevClass::Normal);
        let mut on_new = 0;
        for _ in 0..32 {
            let dva = manager.allocate(1 << 20, 1, AllocClass::Normal).unwrap()[0];
            on_new += u32::from(dva.vdev.0 == 1);
        }
        assert!(
            on_new > 16,
            "the emptier new vdev took only {on_new} of 32 blocks"
        );
        assert_eq!(manager.usage().len(), 2);
    }
}
