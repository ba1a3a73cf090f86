//! Metadata outlives the data it describes (issue 17): on a pool of one raidz1 of four
//! devices, garbage over the same region of two devices (beyond parity there) must never
//! make the pool unimportable, wherever the region lies. Pool-wide metadata (the MOS, the
//! space log) has three copies and dataset metadata two, at least 1/8 of the vdev apart, so
//! one region holds at most one copy of any of it; only data blocks in the region are lost,
//! and their reads fail (never wrong bytes) while every other object reads back.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{PLAIN, check_objects, images, import_tank, scrub_tank, sim_devices, write_object};
use tarn_device::{FaultPlan, SimDevice};
use tarn_engine::{CreateSpec, ImportOptions, SimProvider, TopLayout, TopSpec, check};

const DEVICE: u64 = 64 << 20;
/// Regions the device is cut into; each run damages one of them on two devices.
const REGIONS: u64 = 16;

/// A copy of the exported pool's devices with `[start, start + len)` overwritten by garbage
/// on the first two.
fn damaged(images: &[(String, Vec<u8>)], start: u64, len: u64) -> Arc<SimProvider> {
    let provider = Arc::new(SimProvider::new());
    for (i, (path, image)) in images.iter().enumerate() {
        let device = SimDevice::from_image(path, image, FaultPlan::default());
        if i < 2 {
            device.rot(start, len).unwrap();
        }
        provider.insert(path, device);
    }
    provider
}

// DESCRIPTION: wherever a region of 1/16 of the devices is destroyed on two devices of a
// raidz1 of four, the pool imports, every object reads back right or fails, and most read
// back.
// STRATEGY: twelve 1 MiB objects, each committed; export; for each of the 16 regions, a copy
// of the images with garbage there on two devices, imported by a new engine.
#[test]
fn a_damaged_region_never_costs_the_pool() {
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..4, DEVICE);
    let spec = CreateSpec::one_top("tank", TopLayout::Raidz(1), names);
    let engine = PLAIN.create_tank(&provider, &spec, &[]);
    let objects: Vec<_> = (0..12)
        .map(|i| write_object(&engine, 128 << 10, 100 + i, 1 << 20))
        .collect();
    engine.export_pool("tank", false).unwrap();
    let images = images(&provider);
    let len = DEVICE / REGIONS;
    let mut lost_somewhere = false;
    for region in 0..REGIONS {
        let provider = damaged(&images, region * len, len);
        let engine = PLAIN.engine(&provider);
        if let Err(e) = import_tank(&engine, &ImportOptions::default()) {
            panic!("region {region}: import refused: {e}");
        }
        let mut intact = 0;
        for (object, data) in &objects {
            let mut buf = vec![0u8; data.len()];
            match engine.object_read("tank", *object, 0, &mut buf) {
                Ok(()) => {
                    assert!(buf == *data, "region {region}: {object:?} read wrong bytes");
                    intact += 1;
                }
                Err(_) => lost_somewhere = true,
            }
        }
        assert!(
            intact >= objects.len() / 2,
            "region {region}: only {intact} intact"
        );
    }
    assert!(
        lost_somewhere,
        "some region held data (the damage was beyond parity)"
    );
}

/// One pool of the damage matrix: its top-level vdevs (layout, devices each) and how many
/// devices of the first one a region hits (one more than it tolerates).
struct Shape {
    name: &'static str,
    tops: &'static [(TopLayout, usize)],
    hit: usize,
}

const SHAPES: &[Shape] = &[
    Shape {
        name: "raidz1",
        tops: &[(TopLayout::Raidz(1), 4)],
        hit: 2,
    },
    Shape {
        name: "raidz2",
        tops: &[(TopLayout::Raidz(2), 5)],
        hit: 3,
    },
    Shape {
        name: "raidz3",
        tops: &[(TopLayout::Raidz(3), 6)],
        hit: 4,
    },
    Shape {
        name: "mirror",
        tops: &[(TopLayout::Mirror, 2)],
        hit: 2,
    },
    Shape {
        name: "2x raidz1",
        tops: &[(TopLayout::Raidz(1), 3), (TopLayout::Raidz(1), 3)],
        hit: 2,
    },
];

/// A pool of `shape` on new sim devices of [`DEVICE`] bytes (`/sim/d0`.. in top order).
fn create_shape(provider: &Arc<SimProvider>, shape: &Shape) -> tarn_engine::Engine {
    let mut first = 0;
    let mut spec = CreateSpec::one_top("tank", TopLayout::Disk, Vec::new());
    spec.tops = shape
        .tops
        .iter()
        .map(|&(layout, count)| {
            let devices = sim_devices(provider, "d", first..first + count, DEVICE);
            first += count;
            TopSpec { layout, devices }
        })
        .collect();
    PLAIN.create_tank(provider, &spec, &[])
}

