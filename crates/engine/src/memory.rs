//! What the engine holds in memory, by category (`tarn memory`, issue 15): the clean-block
//! cache (ZFS's ARC: data, metadata and what its entries cost beyond their bytes), the dirty
//! data of open txgs, the blocks of txgs written but not yet committed, the intent logs'
//! pending records and the cache devices' indexes. The daemon adds what only the process can
//! see (RSS, the allocator, the FUSE buffers) and states the bound.
//!
//! Each figure is counted where the memory is held, not derived from the others, so that
//! their sum can be checked against the process's RSS (crates/cli/tests/memory.rs).
//!
//! The bound: the cache never charges more than its limit (tarn-objects I1); an open txg
//! stops growing at [`DIRTY_MAX`] (writers wait, module [`crate::txg`]); while a txg is
//! written its dirty buffers and the blocks the pipeline keeps for it coexist, and after
//! that the kept blocks of one txg in its commit phase coexist with the next open txg's
//! dirty data, so each pool holds at most about `2 * DIRTY_MAX` of dirty and kept data
//! ([`MemoryUse::dirty_max`]).

use crate::{DIRTY_MAX, Engine, Imported, PoolHandle};
use std::sync::{PoisonError, TryLockError};
use tarn_objects::CacheStats;

/// The engine's memory by category, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUse {
    /// The clean-block cache: limit, payload (`bytes`, of which `data_bytes` is file data),
    /// entry overhead (`headers`), hits and misses.
    pub arc: CacheStats,
    /// Dirty buffers of every pool's open txg (and of a txg whose write phase runs).
    pub dirty: u64,
    /// Blocks of txgs written but not committed (a commit phase in flight, a txg a
    /// suspended pool keeps for `clear`).
    pub syncing: u64,
    /// Records the intent logs hold until a commit or an `fsync` writes them.
    pub intent_log: u64,
    /// The indexes of the pools' cache devices (L2ARC headers).
    pub l2arc_headers: u64,
    /// The queues of running scrubs and resilvers: every block pointer still to visit
    /// (proportional to the pool's block count, not bounded by a limit: docs/PERFORMANCE.md
    /// "Memory").
    pub scan_queue: u64,
    /// Imported pools.
    pub pools: u64,
}

impl MemoryUse {
    /// The most dirty and kept data the imported pools can hold together (module doc).
    #[must_use]
    pub fn dirty_max(&self) -> u64 {
        self.pools * 2 * DIRTY_MAX
    }
}

impl Engine {
    /// What the engine holds now (takes each pool's lock in turn, briefly).
    #[must_use]
    pub fn memory_use(&self) -> MemoryUse {
        let mut total = MemoryUse {
            arc: self.cache_stats(),
            ..MemoryUse::default()
        };
        for handle in self.handles() {
            let pool = pool_memory(&handle);
            total.pools += 1;
            total.dirty += pool.dirty;
            total.syncing += pool.syncing;
            total.intent_log += pool.intent_log;
            total.l2arc_headers += pool.l2arc_headers;
            total.scan_queue += pool.scan_queue;
        }
        total
    }
}

/// Attempts at the pool lock before a report uses the pool's last figures.
const LOCK_TRIES: u32 = 20;

/// One pool's part of [`MemoryUse`] (the figures counted under its lock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PoolMemory {
    dirty: u64,
    syncing: u64,
    intent_log: u64,
    l2arc_headers: u64,
    scan_queue: u64,
}

impl PoolMemory {
    fn of(inner: &Imported) -> PoolMemory {
        PoolMemory {
            dirty: inner.dirty_bytes(),
            syncing: inner.pool.kept_bytes(),
            intent_log: inner.logs.memory_bytes(),
            l2arc_headers: inner.pool.pipeline().l2().stats().headers,
            scan_queue: inner.scan.memory_bytes(),
        }
    }
}

/// The pool's figures now, or, while writers and a txg's write phase keep the lock busy,
/// those of the last report that got it: a report must not queue behind a write phase nor
/// finish a commit (`PoolHandle::lock` would).
fn pool_memory(handle: &PoolHandle) -> PoolMemory {
    let last = || *handle.memory.lock().unwrap_or_else(PoisonError::into_inner);
    for _ in 0..LOCK_TRIES {
        match handle.inner.try_lock() {
            Ok(inner) => {
                let now = PoolMemory::of(&inner);
                drop(inner);
                *handle.memory.lock().unwrap_or_else(PoisonError::into_inner) = now;
                return now;
            }
            Err(TryLockError::Poisoned(_)) => return last(),
            Err(TryLockError::WouldBlock) => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
        }
    }
    last()
}
