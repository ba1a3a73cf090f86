//! Tests of the cache-device ring and its persistent index: lookups verified, the ring's
//! wrap, log blocks and headers, and rebuilds from damaged chains.

use super::*;
use tarn_base::ManualClock;
use tarn_device::{Device, FaultPlan, SimDevice};
use tarn_format::label::DATA_START;

const POOL: Guid = Guid(99);
const DEVICE: Guid = Guid(7);

fn leaf_on(device: &Arc<SimDevice>, guid: Guid) -> Arc<Leaf> {
    let dyn_device: Arc<dyn Device> = device.clone();
    Arc::new(Leaf::new(guid, dyn_device).unwrap())
}

fn cache_of(size: u64) -> (L2Cache, Arc<SimDevice>) {
    let device = SimDevice::new("c", size, FaultPlan::default());
    (
        L2Cache::new(POOL, vec![leaf_on(&device, DEVICE)], 12),
        device,
    )
}

/// The cache an import of the same device (same pool, same GUID) would assemble, rebuilt.
fn reimport(device: &Arc<SimDevice>, pool: Guid, guid: Guid) -> (L2Cache, L2Rebuild) {
    let cache = L2Cache::new(pool, vec![leaf_on(device, guid)], 12);
    let mut reports = cache.rebuild(&ManualClock::new(1));
    assert_eq!(reports.len(), 1);
    (cache, reports.remove(0))
}

fn key(n: u64) -> L2Key {
    L2Key {
        vdev: 0,
        offset: n << 20,
        birth: 5,
        checksum: Checksum([n, 1, 2, 3]),
    }
}

fn block(n: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u64 * 31 + n) as u8).collect()
}

/// Looks up block `n` (of `len` bytes) and says whether it was served; a served block must
/// be exactly the bytes fed.
fn served(cache: &L2Cache, n: u64, len: usize) -> bool {
    let data = block(n, len);
    let got = cache.lookup(key(n), len as u64, &|d| d == data.as_slice());
    if let Some(got) = &got {
        assert_eq!(got, &data, "block {n}: served bytes");
    }
    got.is_some()
}

fn cksum_errors(cache: &L2Cache) -> u64 {
    cache.leaves()[0].stats().snapshot().checksum_errors
}

#[test]
fn a_fed_block_is_served_and_verified() {
    let (cache, _) = cache_of(16 << 20);
    let data = block(1, 5000);
    cache.feed(key(1), &data);
    let got = cache.lookup(key(1), 5000, &|d| d == data.as_slice());
    assert_eq!(got.as_deref(), Some(data.as_slice()));
    assert!(cache.lookup(key(2), 5000, &|_| true).is_none());
    let other_checksum = L2Key {
        checksum: Checksum([9; 4]),
        ..key(1)
    };
    assert!(
        cache.lookup(other_checksum, 5000, &|_| true).is_none(),
        "key has the checksum"
    );
    let stats = cache.stats();
    assert_eq!((stats.hits, stats.misses, stats.feeds), (1, 2, 1));
    assert_eq!(stats.size, 8192, "padded to two 4K sectors");
}

#[test]
fn a_copy_that_fails_to_verify_is_counted_dropped_and_missed() {
    let (cache, device) = cache_of(16 << 20);
    let data = block(1, 4096);
    cache.feed(key(1), &data);
    // Rot the cached copy at rest: the first copy sits at the start of the ring.
    device
        .write_at(DATA_START + L2_RING_START_FOR_TESTS, &[0xEE; 4096])
        .unwrap();
    assert!(!served(&cache, 1, 4096));
    assert_eq!(cksum_errors(&cache), 1);
    assert_eq!(cache.stats().size, 0, "the entry is forgotten");
}

const L2_RING_START_FOR_TESTS: u64 = tarn_format::l2cache::L2_RING_START;