// DESCRIPTION: damage beyond parity in one region, swept over the whole device (labels,
// uberblocks, space logs, the MOS and dataset tree, data) for raidz1/2/3, a mirror and two
// raidz1 tops, at two region sizes and two seeds: the pool always imports writable; every
// object reads back exactly or fails (never wrong bytes); a scrub lists exactly the objects
// that fail, and no intact one; the pool imports again afterwards.
// STRATEGY: per shape and seed, ten objects of 256 KiB to 1 MiB committed, export, then for
// each region a copy of the images with garbage there on the first `hit` devices.
#[test]
fn damage_beyond_parity_loses_only_what_it_hits_and_lists_it() {
    for shape in SHAPES {
        let mut lost = 0;
        for seed in [1u64, 2] {
            let provider = Arc::new(SimProvider::new());
            let engine = create_shape(&provider, shape);
            let objects: Vec<_> = (0..10)
                .map(|i| {
                    let len = (256 << 10) * (1 + (seed as usize + i) % 4);
                    write_object(&engine, 128 << 10, seed * 100 + i as u64, len)
                })
                .collect();
            engine.export_pool("tank", false).unwrap();
            let images = images(&provider);
            for (regions, step) in [(16u64, 3u64), (8, 1)] {
                let len = DEVICE / regions;
                for region in (seed % step..regions).step_by(step as usize) {
                    let case = format!("{} seed {seed}: region {region} of {regions}", shape.name);
                    lost += damaged_case(&images, shape.hit, region * len, len, &objects, &case);
                }
            }
        }
        assert!(lost > 0, "{}: some region held data", shape.name);
    }
}

/// One case of the matrix above; returns how many objects it lost.
fn damaged_case(
    images: &[(String, Vec<u8>)],
    hit: usize,
    start: u64,
    len: u64,
    objects: &[(tarn_base::ObjectId, Vec<u8>)],
    case: &str,
) -> usize {
    let provider = Arc::new(SimProvider::new());
    for (path, image) in images {
        let device = SimDevice::from_image(path, image, FaultPlan::default());
        let index: usize = path.trim_start_matches("/sim/d").parse().unwrap();
        if index < hit {
            device.rot(start, len).unwrap();
        }
        provider.insert(path, device);
    }
    let engine = PLAIN.engine(&provider);
    if let Err(e) = import_tank(&engine, &ImportOptions::default()) {
        panic!("{case}: import refused: {e}");
    }
    let mut lost = Vec::new();
    for (object, data) in objects {
        let mut buf = vec![0u8; data.len()];
        match engine.object_read("tank", *object, 0, &mut buf) {
            Ok(()) => assert!(buf == *data, "{case}: {object:?} read wrong bytes"),
            Err(_) => lost.push(format!("tank:<object {}>", object.0)),
        }
    }
    let progress = scrub_tank(&engine, 1 << 20);
    assert_eq!(
        progress.errors > 0,
        !lost.is_empty(),
        "{case}: {progress:?}"
    );
    let listed = engine.status("tank").unwrap().errors;
    lost.sort();
    assert_eq!(listed, lost, "{case}: listed errors");
    engine.export_pool("tank", false).unwrap();
    let again = PLAIN.engine(&provider);
    if let Err(e) = import_tank(&again, &ImportOptions::default()) {
        panic!("{case}: import after the scrub refused: {e}");
    }
    lost.len()
}

/// Garbage over every copy of every space-log block of the mirror `tank` exported on
/// `provider` (both sides).
fn destroy_space_log(provider: &SimProvider, space_log: &[tarn_format::BlockPtr]) {
    for bp in space_log {
        for dva in bp.copies() {
            for side in ["/sim/d0", "/sim/d1"] {
                let device = provider.get(side).unwrap();
                device
                    .rot(tarn_format::label::DATA_START + dva.offset, dva.asize)
                    .unwrap();
            }
        }
    }
}

