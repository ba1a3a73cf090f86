//! Helpers shared by the engine's integration tests (each test file that needs them says
//! `mod common;`): the engine a test runs on (`Host`), the simulated devices under it
//! (`sim_devices`), the pool `tank` made or imported on them, and what a test looks at
//! afterwards (device images, the committed txg, a read-only walk of an exported pool).
//!
//! A test names what is particular to it (a host id, a clock it reads, a seed, fault plans,
//! import options) and takes the rest from here; nothing here picks a value a test's outcome
//! depends on without the test saying so.

#![allow(dead_code)] // Each test binary uses a different part of the helpers.

pub(crate) mod gate;
pub(crate) mod replica;
pub(crate) mod tree;
pub(crate) mod volume;

use std::ops::Range;
use std::sync::{Arc, Mutex};

use tarn_base::{ManualClock, ObjectId, SeededRng, Txg};
use tarn_device::{Device, DeviceError, FaultPlan, SimDevice};
use tarn_engine::{
    CreateOptions, CreateSpec, DatasetId, DatasetQuery, DeviceProvider, Engine, EngineError, FsOp,
    HostIdentity, ImportOptions, ScanProgress, ScanState, ScrubAction, SimProvider, TopLayout,
    TopSpec, VdevNode, check,
};
use tarn_format::BlockPtr;
use tarn_objects::ObjectSet;
use tarn_pool::Pool;

/// Where an engine's identity, clock and randomness start. A test file that needs other
/// values says which, as `Host { hostid: 5, ..PLAIN }`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Host {
    /// The host id the engine writes into labels and heartbeats.
    pub(crate) hostid: u64,
    pub(crate) hostname: &'static str,
    /// The engine's `ManualClock`, in seconds since the epoch (status lines print it).
    pub(crate) secs: u64,
    /// The seed of the engine's `SeededRng` (the GUIDs it hands out).
    pub(crate) seed: u64,
}

/// Host 7 ("host"), the clock at 2023-11-14, seed 42: the start of every test that does not
/// care about identity or time.
pub(crate) const PLAIN: Host = Host {
    hostid: 7,
    hostname: "host",
    secs: 1_700_000_000,
    seed: 42,
};

/// `PLAIN` with the clock at Sun Nov 22 14:30:00 2026 (UTC), the time the scan lines of the
/// scrub and resilver tests expect.
pub(crate) const PLAIN_NOV_22_2026: Host = Host {
    secs: 1_795_357_800,
    ..PLAIN
};

impl Host {
    pub(crate) fn identity(&self) -> HostIdentity {
        HostIdentity {
            hostid: self.hostid,
            hostname: self.hostname.into(),
        }
    }

    /// A new engine over `provider`.
    pub(crate) fn engine<P: DeviceProvider + 'static>(&self, provider: &Arc<P>) -> Engine {
        Engine::new(
            provider.clone(),
            self.identity(),
            Arc::new(ManualClock::new(self.secs)),
            self.seed,
        )
    }

    /// A new engine over `provider` that made pool `tank` of `spec` with the pool
    /// `properties` (history: `pool create tank`).
    pub(crate) fn create_tank<P: DeviceProvider + 'static>(
        &self,
        provider: &Arc<P>,
        spec: &CreateSpec,
        properties: &[(&str, &str)],
    ) -> Engine {
        let engine = self.engine(provider);
        let options = CreateOptions {
            command: "pool create tank".into(),
            properties: properties
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..CreateOptions::default()
        };
        engine.create_pool(spec, &options).expect("create tank");
        engine
    }

    /// A new engine over `provider` that made pool `tank`, a raidz1 of four files `d0`..`d3`
    /// of `size` bytes in `dir`.
    pub(crate) fn file_tank<P: DeviceProvider + 'static>(
        &self,
        provider: &Arc<P>,
        dir: &std::path::Path,
        size: u64,
    ) -> Engine {
        let paths: Vec<String> = (0..4)
            .map(|i| dir.join(format!("d{i}")).display().to_string())
            .collect();
        for path in &paths {
            let file = std::fs::File::create(path).expect("device file");
            file.set_len(size).expect("device file size");
        }
        let spec = CreateSpec::one_top("tank", TopLayout::Raidz(1), paths);
        self.create_tank(provider, &spec, &[])
    }

    /// A new engine over `provider` that imported pool `tank` from `/sim` with `options`.
    pub(crate) fn import<P: DeviceProvider + 'static>(
        &self,
        provider: &Arc<P>,
        options: &ImportOptions,
    ) -> Result<Engine, EngineError> {
        let engine = self.engine(provider);
        import_tank(&engine, options)?;
        Ok(engine)
    }
}

/// An engine over `provider` as the `PLAIN` host.
pub(crate) fn engine_on(provider: &Arc<SimProvider>) -> Engine {
    PLAIN.engine(provider)
}

