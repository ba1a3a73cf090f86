//! Cache devices (ZFS's L2ARC): a second level of read cache on fast devices, in front of
//! the pool's own vdevs.
//!
//! ```text
//!  read_physical(bp) ──► L2Cache::lookup(key) ──hit, verifies──► bytes
//!          │ miss                  └─ fails to verify: counted, entry dropped, treated as miss
//!          ▼
//!  the pool's vdevs (verify, heal) ──► bytes ──► L2Cache::feed(key, bytes)
//!
//!  one cache device's data area, written as a ring:
//!  | block | block | block | ... hand ─►        (older blocks, overwritten next) |
//! ```
//! A block is keyed by its first DVA and birth txg (copy-on-write: a DVA holds other bytes
//! only after a free, and a reallocated DVA has a later birth). Every hit is verified against
//! the caller's checksum before it is used, so a cache device can never return wrong data:
//! a bad read or a checksum mismatch counts on the cache leaf (READ, CKSUM in status), drops
//! the entry and the read goes to the pool as if the cache had missed. Writes are fed from
//! reads that missed (ZFS feeds from blocks leaving the in-memory cache; tarn's in-memory
//! caches live in the object layer, so what reaches this layer is exactly what missed them).
//!
//! Invariants:
//! - I1: an index entry's bytes were written to its slot before the entry became visible,
//!   and the entry is removed before its slot is overwritten by the ring.
//! - I2: nothing on a cache device is needed by the pool: losing or corrupting one costs
//!   speed only. No uberblock, no txg and no flush waits for it.
//!
//! Not here: persistence of the index across import (ZFS 2.0's persistent L2ARC; after an
//! import the cache starts cold), feed-rate limits and skipping of prefetched streams, the
//! `secondarycache` property (every block read from the pool is fed).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tarn_base::Guid;

use crate::leaf::Leaf;

/// Identity of a block in the cache: its first DVA (vdev, offset) and birth txg.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct L2Key {
    /// Top-level vdev of the first DVA.
    pub vdev: u32,
    /// Offset of the first DVA.
    pub offset: u64,
    /// Birth txg of the block.
    pub birth: u64,
}

/// Where a cached block sits.
#[derive(Clone, Copy, Debug)]
struct Slot {
    device: Guid,
    offset: u64,
    len: u64,
}

/// One cache device and its ring.
#[derive(Debug)]
struct Ring {
    leaf: Arc<Leaf>,
    /// Next write offset in the data area (a multiple of the sector size).
    hand: u64,
    /// Slots by offset, to find the entries the hand is about to overwrite.
    slots: BTreeMap<u64, (L2Key, u64)>,
}

#[derive(Debug, Default)]
struct State {
    rings: Vec<Ring>,
    index: HashMap<L2Key, Slot>,
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
}

/// The cache devices of one pool (see the module docs). Shared through `Arc`; every method
/// takes `&self`.
#[derive(Debug)]
pub struct L2Cache {
    state: Mutex<State>,
    sector: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    feeds: AtomicU64,
}

