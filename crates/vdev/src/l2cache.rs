//! Cache devices (ZFS's L2ARC): a second level of read cache on fast devices, in front of
//! the pool's own vdevs, whose index survives export, restart and crash (persistent L2ARC).
//!
//! # Purpose
//! Serve reads that missed the object layer's in-memory caches from a fast device instead
//! of the pool's vdevs, and start warm after an import.
//!
//! # Model
//! ```text
//!  read_physical(bp) ──► L2Cache::lookup(key) ──hit, verifies──► bytes
//!          │ miss                  └─ fails to verify: counted, entry dropped, treated as miss
//!          ▼
//!  the pool's vdevs (verify, heal) ──► bytes ──► L2Cache::feed(key, bytes)  (secondarycache)
//!
//!  one cache device's data area:
//!  | header 0 | header 1 | ring: block | block | log block | block | ... hand ─► (oldest) |
//!   header ──newest──► log block ──prev──► log block ──prev──► ...
//! ```
//! A block is keyed by its first DVA, birth txg and checksum (copy-on-write: a DVA holds
//! other bytes only after a free, and a reallocated DVA has a later birth; txgs never repeat,
//! not even after a rewind). Every hit is verified against the caller's checksum before it is
//! used, so a cache device can never return wrong data: a bad read or a checksum mismatch
//! counts on the cache leaf (READ, CKSUM in status), drops the entry and the read goes to the
//! pool as if the cache had missed. Writes are fed from reads that missed (ZFS feeds from
//! blocks leaving the in-memory cache; tarn's in-memory caches live in the object layer, so
//! what reaches this layer is exactly what missed them), when the dataset's
//! `secondarycache` admits the block (the caller decides: `feed` is simply not called).
//!
//! **Persistence** (module `l2persist`, docs/FORMAT.md section 19). Each ring remembers the
//! entries written since its last log block; a log block listing them (key, ring position,
//! length, checksum of the copy) is written into the ring when 1022 entries are pending,
//! when the ring is about to pass its reservation, at every txg the pool commits and at
//! export. A device header (two alternating slots at the front of the data area) names the
//! newest log block and the *reservation*: the logical ring position the ring will not reach
//! before a newer header is durable. Ring positions are logical (they only grow; a lap is
//! exactly the ring's capacity), so an entry at position `p` can have been overwritten only
//! if `p < reserved - capacity`. Order of writes: copies, flush, log block, flush, header,
//! flush; only then does the ring write past the old reservation. At import the newest
//! header of this pool and this device GUID (a device added by `pool add` has a new GUID, so
//! it never rebuilds) is walked newest block first, stopping at the first block that fails
//! its checksum, does not carry the position its pointer names, or lies where the ring may
//! have written since; entries of older blocks never replace newer ones.
//!
//! **Why a restored entry of a freed block cannot be served.** The index is a hint keyed by
//! what a block pointer says of its block: first DVA, birth txg and checksum. A reader asks
//! with the block pointer it reached from the live tree. A block freed since the entry was
//! logged is no longer reachable, so nobody asks for its key; its DVA may hold a new block,
//! but that one has a later birth txg (and another checksum), hence another key. And even a
//! wrong entry under the right key (a rotted log block whose checksum still matched, a
//! device written by another build) is only read through the caller's verify closure:
//! what does not match the block pointer's checksum is a miss and a CKSUM count, never a
//! returned byte.
//!
//! # Invariants
//! - I1: an index entry's bytes were written to its slot before the entry became visible,
//!   and the entry is removed before its slot is overwritten by the ring.
//! - I2: nothing on a cache device is needed by the pool: losing or corrupting one costs
//!   speed only. No uberblock and no txg waits for it (the pool persists the index after a
//!   txg committed, and ignores failures).
//! - I3: the ring writes below its durable reservation only: `hand <= reserved`, and a
//!   header raising it is flushed before the first write past the old one.
//! - I4: a log block describes only copies that were flushed before it was written, and a
//!   header names only log blocks flushed before it.
//! - I5: logical positions only grow: every log block's predecessor is at a lower position
//!   (the rebuild stops otherwise, so a damaged chain cannot loop).
//!
//! # Concurrency and context
//! One mutex over the index and the rings; feeds (including their device writes, log blocks
//! and flushes) happen under it, lookups read the device outside it and check afterwards
//! that the slot was not reused meanwhile. Rebuild runs at import before the pool serves.
//!
//! # Failure model
//! Read errors and copies that fail verification count on the cache leaf and are misses. A
//! failed copy write leaves the block uncached; a failed log-block or header write leaves
//! those entries unlogged (cold after the next import) and the reservation unchanged, so the
//! ring stops taking feeds until a header write succeeds. A device gone is skipped. A crash
//! loses the entries not yet in a log block (those fed since the last committed txg, at most
//! 1021 per device): the cache is that much colder after the import, nothing else.
//!
//! # Not here
//! Feed-rate limits and skipping of prefetched streams; a rebuild in the background (it runs
//! in the import, a read of every log block: about 1/64 of the cached bytes); an
//! `l2arc_rebuild` switch.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tarn_base::{Clock, Guid};
use tarn_format::Checksum;
use tarn_format::l2cache::{L2_RING_START, L2Entry, L2LogPtr};