#[test]
fn the_ring_overwrites_the_oldest_blocks_and_forgets_them() {
    // 4 MiB of labels and boot area at the front, 512 KiB at the end, 128 KiB of header
    // slots: the ring of a 6 MiB device is about 1.4 MiB, so 64 KiB blocks wrap after ~21
    // feeds (log blocks and headers take some room too).
    let (cache, _) = cache_of(6 << 20);
    let capacity = cache.lock().rings[0].capacity;
    let blocks = capacity / (64 << 10);
    for n in 0..blocks * 3 {
        cache.feed(key(n), &block(n, 64 << 10));
    }
    for n in 0..blocks * 2 {
        assert!(!served(&cache, n, 64 << 10), "block {n} was overwritten");
    }
    let survivors = (blocks * 2..blocks * 3)
        .filter(|&n| served(&cache, n, 64 << 10))
        .count() as u64;
    assert!(
        survivors >= blocks / 2,
        "{survivors} of {blocks} newest survive"
    );
    assert!(
        served(&cache, blocks * 3 - 1, 64 << 10),
        "the newest survives"
    );
    assert_eq!(cksum_errors(&cache), 0, "nothing overwritten is ever read");
}

#[test]
fn a_removed_device_forgets_its_blocks_and_a_gone_one_is_skipped() {
    let (cache, device) = cache_of(16 << 20);
    cache.feed(key(1), &block(1, 4096));
    device.set_gone(true);
    assert!(cache.lookup(key(1), 4096, &|_| true).is_none());
    cache.feed(key(2), &block(2, 4096));
    assert!(cache.remove(DEVICE).is_some());
    assert!(cache.is_empty());
    assert_eq!(cache.stats().size, 0);
}

#[test]
fn a_persisted_index_is_rebuilt_by_the_same_pool_and_device_only() {
    let (cache, device) = cache_of(16 << 20);
    for n in 0..40 {
        cache.feed(key(n), &block(n, 4096 + 512 * n as usize));
    }
    cache.persist();
    let size = cache.stats().size;
    drop(cache);
    let (again, report) = reimport(&device, POOL, DEVICE);
    assert_eq!((report.entries, report.bytes), (40, size), "{report:?}");
    assert_eq!(report.log_blocks, 1);
    assert_eq!(report.stopped, "end of chain");
    assert_eq!(again.allocated_on(DEVICE), size, "ALLOC after import");
    for n in 0..40 {
        assert!(served(&again, n, 4096 + 512 * n as usize), "block {n}");
    }
    let stats = again.stats();
    assert_eq!((stats.restored, stats.restored_hits), (40, 40));
    assert_eq!(cksum_errors(&again), 0);
    // Another pool, or the same device added again (a new GUID): no rebuild.
    for (pool, guid) in [(Guid(1), DEVICE), (POOL, Guid(8))] {
        let (other, report) = reimport(&device, pool, guid);
        assert_eq!(report.entries, 0, "{report:?}");
        assert!(!served(&other, 1, 4608));
    }
}

#[test]
fn a_read_only_cache_writes_nothing() {
    let (cache, device) = cache_of(16 << 20);
    cache.set_readonly(true);
    cache.feed(key(1), &block(1, 4096));
    cache.persist();
    assert_eq!(cache.stats().feeds, 0);
    assert_eq!(cache.leaves()[0].stats().snapshot().write_ops, 0);
    let (_, report) = reimport(&device, POOL, DEVICE);
    assert_eq!(report.entries, 0);
}

/// Feeds blocks `range` (4 KiB each) and writes a log block of them; returns its pointer.
fn logged(cache: &L2Cache, range: std::ops::Range<u64>) -> L2LogPtr {
    for n in range {
        cache.feed(key(n), &block(n, 4096));
    }
    cache.persist();
    cache.lock().rings[0].newest
}

fn ring_offset(cache: &L2Cache, ptr: &L2LogPtr) -> u64 {
    DATA_START + cache.lock().rings[0].data_offset(ptr.position)
}

