//! Allocation classes and changes of the vdev tree through the engine on simulated devices.
//! Goal: metadata lands on special vdevs and file data there only up to
//! `special_small_blocks`; `pool add` of every kind (data, log, special, spare) takes effect,
//! survives export/import and is in the history; `pool remove` takes spares and log devices
//! (an fsync'd record on the log survives the removal) and refuses data and special vdevs;
//! every refusal leaves every device byte-identical. Method: pools over `SimDevice`s, the
//! committed block tree walked with `check::reachable_blocks`, `check::verify_pool` after
//! every change.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;

use common::{
    Host, PLAIN, child_names, crash_all, images, import_tank, in_root_dir, sim_devices,
    sim_devices_with,
};
use tarn_device::{FaultPlan, SimDevice};
use tarn_engine::{
    CreateOptions, CreateSpec, DatasetId, Engine, FsOp, ImportOptions, SimProvider, TopLayout,
    TopSpec, VdevNode, check,
};
use tarn_format::{BlockPtr, BlockType};
use tarn_posix::{Creds, FileKind};

const ME: Creds = Creds { uid: 0, gid: 0 };
const HOST: Host = Host {
    hostid: 5,
    seed: 17,
    ..PLAIN
};

fn top(layout: TopLayout, devices: &[String]) -> TopSpec {
    TopSpec {
        layout,
        devices: devices.to_vec(),
    }
}

/// A raidz1 of three 128 MiB devices, optionally with a special mirror of two.
fn pool(special: bool) -> (Arc<SimProvider>, Engine) {
    let provider = Arc::new(SimProvider::new());
    let data = sim_devices(&provider, "d", 0..3, 128 << 20);
    let mut spec = CreateSpec::one_top("tank", TopLayout::Raidz(1), data);
    if special {
        let special = sim_devices(&provider, "d", 3..5, 64 << 20);
        // A 2-way mirror survives as many failures as raidz1: no -f needed.
        spec.specials = vec![top(TopLayout::Mirror, &special)];
    }
    let engine = HOST.create_tank(&provider, &spec, &[]);
    (provider, engine)
}

fn dataset(engine: &Engine, name: &str, props: &[(&str, &str)]) -> DatasetId {
    let props: Vec<(String, String)> = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    engine
        .create_dataset(name, &props, false, "create")
        .unwrap();
    engine.find_dataset(name).unwrap().1
}

/// Writes file `name` of `len` bytes of incompressible data into `dataset`.
fn write_file(engine: &Engine, dataset: DatasetId, name: &str, len: usize) {
    let mut data = vec![0u8; len];
    tarn_base::SeededRng::new(len as u64).fill(&mut data);
    engine
        .fs_op("tank", dataset, FsOp::Modify, |fs| {
            let root = fs.root()?;
            let ino = fs
                .mknod(root, name.as_bytes(), FileKind::Regular, 0o644, 0, ME)?
                .ino;
            fs.write(ino, 0, &data)
        })
        .unwrap();
}

fn is_file_data(bp: &BlockPtr) -> bool {
    bp.block_type == BlockType::Data && bp.level == 0
}

fn vdevs_of(bp: &BlockPtr) -> Vec<u32> {
    bp.copies().map(|d| d.vdev.0).collect()
}

/// Goal: with a special vdev every metadata block (MOS, dnodes, indirect blocks, ZAPs,
/// object-set roots, the space log) is on it and no file data is (special_small_blocks 0).
#[test]
fn metadata_lands_on_the_special_vdev() {
    let (_provider, engine) = pool(true);
    let fs = dataset(&engine, "tank/fs", &[]);
    for i in 0..20 {
        write_file(&engine, fs, &format!("f{i}"), 8 << 10);
    }
    write_file(&engine, fs, "big", 3 << 20);
    engine.sync_pool("tank").unwrap();
    let blocks = check::reachable_blocks(&engine, "tank").unwrap();
    let (data, meta): (Vec<&BlockPtr>, Vec<&BlockPtr>) =
        blocks.iter().partition(|b| is_file_data(b));
    assert!(
        data.len() > 20 && meta.len() > 10,
        "{} {}",
        data.len(),
        meta.len()
    );
    assert!(meta.iter().any(|b| b.block_type == BlockType::Indirect));
    assert!(meta.iter().any(|b| b.block_type == BlockType::SpaceLog));
    for bp in meta {
        assert!(
            vdevs_of(bp).iter().all(|&v| v == 1),
            "metadata {bp:?} not on special"
        );
    }
    for bp in data {
        // MOS objects that are not ZAPs (the history) write level-0 data blocks too, in
        // the MOS's three copies.
        assert!(
            vdevs_of(bp).iter().all(|&v| v == 0),
            "file data {bp:?} on special"
        );
    }
    check::verify_pool(&engine, "tank").unwrap();
    let status = engine.status("tank").unwrap();
    assert_eq!(child_names(&status.config), ["raidz1-0", "special"]);
    assert_eq!(status.config.children[1].children[0].name, "mirror-1");
}