use crate::leaf::Leaf;

/// Identity of a block in the cache: its first DVA (vdev, offset), birth txg and checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct L2Key {
    /// Top-level vdev of the first DVA.
    pub vdev: u32,
    /// Offset of the first DVA.
    pub offset: u64,
    /// Birth txg of the block.
    pub birth: u64,
    /// The block pointer's checksum (of the physical bytes the cache holds).
    pub checksum: Checksum,
}

/// Where a cached block sits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub(crate) device: Guid,
    /// Offset in the device's data area.
    pub(crate) offset: u64,
    /// Bytes taken (whole sectors).
    pub(crate) len: u64,
    /// The entry came from the rebuild at import.
    pub(crate) restored: bool,
}

/// One cache device and its ring.
#[derive(Debug)]
pub(crate) struct Ring {
    pub(crate) leaf: Arc<Leaf>,
    /// Bytes of the ring (whole sectors), after the header slots.
    pub(crate) capacity: u64,
    /// Logical position of the next write.
    pub(crate) hand: u64,
    /// The durable header's reservation (I3).
    pub(crate) reserved: u64,
    /// Sequence of the newest header written (or adopted at import).
    pub(crate) sequence: u64,
    /// The newest log block (none yet).
    pub(crate) newest: L2LogPtr,
    /// No header of this device is known: the next header goes to both slots.
    pub(crate) fresh: bool,
    /// Entries written since the newest log block.
    pub(crate) pending: Vec<L2Entry>,
    /// Slots by ring offset (`position % capacity`), to find what the hand overwrites.
    pub(crate) slots: BTreeMap<u64, (L2Key, u64)>,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) rings: Vec<Ring>,
    pub(crate) index: HashMap<L2Key, Slot>,
    /// Ring that takes the next feed (round robin, as ZFS feeds its cache devices in turn).
    next: usize,
}

impl State {
    /// Whether the index still sends `key` to `slot` (the ring may have moved on).
    fn indexes(&self, key: L2Key, slot: Slot) -> bool {
        self.index
            .get(&key)
            .is_some_and(|s| s.device == slot.device && s.offset == slot.offset)
    }
}

/// Counters of the cache as a whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct L2Stats {
    /// Reads served by a cache device.
    pub hits: u64,
    /// Reads that looked in the cache and went to the pool.
    pub misses: u64,
    /// Blocks written to cache devices.
    pub feeds: u64,
    /// Bytes the index addresses now (the cache's content).
    pub size: u64,
    /// Memory the index takes (ZFS's L2ARC headers): its table's capacity, slack included.
    pub headers: u64,
    /// Entries the import's rebuild restored.
    pub restored: u64,
    /// Hits served by entries the rebuild restored.
    pub restored_hits: u64,
}

/// What the rebuild of one cache device found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct L2Rebuild {
    /// The cache device.
    pub device: Guid,
    /// Its path.
    pub path: String,
    /// Entries restored into the index.
    pub entries: u64,
    /// Bytes they address.
    pub bytes: u64,
    /// Log blocks read and accepted.
    pub log_blocks: u64,
    /// Time the rebuild took (the pool's clock).
    pub time_ns: u64,
    /// Why the walk ended (`end of chain`, or the block that failed).
    pub stopped: String,
}