// DESCRIPTION: a pool whose space log is unreadable (every copy of every block destroyed)
// still imports, read-only and writable: the allocation state is rebuilt from the block
// tree, an event says so, every object reads back, space closes exactly after the first
// txg (which writes a new base), new writes never land on live blocks, and the next import
// is an ordinary one.
// STRATEGY: a mirror of two devices (a DVA's offset is the same on both sides), objects
// committed, the space-log chain found by the checker, garbage over it, then imports.
#[test]
fn an_unreadable_space_log_is_rebuilt_from_the_block_tree() {
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..2, DEVICE);
    let spec = CreateSpec::one_top("tank", TopLayout::Mirror, names);
    let engine = PLAIN.create_tank(&provider, &spec, &[]);
    let mut objects: Vec<_> = (0..6)
        .map(|i| write_object(&engine, 128 << 10, 200 + i, 1 << 20))
        .collect();
    let space_log: Vec<_> = check::reachable_blocks(&engine, "tank")
        .unwrap()
        .into_iter()
        .filter(|bp| bp.block_type == tarn_format::BlockType::SpaceLog)
        .collect();
    assert!(!space_log.is_empty());
    engine.export_pool("tank", false).unwrap();
    destroy_space_log(&provider, &space_log);

    let readonly = ImportOptions {
        readonly: true,
        ..ImportOptions::default()
    };
    let engine = PLAIN.engine(&provider);
    import_tank(&engine, &readonly).expect("read-only import without a space log");
    check_objects(&engine, &objects);
    engine.export_pool("tank", false).unwrap();

    let engine = PLAIN.engine(&provider);
    import_tank(&engine, &ImportOptions::default()).expect("import without a space log");
    let events = engine.events(Some("tank"), 0, false);
    let rebuilt = events
        .iter()
        .find(|e| e.class == "sysevent.fs.zfs.space_rebuild")
        .expect("a space_rebuild event");
    assert!(
        rebuilt.payload[0].1.contains("space log"),
        "{:?}",
        rebuilt.payload
    );
    check_objects(&engine, &objects);
    check::verify_pool(&engine, "tank").expect("space closes after the rebuild");
    objects.extend((0..6).map(|i| write_object(&engine, 128 << 10, 300 + i, 1 << 20)));
    check_objects(&engine, &objects);
    check::verify_pool(&engine, "tank").expect("space closes after new writes");
    engine.export_pool("tank", false).unwrap();

    let engine = PLAIN.engine(&provider);
    import_tank(&engine, &ImportOptions::default()).unwrap();
    let events = engine.events(Some("tank"), 0, false);
    assert!(events.iter().all(|e| !e.class.ends_with("space_rebuild")));
    check_objects(&engine, &objects);
    check::verify_pool(&engine, "tank").unwrap();
}

/// Checksum errors the status tree shows on the leaves, summed.
fn leaf_cksum(node: &tarn_engine::status::VdevNode) -> u64 {
    match node.children.is_empty() {
        true => node.cksum,
        false => node.children.iter().map(leaf_cksum).sum(),
    }
}

// DESCRIPTION: damage met by a read is reported at once, not only by a scrub: the read gets
// EIO (never wrong bytes), the leaves count checksum errors, `status -v` names every file
// that failed (by path) and no other, and `events` has data and checksum ereports.
// STRATEGY: twelve 1 MiB files in the root dataset, committed and exported; for each region
// of the devices, garbage there on two of four raidz1 devices, a fresh import, every file
// read once. Runs until some region costs files.
#[test]
fn damage_met_by_a_read_is_reported_at_once() {
    use tarn_engine::FsOp;
    use tarn_engine::posix::{Creds, FileKind};
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..4, DEVICE);
    let spec = CreateSpec::one_top("tank", TopLayout::Raidz(1), names);
    let engine = PLAIN.create_tank(&provider, &spec, &[]);
    let (pool, id) = engine.find_dataset("tank").unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..12u64)
        .map(|i| {
            let mut data = vec![0u8; 1 << 20];
            tarn_base::SeededRng::new(300 + i).fill(&mut data);
            let name = format!("file{i}");
            engine
                .fs_op(&pool, id, FsOp::Write(data.len() as u64), |fs| {
                    let root = fs.root()?;
                    let kind = FileKind::Regular;
                    let attr = fs.mknod(root, name.as_bytes(), kind, 0o644, 0, Creds::default())?;
                    fs.write(attr.ino, 0, &data)
                })
                .unwrap();
            (name, data)
        })
        .collect();
    engine.export_pool("tank", false).unwrap();
    let images = images(&provider);
    let len = DEVICE / REGIONS;
    for region in 0..REGIONS {
        let engine = PLAIN.engine(&damaged(&images, region * len, len));
        import_tank(&engine, &ImportOptions::default()).unwrap();
        let (pool, id) = engine.find_dataset("tank").unwrap();
        let mut lost = Vec::new();
        for (name, data) in &files {
            let read = engine.fs_op(&pool, id, FsOp::Read, |fs| {
                let root = fs.root()?;
                let attr = fs.lookup(root, name.as_bytes())?;
                fs.read(attr.ino, 0, data.len() as u32)
            });
            match read {
                Ok(bytes) => assert!(bytes == *data, "region {region}: {name} read wrong bytes"),
                Err(e) => {
                    assert_eq!(e.errno(), libc::EIO, "region {region}: {name}: {e}");
                    lost.push(format!("/{name}"));
                }
            }
        }
        if lost.is_empty() {
            continue;
        }
        let status = engine.status("tank").unwrap();
        for name in &lost {
            assert!(
                status.errors.iter().any(|e| e.ends_with(name.as_str())),
                "region {region}: {name} not in {:?}",
                status.errors
            );
        }
        assert_eq!(status.errors.len(), lost.len(), "{:?}", status.errors);
        assert!(leaf_cksum(&status.config) > 0, "no checksum error counted");
        let events = engine.events(Some("tank"), 0, false);
        for class in ["ereport.fs.zfs.data", "ereport.fs.zfs.checksum"] {
            assert!(events.iter().any(|e| e.class == class), "no {class} event");
        }
        return;
    }
    panic!("no region held file data");
}
