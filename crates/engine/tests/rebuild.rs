//! Sequential resilver (`replace -s`) on simulated devices.
//!
//! Goal: a sequential resilver fills the new device of a mirror with exactly the allocated
//! ranges, then a verifying scrub starts by itself and repairs what the raw copy carried over
//! from a damaged source; raidz is refused and nothing changes.
//! Method: mirrors of 128 MiB `SimDevice`s with random object data; the proof that the new
//! device holds the right bytes is to take every other side away and read everything back.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;

use common::{PLAIN_NOV_22_2026, check_objects, finish_scan, images, sim_devices, write_object};
use tarn_base::ObjectId;
use tarn_engine::{
    CreateSpec, Engine, EngineError, ScanFunction, ScanProgress, ScanState, SimProvider, TopLayout,
};

const DEVICE_SIZE: u64 = 128 << 20;

struct Rig {
    provider: Arc<SimProvider>,
    engine: Engine,
    objects: Vec<(ObjectId, Vec<u8>)>,
}

/// A pool `tank` of `count` devices `/sim/d*` in `layout` with random data, and a fresh
/// device `/sim/n0`.
fn rig(layout: TopLayout, count: usize) -> Rig {
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..count, DEVICE_SIZE);
    sim_devices(&provider, "n", 0..1, DEVICE_SIZE);
    let spec = CreateSpec::one_top("tank", layout, names);
    let engine = PLAIN_NOV_22_2026.create_tank(&provider, &spec, &[]);
    let objects = (0..4)
        .map(|seed| write_object(&engine, 128 << 10, seed, 2 << 20))
        .collect();
    Rig {
        provider,
        engine,
        objects,
    }
}

impl Rig {
    /// Steps until the running scan stops; returns its last record.
    fn finish(&self) -> ScanProgress {
        finish_scan(&self.engine, 4 << 20)
    }

    fn check_data(&self) {
        check_objects(&self.engine, &self.objects);
    }

    fn scan_line(&self) -> String {
        self.engine.status("tank").unwrap().scan.unwrap()
    }
}

#[test]
fn sequential_replace_copies_the_allocated_ranges_then_verifies() {
    let rig = rig(TopLayout::Mirror, 2);
    let allocated = rig.engine.list(&[]).unwrap()[0].allocated;
    rig.engine
        .replace_sequential("tank", "/sim/d1", Some("/sim/n0"), "pool replace -s")
        .unwrap();
    assert!(
        rig.scan_line()
            .starts_with("resilver (mirror-0) in progress since "),
        "{}",
        rig.scan_line()
    );
    let rebuilt = rig.finish();
    assert_eq!(
        (rebuilt.function, rebuilt.sequential, rebuilt.errors),
        (ScanFunction::Resilver, true, 0)
    );
    // Every allocated byte of the mirror, once, and nothing else (the replace's own txg
    // allocated a little more metadata than the figure taken before it).
    assert_eq!(rebuilt.repaired, rebuilt.to_examine);
    assert!(
        (allocated..allocated + (1 << 20)).contains(&rebuilt.repaired),
        "{} vs {allocated}",
        rebuilt.repaired
    );
    let verify = rig.engine.scan_progress("tank").unwrap().unwrap();
    assert_eq!(
        (verify.function, verify.state, verify.sequential),
        (ScanFunction::Scrub, ScanState::Scanning, true)
    );
    let verified = rig.finish();
    assert_eq!((verified.errors, verified.repaired), (0, 0));
    assert!(
        rig.scan_line()
            .starts_with("scrub (after a sequential resilver) repaired 0B in "),
        "{}",
        rig.scan_line()
    );
    let events: Vec<String> = rig
        .engine
        .events(Some("tank"), 0, false)
        .into_iter()
        .map(|e| e.class)
        .collect();
    let tail: Vec<&str> = events.iter().rev().take(3).map(String::as_str).collect();
    assert_eq!(
        tail,
        [
            "sysevent.fs.zfs.scrub_finish",
            "sysevent.fs.zfs.scrub_start",
            "sysevent.fs.zfs.resilver_finish"
        ]
    );
    // d1 left the pool; with d0 gone too, the new device alone holds everything.
    rig.provider.get("/sim/d0").unwrap().set_gone(true);
    rig.check_data();
}

#[test]
fn the_verifying_scrub_repairs_what_the_copy_carried_over() {
    let rig = rig(TopLayout::Mirror, 3);
    // Silent damage on the side the copy reads from: the copy spreads it to the new device.
    rig.provider
        .get("/sim/d0")
        .unwrap()
        .rot(4 << 20, DEVICE_SIZE / 2)
        .unwrap();
    rig.engine
        .replace_sequential("tank", "/sim/d1", Some("/sim/n0"), "pool replace -s")
        .unwrap();
    let rebuilt = rig.finish();
    assert_eq!(
        (rebuilt.function, rebuilt.errors),
        (ScanFunction::Resilver, 0)
    );
    let verified = rig.finish();
    assert_eq!(verified.function, ScanFunction::Scrub);
    assert_eq!(verified.errors, 0);
    assert!(verified.repaired > 0, "the scrub found the copied damage");
    for gone in ["/sim/d0", "/sim/d2"] {
        rig.provider.get(gone).unwrap().set_gone(true);
    }
    rig.check_data();
}

