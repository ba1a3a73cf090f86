//! Pool-level tests on simulated devices: create, commit txgs, export/import by GUID after
//! renaming and shuffling devices, crash at random instants, missing devices.
//!
//! Method: the "upper layer" here is a tiny Merkle list: each txg writes some data blocks
//! whose contents are a function of a seed, frees some older ones, and writes a root block
//! listing every live block pointer with its seed. After import the root is read back and
//! every block must verify and match its seed.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::sync::Arc;

use tarn_base::{ManualClock, SeededRng, Txg};
use tarn_device::{Device, FaultPlan, PER_MILLION, SimDevice};
use tarn_format::{BlockPtr, BlockType, ChecksumKind, CompressSetting};
use tarn_pool::{
    CreateSpec, HostIdentity, ImportOptions, Pool, PoolError, SimProvider, TopLayout, TopSpec,
    discover,
};
use tarn_zio::{BlockStore, WriteProps};

const DEVICE_SIZE: u64 = 128 << 20;

fn identity() -> HostIdentity {
    HostIdentity {
        hostid: 0x1234,
        hostname: "testhost".into(),
    }
}

fn provider_with(names: &[String], plan: &FaultPlan) -> Arc<SimProvider> {
    let provider = Arc::new(SimProvider::new());
    for name in names {
        provider.insert(name, SimDevice::new(name, DEVICE_SIZE, plan.clone()));
    }
    provider
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("/dev/sim/d{i}")).collect()
}

fn spec(layout: TopLayout, devices: Vec<String>) -> CreateSpec {
    CreateSpec {
        name: "tank".into(),
        tops: vec![TopSpec { layout, devices }],
        spares: vec![],
        caches: Vec::new(),
        logs: Vec::new(),
        specials: Vec::new(),
        ashift: 12,
        force: false,
    }
}

fn data_for(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = SeededRng::new(seed);
    let mut data = vec![0u8; len];
    // Half random, half compressible, so both paths run.
    rng.fill(&mut data[..len / 2]);
    data
}

fn props(block_type: BlockType) -> WriteProps {
    WriteProps {
        block_type,
        level: 0,
        checksum: ChecksumKind::Fletcher4,
        compression: CompressSetting::Lz4,
        copies: 1,
        fill: 1,
        special_small_blocks: 0,
    }
}

/// The test's upper layer: live blocks with their seeds.
#[derive(Clone, Debug, Default, PartialEq)]
struct Model {
    live: Vec<(BlockPtr, u64, usize)>,
}

fn encode_root(model: &Model) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(model.live.len() as u64).to_le_bytes());
    for (bp, seed, len) in &model.live {
        out.extend_from_slice(&bp.encode());
        out.extend_from_slice(&seed.to_le_bytes());
        out.extend_from_slice(&(*len as u64).to_le_bytes());
    }
    out.resize(out.len().next_multiple_of(512).max(512), 0);
    out
}

fn decode_root(bytes: &[u8]) -> Model {
    let count = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut live = Vec::new();
    for i in 0..count {
        let at = 8 + i * 144;
        let bp = BlockPtr::decode_bytes(&bytes[at..at + 128]).unwrap();
        let seed = u64::from_le_bytes(bytes[at + 128..at + 136].try_into().unwrap());
        let len = u64::from_le_bytes(bytes[at + 136..at + 144].try_into().unwrap()) as usize;
        live.push((bp, seed, len));
    }
    Model { live }
}

fn sync_step(pool: &mut Pool, model: &mut Model, rng: &mut SeededRng) -> Result<Txg, PoolError> {
    let mut next = model.clone();
    let result = pool.sync(|ctx| -> Result<BlockPtr, tarn_zio::ZioError> {
        for _ in 0..rng.below(3) {
            if next.live.is_empty() {
                break;
            }
            let victim = rng.below(next.live.len() as u64) as usize;
            let (bp, _, _) = next.live.remove(victim);
            ctx.free_block(&bp);
        }
        for _ in 0..1 + rng.below(4) {
            let seed = rng.next_u64();
            let len = 512 * (1 + rng.below(64) as usize);
            let bp = ctx.write_block(&data_for(seed, len), &props(BlockType::Data))?;
            next.live.push((bp, seed, len));
        }
        ctx.write_block(&encode_root(&next), &props(BlockType::Metadata))
    });
    if result.is_ok() {
        *model = next;
    }
    result
}

fn verify(pool: &Pool) -> Result<(), String> {
    let reader = pool.reader();
    let root = pool.root().ok_or("no root")?;
    let model = decode_root(&reader.read_block(&root).map_err(|e| e.to_string())?);
    for (bp, seed, len) in &model.live {
        let data = reader.read_block(bp).map_err(|e| e.to_string())?;
        if data != data_for(*seed, *len) {
            return Err(format!("block {bp:?} has wrong contents"));
        }
    }
    Ok(())
}

fn import(
    provider: &SimProvider,
    dirs: &[&str],
    options: &ImportOptions,
) -> Result<Pool, PoolError> {
    let dirs: Vec<String> = dirs.iter().map(|d| d.to_string()).collect();
    let found = discover(provider, &dirs);
    let found = found
        .into_iter()
        .find(|d| d.name() == "tank")
        .ok_or(PoolError::NotFound)?;
    Pool::import(
        &found,
        provider,
        options,
        identity(),
        Arc::new(ManualClock::new(1_700_000_000)),
        &verify,
    )
}

fn create(provider: &SimProvider, spec: &CreateSpec) -> Pool {
    let mut rng = SeededRng::new(1);
    Pool::create(
        spec,
        provider,
        identity(),
        Arc::new(ManualClock::new(1_700_000_000)),
        &mut rng,
    )
    .expect("create")
}