/// Goal: data blocks up to `special_small_blocks` (inherited from the parent) go to the
/// special vdev, larger ones do not; without a special vdev the property changes nothing.
#[test]
fn small_blocks_follow_the_property() {
    let (_provider, engine) = pool(true);
    let parent = dataset(&engine, "tank/p", &[("special_small_blocks", "16K")]);
    let child = dataset(&engine, "tank/p/c", &[]);
    let rows = engine
        .dataset_props(&tarn_engine::DatasetQuery {
            names: vec!["tank/p/c".into()],
            properties: vec!["special_small_blocks".into()],
            ..Default::default()
        })
        .unwrap();
    assert_eq!(rows[0].props[0].value, "16K");
    assert_eq!(rows[0].props[0].parsable, "16384");
    assert_eq!(rows[0].props[0].source, "inherited from tank/p");
    let before = check::committed_txg(&engine, "tank").unwrap().unwrap();
    write_file(&engine, parent, "small", 12 << 10);
    write_file(&engine, child, "small", 16 << 10);
    write_file(&engine, child, "large", 512 << 10);
    engine.sync_pool("tank").unwrap();
    let blocks = check::reachable_blocks(&engine, "tank").unwrap();
    let data: Vec<&BlockPtr> = blocks
        .iter()
        .filter(|b| is_file_data(b) && b.birth > before)
        .collect();
    let small: Vec<_> = data.iter().filter(|b| b.psize <= 16 << 10).collect();
    let large: Vec<_> = data.iter().filter(|b| b.psize > 16 << 10).collect();
    assert_eq!(small.len(), 2, "{data:?}");
    assert!(!large.is_empty());
    assert!(small.iter().all(|b| vdevs_of(b) == [1]), "{small:?}");
    assert!(large.iter().all(|b| vdevs_of(b) == [0]), "{large:?}");
    let err = engine
        .set_dataset_props(
            "tank/p",
            &[("special_small_blocks".into(), "3K".into())],
            "set",
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("0 or a power of two from 512 to 1M"),
        "{err}"
    );
    check::verify_pool(&engine, "tank").unwrap();
}

/// Goal: on a dRAID pool with a special vdev, file blocks that leave a dRAID row's data
/// part at least a sector short go to the special vdev with `special_small_blocks` unset
/// (a 4K block would take a whole row of 6 columns, 24K, there), and blocks that fill their
/// rows (1M) stay on the dRAID.
#[test]
fn blocks_that_would_pad_a_draid_row_go_to_the_special_vdev() {
    let provider = Arc::new(SimProvider::new());
    let data = sim_devices(&provider, "d", 0..8, 128 << 20);
    let layout = TopLayout::Draid {
        parity: 2,
        data: 4,
        spares: 1,
    };
    let mut spec = CreateSpec::one_top("tank", layout, data);
    // A 3-way mirror survives as many failures as draid2: no -f needed.
    spec.specials = vec![top(
        TopLayout::Mirror,
        &sim_devices(&provider, "s", 0..3, 64 << 20),
    )];
    let engine = HOST.create_tank(&provider, &spec, &[]);
    let fs = dataset(&engine, "tank/fs", &[("recordsize", "1M")]);
    let before = check::committed_txg(&engine, "tank").unwrap().unwrap();
    for (i, len) in [4 << 10, 8 << 10, 12 << 10, 1 << 20]
        .into_iter()
        .enumerate()
    {
        write_file(&engine, fs, &format!("f{i}"), len);
    }
    engine.sync_pool("tank").unwrap();
    let blocks = check::reachable_blocks(&engine, "tank").unwrap();
    let data: Vec<&BlockPtr> = blocks
        .iter()
        .filter(|b| is_file_data(b) && b.birth > before)
        .collect();
    let small: Vec<_> = data.iter().filter(|b| b.psize <= 8 << 10).collect();
    let large: Vec<_> = data.iter().filter(|b| b.psize == 1 << 20).collect();
    assert_eq!((small.len(), large.len()), (2, 1), "{data:?}");
    assert!(small.iter().all(|b| vdevs_of(b) == [1]), "{small:?}");
    assert!(large.iter().all(|b| vdevs_of(b) == [0]), "{large:?}");
    check::verify_pool(&engine, "tank").unwrap();
}