#[test]
fn sequential_replace_is_refused_for_raidz() {
    let rig = rig(TopLayout::Raidz(1), 3);
    let before = images(&rig.provider);
    let error = rig
        .engine
        .replace_sequential("tank", "/sim/d1", Some("/sim/n0"), "pool replace -s")
        .unwrap_err();
    assert!(matches!(error, EngineError::InvalidArgument(_)), "{error}");
    assert_eq!(
        error.to_string(),
        "sequential resilver (-s) is only supported for mirror and single-disk vdevs; \
         replace a raidz device without -s"
    );
    assert!(
        images(&rig.provider) == before,
        "a refused replace changed a device"
    );
}

fn draid() -> TopLayout {
    TopLayout::Draid {
        parity: 2,
        data: 4,
        spares: 1,
    }
}

fn spare_state(rig: &Rig) -> String {
    let status = rig.engine.status("tank").unwrap();
    let spare = status
        .spares
        .iter()
        .find(|s| s.name == "draid2-0-0")
        .unwrap();
    spare.state.clone()
}

/// Goal: on dRAID a failed child is replaced by the distributed spare automatically (the hot
/// spare machinery), rebuilt sequentially, verified by a scrub that starts by itself, and
/// afterwards every byte survives two more lost children. Method: draid2:4d:1s:11c on
/// simulated devices, one device vanishes, `fault_check`, steps to the end.
#[test]
fn draid_distributed_spare_steps_in_and_rebuilds_sequentially() {
    let rig = rig(draid(), 11);
    assert_eq!(spare_state(&rig), "AVAIL");
    rig.provider.get("/sim/d3").unwrap().set_gone(true);
    assert_eq!(rig.engine.fault_check(), vec!["tank".to_string()]);
    assert_eq!(spare_state(&rig), "INUSE");
    // The spare's state change is an event, as for a traditional spare.
    let events = rig.engine.events(Some("tank"), 0, false);
    assert!(
        events.iter().any(|e| {
            e.class == "sysevent.fs.zfs.statechange"
                && e.vdev_path == "draid2-0-0"
                && e.payload
                    .contains(&("vdev_state".to_string(), "INUSE".to_string()))
        }),
        "{events:?}"
    );
    assert!(
        rig.scan_line()
            .starts_with("resilver (draid2:4d:11c:1s-0) in progress since "),
        "{}",
        rig.scan_line()
    );
    let rebuilt = rig.finish();
    assert_eq!(
        (rebuilt.function, rebuilt.sequential, rebuilt.errors),
        (ScanFunction::Resilver, true, 0)
    );
    assert!(rebuilt.repaired > 0);
    let verified = rig.finish();
    assert_eq!(verified.function, ScanFunction::Scrub);
    assert_eq!((verified.errors, verified.repaired), (0, 0));
    for name in ["/sim/d5", "/sim/d8"] {
        rig.provider.get(name).unwrap().set_gone(true);
    }
    rig.check_data();
}

/// Goal: `replace POOL OLD draid2-0-0` puts the distributed spare in by name; replacing the
/// failed device with a new one later moves the spare's contents there and frees the spare
/// (AVAIL again); the new device then holds the failed child's share (two more children
/// lost, every byte read). A second replace onto a spare in use is refused.
#[test]
fn draid_replace_onto_the_spare_then_onto_a_new_device() {
    let rig = rig(draid(), 11);
    rig.provider.get("/sim/d3").unwrap().set_gone(true);
    rig.engine
        .replace("tank", "/sim/d3", Some("draid2-0-0"), "pool replace")
        .unwrap();
    assert_eq!(spare_state(&rig), "INUSE");
    let rebuilt = rig.finish();
    assert_eq!((rebuilt.sequential, rebuilt.errors), (true, 0));
    rig.finish();
    let again = rig
        .engine
        .replace("tank", "/sim/d4", Some("draid2-0-0"), "pool replace");
    assert!(
        matches!(again, Err(EngineError::InvalidArgument(_))),
        "{again:?}"
    );
    rig.engine
        .replace("tank", "/sim/d3", Some("/sim/n0"), "pool replace")
        .unwrap();
    let moved = rig.finish();
    assert_eq!((moved.function, moved.errors), (ScanFunction::Resilver, 0));
    assert_eq!(spare_state(&rig), "AVAIL");
    for name in ["/sim/d5", "/sim/d8"] {
        rig.provider.get(name).unwrap().set_gone(true);
    }
    rig.check_data();
}
