//! The clean-block cache (ZFS's ARC in miniature): verified logical bytes of blocks read or
//! written, bounded by bytes, evicted in CLOCK order (an approximation of least recently
//! used: entries sit in a ring in insertion order, a hit only sets the entry's referenced
//! flag, and eviction takes the oldest entry whose flag is clear, clearing and re-queueing
//! the referenced ones it passes). A hit therefore costs one hash lookup under the store's
//! mutex and no reordering, which matters when every 4 KiB read of a file walks three or
//! four cached blocks.
//!
//! Keyed by the block's first DVA, birth txg and checksum: a block pointer names immutable
//! contents, so an entry never goes stale, and a reused address is born in a later txg, so
//! its key differs. A block its sync frees for good (no snapshot keeps it) leaves the cache
//! at once ([`BlockCache::forget`]): a random-write load otherwise filled the cache with
//! superseded records, new memory page by page, until the limit evicted them. Dirty buffers
//! never live here (they belong to their object until sync). A hit is a reference to bytes
//! that were decompressed and checksum-verified once, when they entered: no device read, no
//! checksum, no decompression, only the copy the reader makes.
//!
//! One [`CacheStore`] holds the entries of many object sets under one byte limit: the engine
//! keeps one per process, sized from the machine's memory, as ZFS keeps one ARC for every
//! pool. Each imported pool reads through its own [`CacheDomain`] (a tag in every key, so
//! two pools, or two imports of one pool, never share an entry: an import rewound to an
//! older txg may write new blocks at the addresses and birth txgs of blocks it abandoned).
//! When the last handle of a domain goes (its pool is exported or destroyed), its entries
//! are dropped. An object set made without a domain has a private store of its own
//! ([`CACHE_BYTES_DEFAULT`](crate::CACHE_BYTES_DEFAULT) unless told otherwise).
//!
//! The byte limit bounds memory, not payload: each entry is charged its buffer's capacity
//! plus [`ENTRY_OVERHEAD`] (its key in the index and the ring, the entry, the buffer's
//! headers), so a store of small blocks stays within its limit too; `bytes` in
//! [`CacheStats`] is the payload alone, `headers` the rest.
//!
//! # Records written whole
//! A record a sync writes whole (a stream through a mount, a volume's blocks) enters the
//! cache as *written*: such entries are kept up to a [`WRITTEN_SHARE`]th of the cache's
//! room together, the oldest going first, unless a read hits one (it is then an entry like
//! any other). A stream of writes then recycles the same memory instead of growing the
//! cache page by page: the first touch of fresh memory (the kernel clearing each page) was
//! a fifth of a streaming write's CPU (docs/PERFORMANCE.md, "Records written whole kept
//! briefly"). Records merged from pieces, metadata and everything read enter as before: a
//! random writer reads its records back for the next piece.
//!
//! The `primarycache` property is per object set ([`CachePolicy`]): it decides what that set
//! puts in the store and what it takes from it; narrowing it drops the domain's entries it no
//! longer admits (a rare admin change, so the store is scanned).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tarn_format::{BlockPtr, BlockType, Dva};

use crate::readahead::Ahead;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct CacheKey {
    domain: u64,
    dva: Dva,
    birth: u64,
    checksum: [u64; 4],
}

impl CacheKey {
    fn of(domain: u64, bp: &BlockPtr) -> Self {
        CacheKey {
            domain,
            dva: bp.dvas[0],
            birth: bp.physical_birth().0,
            checksum: bp.checksum.0,
        }
    }
}

fn is_data(bp: &BlockPtr) -> bool {
    bp.block_type == BlockType::Data && bp.level == 0
}

/// What the clean-block cache may keep (the `primarycache` property of a dataset), and what
/// reads may copy to the pool's cache devices (`secondarycache`, same values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CachePolicy {
    /// Every block.
    #[default]
    All,
    /// Everything but level-0 file and volume data.
    Metadata,
    /// Nothing: every read goes to the pool (and its cache devices).
    None,
}

impl CachePolicy {
    /// The policy named by a `primarycache` value (`all`, `metadata`, `none`); anything
    /// else is `All`, the default.
    #[must_use]
    pub fn parse(value: &str) -> CachePolicy {
        match value {
            "metadata" => CachePolicy::Metadata,
            "none" => CachePolicy::None,
            _ => CachePolicy::All,
        }
    }