/// The cache devices of one pool (see the module docs). Shared through `Arc`; every method
/// takes `&self`.
#[derive(Debug)]
pub struct L2Cache {
    state: Mutex<State>,
    pool: Guid,
    sector: u64,
    /// A read-only pool writes nothing, not even to its cache devices.
    readonly: std::sync::atomic::AtomicBool,
    hits: AtomicU64,
    misses: AtomicU64,
    feeds: AtomicU64,
    restored: AtomicU64,
    restored_hits: AtomicU64,
}

impl L2Cache {
    /// A cache of pool `pool` over `leaves` (each starting empty), writing in units of
    /// `2^ashift` bytes.
    #[must_use]
    pub fn new(pool: Guid, leaves: Vec<Arc<Leaf>>, ashift: u8) -> L2Cache {
        let cache = L2Cache {
            state: Mutex::new(State::default()),
            pool,
            sector: 1u64 << ashift,
            readonly: std::sync::atomic::AtomicBool::new(false),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            feeds: AtomicU64::new(0),
            restored: AtomicU64::new(0),
            restored_hits: AtomicU64::new(0),
        };
        for leaf in leaves {
            cache.add(leaf);
        }
        cache
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is an index of hints: every hit is verified, so a panic elsewhere cannot
        // make it return wrong data; keep serving.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops (or resumes) every write to the cache devices: lookups only.
    pub fn set_readonly(&self, readonly: bool) {
        self.readonly.store(readonly, Ordering::Relaxed);
    }

    fn is_readonly(&self) -> bool {
        self.readonly.load(Ordering::Relaxed)
    }

    /// Adds a cache device. It starts empty, whatever it held: only an import rebuilds
    /// ([`L2Cache::rebuild`]).
    pub fn add(&self, leaf: Arc<Leaf>) {
        let mut state = self.lock();
        if state.rings.iter().any(|r| r.leaf.guid() == leaf.guid()) {
            return;
        }
        let ring = Ring::new(leaf, self.sector);
        state.rings.push(ring);
    }

    /// Removes the cache device `guid` and forgets what it held.
    pub fn remove(&self, guid: Guid) -> Option<Arc<Leaf>> {
        let mut state = self.lock();
        let at = state.rings.iter().position(|r| r.leaf.guid() == guid)?;
        let ring = state.rings.remove(at);
        for (key, _) in ring.slots.values() {
            state.index.remove(key);
        }
        state.next = 0;
        Some(ring.leaf)
    }

    /// The cache devices, in the order they were added.
    #[must_use]
    pub fn leaves(&self) -> Vec<Arc<Leaf>> {
        self.lock()
            .rings
            .iter()
            .map(|r| Arc::clone(&r.leaf))
            .collect()
    }

    /// Whether the pool has any cache device.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.lock().rings.is_empty()
    }

    /// The counters now.
    #[must_use]
    pub fn stats(&self) -> L2Stats {
        let state = self.lock();
        let size = state.index.values().map(|s| s.len).sum();
        let slot = size_of::<(L2Key, Slot)>() + 1;
        let headers = (state.index.capacity() * slot * 8 / 7) as u64;
        drop(state);
        L2Stats {
            headers,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            feeds: self.feeds.load(Ordering::Relaxed),
            size,
            restored: self.restored.load(Ordering::Relaxed),
            restored_hits: self.restored_hits.load(Ordering::Relaxed),
        }
    }

    /// Bytes the index addresses on the cache device `guid` (its ALLOC in iostat).
    #[must_use]
    pub fn allocated_on(&self, guid: Guid) -> u64 {
        let state = self.lock();
        state
            .index
            .values()
            .filter(|s| s.device == guid)
            .map(|s| s.len)
            .sum()
    }