#[test]
fn the_chain_walk_stops_at_a_rotted_or_torn_block() {
    let (cache, device) = cache_of(16 << 20);
    let _first = logged(&cache, 0..10);
    let second = logged(&cache, 10..20);
    let _third = logged(&cache, 20..30);
    // Rot the middle block: the newest is restored, the walk stops there.
    device.rot(ring_offset(&cache, &second), 512).unwrap();
    let (again, report) = reimport(&device, POOL, DEVICE);
    assert_eq!((report.entries, report.log_blocks), (10, 1), "{report:?}");
    assert!(report.stopped.contains("checksum"), "{}", report.stopped);
    assert!((20..30).all(|n| served(&again, n, 4096)));
    assert!((0..20).all(|n| !served(&again, n, 4096)));
    assert_eq!(cksum_errors(&again), 0);
    drop(again);
    // A torn newest block (only its first sector written): nothing is restored.
    let (cache, device) = cache_of(16 << 20);
    let _ = logged(&cache, 0..10);
    let newest = logged(&cache, 10..80);
    assert!(newest.length > 4096, "the block spans more than a sector");
    device
        .write_at(ring_offset(&cache, &newest) + 4096, &[0; 4096])
        .unwrap();
    let (_, report) = reimport(&device, POOL, DEVICE);
    assert_eq!((report.entries, report.log_blocks), (0, 0), "{report:?}");
}

#[test]
fn a_rotted_newest_header_falls_back_to_the_older_slot() {
    let (cache, device) = cache_of(16 << 20);
    let _ = logged(&cache, 0..10);
    let _ = logged(&cache, 10..20);
    let sequence = cache.lock().rings[0].sequence;
    let slot = tarn_format::l2cache::l2_header_offset(sequence);
    device.rot(DATA_START + slot, 512).unwrap();
    let (again, report) = reimport(&device, POOL, DEVICE);
    assert_eq!(
        report.entries, 10,
        "the older header names the first block: {report:?}"
    );
    assert!((0..10).all(|n| served(&again, n, 4096)));
    // Both headers gone: a cold start, and the next feed writes both slots afresh.
    device.rot(DATA_START, 512).unwrap();
    device
        .rot(DATA_START + tarn_format::l2cache::L2_HEADER_STRIDE, 512)
        .unwrap();
    let (cold, report) = reimport(&device, POOL, DEVICE);
    assert_eq!(report.entries, 0);
    let _ = logged(&cold, 100..101);
    let (_, report) = reimport(&device, POOL, DEVICE);
    assert_eq!(report.entries, 1, "{report:?}");
}

#[test]
fn entries_and_blocks_the_ring_wrapped_over_are_not_restored() {
    let (cache, device) = cache_of(6 << 20);
    let mut n = 0;
    // About six laps of a ~1.4 MiB ring in 16 KiB blocks, a log block every 8 of them.
    while n < 600 {
        for _ in 0..8 {
            cache.feed(key(n), &block(n, 16 << 10));
            n += 1;
        }
        cache.persist();
    }
    let live = cache.stats().size;
    drop(cache);
    let (again, report) = reimport(&device, POOL, DEVICE);
    assert!(report.entries > 20, "{report:?}");
    assert!(report.stopped.contains("overwritten"), "{}", report.stopped);
    assert!(report.bytes <= live, "never more than was live");
    let hits = (0..n).filter(|&n| served(&again, n, 16 << 10)).count() as u64;
    assert_eq!(
        hits, report.entries,
        "every restored entry serves its own bytes"
    );
    assert_eq!(
        cksum_errors(&again),
        0,
        "no restored entry points at overwritten bytes"
    );
}

#[test]
fn after_a_crash_the_logged_entries_come_back_and_the_unlogged_miss() {
    let plan = FaultPlan {
        drop_on_crash: 1_000_000,
        ..FaultPlan::seeded(3)
    };
    let device = SimDevice::new("c", 16 << 20, plan);
    let cache = L2Cache::new(POOL, vec![leaf_on(&device, DEVICE)], 12);
    let _ = logged(&cache, 0..30);
    for n in 30..40 {
        cache.feed(key(n), &block(n, 4096));
    }
    device.crash();
    drop(cache);
    let (again, report) = reimport(&device, POOL, DEVICE);
    assert_eq!(report.entries, 30, "{report:?}");
    assert!((0..30).all(|n| served(&again, n, 4096)));
    assert!((30..40).all(|n| !served(&again, n, 4096)));
    assert_eq!(cksum_errors(&again), 0);
    // The ring goes on after the rebuild, and a second import finds old and new entries.
    let _ = logged(&again, 40..50);
    drop(again);
    let (_, report) = reimport(&device, POOL, DEVICE);
    assert_eq!(report.entries, 40, "{report:?}");
}