#[test]
fn commit_export_import_every_layout() {
    for (layout, width) in [
        (TopLayout::Disk, 1),
        (TopLayout::Mirror, 3),
        (TopLayout::Raidz(1), 4),
        (TopLayout::Raidz(2), 6),
        (TopLayout::Raidz(3), 7),
    ] {
        let devices = names(width);
        let provider = provider_with(&devices, &FaultPlan::default());
        let mut pool = create(&provider, &spec(layout, devices));
        let mut model = Model::default();
        let mut rng = SeededRng::new(width as u64);
        for _ in 0..20 {
            sync_step(&mut pool, &mut model, &mut rng).expect("sync");
        }
        let allocated = pool.space().allocated();
        let txg = pool.txg();
        pool.export().expect("export");
        let pool = import(&provider, &["/dev/sim"], &ImportOptions::default()).expect("import");
        assert_eq!(pool.txg(), txg, "{layout:?}");
        assert_eq!(
            pool.space().allocated(),
            allocated,
            "{layout:?}: space log replays exactly"
        );
        verify(&pool).expect("data after import");
    }
}

#[test]
fn import_finds_devices_by_guid_after_rename_and_shuffle() {
    let devices = names(6);
    let provider = provider_with(&devices, &FaultPlan::default());
    let mut pool = create(&provider, &spec(TopLayout::Raidz(2), devices.clone()));
    let mut model = Model::default();
    let mut rng = SeededRng::new(9);
    for _ in 0..10 {
        sync_step(&mut pool, &mut model, &mut rng).unwrap();
    }
    pool.export().unwrap();
    // Reverse the order and move every device to a new directory and name.
    for (i, name) in devices.iter().enumerate() {
        provider.rename(name, &format!("/dev/moved/disk-{}", 5 - i));
    }
    let pool = import(&provider, &["/dev/moved"], &ImportOptions::default())
        .expect("import after shuffle");
    verify(&pool).unwrap();
    let paths: Vec<String> = pool.tops()[0].leaves().iter().map(|l| l.path()).collect();
    assert!(
        paths.iter().all(|p| p.starts_with("/dev/moved/")),
        "{paths:?}"
    );
}

#[test]
fn missing_devices_within_parity_degrade_beyond_refuse() {
    let devices = names(6);
    let provider = provider_with(&devices, &FaultPlan::default());
    let mut pool = create(&provider, &spec(TopLayout::Raidz(2), devices.clone()));
    let mut model = Model::default();
    let mut rng = SeededRng::new(3);
    for _ in 0..10 {
        sync_step(&mut pool, &mut model, &mut rng).unwrap();
    }
    pool.export().unwrap();
    let first = provider.remove(&devices[1]).unwrap();
    let second = provider.remove(&devices[4]).unwrap();
    let pool =
        import(&provider, &["/dev/sim"], &ImportOptions::default()).expect("degraded import");
    assert_eq!(pool.tops()[0].health(), tarn_vdev::Health::Degraded);
    verify(&pool).expect("all data readable with two devices missing");
    pool.export().unwrap();
    let third = provider.remove(&devices[0]).unwrap();
    match import(&provider, &["/dev/sim"], &ImportOptions::default()) {
        Err(PoolError::MissingDevices { missing }) => assert_eq!(missing.len(), 3, "{missing:?}"),
        other => panic!("expected MissingDevices, got {other:?}"),
    }
    for (device, name) in [(first, 1), (second, 4), (third, 0)] {
        provider.insert(&devices[name], device);
    }
    import(&provider, &["/dev/sim"], &ImportOptions::default()).expect("all back");
}

#[test]
fn crash_at_random_instants_keeps_the_last_committed_txg() {
    for seed in 0..12u64 {
        let devices = names(5);
        let plan = FaultPlan {
            seed,
            drop_on_crash: PER_MILLION / 2,
            torn_on_crash: PER_MILLION / 4,
            ..FaultPlan::default()
        };
        let provider = provider_with(&devices, &plan);
        let mut pool = create(&provider, &spec(TopLayout::Raidz(1), devices.clone()));
        let mut model = Model::default();
        let mut rng = SeededRng::new(seed);
        let steps = 3 + rng.below(15);
        let mut committed = Vec::new();
        for _ in 0..steps {
            sync_step(&mut pool, &mut model, &mut rng).unwrap();
            committed.push((pool.txg(), model.clone()));
        }
        // One more txg whose writes are in flight when the power goes.
        let mut doomed = model.clone();
        let _ = sync_step(&mut pool, &mut doomed, &mut rng);
        drop(pool);
        for (_, device) in provider.all() {
            device.crash();
        }
        let pool = import(&provider, &["/dev/sim"], &ImportOptions::default())
            .expect("import after crash");
        verify(&pool).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let (last_txg, _) = committed.last().unwrap();
        assert!(
            pool.txg() >= *last_txg,
            "seed {seed}: lost committed txg {last_txg}, got {}",
            pool.txg()
        );
    }
}

#[test]
fn rewind_to_an_older_txg() {
    let devices = names(4);
    let provider = provider_with(&devices, &FaultPlan::default());
    let mut pool = create(&provider, &spec(TopLayout::Mirror, devices));
    let mut model = Model::default();
    let mut rng = SeededRng::new(5);
    let mut history = Vec::new();
    for _ in 0..6 {
        sync_step(&mut pool, &mut model, &mut rng).unwrap();
        history.push((pool.txg(), model.clone()));
    }
    pool.export().unwrap();
    let (target, _) = history[history.len() - 2];
    let options = ImportOptions {
        max_txg: Some(target),
        ..ImportOptions::default()
    };
    let pool = import(&provider, &["/dev/sim"], &options).expect("import -T");
    assert_eq!(pool.last_uberblock().unwrap().txg, target);
    verify(&pool).unwrap();
}

