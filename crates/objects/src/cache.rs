//! Bounded cache of clean blocks (verified logical bytes), least recently used evicted first,
//! bounded by bytes. Keyed by the block's first DVA, birth txg and checksum: a block pointer
//! names immutable contents, so an entry never goes stale; entries of freed blocks simply age
//! out. Dirty buffers never live here (they belong to their object until sync).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tarn_format::{BlockPtr, BlockType, Dva};

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
            CachePolicy::Metadata => !(bp.block_type == BlockType::Data && bp.level == 0),
            CachePolicy::None => false,
        }
    }
}

/// The cache. `bytes <= limit` holds after every call (I1 of the module).
#[derive(Debug)]
pub(crate) struct BlockCache {
    limit: u64,
    policy: CachePolicy,
    /// What reads may copy to the cache devices (`secondarycache`); not this cache's own.
    secondary: CachePolicy,
    bytes: u64,
    tick: u64,
    entries: HashMap<CacheKey, (Arc<Vec<u8>>, u64)>,
    by_age: BTreeMap<u64, CacheKey>,
}

impl BlockCache {
    pub(crate) fn new(limit: u64) -> Self {
        BlockCache {
            limit,
            policy: CachePolicy::All,
            secondary: CachePolicy::All,
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

    /// Applies `policy` from now on, dropping what it no longer admits.
    pub(crate) fn set_policy(&mut self, policy: CachePolicy) {
        if policy == self.policy {
            return;
        }
        self.policy = policy;
        if policy != CachePolicy::All {
            // Which entries were data is not recorded: start over (a rare admin change).
            *self = BlockCache {
                policy,
                secondary: self.secondary,
                ..BlockCache::new(self.limit)
            };
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

    /// Whether `bp`'s contents are cached (without making the entry younger).
    pub(crate) fn contains(&self, bp: &BlockPtr) -> bool {
        self.entries.contains_key(&CacheKey::of(bp))
    }

    pub(crate) fn insert(&mut self, bp: &BlockPtr, data: Arc<Vec<u8>>) {
        let size = data.len() as u64;
        if !self.policy.admits(bp) {
            return;
        }
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
        cache.set_policy(CachePolicy::Metadata);
        assert!(
            cache.get(&data).is_none(),
            "data cached before the change is dropped"
        );
        for block in [&data, &indirect, &zap] {
            cache.insert(block, Arc::new(vec![0; 512]));
        }
        assert!(cache.get(&data).is_none());
        assert!(cache.get(&indirect).is_some() && cache.get(&zap).is_some());
        cache.set_policy(CachePolicy::None);
        cache.insert(&zap, Arc::new(vec![0; 512]));
        assert_eq!(cache.bytes(), 0);
        cache.set_policy(CachePolicy::parse("all"));
        cache.insert(&data, Arc::new(vec![0; 512]));
        assert!(cache.get(&data).is_some());
    }
}