/// Goal: when the special vdev fills, small blocks stop at its metadata reserve and go to
/// the normal class, and the pool keeps working and verifying.
#[test]
fn a_full_special_vdev_falls_back_to_the_normal_class() {
    let provider = Arc::new(SimProvider::new());
    let data = sim_devices(&provider, "d", 0..3, 256 << 20);
    let special = sim_devices(&provider, "d", 3..4, 64 << 20);
    let mut spec = CreateSpec::one_top("tank", TopLayout::Raidz(1), data);
    spec.specials = vec![top(TopLayout::Disk, &special)];
    spec.force = true;
    let engine = HOST.engine(&provider);
    let options = CreateOptions::default();
    let refused = engine.create_pool(
        &CreateSpec {
            force: false,
            ..spec.clone()
        },
        &options,
    );
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("mismatched replication level"),
        "a single-disk special under raidz1 needs -f"
    );
    engine.create_pool(&spec, &options).unwrap();
    let fs = dataset(&engine, "tank/fs", &[("special_small_blocks", "128K")]);
    for i in 0..64 {
        write_file(&engine, fs, &format!("f{i}"), 1 << 20);
        if i % 8 == 7 {
            engine.sync_pool("tank").unwrap();
        }
    }
    let blocks = check::reachable_blocks(&engine, "tank").unwrap();
    let data: Vec<&BlockPtr> = blocks.iter().filter(|b| is_file_data(b)).collect();
    let on_special = data.iter().filter(|b| vdevs_of(b) == [1]).count();
    let on_normal = data.iter().filter(|b| vdevs_of(b) == [0]).count();
    // 64 MiB of 128K blocks: the special vdev takes them until a quarter of it is left.
    assert!(
        on_special > 200 && on_normal > 50,
        "{on_special} {on_normal}"
    );
    let special_bytes = on_special as u64 * (128 << 10);
    assert!(
        special_bytes <= 48 << 20,
        "small blocks ate the metadata reserve"
    );
    let usage = engine.list(&["tank".into()]).unwrap();
    assert_eq!(usage.len(), 1);
    check::verify_pool(&engine, "tank").unwrap();
}

/// Goal: `add` of a data mirror, a special vdev, a log device and a spare: each appears in
/// status in its section, new blocks use the new vdevs, history records the command, and
/// all of it survives export and import.
#[test]
fn add_of_each_kind_survives_export_and_import() {
    let (provider, engine) = pool(false);
    let fs = dataset(&engine, "tank/fs", &[]);
    write_file(&engine, fs, "before", 2 << 20);
    engine.sync_pool("tank").unwrap();
    let mirror = sim_devices(&provider, "d", 10..12, 128 << 20);
    let special = sim_devices(&provider, "d", 12..14, 64 << 20);
    let log = sim_devices(&provider, "d", 14..15, 64 << 20);
    let spare = sim_devices(&provider, "d", 15..16, 128 << 20);
    let add = CreateSpec {
        tops: vec![top(TopLayout::Mirror, &mirror)],
        specials: vec![top(TopLayout::Mirror, &special)],
        logs: vec![top(TopLayout::Disk, &log)],
        spares: spare.clone(),
        ..CreateSpec::one_top("tank", TopLayout::Disk, vec![])
    };
    let before = images(&provider);
    let layout = engine
        .add_vdevs("tank", &add, true, "pool add -n")
        .unwrap()
        .unwrap();
    assert_eq!(images(&provider), before, "add -n changes nothing");
    assert_eq!(
        child_names(&layout),
        ["raidz1-0", "mirror", "special", "logs", "spares"]
    );
    engine
        .add_vdevs("tank", &add, false, "pool add tank ...")
        .unwrap();
    let status = engine.status("tank").unwrap();
    assert_eq!(
        child_names(&status.config),
        ["raidz1-0", "mirror-1", "special", "logs"]
    );
    assert_eq!(status.spares.len(), 1);
    for i in 0..8 {
        write_file(&engine, fs, &format!("after{i}"), 1 << 20);
    }
    engine.sync_pool("tank").unwrap();
    let blocks = check::reachable_blocks(&engine, "tank").unwrap();
    let on = |v: u32| blocks.iter().filter(|b| vdevs_of(b).contains(&v)).count();
    assert!(on(1) > 0, "the new data mirror takes data");
    // Ids: data first, then log, then special (CreateSpec::all_tops).
    assert_eq!(on(2), 0, "the log device holds no committed block");
    assert!(on(3) > 0, "the new special vdev takes metadata");
    let history = engine.history("tank").unwrap();
    assert!(history.iter().any(|h| h.command == "pool add tank ..."));
    check::verify_pool(&engine, "tank").unwrap();
    engine.export_pool("tank", false).unwrap();
    let engine = HOST.import(&provider, &ImportOptions::default()).unwrap();
    let again = engine.status("tank").unwrap();
    // The same tree; allocated bytes move with the txgs export and import commit.
    assert_eq!(without_space(again.config), without_space(status.config));
    assert_eq!(again.state, "ONLINE");
    check::verify_pool(&engine, "tank").unwrap();
}