#[test]
fn refused_create_writes_nothing() {
    let devices = names(3);
    let provider = provider_with(&devices, &FaultPlan::default());
    let images: Vec<Vec<u8>> = devices
        .iter()
        .map(|d| provider.get(d).unwrap().image())
        .collect();
    let mut rng = SeededRng::new(1);
    let clock = Arc::new(ManualClock::new(0));
    let cases = [
        spec(TopLayout::Raidz(2), devices[..2].to_vec()),
        spec(
            TopLayout::Raidz(1),
            vec![devices[0].clone(), devices[0].clone()],
        ),
        spec(
            TopLayout::Mirror,
            vec![devices[0].clone(), "/dev/sim/nonexistent".into()],
        ),
        CreateSpec {
            name: "1bad".into(),
            ..spec(TopLayout::Disk, vec![devices[0].clone()])
        },
    ];
    for case in cases {
        assert!(
            Pool::create(
                &case,
                provider.as_ref(),
                identity(),
                clock.clone(),
                &mut rng
            )
            .is_err(),
            "{case:?}"
        );
    }
    let small = SimDevice::new("/dev/sim/small", 32 << 20, FaultPlan::default());
    provider.insert("/dev/sim/small", small);
    let err = Pool::create(
        &spec(TopLayout::Disk, vec!["/dev/sim/small".into()]),
        provider.as_ref(),
        identity(),
        clock.clone(),
        &mut rng,
    )
    .unwrap_err();
    assert!(matches!(err, PoolError::DeviceTooSmall { .. }), "{err}");
    for (device, image) in devices.iter().zip(images) {
        assert!(
            provider.get(device).unwrap().image() == image,
            "{device} changed"
        );
    }
    // A device of another pool is refused without -f.
    let _pool = create(&provider, &spec(TopLayout::Disk, vec![devices[0].clone()]));
    let mut other = spec(TopLayout::Disk, vec![devices[0].clone()]);
    other.name = "other".into();
    let err = Pool::create(&other, provider.as_ref(), identity(), clock, &mut rng).unwrap_err();
    assert!(matches!(err, PoolError::DeviceInUse { .. }), "{err}");
}

/// A device that stops working for good once a shared write budget runs out: the instant
/// the power goes. Writes after that instant fail and reach nothing.
#[derive(Debug)]
struct PowerCut {
    inner: Arc<SimDevice>,
    budget: Arc<std::sync::atomic::AtomicI64>,
}

impl tarn_device::Device for PowerCut {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), tarn_device::DeviceError> {
        if self.budget.load(std::sync::atomic::Ordering::SeqCst) <= 0 {
            return Err(tarn_device::DeviceError::Gone);
        }
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), tarn_device::DeviceError> {
        if self
            .budget
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            <= 0
        {
            return Err(tarn_device::DeviceError::Gone);
        }
        self.inner.write_at(offset, data)
    }
    fn flush(&self) -> Result<(), tarn_device::DeviceError> {
        if self
            .budget
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
            <= 0
        {
            return Err(tarn_device::DeviceError::Gone);
        }
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), tarn_device::DeviceError> {
        self.inner.discard(offset, len)
    }
    fn path(&self) -> &str {
        self.inner.path()
    }
}

#[derive(Debug)]
struct PowerCutProvider {
    inner: Arc<SimProvider>,
    budget: Arc<std::sync::atomic::AtomicI64>,
}

