//! Metadata outlives the data it describes (issue 17): on a pool of one raidz1 of four
//! devices, garbage over the same region of two devices (beyond parity there) must never
//! make the pool unimportable, wherever the region lies. Pool-wide metadata (the MOS, the
//! space log) has three copies and dataset metadata two, at least 1/8 of the vdev apart, so
//! one region holds at most one copy of any of it; only data blocks in the region are lost,
//! and their reads fail (never wrong bytes) while every other object reads back.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{PLAIN, images, import_tank, sim_devices, write_object};
use tarn_device::{FaultPlan, SimDevice};
use tarn_engine::{CreateSpec, ImportOptions, SimProvider, TopLayout};

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
