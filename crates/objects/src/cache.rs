//! Bounded cache of clean blocks (verified logical bytes), least recently used evicted first,
//! bounded by bytes. Keyed by the block's first DVA, birth txg and checksum: a block pointer
//! names immutable contents, so an entry never goes stale; entries of freed blocks simply age
//! out. Dirty buffers never live here (they belong to their object until sync).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tarn_format::{BlockPtr, Dva};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct CacheKey {
    dva: Dva,
    birth: u64,
    checksum: [u64; 4],
}

impl CacheKey {
    fn of(bp: &BlockPtr) -> Self {
        CacheKey {
            dva: bp.dvas[0],
            birth: bp.birth.0,
            checksum: bp.checksum.0,
        }
    }
}

/// The cache. `bytes <= limit` holds after every call (I1 of the module).
#[derive(Debug)]
pub(crate) struct BlockCache {
    limit: u64,
    bytes: u64,
    tick: u64,
    entries: HashMap<CacheKey, (Arc<Vec<u8>>, u64)>,
    by_age: BTreeMap<u64, CacheKey>,
}

impl BlockCache {
    pub(crate) fn new(limit: u64) -> Self {
        BlockCache {
            limit,
            bytes: 0,
            tick: 0,
            entries: HashMap::new(),
            by_age: BTreeMap::new(),
        }
    }

    pub(crate) fn get(&mut self, bp: &BlockPtr) -> Option<Arc<Vec<u8>>> {
        let key = CacheKey::of(bp);
        let (data, age) = self.entries.get_mut(&key)?;
        self.by_age.remove(age);
        self.tick += 1;
        *age = self.tick;
        self.by_age.insert(self.tick, key);
        Some(Arc::clone(data))
    }

    /// Whether `bp`'s contents are cached (without making the entry younger).
    pub(crate) fn contains(&self, bp: &BlockPtr) -> bool {
        self.entries.contains_key(&CacheKey::of(bp))
    }

    pub(crate) fn insert(&mut self, bp: &BlockPtr, data: Arc<Vec<u8>>) {
        let size = data.len() as u64;
        if size > self.limit / 4 {
            // A block bigger than a quarter of the cache would evict too much to be worth it.
            return;
        }
        let key = CacheKey::of(bp);
        if self.entries.contains_key(&key) {
            return;
        }
        while self.bytes + size > self.limit {
            let Some((_, victim)) = self.by_age.pop_first() else {
                break;
            };
            let (old, _) = self
                .entries
                .remove(&victim)
                .expect("cache: age index names an entry");
            self.bytes -= old.len() as u64;
        }
        self.tick += 1;
        self.entries.insert(key, (data, self.tick));
        self.by_age.insert(self.tick, key);
        self.bytes += size;
        assert!(
            self.bytes <= self.limit,
            "cache: {} bytes over limit {}",
            self.bytes,
            self.limit
        );
        assert_eq!(self.entries.len(), self.by_age.len(), "cache: index sizes");
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
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

    #[test]
    fn evicts_least_recently_used_within_the_byte_limit() {
        let mut cache = BlockCache::new(4096);
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
        cache.insert(&bp(10), Arc::new(vec![0; 2048]));
        assert!(cache.bytes() <= 4096);
        assert!(
            cache.get(&bp(10)).is_none(),
            "a block over a quarter of the limit is not kept"
        );
    }
}