impl tarn_pool::DeviceProvider for PowerCutProvider {
    fn open(
        &self,
        path: &str,
        _read_only: bool,
    ) -> Result<Arc<dyn tarn_device::Device>, tarn_device::DeviceError> {
        let inner = self.inner.get(path).ok_or(tarn_device::DeviceError::Gone)?;
        Ok(Arc::new(PowerCut {
            inner,
            budget: Arc::clone(&self.budget),
        }))
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, tarn_device::DeviceError> {
        self.inner.list(dir)
    }
}

/// Goal: a crash at any instant (any write or flush, including inside label and uberblock
/// updates) leaves the last committed txg intact, and whatever txg import picks reads back
/// exactly. Method: cut the power after a random number of device operations during a run
/// of txgs, drop or tear every unflushed write, import, verify.
#[test]
fn power_cut_at_any_instant() {
    for seed in 0..40u64 {
        let devices = names(5);
        let plan = FaultPlan {
            seed,
            drop_on_crash: PER_MILLION / 2,
            torn_on_crash: PER_MILLION / 4,
            ..FaultPlan::default()
        };
        let sims = provider_with(&devices, &plan);
        let mut rng = SeededRng::new(seed);
        let budget = Arc::new(std::sync::atomic::AtomicI64::new(i64::MAX));
        let provider = PowerCutProvider {
            inner: Arc::clone(&sims),
            budget: Arc::clone(&budget),
        };
        let layout =
            [TopLayout::Raidz(1), TopLayout::Mirror, TopLayout::Raidz(2)][seed as usize % 3];
        let mut pool = {
            let mut create_rng = SeededRng::new(seed);
            Pool::create(
                &spec(layout, devices.clone()),
                &provider,
                identity(),
                Arc::new(ManualClock::new(1)),
                &mut create_rng,
            )
            .unwrap()
        };
        let mut model = Model::default();
        sync_step(&mut pool, &mut model, &mut rng).unwrap();
        let mut committed = vec![(pool.txg(), model.clone())];
        budget.store(
            1 + rng.below(400) as i64,
            std::sync::atomic::Ordering::SeqCst,
        );
        while sync_step(&mut pool, &mut model, &mut rng).is_ok() {
            committed.push((pool.txg(), model.clone()));
        }
        drop(pool);
        for (_, device) in sims.all() {
            device.crash();
        }
        let pool = import(&sims, &["/dev/sim"], &ImportOptions::default())
            .unwrap_or_else(|e| panic!("seed {seed}: import after power cut: {e}"));
        verify(&pool).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let last = committed.last().unwrap().0;
        assert!(
            pool.txg() >= last,
            "seed {seed}: committed txg {last} lost (imported {})",
            pool.txg()
        );
        let reader = pool.reader();
        let found = decode_root(&reader.read_block(&pool.root().unwrap()).unwrap());
        let expected = committed
            .iter()
            .find(|(txg, _)| *txg == pool.txg())
            .map(|(_, m)| m);
        if let Some(expected) = expected {
            assert_eq!(&found, expected, "seed {seed}: txg {} content", pool.txg());
        }
    }
}

/// Goal: condensing the space log keeps the allocation state exact, including frees still
/// deferred when the base was written (a regression: a base once listed them as free, so an
/// import right after a condense could hand out blocks a rewind still needed). Method: condense
/// on every txg with frees in flight, then export, import, and compare the allocated bytes and
/// the data; also rewind one txg after a condense.
#[test]
fn condensed_space_log_replays_exactly() {
    let devices = names(4);
    let provider = provider_with(&devices, &FaultPlan::default());
    let mut pool = create(&provider, &spec(TopLayout::Raidz(1), devices));
    pool.space_mut().set_condense_threshold(0);
    let mut model = Model::default();
    let mut rng = SeededRng::new(77);
    let mut history = Vec::new();
    for _ in 0..25 {
        sync_step(&mut pool, &mut model, &mut rng).unwrap();
        history.push(pool.txg());
    }
    let allocated = pool.space().allocated();
    pool.export().unwrap();
    let pool = import(&provider, &["/dev/sim"], &ImportOptions::default()).expect("import");
    assert_eq!(
        pool.space().allocated(),
        allocated,
        "allocated bytes after a condensed log"
    );
    verify(&pool).unwrap();
    drop(pool);
    let target = history[history.len() - 2];
    let options = ImportOptions {
        max_txg: Some(target),
        ..ImportOptions::default()
    };
    let pool = import(&provider, &["/dev/sim"], &options).expect("rewind after condense");
    verify(&pool).unwrap();
}

/// One txg that frees the oldest live block (so every txg has a free in flight) and writes
/// one new block and the root.
fn sync_freeing_one(pool: &mut Pool, model: &mut Model, seed: u64) -> Txg {
    let mut next = model.clone();
    let txg = pool
        .sync(|ctx| -> Result<BlockPtr, tarn_zio::ZioError> {
            if next.live.len() > 2 {
                let (bp, _, _) = next.live.remove(0);
                ctx.free_block(&bp);
            }
            let bp = ctx.write_block(&data_for(seed, 4096), &props(BlockType::Data))?;
            next.live.push((bp, seed, 4096));
            ctx.write_block(&encode_root(&next), &props(BlockType::Metadata))
        })
        .unwrap();
    *model = next;
    txg
}

/// Goal: an import whose newest txg is the one right after a condense finds exactly the
/// allocation state the pool had in memory (a regression: the base re-dated the deferred
/// frees of older txgs to its own txg, while memory released them at their own time, so the
/// txg after the base could allocate space that a load still held deferred; the kill loop's
/// import then failed with "allocation of space that is not free"). Method: frees in every
/// txg, a base, one more txg, then import from the devices as a crash would leave them and
/// compare allocated and deferred bytes; again from the imported pool, six times.
#[test]
fn import_right_after_a_condense_matches_memory() {
    let devices = names(4);
    let provider = provider_with(&devices, &FaultPlan::default());
    let mut pool = create(&provider, &spec(TopLayout::Raidz(1), devices));
    let mut model = Model::default();
    let mut seed = 500;
    for round in 0..6 {
        for _ in 0..4 {
            seed += 1;
            sync_freeing_one(&mut pool, &mut model, seed);
        }
        pool.space_mut().condense_next_sync();
        seed += 1;
        let base = sync_freeing_one(&mut pool, &mut model, seed);
        seed += 1;
        let after = sync_freeing_one(&mut pool, &mut model, seed);
        assert_eq!(after, Txg(base.0 + 1), "round {round}");
        let space = (pool.space().allocated(), pool.space().deferred_bytes());
        assert!(space.1 > 0, "round {round}: frees in flight");
        drop(pool);
        pool = import(&provider, &["/dev/sim"], &ImportOptions::default())
            .unwrap_or_else(|e| panic!("round {round}: import at txg {after}: {e}"));
        assert_eq!(
            (pool.space().allocated(), pool.space().deferred_bytes()),
            space,
            "round {round}: (allocated, deferred) bytes after an import at the txg after a base"
        );
        verify(&pool).unwrap();
    }
}

/// Read operations the data leaves of `pool` have issued so far.
fn data_reads(pool: &Pool) -> u64 {
    pool.tops()
        .iter()
        .flat_map(|t| t.leaves())
        .map(|l| l.stats().snapshot().read_ops)
        .sum()
}

#[test]
fn cache_device_serves_verified_copies_and_never_wrong_bytes() {
    let devices = names(4);
    let cache = "/dev/sim/cache0".to_string();
    let provider = provider_with(&devices, &FaultPlan::default());
    provider.insert(
        &cache,
        SimDevice::new(&cache, 64 << 20, FaultPlan::default()),
    );
    let spec = CreateSpec {
        caches: vec![cache.clone()],
        ..spec(TopLayout::Raidz(1), devices)
    };
    let mut pool = create(&provider, &spec);
    let mut model = Model::default();
    let mut rng = SeededRng::new(3);
    for _ in 0..5 {
        sync_step(&mut pool, &mut model, &mut rng).unwrap();
    }
    // First pass: every block comes from the pool and is fed to the cache device.
    verify(&pool).unwrap();
    let leaf = Arc::clone(&pool.caches()[0]);
    let fed = leaf.stats().snapshot().write_ops;
    assert!(fed as usize > model.live.len(), "{fed} blocks fed");
    // Second pass: served by the cache device alone.
    let before = data_reads(&pool);
    verify(&pool).unwrap();
    assert_eq!(data_reads(&pool), before, "no data leaf was read");
    assert!(pool.pipeline().l2().stats().hits as usize > model.live.len());
    // Rot the whole cache device's data area: every read still returns the right bytes
    // (from the pool), each bad copy is counted once and forgotten.
    let sim = provider.get(&cache).unwrap();
    sim.write_at(tarn_format::label::DATA_START, &vec![0x5A; 8 << 20])
        .unwrap();
    verify(&pool).unwrap();
    let bad = leaf.stats().snapshot().checksum_errors;
    assert!(bad as usize > model.live.len(), "{bad} bad copies counted");
    assert!(data_reads(&pool) > before, "the pool served the reads");
    verify(&pool).unwrap();
    assert_eq!(
        leaf.stats().snapshot().checksum_errors,
        bad,
        "re-fed copies are good"
    );
}

/// Goal: a cache device's index survives export/import and a power cut (persistent L2ARC),
/// and a cache device damaged after the import still never yields a wrong byte.
/// Method: fill a raidz1 pool, read everything once (fed), export, import: the rebuild
/// restores the index and a second read pass touches no data leaf. Then a power cut
/// dropping every unflushed write: what was logged at the last txg comes back. Last, the
/// ring is overwritten with garbage after an import: right bytes, CKSUM counted.
/// A raidz1 pool of four devices with one cache device that loses every unflushed write at a
/// crash, six txgs of data, every block read once (fed to the cache device).
fn pool_with_lossy_cache(cache: &str) -> (Arc<SimProvider>, Pool, Model, SeededRng) {
    let devices = names(4);
    let provider = provider_with(&devices, &FaultPlan::default());
    let lossy = FaultPlan {
        drop_on_crash: 1_000_000,
        ..FaultPlan::seeded(9)
    };
    provider.insert(cache, SimDevice::new(cache, 64 << 20, lossy));
    let spec = CreateSpec {
        caches: vec![cache.to_string()],
        ..spec(TopLayout::Raidz(1), devices)
    };
    let mut pool = create(&provider, &spec);
    let mut model = Model::default();
    let mut rng = SeededRng::new(5);
    for _ in 0..6 {
        sync_step(&mut pool, &mut model, &mut rng).unwrap();
    }
    verify(&pool).unwrap();
    (provider, pool, model, rng)
}

#[test]
fn cache_device_index_survives_export_import_and_power_cut() {
    let cache = "/dev/sim/cache0".to_string();
    let (provider, pool, mut model, mut rng) = pool_with_lossy_cache(&cache);
    let held = pool.pipeline().l2().stats().size;
    pool.export().unwrap();
    let pool = import(&provider, &["/dev/sim"], &ImportOptions::default()).unwrap();
    let rebuilt = &pool.l2_rebuilds()[0];
    assert!(rebuilt.entries as usize > model.live.len(), "{rebuilt:?}");
    assert_eq!(rebuilt.bytes, held, "everything the cache held at export");
    let guid = pool.caches()[0].guid();
    assert_eq!(
        pool.pipeline().l2().allocated_on(guid),
        held,
        "ALLOC after import"
    );
    let before = data_reads(&pool);
    verify(&pool).unwrap();
    assert_eq!(
        data_reads(&pool),
        before,
        "no data leaf was read after the import"
    );
    let stats = pool.pipeline().l2().stats();
    assert!(stats.restored_hits as usize > model.live.len(), "{stats:?}");
    // A power cut: the index as of the last committed txg comes back.
    let mut pool = pool;
    sync_step(&mut pool, &mut model, &mut rng).unwrap();
    verify(&pool).unwrap();
    sync_step(&mut pool, &mut model, &mut rng).unwrap();
    let logged = pool.pipeline().l2().stats().size;
    drop(pool);
    for name in names(4).iter().chain([&cache]) {
        provider.get(name).unwrap().crash();
    }
    let pool = import(&provider, &["/dev/sim"], &ImportOptions::default()).unwrap();
    assert!(
        pool.l2_rebuilds()[0].bytes >= logged / 2,
        "{:?}",
        pool.l2_rebuilds()
    );
    let before = data_reads(&pool);
    verify(&pool).unwrap();
    let leaf = Arc::clone(&pool.caches()[0]);
    assert_eq!(leaf.stats().snapshot().checksum_errors, 0, "no stale entry");
    assert!(
        data_reads(&pool) < before + model.live.len() as u64,
        "mostly cache hits"
    );
    // Garbage over the whole ring after the import: the pool serves every read.
    let sim = provider.get(&cache).unwrap();
    let ring = tarn_format::label::DATA_START + tarn_format::l2cache::L2_RING_START;
    sim.write_at(ring, &vec![0xA5; 16 << 20]).unwrap();
    verify(&pool).unwrap();
    assert!(
        leaf.stats().snapshot().checksum_errors > 0,
        "bad copies counted"
    );
    pool.export().unwrap();
    // Reimported: the export logged the copies fed again since; the walk ends at the
    // first block the garbage replaced, and every read is still right.
    let pool = import(&provider, &["/dev/sim"], &ImportOptions::default()).unwrap();
    let rebuilt = &pool.l2_rebuilds()[0];
    assert!(rebuilt.stopped.contains("log block"), "{rebuilt:?}");
    verify(&pool).unwrap();
    assert_eq!(pool.caches()[0].stats().snapshot().checksum_errors, 0);
}

/// Goal: `pool add` of a device that was this pool's cache device is not a rebuild: it is a
/// new leaf (new GUID) and starts empty, and the next import restores only what was fed
/// after the add. Method: fill, remove the cache device, add it back, export and import;
/// the rebuilt bytes are exactly what the new leaf held at export.
#[test]
fn a_cache_device_added_again_starts_empty() {
    let cache = "/dev/sim/cache0".to_string();
    let (provider, pool, mut model, mut rng) = pool_with_lossy_cache(&cache);
    let old = pool.caches()[0].guid();
    assert!(pool.pipeline().l2().allocated_on(old) > 0);
    pool.export().unwrap();
    let mut pool = import(&provider, &["/dev/sim"], &ImportOptions::default()).unwrap();
    assert!(
        pool.l2_rebuilds()[0].entries > 0,
        "{:?}",
        pool.l2_rebuilds()
    );
    pool.remove_cache_device(&cache).unwrap();
    sync_step(&mut pool, &mut model, &mut rng).unwrap();
    let add = CreateSpec {
        tops: Vec::new(),
        caches: vec![cache.clone()],
        force: true,
        ..spec(TopLayout::Disk, Vec::new())
    };
    pool.add(&add, provider.as_ref(), &mut SeededRng::new(77))
        .unwrap();
    sync_step(&mut pool, &mut model, &mut rng).unwrap();
    let new = pool.caches()[0].guid();
    assert_ne!(new, old, "a new leaf");
    assert_eq!(pool.pipeline().l2().allocated_on(new), 0, "starts empty");
    verify(&pool).unwrap();
    let held = pool.pipeline().l2().allocated_on(new);
    assert!(held > 0, "fed after the add");
    pool.export().unwrap();
    let pool = import(&provider, &["/dev/sim"], &ImportOptions::default()).unwrap();
    assert_eq!(
        pool.l2_rebuilds()[0].bytes,
        held,
        "{:?}",
        pool.l2_rebuilds()
    );
    verify(&pool).unwrap();
    assert_eq!(pool.caches()[0].stats().snapshot().checksum_errors, 0);
}

#[test]
fn cache_devices_are_found_by_guid_and_their_loss_costs_nothing() {
    let devices = names(3);
    let cache = "/dev/sim/cache0".to_string();
    let provider = provider_with(&devices, &FaultPlan::default());
    provider.insert(
        &cache,
        SimDevice::new(&cache, 64 << 20, FaultPlan::default()),
    );
    let spec = CreateSpec {
        caches: vec![cache.clone()],
        ..spec(TopLayout::Mirror, devices)
    };
    let mut pool = create(&provider, &spec);
    let mut model = Model::default();
    let mut rng = SeededRng::new(4);
    for _ in 0..3 {
        sync_step(&mut pool, &mut model, &mut rng).unwrap();
    }
    pool.export().unwrap();
    provider.rename(&cache, "/dev/sim/renamed-cache");
    let pool = import(&provider, &["/dev/sim"], &ImportOptions::default()).unwrap();
    let caches = pool.caches();
    assert_eq!(caches.len(), 1);
    assert!(caches[0].is_usable(), "found by GUID under its new name");
    assert_eq!(caches[0].path(), "/dev/sim/renamed-cache");
    verify(&pool).unwrap();
    pool.export().unwrap();
    provider.rename("/dev/sim/renamed-cache", "/dev/elsewhere/cache");
    let mut pool = import(&provider, &["/dev/sim"], &ImportOptions::default()).unwrap();
    assert!(
        !pool.caches()[0].is_usable(),
        "missing, and the import did not care"
    );
    verify(&pool).unwrap();
    sync_step(&mut pool, &mut model, &mut rng).unwrap();
    verify(&pool).unwrap();
}

/// A pool (raidz1 of d0..d2) with a committed model, on a power-cut provider whose budget is
/// unlimited until the caller sets it. Deterministic for `seed`.
fn pool_for_add(
    seed: u64,
) -> (
    Arc<SimProvider>,
    Arc<std::sync::atomic::AtomicI64>,
    PowerCutProvider,
    Pool,
    Model,
) {
    let all = names(8);
    let plan = FaultPlan {
        seed,
        drop_on_crash: PER_MILLION / 2,
        torn_on_crash: PER_MILLION / 4,
        ..FaultPlan::default()
    };
    let sims = provider_with(&all, &plan);
    let budget = Arc::new(std::sync::atomic::AtomicI64::new(i64::MAX));
    let provider = PowerCutProvider {
        inner: Arc::clone(&sims),
        budget: Arc::clone(&budget),
    };
    let mut pool = Pool::create(
        &spec(TopLayout::Raidz(1), all[..3].to_vec()),
        &provider,
        identity(),
        Arc::new(ManualClock::new(1)),
        &mut SeededRng::new(seed),
    )
    .unwrap();
    let mut model = Model::default();
    let mut rng = SeededRng::new(seed);
    for _ in 0..3 {
        sync_step(&mut pool, &mut model, &mut rng).unwrap();
    }
    (sims, budget, provider, pool, model)
}

/// What the add tests add: a data mirror (d3, d4), a log (d5), a special disk (d6; a
/// single disk under raidz1, so with -f) and a cache device (d7).
fn addition() -> CreateSpec {
    let all = names(8);
    CreateSpec {
        tops: vec![TopSpec {
            layout: TopLayout::Mirror,
            devices: all[3..5].to_vec(),
        }],
        logs: vec![TopSpec {
            layout: TopLayout::Disk,
            devices: vec![all[5].clone()],
        }],
        specials: vec![TopSpec {
            layout: TopLayout::Disk,
            devices: vec![all[6].clone()],
        }],
        caches: vec![all[7].clone()],
        force: true,
        ..spec(TopLayout::Disk, Vec::new())
    }
}

/// Goal: `add` is crash-safe. A power cut at every device operation of the txg that
/// commits an add (labels of old and new devices, uberblocks, flushes) leaves a pool that
/// imports with either the old vdev tree or the new one, every committed block reading back,
/// and a pool that takes more txgs (on the new vdevs when they are there). Method: count the
/// operations of one add + sync, then for each k cut the power after k operations, drop or
/// tear every unflushed write, import, verify, sync once more, import again.
#[test]
fn add_then_power_cut_at_every_step() {
    let ops = {
        let (_sims, budget, provider, mut pool, mut model) = pool_for_add(9);
        budget.store(1 << 40, std::sync::atomic::Ordering::SeqCst);
        pool.add(&addition(), &provider, &mut SeededRng::new(1009))
            .unwrap();
        sync_step(&mut pool, &mut model, &mut SeededRng::new(99)).unwrap();
        (1 << 40) - budget.load(std::sync::atomic::Ordering::SeqCst)
    };
    assert!(
        ops > 20,
        "an add commits through labels and uberblocks ({ops} ops)"
    );
    let (mut old, mut new) = (0, 0);
    for k in 0..=ops {
        let (sims, budget, provider, mut pool, mut model) = pool_for_add(9);
        let committed = pool.txg();
        budget.store(k, std::sync::atomic::Ordering::SeqCst);
        let added = pool.add(&addition(), &provider, &mut SeededRng::new(1009));
        let synced =
            added.is_ok() && sync_step(&mut pool, &mut model, &mut SeededRng::new(99)).is_ok();
        drop(pool);
        for (_, device) in sims.all() {
            device.crash();
        }
        let mut pool = import(&sims, &["/dev/sim"], &ImportOptions::default())
            .unwrap_or_else(|e| panic!("cut after {k} of {ops}: import: {e}"));
        verify(&pool).unwrap_or_else(|e| panic!("cut after {k}: {e}"));
        assert!(pool.txg() >= committed, "cut after {k}: committed txg lost");
        match pool.tops().len() {
            1 => {
                assert!(
                    pool.caches().is_empty(),
                    "cut after {k}: a cache without its add"
                );
                assert!(
                    !synced,
                    "cut after {k}: the add committed but the pool lost it"
                );
                old += 1;
            }
            4 => {
                assert!(
                    pool.is_log_vdev(2) && pool.is_special_vdev(3),
                    "cut after {k}"
                );
                assert_eq!(pool.caches().len(), 1, "cut after {k}: the cache device");
                new += 1;
            }
            n => panic!("cut after {k}: {n} top-level vdevs"),
        }
        let mut model = decode_root(&pool.reader().read_block(&pool.root().unwrap()).unwrap());
        sync_step(&mut pool, &mut model, &mut SeededRng::new(k as u64))
            .unwrap_or_else(|e| panic!("cut after {k}: sync after import: {e}"));
        let tops = pool.tops().len();
        drop(pool);
        let again = import(&sims, &["/dev/sim"], &ImportOptions::default()).unwrap();
        verify(&again).unwrap();
        assert_eq!(
            again.tops().len(),
            tops,
            "cut after {k}: the tree changed again"
        );
    }
    assert!(
        old > 0 && new > 0,
        "both outcomes seen ({old} old, {new} new)"
    );
}

/// Goal: with a special vdev, metadata (here the model's root) goes there and data does
/// not; a special vdev lost beyond its redundancy stops the import and says why.
#[test]
fn special_vdev_takes_metadata_and_is_needed_to_import() {
    let all = names(4);
    let provider = provider_with(&all, &FaultPlan::default());
    let mut create_spec = spec(TopLayout::Raidz(1), all[..3].to_vec());
    create_spec.specials = vec![TopSpec {
        layout: TopLayout::Disk,
        devices: vec![all[3].clone()],
    }];
    let err = Pool::create(
        &create_spec,
        provider.as_ref(),
        identity(),
        Arc::new(ManualClock::new(1)),
        &mut SeededRng::new(1),
    )
    .unwrap_err();
    assert!(
        matches!(err, PoolError::MismatchedReplication { .. }),
        "{err}"
    );
    create_spec.force = true;
    let mut pool = create(&provider, &create_spec);
    let mut model = Model::default();
    let mut rng = SeededRng::new(3);
    for _ in 0..4 {
        sync_step(&mut pool, &mut model, &mut rng).unwrap();
    }
    let root = pool.root().unwrap();
    assert!(root.copies().all(|d| d.vdev.0 == 1), "root {root:?}");
    assert!(
        pool.space()
            .chain()
            .iter()
            .all(|bp| bp.copies().all(|d| d.vdev.0 == 1))
    );
    for (bp, _, _) in &model.live {
        assert!(bp.copies().all(|d| d.vdev.0 == 0), "data {bp:?} on special");
    }
    let found = discover(provider.as_ref(), &["/dev/sim".into()]);
    assert!(
        found[0]
            .config
            .features_for_read
            .iter()
            .any(|f| f == tarn_format::FEATURE_ALLOCATION_CLASSES)
    );
    pool.export().unwrap();
    provider.remove(&all[3]).unwrap();
    let err = import(&provider, &["/dev/sim"], &ImportOptions::default()).unwrap_err();
    assert!(matches!(err, PoolError::MissingSpecial { .. }), "{err}");
    assert!(err.to_string().contains("special vdev"), "{err}");
}

/// Goal: a pool without a special vdev does not list the allocation-classes feature (older
/// builds can still import it), and a refused add writes nothing.
#[test]
fn no_special_no_feature_and_refused_add_writes_nothing() {
    let all = names(5);
    let provider = provider_with(&all, &FaultPlan::default());
    let mut pool = create(&provider, &spec(TopLayout::Mirror, all[..2].to_vec()));
    let mut model = Model::default();
    sync_step(&mut pool, &mut model, &mut SeededRng::new(1)).unwrap();
    let found = discover(provider.as_ref(), &["/dev/sim".into()]);
    assert!(
        !found[0]
            .config
            .features_for_read
            .iter()
            .any(|f| f == tarn_format::FEATURE_ALLOCATION_CLASSES)
    );
    let images: Vec<Vec<u8>> = provider.all().iter().map(|(_, d)| d.image()).collect();
    let weak = CreateSpec {
        tops: vec![TopSpec {
            layout: TopLayout::Disk,
            devices: vec![all[2].clone()],
        }],
        ..spec(TopLayout::Disk, Vec::new())
    };
    let err = pool
        .add(&weak, provider.as_ref(), &mut SeededRng::new(1))
        .unwrap_err();
    assert!(
        matches!(err, PoolError::MismatchedReplication { .. }),
        "{err}"
    );
    let twice = CreateSpec {
        spares: vec![all[0].clone()],
        ..spec(TopLayout::Disk, Vec::new())
    };
    let twice = CreateSpec {
        tops: Vec::new(),
        ..twice
    };
    let err = pool
        .add(&twice, provider.as_ref(), &mut SeededRng::new(1))
        .unwrap_err();
    assert!(matches!(err, PoolError::AlreadyInPool { .. }), "{err}");
    let after: Vec<Vec<u8>> = provider.all().iter().map(|(_, d)| d.image()).collect();
    assert!(images == after, "a refused add wrote to a device");
    assert_eq!(pool.tops().len(), 1);
}

/// Goal: frees become allocatable soon after they are made even when the space log condenses
/// often (a regression: a base carrying many frees was itself over the condense threshold, so
/// every txg wrote a new base, which re-dated the frees to its own txg; they were never
/// released, and the log's own freed blocks piled up with them until a volume benchmark's
/// pool suspended "out of space" with 6 GiB "freeing"). Method: a low condense threshold, 300
/// blocks written in one txg and freed in the next, then txgs that write only a root.
#[test]
fn deferred_frees_are_released_while_the_log_condenses() {
    let devices = names(4);
    let provider = provider_with(&devices, &FaultPlan::default());
    let mut pool = create(&provider, &spec(TopLayout::Raidz(1), devices));
    pool.space_mut().set_condense_threshold(64);
    let model = Model::default();
    let root = |ctx: &mut tarn_pool::SyncCtx<'_>| {
        ctx.write_block(&encode_root(&model), &props(BlockType::Metadata))
    };
    let mut blocks = Vec::new();
    pool.sync(|ctx| -> Result<BlockPtr, tarn_zio::ZioError> {
        for seed in 0..300 {
            blocks.push(ctx.write_block(&data_for(seed, 4096), &props(BlockType::Data))?);
        }
        root(ctx)
    })
    .unwrap();
    let with_blocks = pool.space().allocated();
    pool.sync(|ctx| -> Result<BlockPtr, tarn_zio::ZioError> {
        blocks.iter().for_each(|bp| ctx.free_block(bp));
        root(ctx)
    })
    .unwrap();
    let freed = pool.space().deferred_bytes();
    assert!(freed > 300 * 4096, "the frees are deferred: {freed} bytes");
    for _ in 0..3 * tarn_space::TXG_DEFER + 3 {
        pool.sync(|ctx| -> Result<BlockPtr, tarn_zio::ZioError> { root(ctx) })
            .unwrap();
    }
    let space = pool.space();
    assert!(
        space.deferred_bytes() < freed / 10,
        "{} of {freed} freed bytes still deferred",
        space.deferred_bytes()
    );
    assert!(
        space.allocated() < with_blocks - freed / 2,
        "allocated {} bytes, {with_blocks} with the blocks",
        space.allocated()
    );
}