/// Imports pool `tank` from `/sim` into `engine` with `options` (history: `pool import tank`);
/// returns the name it was imported under.
pub(crate) fn import_tank(engine: &Engine, options: &ImportOptions) -> Result<String, EngineError> {
    engine.import_pool(&["/sim".into()], "tank", options, "pool import tank")
}

/// Simulated devices `/sim/{prefix}N` of `size` bytes for every N in `numbers`, without
/// faults; returns their paths.
pub(crate) fn sim_devices(
    provider: &SimProvider,
    prefix: &str,
    numbers: Range<usize>,
    size: u64,
) -> Vec<String> {
    sim_devices_with(provider, prefix, numbers, size, |_| FaultPlan::default())
}

/// [`sim_devices`] where device N follows fault plan `plan(N)`.
pub(crate) fn sim_devices_with(
    provider: &SimProvider,
    prefix: &str,
    numbers: Range<usize>,
    size: u64,
    plan: impl Fn(usize) -> FaultPlan,
) -> Vec<String> {
    numbers
        .map(|i| {
            let name = format!("/sim/{prefix}{i}");
            provider.insert(&name, SimDevice::new(&name, size, plan(i)));
            name
        })
        .collect()
}

/// Pool `tank` of one top-level vdev `layout` over `names`, with each of `logs` a log
/// device of its own, sector size 4K.
pub(crate) fn spec_with_logs(
    layout: TopLayout,
    names: Vec<String>,
    logs: Vec<String>,
) -> CreateSpec {
    CreateSpec {
        logs: logs
            .into_iter()
            .map(|device| TopSpec {
                layout: TopLayout::Disk,
                devices: vec![device],
            })
            .collect(),
        ashift: 12,
        ..CreateSpec::one_top("tank", layout, names)
    }
}

/// A device plan whose every unflushed write is dropped or torn at a crash (6 in 10 dropped,
/// 4 in 10 torn), from `seed`.
pub(crate) fn crash_plan(seed: u64) -> FaultPlan {
    FaultPlan {
        seed,
        drop_on_crash: 600_000,
        torn_on_crash: 400_000,
        ..FaultPlan::default()
    }
}

/// The power goes: every device drops or tears its unflushed writes as its plan says.
pub(crate) fn crash_all(provider: &SimProvider) {
    for (_, device) in provider.all() {
        device.crash();
    }
}

/// Every device's path and durable bytes, in path order: equal images mean nothing was
/// written.
pub(crate) fn images(provider: &SimProvider) -> Vec<(String, Vec<u8>)> {
    provider
        .all()
        .into_iter()
        .map(|(name, device)| (name, device.image()))
        .collect()
}

/// The last committed txg of pool `tank`.
pub(crate) fn committed(engine: &Engine) -> Txg {
    check::committed_txg(engine, "tank")
        .expect("committed txg of tank")
        .expect("tank has committed a txg")
}

/// The exported pool `tank` on `provider`, imported read-only at the pool layer as `host`
/// (to walk its blocks), and the root block pointer of its root dataset's object set.
pub(crate) fn exported_tank(provider: &SimProvider, host: &Host) -> (Pool, BlockPtr) {
    let found = tarn_pool::discover(provider, &["/sim".to_string()]);
    let options = ImportOptions {
        readonly: true,
        ..ImportOptions::default()
    };
    let pool = Pool::import(
        &found[0],
        provider,
        &options,
        host.identity(),
        Arc::new(ManualClock::new(host.secs)),
        &|_| Ok(()),
    )
    .expect("read-only import of tank");
    let reader = pool.reader();
    let mos_root = pool.root().expect("MOS root");
    let mut mos = ObjectSet::open(&reader, &mos_root).expect("open the MOS");
    // MOS object 4 is the root dataset; its bonus is its object set's root block pointer.
    let bonus = mos.bonus(&reader, ObjectId(4)).expect("root dataset bonus");
    let data_root = BlockPtr::decode_bytes(&bonus).expect("root dataset block pointer");
    (pool, data_root)
}

/// Whether the root directory of `dataset` in pool `tank` has an entry `name`.
pub(crate) fn in_root_dir(engine: &Engine, dataset: DatasetId, name: &[u8]) -> bool {
    engine
        .fs_op("tank", dataset, FsOp::Read, |fs| {
            let root = fs.root()?;
            fs.lookup(root, name)
        })
        .is_ok()
}

/// `len` bytes drawn from `SeededRng::new(seed)`: they do not compress.
pub(crate) fn seeded_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut data = vec![0u8; len];
    SeededRng::new(seed).fill(&mut data);
    data
}

/// A new object of pool `tank` with blocks of `block` bytes, holding `len` bytes drawn from
/// `SeededRng::new(seed)`, committed; returns it with its bytes.
pub(crate) fn write_object(
    engine: &Engine,
    block: u32,
    seed: u64,
    len: usize,
) -> (ObjectId, Vec<u8>) {
    let object = engine.object_create("tank", block).expect("create object");
    let data = seeded_bytes(len, seed);
    engine
        .object_write("tank", object, 0, &data)
        .expect("write object");
    engine.sync_pool("tank").expect("sync tank");
    (object, data)
}