    /// Whether the policy admits `bp` (metadata: every block but level-0 data).
    #[must_use]
    pub fn admits(self, bp: &BlockPtr) -> bool {
        match self {
            CachePolicy::All => true,
            CachePolicy::Metadata => !is_data(bp),
            CachePolicy::None => false,
        }
    }
}

/// The share of the cache's room that records written whole and not read since may take
/// (module docs, "Records written whole"): a sixteenth.
pub(crate) const WRITTEN_SHARE: u64 = 16;

/// Memory an entry costs beyond its buffer's capacity: its key twice (the index and the
/// CLOCK ring), the entry, the index's control byte and load-factor slack (an eighth), the
/// ring's places (one per entry and at most one left by a forgotten entry, each up to
/// doubled by growth slack), its place among the records written whole when it is one (a
/// B-tree's nodes are at least half full: twice the place), and the `Arc<Vec<u8>>`
/// headers.
pub const ENTRY_OVERHEAD: u64 = {
    let key = std::mem::size_of::<CacheKey>() as u64;
    let slot = key + std::mem::size_of::<Entry>() as u64 + 1;
    let place = std::mem::size_of::<(CacheKey, u64)>() as u64;
    slot + slot / 7 + 4 * place + 2 * place + std::mem::size_of::<Vec<u8>>() as u64 + 16
};

/// Counters of a [`CacheStore`] since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Byte limit (payload and headers together).
    pub limit: u64,
    /// Bytes held: the blocks' logical sizes.
    pub bytes: u64,
    /// Of `bytes`, those of level-0 file and volume data (the rest is metadata).
    pub data_bytes: u64,
    /// Memory the entries cost beyond `bytes`: buffer slack and [`ENTRY_OVERHEAD`] each.
    pub headers: u64,
    /// Blocks held.
    pub entries: u64,
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that were not (the block was then read from the pool).
    pub misses: u64,
    /// Entries evicted to make room.
    pub evictions: u64,
    /// Bytes of the limit lent to dirty data ([`CacheStore::reserve`]).
    pub reserved: u64,
}

/// One entry: the bytes, whether it was hit since the clock hand last passed it, and
/// whether it is level-0 data.
#[derive(Debug)]
struct Entry {
    bytes: Arc<Vec<u8>>,
    referenced: bool,
    data: bool,
    /// Which place in the ring is this entry's (a forgotten entry's place stays behind).
    generation: u64,
    /// A record written whole and not read since (module docs): counted in
    /// `Entries::written_charged` and in `Entries::written` by its generation.
    written: bool,
}

/// What `entry` is charged against the limit: the memory it holds.
fn charge(entry: &Entry) -> u64 {
    entry.bytes.capacity() as u64 + ENTRY_OVERHEAD
}

/// The entries of a store. `charged <= limit` holds after every call (I1 of the crate),
/// `charged` is the sum of [`charge`] over the entries and `bytes` of their lengths, and
/// `ring` holds every entry of `map` exactly once (the place whose generation is the
/// entry's) plus `stale` places of entries forgotten, never more of those than entries.
#[derive(Debug)]
struct Entries {
    limit: u64,
    bytes: u64,
    data_bytes: u64,
    charged: u64,
    next_domain: u64,
    map: HashMap<CacheKey, Entry>,
    ring: VecDeque<(CacheKey, u64)>,
    stale: usize,
    /// Bytes of the limit lent to dirty data ([`CacheStore::reserve`]): entries are kept
    /// within `limit - reserved`.
    reserved: u64,
    next_generation: u64,
    stats: CacheStats,
    /// The entries marked written, by generation (so the oldest first), and what they are
    /// charged together.
    written: BTreeMap<u64, CacheKey>,
    written_charged: u64,
}

impl Entries {
    /// Drops the oldest written entries until they take at most their share of the room.
    fn trim_written(&mut self) {
        let cap = self.room() / WRITTEN_SHARE;
        while self.written_charged > cap {
            let (_, key) = self
                .written
                .pop_first()
                .expect("cache: written bytes belong to written entries");
            self.remove(&key);
            self.stats.evictions += 1;
        }
    }