/// `node` with every vdev's `space` left out.
fn without_space(mut node: VdevNode) -> VdevNode {
    node.space = None;
    node.children = node.children.into_iter().map(without_space).collect();
    node
}

/// The refused adds of [`refused_adds_leave_every_device_untouched`] with the text each
/// refusal must contain.
fn refused_add_cases(spare: &[String], small: &str) -> Vec<(CreateSpec, &'static str)> {
    let base = CreateSpec {
        tops: Vec::new(),
        ..CreateSpec::one_top("tank", TopLayout::Disk, vec![])
    };
    vec![
        (
            CreateSpec {
                tops: vec![top(
                    TopLayout::Mirror,
                    &[spare[0].clone(), spare[0].clone()],
                )],
                ..base.clone()
            },
            "more than once",
        ),
        (
            CreateSpec {
                tops: vec![top(TopLayout::Disk, &["/sim/d0".into()])],
                force: true,
                ..base.clone()
            },
            "device '/sim/d0' is already in this pool",
        ),
        (
            CreateSpec {
                spares: vec![small.to_string()],
                ..base.clone()
            },
            "too small",
        ),
        (
            CreateSpec {
                logs: vec![top(TopLayout::Disk, &["/sim/none".into()])],
                ..base.clone()
            },
            "cannot open",
        ),
        (
            CreateSpec {
                tops: vec![top(TopLayout::Disk, &spare[..1])],
                ..base.clone()
            },
            "mismatched replication level: pool uses raidz1 and new vdev is disk",
        ),
        (
            CreateSpec {
                logs: vec![top(TopLayout::Raidz(1), spare)],
                ..base.clone()
            },
            "not allowed in a log section",
        ),
        (base.clone(), "no vdevs given"),
    ]
}

/// Goal: refused adds change nothing on any device: a device twice, one already in the
/// pool, one too small, a missing path, less redundancy without -f, a raidz log.
#[test]
fn refused_adds_leave_every_device_untouched() {
    let (provider, engine) = pool(false);
    let spare = sim_devices(&provider, "d", 10..12, 128 << 20);
    let small = "/sim/small".to_string();
    provider.insert(
        &small,
        SimDevice::new(&small, 1 << 20, FaultPlan::default()),
    );
    let before = images(&provider);
    let cases = refused_add_cases(&spare, &small);
    for (spec, expected) in cases {
        let err = engine.add_vdevs("tank", &spec, false, "add").unwrap_err();
        assert!(err.to_string().contains(expected), "{expected}: {err}");
        let err = engine.add_vdevs("tank", &spec, true, "add -n").unwrap_err();
        assert!(err.to_string().contains(expected), "-n {expected}: {err}");
        assert_eq!(images(&provider), before, "refused add ({expected}) wrote");
    }
    assert_eq!(engine.status("tank").unwrap().config.children.len(), 1);
}