/// Steps the running scan (scrub or resilver) of pool `tank` in batches of `batch` bytes
/// until it stops; returns its last record.
pub(crate) fn finish_scan(engine: &Engine, batch: u64) -> ScanProgress {
    for _ in 0..100_000 {
        let progress = engine
            .scrub_step("tank", batch)
            .expect("scan step")
            .expect("a scan record");
        if progress.state != ScanState::Scanning {
            return progress;
        }
    }
    panic!("the scan of tank did not stop");
}

/// Starts a scrub of pool `tank` (history: `pool scrub tank`) and runs it to its end in
/// batches of `batch` bytes; returns its last record.
pub(crate) fn scrub_tank(engine: &Engine, batch: u64) -> ScanProgress {
    engine
        .scrub(&["tank".to_string()], ScrubAction::Start, "pool scrub tank")
        .expect("start a scrub");
    finish_scan(engine, batch)
}

/// Asserts that every object of pool `tank` in `objects` reads back as its bytes.
pub(crate) fn check_objects(engine: &Engine, objects: &[(ObjectId, Vec<u8>)]) {
    for (object, data) in objects {
        let mut buf = vec![0u8; data.len()];
        engine
            .object_read("tank", *object, 0, &mut buf)
            .expect("read object");
        assert!(buf == *data, "object {object:?} differs");
    }
}

/// The names of `node`'s children, in order.
pub(crate) fn child_names(node: &VdevNode) -> Vec<String> {
    node.children.iter().map(|c| c.name.clone()).collect()
}

/// Device operations left before the power goes (`None`: no cut), shared by every device
/// (the crash tests of snapshots and clones).
#[derive(Debug, Default)]
pub(crate) struct Cut(pub(crate) Mutex<Option<u64>>);

impl Cut {
    fn spend(&self) -> Result<(), DeviceError> {
        let mut left = self.0.lock().expect("cut lock");
        match &mut *left {
            Some(0) => Err(DeviceError::Io {
                offset: 0,
                source: std::io::Error::other("power cut"),
            }),
            Some(n) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }
}

#[derive(Debug)]
pub(crate) struct CutDevice {
    inner: Arc<SimDevice>,
    cut: Arc<Cut>,
}

impl Device for CutDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.cut.spend()?;
        self.inner.write_at(offset, data)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        self.cut.spend()?;
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.discard(offset, len)
    }
    fn path(&self) -> &str {
        self.inner.path()
    }
}

#[derive(Debug, Default)]
pub(crate) struct CutProvider {
    pub(crate) sims: SimProvider,
    pub(crate) cut: Arc<Cut>,
}

impl DeviceProvider for CutProvider {
    fn open(&self, path: &str, read_only: bool) -> Result<Arc<dyn Device>, DeviceError> {
        self.sims.open(path, read_only)?;
        let inner = self.sims.get(path).expect("a device just opened");
        Ok(Arc::new(CutDevice {
            inner,
            cut: Arc::clone(&self.cut),
        }))
    }
    fn list(&self, dir: &str) -> Result<Vec<String>, DeviceError> {
        self.sims.list(dir)
    }
}

/// The query of property `property` of dataset `name`.
fn prop_query(name: &str, property: &str) -> DatasetQuery {
    DatasetQuery {
        names: vec![name.into()],
        properties: vec![property.into()],
        ..DatasetQuery::default()
    }
}

/// Property `property` of dataset (or snapshot) `name`, parsable (`get -p`).
pub(crate) fn dataset_prop(engine: &Engine, name: &str, property: &str) -> String {
    let rows = engine.dataset_props(&prop_query(name, property)).unwrap();
    rows[0].props[0].parsable.clone()
}

/// A byte count of dataset `name` (`used`, `referenced`, ...).
pub(crate) fn dataset_bytes(engine: &Engine, name: &str, property: &str) -> u64 {
    dataset_prop(engine, name, property).parse().unwrap()
}

/// Whether dataset `name` exists.
pub(crate) fn dataset_exists(engine: &Engine, name: &str) -> bool {
    engine.dataset_props(&prop_query(name, "name")).is_ok()
}

/// Every dataset, volume, snapshot and bookmark under `tank`, one row each with the parsable
/// values of `properties` in order (`get -rHp -t all`).
pub(crate) fn tank_rows(engine: &Engine, properties: &[&str]) -> Vec<Vec<String>> {
    let query = DatasetQuery {
        names: vec!["tank".into()],
        properties: properties.iter().map(|p| (*p).to_string()).collect(),
        types: vec!["all".into()],
        recursive: true,
        ..DatasetQuery::default()
    };
    let rows = engine.dataset_props(&query).expect("properties of tank");
    rows.into_iter()
        .map(|row| row.props.into_iter().map(|p| p.parsable).collect())
        .collect()
}