impl L2Cache {
    /// A cache over `leaves`, writing in units of `2^ashift` bytes.
    #[must_use]
    pub fn new(leaves: Vec<Arc<Leaf>>, ashift: u8) -> L2Cache {
        let cache = L2Cache {
            state: Mutex::new(State::default()),
            sector: 1u64 << ashift,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            feeds: AtomicU64::new(0),
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

    /// Adds a cache device (it starts empty).
    pub fn add(&self, leaf: Arc<Leaf>) {
        let mut state = self.lock();
        if state.rings.iter().any(|r| r.leaf.guid() == leaf.guid()) {
            return;
        }
        state.rings.push(Ring {
            leaf,
            hand: 0,
            slots: BTreeMap::new(),
        });
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
        let size = self.lock().index.values().map(|s| s.len).sum();
        L2Stats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            feeds: self.feeds.load(Ordering::Relaxed),
            size,
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
        let mut buf = vec![0u8; slot.len as usize];
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
        buf.truncate(len as usize);
        Some(buf)
    }

    fn still_indexed(&self, key: L2Key, slot: Slot) -> bool {
        self.lock().indexes(key, slot)
    }

    fn forget(&self, key: L2Key, slot: Slot) {
        let mut state = self.lock();
        if state.indexes(key, slot) {
            state.index.remove(&key);
        }
        if let Some(ring) = state
            .rings
            .iter_mut()
            .find(|r| r.leaf.guid() == slot.device)
        {
            ring.slots.remove(&slot.offset);
        }
    }

    /// Writes `data` (verified bytes of the block `key`) to the next cache device in turn,
    /// overwriting the oldest blocks of its ring. Blocks larger than a quarter of a device
    /// are not cached; a failed write leaves the block uncached (counted on the leaf).
    pub fn feed(&self, key: L2Key, data: &[u8]) {
        let mut state = self.lock();
        if state.rings.is_empty() || state.index.contains_key(&key) {
            return;
        }
        let len = (data.len() as u64).next_multiple_of(self.sector);
        let count = state.rings.len();
        let Some(at) = (0..count)
            .map(|i| (state.next + i) % count)
            .find(|&i| state.rings[i].leaf.is_usable() && len <= state.rings[i].capacity() / 4)
        else {
            return;
        };
        state.next = (at + 1) % count;
        let State { rings, index, .. } = &mut *state;
        let ring = &mut rings[at];
        let offset = ring.claim(len, self.sector, index);
        let Some(device) = ring.leaf.usable_device() else {
            return;
        };
        let mut padded = data.to_vec();
        padded.resize(len as usize, 0);
        if ring.leaf.write(device.as_ref(), offset, &padded).is_err() {
            return;
        }
        ring.slots.insert(offset, (key, len));
        let device = ring.leaf.guid();
        index.insert(
            key,
            Slot {
                device,
                offset,
                len,
            },
        );
        self.feeds.fetch_add(1, Ordering::Relaxed);
    }
}

impl Ring {
    /// Bytes of the data area the ring uses (whole sectors).
    fn capacity(&self) -> u64 {
        self.leaf.asize()
    }

    /// Moves the hand past `len` bytes (wrapping to the start when they do not fit before
    /// the end) and forgets every block stored where they go (I1). Returns their offset.
    fn claim(&mut self, len: u64, sector: u64, index: &mut HashMap<L2Key, Slot>) -> u64 {
        let capacity = self.capacity() / sector * sector;
        if self.hand + len > capacity {
            self.hand = 0;
        }
        let start = self.hand;
        let end = start + len;
        // A slot that starts before `start` may reach into the claimed range.
        let first = self
            .slots
            .range(..start)
            .next_back()
            .filter(|(offset, (_, slot_len))| *offset + slot_len > start)
            .map(|(offset, _)| *offset)
            .unwrap_or(start);
        let doomed: Vec<u64> = self.slots.range(first..end).map(|(o, _)| *o).collect();
        for offset in doomed {
            if let Some((key, _)) = self.slots.remove(&offset) {
                index.remove(&key);
            }
        }
        self.hand = end;
        start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_device::{Device, FaultPlan, SimDevice};

    fn cache_of(size: u64) -> (L2Cache, Arc<SimDevice>) {
        let device = SimDevice::new("c", size, FaultPlan::default());
        let dyn_device: Arc<dyn Device> = device.clone();
        let leaf = Arc::new(Leaf::new(Guid(7), dyn_device).unwrap());
        (L2Cache::new(vec![leaf], 12), device)
    }

    fn key(n: u64) -> L2Key {
        L2Key {
            vdev: 0,
            offset: n << 20,
            birth: 5,
        }
    }

    fn block(n: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u64 * 31 + n) as u8).collect()
    }

    #[test]
    fn a_fed_block_is_served_and_verified() {
        let (cache, _) = cache_of(16 << 20);
        let data = block(1, 5000);
        cache.feed(key(1), &data);
        let got = cache.lookup(key(1), 5000, &|d| d == data.as_slice());
        assert_eq!(got.as_deref(), Some(data.as_slice()));
        assert!(cache.lookup(key(2), 5000, &|_| true).is_none());
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.feeds), (1, 1, 1));
        assert_eq!(stats.size, 8192, "padded to two 4K sectors");
    }

    #[test]
    fn a_copy_that_fails_to_verify_is_counted_dropped_and_missed() {
        let (cache, device) = cache_of(16 << 20);
        let data = block(1, 4096);
        cache.feed(key(1), &data);
        // Rot the cached copy at rest.
        device
            .write_at(tarn_format::label::DATA_START, &[0xEE; 4096])
            .unwrap();
        assert!(
            cache
                .lookup(key(1), 4096, &|d| d == data.as_slice())
                .is_none()
        );
        let leaf = &cache.leaves()[0];
        assert_eq!(leaf.stats().snapshot().checksum_errors, 1);
        assert_eq!(cache.stats().size, 0, "the entry is forgotten");
    }

    #[test]
    fn the_ring_overwrites_the_oldest_blocks_and_forgets_them() {
        // 4 MiB of labels and boot area at the front, 512 KiB at the end: the data area of
        // a 6 MiB device is about 1.5 MiB, so 64 KiB blocks wrap after ~24 feeds.
        let (cache, _) = cache_of(6 << 20);
        let capacity = cache.leaves()[0].asize();
        let blocks = capacity / (64 << 10);
        for n in 0..blocks + 3 {
            cache.feed(key(n), &block(n, 64 << 10));
        }
        for n in 0..3 {
            assert!(cache.lookup(key(n), 64 << 10, &|_| true).is_none(), "{n}");
        }
        for n in 3..blocks + 3 {
            let data = block(n, 64 << 10);
            let got = cache.lookup(key(n), 64 << 10, &|d| d == data.as_slice());
            assert!(got.is_some(), "block {n} survives");
        }
        assert_eq!(cache.leaves()[0].stats().snapshot().checksum_errors, 0);
    }

    #[test]
    fn a_removed_device_forgets_its_blocks_and_a_gone_one_is_skipped() {
        let (cache, device) = cache_of(16 << 20);
        cache.feed(key(1), &block(1, 4096));
        device.set_gone(true);
        assert!(cache.lookup(key(1), 4096, &|_| true).is_none());
        cache.feed(key(2), &block(2, 4096));
        assert!(cache.remove(Guid(7)).is_some());
        assert!(cache.is_empty());
        assert_eq!(cache.stats().size, 0);
    }
}