/// Goal: remove takes an unused spare and a log device (clearing their labels, so they can
/// be used again), an fsync'd record that was on the log is not lost, and data and special
/// vdevs are refused with a line saying evacuation is not supported yet.
#[test]
fn remove_spare_and_log_refuse_data_and_special() {
    let (provider, engine) = pool(true);
    let spare = sim_devices(&provider, "d", 10..11, 128 << 20);
    let log = sim_devices(&provider, "d", 11..12, 64 << 20);
    let add = CreateSpec {
        spares: spare.clone(),
        logs: vec![top(TopLayout::Disk, &log)],
        ..CreateSpec::one_top("tank", TopLayout::Disk, vec![])
    };
    let add = CreateSpec {
        tops: Vec::new(),
        ..add
    };
    engine.add_vdevs("tank", &add, false, "add").unwrap();
    let fs = dataset(&engine, "tank/fs", &[]);
    write_file(&engine, fs, "first", 4096);
    engine.fs_sync("tank", fs).unwrap();
    write_file(&engine, fs, "logged", 4096);
    engine.fs_sync("tank", fs).unwrap();
    let before = images(&provider);
    for (name, expected) in [
        ("raidz1-0", "needs device evacuation"),
        (
            "mirror-1",
            "removing a special top-level vdev needs device evacuation",
        ),
        (
            "/sim/d0",
            "only hot spares, cache and log devices can be removed",
        ),
        ("/sim/nothing", "no such device in pool"),
    ] {
        let err = engine.remove_vdev("tank", name, "remove").unwrap_err();
        assert!(err.to_string().contains(expected), "{name}: {err}");
        assert_eq!(images(&provider), before, "refused remove of {name} wrote");
    }
    engine
        .remove_vdev("tank", &spare[0], "pool remove tank spare")
        .unwrap();
    assert!(engine.status("tank").unwrap().spares.is_empty());
    engine
        .remove_vdev("tank", &log[0], "pool remove tank log")
        .unwrap();
    let status = engine.status("tank").unwrap();
    assert_eq!(child_names(&status.config), ["raidz1-0", "special"]);
    check::verify_pool(&engine, "tank").unwrap();
    engine.export_pool("tank", false).unwrap();
    after_removal(&provider, &spare[0], &log[0]);
}

/// The end of [`remove_spare_and_log_refuse_data_and_special`]: after import the fsync'd file
/// is there, and the removed devices make a new pool without -f.
fn after_removal(provider: &Arc<SimProvider>, spare: &str, log: &str) {
    let engine = HOST.import(provider, &ImportOptions::default()).unwrap();
    let fs = engine.find_dataset("tank/fs").unwrap().1;
    assert!(
        in_root_dir(&engine, fs, b"logged"),
        "the fsync'd file survives the log device's removal"
    );
    check::verify_pool(&engine, "tank").unwrap();
    // The removed devices carry no label: a new pool may take them without -f.
    let reuse = CreateSpec::one_top("again", TopLayout::Mirror, vec![spare.into(), log.into()]);
    engine
        .create_pool(&reuse, &CreateOptions::default())
        .unwrap();
}

/// Goal: losing the special vdev beyond its redundancy loses the pool, and import says so
/// by naming the special vdev; within its redundancy the pool imports degraded.
#[test]
fn a_lost_special_vdev_stops_the_import() {
    let (provider, engine) = pool(true);
    let fs = dataset(&engine, "tank/fs", &[]);
    write_file(&engine, fs, "f", 64 << 10);
    engine.export_pool("tank", false).unwrap();
    let gone = provider.remove("/sim/d3").unwrap();
    let engine = HOST.import(&provider, &ImportOptions::default()).unwrap();
    assert_eq!(engine.status("tank").unwrap().state, "DEGRADED");
    engine.export_pool("tank", false).unwrap();
    provider.remove("/sim/d4").unwrap();
    let engine = HOST.engine(&provider);
    let listed = engine.importable(&["/sim".into()]);
    assert_eq!(listed[0].state, "UNAVAIL");
    assert!(
        listed[0]
            .status
            .as_deref()
            .unwrap_or("")
            .contains("special vdev"),
        "{:?}",
        listed[0].status
    );
    let err = import_tank(&engine, &ImportOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains("the special vdev holding the pool's metadata is missing"),
        "{err}"
    );
    drop(gone);
}

/// Goal: a read-only pool refuses `add` and `remove` without writing a byte (ZFS refuses
/// changes to a read-only pool too).
#[test]
fn a_read_only_pool_refuses_add_and_remove() {
    let (provider, engine) = pool(false);
    engine.export_pool("tank", false).unwrap();
    let options = ImportOptions {
        readonly: true,
        ..ImportOptions::default()
    };
    let engine = HOST.import(&provider, &options).unwrap();
    let spare = sim_devices(&provider, "d", 10..11, 128 << 20);
    let before = images(&provider);
    let add = CreateSpec {
        tops: Vec::new(),
        spares: spare.clone(),
        ..CreateSpec::one_top("tank", TopLayout::Disk, vec![])
    };
    for dry_run in [false, true] {
        let err = engine.add_vdevs("tank", &add, dry_run, "add").unwrap_err();
        assert!(err.to_string().contains("read-only"), "{err}");
    }
    let err = engine.remove_vdev("tank", &spare[0], "remove").unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
    assert_eq!(
        images(&provider),
        before,
        "a refusal on a read-only pool wrote"
    );
}