    /// A hit on `key`'s entry: it is referenced, and no longer written.
    fn hit(&mut self, key: &CacheKey) -> Option<Arc<Vec<u8>>> {
        let entry = self.map.get_mut(key)?;
        entry.referenced = true;
        if entry.written {
            entry.written = false;
            self.written_charged -= charge(entry);
            self.written.remove(&entry.generation);
        }
        Some(Arc::clone(&entry.bytes))
    }

    /// Evicts in CLOCK order until at most `limit` bytes are held. Each pass of the hand
    /// clears the flags it passes, so this ends within two turns of the ring.
    fn evict_to(&mut self, limit: u64) {
        while self.charged > limit {
            let Some((key, generation)) = self.ring.pop_front() else {
                break;
            };
            let Some(entry) = self
                .map
                .get_mut(&key)
                .filter(|e| e.generation == generation)
            else {
                self.stale -= 1;
                continue;
            };
            if entry.referenced {
                entry.referenced = false;
                self.ring.push_back((key, generation));
                continue;
            }
            let old = self.map.remove(&key).expect("cache: entry just seen");
            self.forget(&old);
            self.stats.evictions += 1;
        }
        self.check_places();
    }

    /// What the entries may hold: the limit less what is lent.
    fn room(&self) -> u64 {
        self.limit.saturating_sub(self.reserved)
    }

    fn check_places(&self) {
        assert_eq!(
            self.map.len() + self.stale,
            self.ring.len(),
            "cache: index sizes"
        );
    }

    /// Removes the entry of `key`, if any; its place in the ring is left behind until the
    /// hand passes it or the ring is compacted (when there are as many such places as
    /// entries).
    fn remove(&mut self, key: &CacheKey) {
        let Some(entry) = self.map.remove(key) else {
            return;
        };
        self.forget(&entry);
        self.stale += 1;
        if self.stale > self.map.len() {
            self.compact();
        }
        self.check_places();
    }

    /// Drops the ring's places of removed entries.
    fn compact(&mut self) {
        let map = &self.map;
        self.ring
            .retain(|(key, generation)| map.get(key).is_some_and(|e| e.generation == *generation));
        self.stale = 0;
    }

    /// Takes a removed entry out of the byte counts.
    fn forget(&mut self, entry: &Entry) {
        self.bytes -= entry.bytes.len() as u64;
        self.charged -= charge(entry);
        if entry.written {
            self.written_charged -= charge(entry);
            self.written.remove(&entry.generation);
        }
        if entry.data {
            self.data_bytes -= entry.bytes.len() as u64;
        }
    }

    fn remove_where(&mut self, mut doomed: impl FnMut(&CacheKey, &Entry) -> bool) {
        let keys: Vec<CacheKey> = self
            .map
            .iter()
            .filter(|(key, entry)| doomed(key, entry))
            .map(|(key, _)| *key)
            .collect();
        if keys.is_empty() {
            return;
        }
        for key in keys {
            let entry = self.map.remove(&key).expect("cache: key just listed");
            self.forget(&entry);
        }
        self.compact();
        self.check_places();
    }
}

/// A byte-bounded store of clean blocks shared by the object sets of many pools (module
/// docs). Cloning gives another handle to the same store.
#[derive(Clone, Debug)]
pub struct CacheStore {
    entries: Arc<Mutex<Entries>>,
}