    /// The cached bytes of `key` (`len` of them), if a cache device holds them and
    /// `verify` accepts them. A read error or a rejected copy is counted on the cache leaf
    /// and forgets the entry; the caller then reads the pool.
    pub fn lookup(&self, key: L2Key, len: u64, verify: &dyn Fn(&[u8]) -> bool) -> Option<Vec<u8>> {
        let found = {
            let state = self.lock();
            state.index.get(&key).copied().and_then(|slot| {
                let ring = state.rings.iter().find(|r| r.leaf.guid() == slot.device)?;
                Some((slot, Arc::clone(&ring.leaf)))
            })
        };
        let Some((slot, leaf)) = found.filter(|(slot, _)| slot.len >= len) else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let mut buf = tarn_base::buf::zeroed(slot.len as usize);
        let read = leaf
            .usable_device()
            .map(|device| leaf.read(device.as_ref(), slot.offset, &mut buf));
        let good = match read {
            Some(Ok(())) if verify(&buf[..len as usize]) => true,
            Some(Ok(())) => {
                // The ring may have overwritten the slot since the index was consulted: only
                // a slot still indexed for this key is a wrong copy.
                if self.still_indexed(key, slot) {
                    leaf.stats().add_checksum_error();
                }
                false
            }
            _ => false,
        };
        if !good {
            self.forget(key, slot);
            self.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        if slot.restored {
            self.restored_hits.fetch_add(1, Ordering::Relaxed);
        }
        buf.truncate(len as usize);
        Some(buf)
    }

    fn still_indexed(&self, key: L2Key, slot: Slot) -> bool {
        self.lock().indexes(key, slot)
    }

    fn forget(&self, key: L2Key, slot: Slot) {
        let mut state = self.lock();
        if !state.indexes(key, slot) {
            return;
        }
        state.index.remove(&key);
        if let Some(ring) = state
            .rings
            .iter_mut()
            .find(|r| r.leaf.guid() == slot.device)
        {
            ring.slots.remove(&(slot.offset - L2_RING_START));
        }
    }

    /// Writes `data` (verified bytes of the block `key`) to the next cache device in turn,
    /// overwriting the oldest blocks of its ring. Blocks larger than a quarter of a ring are
    /// not cached; a failed write leaves the block uncached (counted on the leaf).
    pub fn feed(&self, key: L2Key, data: &[u8]) {
        if self.is_readonly() || data.is_empty() {
            return;
        }
        let mut state = self.lock();
        if state.rings.is_empty() || state.index.contains_key(&key) {
            return;
        }
        let len = (data.len() as u64).next_multiple_of(self.sector);
        let count = state.rings.len();
        let Some(at) = (0..count)
            .map(|i| (state.next + i) % count)
            .find(|&i| state.rings[i].leaf.is_usable() && len <= state.rings[i].capacity / 4)
        else {
            return;
        };
        state.next = (at + 1) % count;
        let State { rings, index, .. } = &mut *state;
        let ring = &mut rings[at];
        let Some(position) = ring.claim_data(len, self.pool, self.sector, index) else {
            return;
        };
        let Some(device) = ring.leaf.usable_device() else {
            return;
        };
        let mut padded = data.to_vec();
        padded.resize(len as usize, 0);
        let offset = ring.data_offset(position);
        if ring.leaf.write(device.as_ref(), offset, &padded).is_err() {
            return;
        }
        ring.slots.insert(offset - L2_RING_START, (key, len));
        index.insert(
            key,
            Slot {
                device: ring.leaf.guid(),
                offset,
                len,
                restored: false,
            },
        );
        ring.log_entry(
            key,
            data.len() as u64,
            position,
            self.pool,
            self.sector,
            index,
        );
        self.feeds.fetch_add(1, Ordering::Relaxed);
    }

    /// Writes a log block of the entries fed since the last one, and a header naming it, to
    /// every cache device that has such entries (after a txg commits, and at export). A
    /// failure is counted on the leaf and leaves those entries out of the persistent index.
    pub fn persist(&self) {
        if self.is_readonly() {
            return;
        }
        let mut state = self.lock();
        let State { rings, index, .. } = &mut *state;
        for ring in rings {
            if !ring.pending.is_empty() {
                let _ = ring.persist(self.pool, self.sector, 0, index);
            }
        }
    }

    /// Rebuilds the index of every cache device from its header and log blocks (at import;
    /// see the module docs). Returns what each device gave, timed with `clock`.
    pub fn rebuild(&self, clock: &dyn Clock) -> Vec<L2Rebuild> {
        let mut state = self.lock();
        let mut reports = Vec::new();
        for at in 0..state.rings.len() {
            let started = clock.monotonic_ns();
            let State { rings, index, .. } = &mut *state;
            let mut report = rings[at].rebuild(self.pool, self.sector, index);
            report.time_ns = clock.monotonic_ns().saturating_sub(started);
            self.restored.fetch_add(report.entries, Ordering::Relaxed);
            reports.push(report);
        }
        reports
    }
}

#[cfg(test)]
#[path = "l2cache_tests.rs"]
mod tests;