/// A device that fails every operation once a shared budget of writes and flushes runs
/// out: the instant the power goes (the pool tests' `PowerCut`, here for the engine).
#[derive(Debug)]
struct PowerCut {
    inner: Arc<SimDevice>,
    budget: Arc<std::sync::atomic::AtomicI64>,
}

impl PowerCut {
    fn spend(&self) -> Result<(), tarn_device::DeviceError> {
        let left = self
            .budget
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        if left <= 0 {
            return Err(tarn_device::DeviceError::Gone);
        }
        Ok(())
    }
}

impl tarn_device::Device for PowerCut {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), tarn_device::DeviceError> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), tarn_device::DeviceError> {
        self.spend()?;
        self.inner.write_at(offset, data)
    }
    fn flush(&self) -> Result<(), tarn_device::DeviceError> {
        self.spend()?;
        self.inner.flush()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), tarn_device::DeviceError> {
        self.inner.discard(offset, len)
    }
    fn path(&self) -> &str {
        self.inner.path()
    }
}

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

/// One run of [`remove_log_then_power_cut_at_every_step`]: the power goes after `k` device
/// operations of the removal. Returns the top-level sections after import and the
/// operations the removal spent.
fn remove_log_with_cut(k: i64) -> (usize, i64) {
    let sims = Arc::new(SimProvider::new());
    let mut data = sim_devices_with(&sims, "d", 0..4, 64 << 20, |i| FaultPlan {
        seed: i as u64,
        drop_on_crash: tarn_device::PER_MILLION / 2,
        torn_on_crash: tarn_device::PER_MILLION / 4,
        ..FaultPlan::default()
    });
    let log = data.split_off(3);
    let budget = Arc::new(std::sync::atomic::AtomicI64::new(i64::MAX));
    let provider = Arc::new(PowerCutProvider {
        inner: Arc::clone(&sims),
        budget: Arc::clone(&budget),
    });
    let spec = CreateSpec {
        logs: vec![top(TopLayout::Disk, &log)],
        ..CreateSpec::one_top("tank", TopLayout::Raidz(1), data)
    };
    let engine = HOST.create_tank(&provider, &spec, &[]);
    let fs = dataset(&engine, "tank/fs", &[]);
    write_file(&engine, fs, "first", 4096);
    engine.fs_sync("tank", fs).unwrap();
    write_file(&engine, fs, "logged", 4096);
    engine.fs_sync("tank", fs).unwrap();
    budget.store(k, std::sync::atomic::Ordering::SeqCst);
    let _ = engine.remove_vdev("tank", "/sim/d3", "remove");
    let spent = k - budget.load(std::sync::atomic::Ordering::SeqCst);
    drop(engine);
    crash_all(&sims);
    let engine = HOST
        .import(&sims, &ImportOptions::default())
        .unwrap_or_else(|e| panic!("cut after {k}: import: {e}"));
    check::verify_pool(&engine, "tank").unwrap_or_else(|e| panic!("cut after {k}: {e}"));
    let fs = engine.find_dataset("tank/fs").unwrap().1;
    assert!(
        in_root_dir(&engine, fs, b"logged"),
        "cut after {k}: the fsync'd file is gone"
    );
    let tops = engine.status("tank").unwrap().config.children.len();
    (tops, spent)
}

/// Goal: removing a log device is crash-safe. A power cut at every device operation of the
/// removal (its drain txgs, the condensed space log, the txg that drops the device, the
/// label clearing) leaves a pool that imports, verifies, still has the file whose record
/// was on the log, and has the log device or not. Method: count the removal's operations,
/// then for each k cut after k operations, drop or tear every unflushed
/// write, import with a new engine, check.
#[test]
fn remove_log_then_power_cut_at_every_step() {
    let run = remove_log_with_cut;
    let (tops, ops) = run(1 << 40);
    assert_eq!(tops, 1, "without a cut the log device is gone");
    assert!(ops > 10, "{ops} operations");
    let mut seen = std::collections::BTreeSet::new();
    for k in 0..ops {
        seen.insert(run(k).0);
    }
    assert_eq!(seen.len(), 2, "both outcomes seen: {seen:?}");
}