impl CacheStore {
    /// An empty store holding at most `limit` bytes.
    #[must_use]
    pub fn new(limit: u64) -> Self {
        CacheStore {
            entries: Arc::new(Mutex::new(Entries {
                limit,
                bytes: 0,
                data_bytes: 0,
                charged: 0,
                next_domain: 0,
                map: HashMap::new(),
                ring: VecDeque::new(),
                stale: 0,
                reserved: 0,
                next_generation: 0,
                stats: CacheStats::default(),
                written: BTreeMap::new(),
                written_charged: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        // Every update keeps the entries consistent before it can panic, so a poisoned lock
        // (a panic elsewhere while holding it) leaves usable entries.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new domain: the keys of one imported pool.
    #[must_use]
    pub fn domain(&self) -> CacheDomain {
        let mut entries = self.lock();
        entries.next_domain += 1;
        CacheDomain {
            inner: Arc::new(DomainInner {
                store: self.clone(),
                id: entries.next_domain,
                ahead: Mutex::default(),
            }),
        }
    }

    /// Sets the byte limit, evicting what no longer fits.
    pub fn set_limit(&self, limit: u64) {
        let mut entries = self.lock();
        entries.limit = limit;
        let room = entries.room();
        entries.evict_to(room);
    }

    /// Lends up to `want` bytes of the limit to dirty data (the engine's write throttle,
    /// as ZFS counts dirty data in its ARC), never more than half the limit in all, and
    /// evicts what no longer fits; returns the bytes lent.
    pub fn reserve(&self, want: u64) -> u64 {
        let mut entries = self.lock();
        let granted = want.min((entries.limit / 2).saturating_sub(entries.reserved));
        entries.reserved += granted;
        let room = entries.room();
        entries.evict_to(room);
        granted
    }

    /// Takes back `bytes` lent by [`CacheStore::reserve`].
    pub fn release(&self, bytes: u64) {
        let mut entries = self.lock();
        assert!(
            bytes <= entries.reserved,
            "cache: {bytes} released of {} lent",
            entries.reserved
        );
        entries.reserved -= bytes;
    }

    /// What the store holds and how it was used.
    #[must_use]
    pub fn stats(&self) -> CacheStats {
        let entries = self.lock();
        CacheStats {
            limit: entries.limit,
            bytes: entries.bytes,
            data_bytes: entries.data_bytes,
            headers: entries.charged - entries.bytes,
            entries: entries.map.len() as u64,
            reserved: entries.reserved,
            ..entries.stats
        }
    }
}

#[derive(Debug)]
struct DomainInner {
    store: CacheStore,
    id: u64,
    /// Read-ahead batches being read off every lock, by the keys of their blocks
    /// (`readahead`, "Read-ahead that does not wait"): a read that needs one of them waits
    /// for its batch instead of reading the block again, with the block's place in the
    /// batch (the batch finishes its blocks in order). A batch takes its keys out when it
    /// ends, so no batch outlives its read.
    ahead: Mutex<HashMap<CacheKey, (Arc<Ahead>, usize)>>,
}

impl Drop for DomainInner {
    fn drop(&mut self) {
        let id = self.id;
        self.store.lock().remove_where(|key, _| key.domain == id);
    }
}

/// The part of a [`CacheStore`] one imported pool uses; its entries go with its last handle.
#[derive(Clone, Debug)]
pub struct CacheDomain {
    inner: Arc<DomainInner>,
}

impl CacheDomain {
    /// The store this domain is part of.
    #[must_use]
    pub fn store(&self) -> &CacheStore {
        &self.inner.store
    }

    /// Keeps `data` as the contents of `bp` (a block that verified), unless it is already
    /// kept or too big; evicts the least recently used to make room. The object set's
    /// `primarycache` policy is its caller's to apply.
    pub(crate) fn insert(&self, bp: &BlockPtr, data: Arc<Vec<u8>>) {
        self.insert_as(bp, data, false);
    }

    /// [`CacheDomain::insert`], of a record a sync wrote whole when `whole` (module docs,
    /// "Records written whole"; metadata is inserted as any block).
    fn insert_as(&self, bp: &BlockPtr, data: Arc<Vec<u8>>, whole: bool) {
        let written = whole && is_data(bp);
        let mut entry = Entry {
            bytes: data,
            referenced: false,
            data: is_data(bp),
            generation: 0,
            written,
        };
        let size = charge(&entry);
        let key = CacheKey::of(self.inner.id, bp);
        let mut guard = self.store().lock();
        let entries = &mut *guard;
        if size > entries.limit / 4 {
            // A block bigger than a quarter of the cache would evict too much to be worth it.
            return;
        }
        if entries.map.contains_key(&key) || size > entries.room() {
            return;
        }
        let room = entries.room();
        entries.evict_to(room - size);
        entries.bytes += entry.bytes.len() as u64;
        entries.charged += size;
        if entry.data {
            entries.data_bytes += entry.bytes.len() as u64;
        }
        entries.next_generation += 1;
        entry.generation = entries.next_generation;
        entries.ring.push_back((key, entry.generation));
        if written {
            entries.written.insert(entry.generation, key);
            entries.written_charged += size;
        }
        entries.map.insert(key, entry);
        if written {
            entries.trim_written();
        }
        assert!(
            entries.charged <= entries.room(),
            "cache: {} bytes over limit {} less {} lent (I1)",
            entries.charged,
            entries.limit,
            entries.reserved
        );
        entries.check_places();
    }

    fn same(&self, other: &CacheDomain) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn ahead_map(&self) -> MutexGuard<'_, HashMap<CacheKey, (Arc<Ahead>, usize)>> {
        // Every update of the map is one insert or remove: a poisoned lock leaves it usable.
        self.inner
            .ahead
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The read-ahead batch reading `bp` now, if any, and the place of `bp` in it.
    pub(crate) fn in_flight(&self, bp: &BlockPtr) -> Option<(Arc<Ahead>, usize)> {
        let key = CacheKey::of(self.inner.id, bp);
        self.ahead_map().get(&key).cloned()
    }

    /// Notes `ahead` as reading its blocks (a block some other batch reads stays that
    /// batch's).
    pub(crate) fn start_ahead(&self, ahead: &Arc<Ahead>) {
        let mut map = self.ahead_map();
        for (place, bp) in ahead.blocks().iter().enumerate() {
            map.entry(CacheKey::of(self.inner.id, bp))
                .or_insert_with(|| (Arc::clone(ahead), place));
        }
    }

    /// Takes out the keys `ahead` holds: its read ended.
    pub(crate) fn end_ahead(&self, ahead: &Arc<Ahead>) {
        let mut map = self.ahead_map();
        for bp in ahead.blocks() {
            let key = CacheKey::of(self.inner.id, bp);
            if map
                .get(&key)
                .is_some_and(|(held, _)| Arc::ptr_eq(held, ahead))
            {
                map.remove(&key);
            }
        }
    }

    /// Ends every read-ahead of this domain: each batch nobody runs yet is run here, and
    /// each one running elsewhere is waited for. After this no batch holds a reader of the
    /// pool, so its devices can be closed (export).
    pub fn finish_reads_ahead(&self) {
        loop {
            let Some(ahead) = self.ahead_map().values().next().map(|(a, _)| Arc::clone(a)) else {
                return;
            };
            ahead.run();
        }
    }
}

/// One object set's view of the cache: a domain and the set's `primarycache` policy.
#[derive(Debug)]
pub(crate) struct BlockCache {
    policy: CachePolicy,
    /// What reads may copy to the cache devices (`secondarycache`); not this cache's own.
    secondary: CachePolicy,
    domain: CacheDomain,
}

impl BlockCache {
    /// A cache of its own (a private store of `limit` bytes).
    pub(crate) fn new(limit: u64) -> Self {
        BlockCache {
            policy: CachePolicy::All,
            secondary: CachePolicy::All,
            domain: CacheStore::new(limit).domain(),
        }
    }

    /// Reads through `domain` from now on (nothing to do when it already does).
    pub(crate) fn use_domain(&mut self, domain: &CacheDomain) {
        if !self.domain.same(domain) {
            self.domain = domain.clone();
        }
    }

    pub(crate) fn get(&mut self, bp: &BlockPtr) -> Option<Arc<Vec<u8>>> {
        if !self.policy.admits(bp) {
            return None;
        }
        let key = CacheKey::of(self.domain.inner.id, bp);
        let mut guard = self.domain.store().lock();
        let entries = &mut *guard;
        let Some(bytes) = entries.hit(&key) else {
            entries.stats.misses += 1;
            return None;
        };
        entries.stats.hits += 1;
        Some(bytes)
    }

    /// Applies `policy` from now on, dropping the domain's entries it no longer admits.
    pub(crate) fn set_policy(&mut self, policy: CachePolicy) {
        if policy == self.policy {
            return;
        }
        self.policy = policy;
        let id = self.domain.inner.id;
        match policy {
            CachePolicy::All => {}
            // Which object set an entry came from is not recorded: the domain's data goes
            // (a rare admin change; other datasets of the pool read it again).
            CachePolicy::Metadata => self
                .domain
                .store()
                .lock()
                .remove_where(|key, entry| key.domain == id && entry.data),
            CachePolicy::None => self
                .domain
                .store()
                .lock()
                .remove_where(|key, _| key.domain == id),
        }
    }

    /// Applies `secondarycache`: what reads through this cache may copy to the pool's cache
    /// devices from now on.
    pub(crate) fn set_secondary_policy(&mut self, policy: CachePolicy) {
        self.secondary = policy;
    }

    /// Whether a read of `bp` may copy it to the pool's cache devices (`secondarycache`).
    pub(crate) fn feeds_l2(&self, bp: &BlockPtr) -> bool {
        self.secondary.admits(bp)
    }

    /// Whether level-0 data blocks are kept (read-ahead into the cache is pointless
    /// otherwise).
    pub(crate) fn keeps_data(&self) -> bool {
        self.policy == CachePolicy::All
    }

    /// The byte limit of the store this cache is part of.
    pub(crate) fn limit(&self) -> u64 {
        self.domain.store().lock().limit
    }

    /// Whether `bp`'s contents are cached (without making the entry younger).
    pub(crate) fn contains(&self, bp: &BlockPtr) -> bool {
        let key = CacheKey::of(self.domain.inner.id, bp);
        self.policy.admits(bp) && self.domain.store().lock().map.contains_key(&key)
    }

    pub(crate) fn insert(&mut self, bp: &BlockPtr, data: Arc<Vec<u8>>) {
        if self.policy.admits(bp) {
            self.domain.insert(bp, data);
        }
    }

    /// [`BlockCache::insert`] of a block a sync wrote, a record written whole when `whole`
    /// (module docs, "Records written whole").
    pub(crate) fn insert_synced(&mut self, bp: &BlockPtr, data: Arc<Vec<u8>>, whole: bool) {
        if self.policy.admits(bp) {
            self.domain.insert_as(bp, data, whole);
        }
    }

    /// Drops the entry of `bp`, a block freed for good (module docs).
    pub(crate) fn forget(&mut self, bp: &BlockPtr) {
        let key = CacheKey::of(self.domain.inner.id, bp);
        self.domain.store().lock().remove(&key);
    }

    /// The domain this cache reads through.
    pub(crate) fn domain(&self) -> &CacheDomain {
        &self.domain
    }

    /// Bytes the store holds (every domain's).
    pub(crate) fn bytes(&self) -> u64 {
        self.domain.store().lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_base::{Txg, VdevId};

    fn bp(offset: u64) -> BlockPtr {
        let mut bp = BlockPtr::hole(Txg(1));
        bp.dvas[0] = Dva {
            vdev: VdevId(0),
            offset,
            asize: 512,
        };
        bp
    }

    /// The limit that holds exactly `blocks` entries of `size` bytes.
    fn room(blocks: u64, size: u64) -> u64 {
        blocks * (size + ENTRY_OVERHEAD)
    }

    /// Goal: eviction keeps what was hit since it was cached (second chance) and takes the
    /// oldest of the rest, within the byte limit.
    #[test]
    fn evicts_the_oldest_unreferenced_within_the_byte_limit() {
        let mut cache = BlockCache::new(room(4, 1024));
        for i in 0..4 {
            cache.insert(&bp(i), Arc::new(vec![0; 1024]));
        }
        assert!(cache.get(&bp(0)).is_some());
        cache.insert(&bp(9), Arc::new(vec![0; 1024]));
        assert!(
            cache.get(&bp(1)).is_none(),
            "oldest entry should be evicted"
        );
        assert!(
            cache.get(&bp(0)).is_some(),
            "recently used entry should stay"
        );
        assert_eq!(cache.bytes(), 4096);
        let stats = cache.domain.store().stats();
        assert_eq!(
            stats.headers,
            4 * ENTRY_OVERHEAD,
            "every entry charged its overhead"
        );
        assert_eq!(stats.data_bytes, 0, "untyped test blocks are metadata");
        cache.insert(&bp(10), Arc::new(vec![0; 2048]));
        assert!(cache.bytes() <= 4096);
        assert!(
            cache.get(&bp(10)).is_none(),
            "a block over a quarter of the limit is not kept"
        );
        let stats = cache.domain.store().stats();
        assert_eq!((stats.hits, stats.misses, stats.evictions), (2, 2, 1));
    }

    /// Goal: the cache lends at most half its limit to dirty data, evicts what no longer
    /// fits in the rest at once, keeps new entries within the rest, and takes the loan back.
    #[test]
    fn a_loan_to_dirty_data_shrinks_the_room_until_it_is_released() {
        let cache = BlockCache::new(room(8, 1024));
        let store = cache.domain.store().clone();
        for i in 0..8 {
            cache.domain.insert(&bp(i), Arc::new(vec![0; 1024]));
        }
        assert_eq!(store.reserve(room(3, 1024)), room(3, 1024));
        assert_eq!(store.stats().entries, 5, "evicted to the room left");
        assert_eq!(
            store.reserve(room(3, 1024)),
            room(1, 1024),
            "at most half the limit"
        );
        for i in 10..20 {
            cache.domain.insert(&bp(i), Arc::new(vec![0; 1024]));
        }
        let stats = store.stats();
        assert_eq!(
            (stats.entries, stats.reserved),
            (4, room(4, 1024)),
            "{stats:?}"
        );
        store.release(room(4, 1024));
        for i in 20..30 {
            cache.domain.insert(&bp(i), Arc::new(vec![0; 1024]));
        }
        assert_eq!(store.stats().entries, 8, "the whole limit again");
    }

    /// Goal: a forgotten entry's bytes leave the counts at once; the places it leaves in
    /// the ring never outnumber the entries, are skipped by the hand, and do not confuse a
    /// block cached again under the same key; eviction order is as without them.
    #[test]
    fn forgotten_entries_leave_at_once_and_their_places_stay_bounded() {
        let mut cache = BlockCache::new(room(8, 1024));
        for i in 0..8 {
            cache.insert(&bp(i), Arc::new(vec![0; 1024]));
        }
        cache.forget(&bp(0));
        cache.forget(&bp(0));
        cache.forget(&bp(99));
        let stats = cache.domain.store().stats();
        assert_eq!((stats.entries, stats.bytes), (7, 7 * 1024));
        // Cached again: a new place at the back; its old place is a stale one.
        cache.insert(&bp(0), Arc::new(vec![1; 1024]));
        cache.insert(&bp(8), Arc::new(vec![0; 1024]));
        assert!(cache.get(&bp(1)).is_none(), "the oldest goes first");
        assert_eq!(
            cache.get(&bp(0)).unwrap()[0],
            1,
            "the entry cached again stays"
        );
        // Many forgets and inserts with room to spare: the ring stays within twice the
        // entries (the overhead charged per entry).
        cache.forget(&bp(8));
        for i in 100..1100 {
            cache.insert(&bp(i), Arc::new(vec![0; 16]));
            cache.forget(&bp(i));
            let entries = cache.domain.store().lock();
            assert!(
                entries.ring.len() <= 2 * entries.map.len() + 1,
                "{}",
                entries.ring.len()
            );
        }
        let stats = cache.domain.store().stats();
        assert_eq!((stats.bytes, stats.evictions), (7 * 1024, 1), "{stats:?}");
        assert!(cache.get(&bp(0)).is_some() && cache.get(&bp(7)).is_some());
    }

    /// Goal: the limit bounds memory: a buffer with slack is charged its capacity, and small
    /// blocks their per-entry overhead, so many of them cannot exceed the limit.
    #[test]
    fn the_limit_counts_capacity_and_entry_overhead() {
        let mut cache = BlockCache::new(room(8, 4096));
        let mut slack = Vec::with_capacity(4096);
        slack.extend_from_slice(&[7; 512]);
        cache.insert(&bp(1), Arc::new(slack));
        let stats = cache.domain.store().stats();
        assert_eq!(stats.bytes, 512);
        assert_eq!(stats.headers, 4096 - 512 + ENTRY_OVERHEAD);
        for i in 0..1000 {
            cache.insert(&bp(100 + i), Arc::new(vec![0; 16]));
        }
        let stats = cache.domain.store().stats();
        assert!(stats.bytes + stats.headers <= room(8, 4096), "{stats:?}");
        assert_eq!(stats.entries, room(8, 4096) / (16 + ENTRY_OVERHEAD));
    }

    /// Goal: records written whole take at most a `WRITTEN_SHARE`th of the room together,
    /// the oldest leaving first; one read since it was written stays as any entry; metadata
    /// written is not counted; reads take entries out of the written ones. Method: 64
    /// blocks' room, so 4 written ones fit; 40 written data blocks with the fifth read back,
    /// then 200 more each read at once, and metadata written. Negative control: without
    /// `trim_written` all 40 stay (the first assert).
    #[test]
    fn records_written_whole_are_kept_within_their_share() {
        let data = |offset: u64| BlockPtr {
            block_type: BlockType::Data,
            ..bp(offset)
        };
        let mut cache = BlockCache::new(room(64, 1024));
        let share = room(64, 1024) / WRITTEN_SHARE;
        assert_eq!(
            share / (1024 + ENTRY_OVERHEAD),
            4,
            "four written blocks fit"
        );
        for i in 0..40 {
            cache.insert_synced(&data(i), Arc::new(vec![i as u8; 1024]), true);
            if i == 4 {
                assert!(cache.get(&data(4)).is_some(), "read since written");
            }
        }
        let kept: Vec<u64> = (0..40).filter(|&i| cache.contains(&data(i))).collect();
        assert_eq!(
            kept,
            [4, 36, 37, 38, 39],
            "the newest four written, and the read one"
        );
        {
            let entries = cache.domain.store().lock();
            assert_eq!(entries.written.len(), 4);
            assert!(entries.written_charged <= share);
        }
        for i in 100..300 {
            cache.insert_synced(&data(i), Arc::new(vec![0; 1024]), true);
            assert!(cache.get(&data(i)).is_some());
        }
        let meta = BlockPtr {
            block_type: BlockType::Indirect,
            level: 1,
            ..bp(1000)
        };
        cache.insert_synced(&meta, Arc::new(vec![0; 1024]), true);
        let entries = cache.domain.store().lock();
        assert_eq!(
            entries.written.len(),
            0,
            "read and metadata entries are not written"
        );
        assert!(entries.map.len() >= 60, "read entries fill the room as any");
    }

    #[test]
    fn primarycache_policy_decides_what_is_kept() {
        let typed = |offset: u64, block_type: BlockType, level: u8| BlockPtr {
            block_type,
            level,
            ..bp(offset)
        };
        let data = typed(1, BlockType::Data, 0);
        let indirect = typed(2, BlockType::Indirect, 1);
        let zap = typed(3, BlockType::Metadata, 0);
        let mut cache = BlockCache::new(1 << 20);
        cache.insert(&data, Arc::new(vec![0; 512]));
        cache.insert(&zap, Arc::new(vec![0; 512]));
        let stats = cache.domain.store().stats();
        assert_eq!(
            (stats.bytes, stats.data_bytes),
            (1024, 512),
            "data counted apart"
        );
        cache.set_policy(CachePolicy::Metadata);
        assert!(
            cache.get(&data).is_none(),
            "data cached before the change is dropped"
        );
        assert_eq!(
            cache.bytes(),
            512,
            "metadata cached before the change stays"
        );
        for block in [&data, &indirect, &zap] {
            cache.insert(block, Arc::new(vec![0; 512]));
        }
        assert!(cache.get(&data).is_none());
        assert!(cache.get(&indirect).is_some() && cache.get(&zap).is_some());
        cache.set_policy(CachePolicy::None);
        assert_eq!(cache.bytes(), 0, "nothing stays under primarycache=none");
        cache.insert(&zap, Arc::new(vec![0; 512]));
        assert_eq!(cache.bytes(), 0);
        cache.set_policy(CachePolicy::parse("all"));
        cache.insert(&data, Arc::new(vec![0; 512]));
        assert!(cache.get(&data).is_some());
    }

    /// Goal: domains of one store share its byte limit but never each other's entries, and
    /// a domain's entries go with its last handle. Method: two domains cache the same block
    /// pointer with different bytes; one domain is dropped.
    #[test]
    fn domains_share_the_limit_not_the_entries() {
        let store = CacheStore::new(room(4, 1024));
        let (one, two) = (store.domain(), store.domain());
        let mut first = BlockCache::new(0);
        first.use_domain(&one);
        let mut second = BlockCache::new(0);
        second.use_domain(&two);
        first.insert(&bp(7), Arc::new(vec![1; 1024]));
        assert!(
            second.get(&bp(7)).is_none(),
            "another domain's entry is not seen"
        );
        second.insert(&bp(7), Arc::new(vec![2; 1024]));
        assert_eq!(first.get(&bp(7)).as_deref().map(|b| b[0]), Some(1));
        assert_eq!(second.get(&bp(7)).as_deref().map(|b| b[0]), Some(2));
        for i in 0..2 {
            second.insert(&bp(100 + i), Arc::new(vec![2; 1024]));
        }
        assert_eq!(store.stats().bytes, 4096, "one limit for both domains");
        drop((first, one));
        assert_eq!(
            store.stats().entries,
            3,
            "the dropped domain's entries went with it"
        );
        store.set_limit(room(1, 1024));
        assert_eq!(store.stats().bytes, 1024, "a lower limit evicts at once");
    }
}