/// Goal: a dRAID pool (draid2:4d:1s:11c) commits, exports and imports with its layout and
/// space intact, lists the `org.tarn:draid` feature (so builds without dRAID refuse it) while
/// a pool without dRAID does not, survives bit rot on two devices, imports degraded with two
/// devices missing and returns every byte, and refuses to import with three missing.
#[test]
fn draid_pool_round_trip_bit_rot_and_device_loss() {
    let devices = names(11);
    let provider = provider_with(&devices, &FaultPlan::default());
    let layout = TopLayout::Draid {
        parity: 2,
        data: 4,
        spares: 1,
    };
    let mut pool = create(&provider, &spec(layout, devices.clone()));
    let mut model = Model::default();
    let mut rng = SeededRng::new(20);
    for _ in 0..25 {
        sync_step(&mut pool, &mut model, &mut rng).expect("sync");
    }
    let allocated = pool.space().allocated();
    let top_layout = pool.tops()[0].layout();
    assert!(matches!(top_layout, tarn_vdev::Layout::Draid(_)));
    let found = discover(provider.as_ref(), &["/dev/sim".into()]);
    let features = &found[0].config.features_for_read;
    assert!(features.iter().any(|f| f == tarn_format::FEATURE_DRAID));
    pool.export().unwrap();
    let pool = import(&provider, &["/dev/sim"], &ImportOptions::default()).expect("import");
    assert_eq!(pool.tops()[0].layout(), top_layout, "the seed is kept");
    assert_eq!(pool.space().allocated(), allocated);
    verify(&pool).expect("data after import");
    pool.export().unwrap();
    for name in [&devices[2], &devices[7]] {
        let rotted = provider.get(name).unwrap().rot_random(200);
        assert!(!rotted.is_empty());
    }
    let pool = import(&provider, &["/dev/sim"], &ImportOptions::default()).expect("import");
    verify(&pool).expect("bit rot on two devices is within parity");
    pool.export().unwrap();
    // The rotted devices go: what the reads above did not heal would otherwise count
    // against the parity left with two devices missing.
    let first = provider.remove(&devices[2]).unwrap();
    let second = provider.remove(&devices[7]).unwrap();
    let pool = import(&provider, &["/dev/sim"], &ImportOptions::default()).expect("degraded");
    assert_eq!(pool.tops()[0].health(), tarn_vdev::Health::Degraded);
    verify(&pool).expect("every byte with two devices missing");
    pool.export().unwrap();
    let third = provider.remove(&devices[0]).unwrap();
    assert!(import(&provider, &["/dev/sim"], &ImportOptions::default()).is_err());
    provider.insert(&devices[0], third);
    let pool = import(&provider, &["/dev/sim"], &ImportOptions::default()).expect("two back");
    verify(&pool).expect("two missing again");
    drop((first, second));

    let mirrors = names(2);
    let provider = provider_with(&mirrors, &FaultPlan::default());
    let mut pool = create(&provider, &spec(TopLayout::Mirror, mirrors));
    sync_step(&mut pool, &mut Model::default(), &mut rng).unwrap();
    let found = discover(provider.as_ref(), &["/dev/sim".into()]);
    let features = &found[0].config.features_for_read;
    assert!(!features.iter().any(|f| f == tarn_format::FEATURE_DRAID));
}
