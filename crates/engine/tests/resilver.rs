//! Replace, attach, detach, resilver and hot spares on simulated devices.
//!
//! Goal: a resilver copies exactly the live data that belongs on the new device (in bytes:
//! the columns of live blocks on that position, plus metadata), misses no block written while
//! it runs, resumes after a crash or an export with renamed devices, and leaves a pool whose
//! data survives the loss of another device; a device that vanishes or keeps failing is
//! replaced by a hot spare without anyone asking; every refused command changes nothing.
//! Method: raidz1 and mirror pools of 128 MiB `SimDevice`s with random object data; the
//! proof that the new device holds the right bytes is to make another device of the raidz
//! disappear afterwards and read everything back (then nothing but parity and the new
//! device can supply the missing columns), then scrub.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;

use common::{
    Host, PLAIN_NOV_22_2026, check_objects, child_names, crash_all, exported_tank, finish_scan,
    images, import_tank, scrub_tank, sim_devices,
};
use tarn_base::ObjectId;
use tarn_device::{FaultPlan, SimDevice};
use tarn_engine::{
    CreateSpec, Engine, EngineError, ImportOptions, ScanFunction, ScanProgress, ScanState,
    SimProvider, TopLayout, VdevNode,
};
use tarn_objects::visit_object_set;
use tarn_vdev::RaidzMap;

const DEVICE_SIZE: u64 = 128 << 20;
const ASHIFT: u8 = 12;
const HOST: Host = PLAIN_NOV_22_2026;

struct Rig {
    provider: Arc<SimProvider>,
    engine: Engine,
    objects: Vec<(ObjectId, Vec<u8>)>,
}

/// A pool `tank` of `count` devices `/sim/d*` in `layout`, with `spares` hot spares
/// `/sim/s*`, and spare devices `/sim/n*` (not in the pool) for replacing.
fn rig(layout: TopLayout, count: usize, spares: usize) -> Rig {
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..count, DEVICE_SIZE);
    let spare_names = sim_devices(&provider, "s", 0..spares, DEVICE_SIZE);
    sim_devices(&provider, "n", 0..2, DEVICE_SIZE);
    provider.insert(
        "/sim/small",
        SimDevice::new("/sim/small", DEVICE_SIZE / 2, FaultPlan::default()),
    );
    let spec = CreateSpec {
        spares: spare_names,
        ashift: ASHIFT,
        ..CreateSpec::one_top("tank", layout, names)
    };
    let engine = HOST.create_tank(&provider, &spec, &[]);
    Rig {
        provider,
        engine,
        objects: Vec::new(),
    }
}

impl Rig {
    fn write_object(&mut self, seed: u64, len: usize) {
        let written = common::write_object(&self.engine, 128 << 10, seed, len);
        self.objects.push(written);
    }

    fn check_data(&self) {
        check_objects(&self.engine, &self.objects);
    }

    fn device(&self, path: &str) -> Arc<SimDevice> {
        self.provider.get(path).unwrap()
    }

    fn step(&self, bytes: u64) -> ScanProgress {
        self.engine.scrub_step("tank", bytes).unwrap().unwrap()
    }

    fn finish(&self) -> ScanProgress {
        finish_scan(&self.engine, 1 << 20)
    }

    fn scrub(&self) -> ScanProgress {
        scrub_tank(&self.engine, 1 << 20)
    }

    fn config(&self) -> VdevNode {
        self.engine.status("tank").unwrap().config.children[0].clone()
    }

    fn import(&mut self) {
        self.engine = HOST.engine(&self.provider);
        import_tank(&self.engine, &ImportOptions::default()).unwrap();
    }

    /// Bytes of the data blocks of the root dataset that live on child position `child` of
    /// a raidz1 of `width` (read from a read-only import of the exported pool).
    fn data_bytes_on(&self, child: usize, width: usize) -> u64 {
        let (pool, data_root) = exported_tank(&self.provider, &HOST);
        let reader = pool.reader();
        let mut bytes = 0u64;
        visit_object_set(&reader, &data_root, &mut |bp, _| {
            let padded = u64::from(bp.psize).next_multiple_of(1 << ASHIFT);
            for dva in bp.copies() {
                let map = RaidzMap::new(width, 1, ASHIFT, dva.offset, padded);
                for (c, column) in map.columns.iter().enumerate() {
                    if column.child == child {
                        bytes += map.column_bytes(c) as u64;
                    }
                }
            }
        })
        .unwrap();
        bytes
    }
}

/// Replace a raidz1 member holding data: the resilver writes the live columns of that
/// position (plus metadata), the replacing vdev collapses, and the new device alone can
/// stand in for the old one (another device vanishes and every byte still reads back).
#[test]
fn replace_resilvers_live_data_only_and_collapses() {
    let mut rig = rig(TopLayout::Raidz(1), 4, 0);
    rig.write_object(1, 6 << 20);
    rig.write_object(2, 3 << 20);
    rig.engine.export_pool("tank", false).unwrap();
    let expected = rig.data_bytes_on(1, 4);
    rig.import();
    rig.engine
        .replace(
            "tank",
            "d1",
            Some("/sim/n0"),
            "pool replace tank d1 /sim/n0",
        )
        .unwrap();
    let config = rig.config();
    assert_eq!(config.children[1].name, "replacing-1");
    assert_eq!(
        child_names(&config.children[1]),
        vec!["/sim/d1".to_string(), "/sim/n0".to_string()]
    );
    assert_eq!(
        config.children[1].children[1].note.as_deref(),
        Some("(resilvering)")
    );
    let done = rig.finish();
    assert_eq!(done.function, ScanFunction::Resilver);
    assert_eq!((done.state, done.errors), (ScanState::Finished, 0));
    assert!(
        done.repaired >= expected && done.repaired <= expected + (1 << 20),
        "resilvered {} bytes, live data on the device {expected}",
        done.repaired
    );
    let status = rig.engine.status("tank").unwrap();
    let scan = status.scan.unwrap();
    assert!(scan.starts_with("resilvered "), "{scan}");
    assert!(
        scan.ends_with("with 0 errors on Sun Nov 22 14:30:00 2026"),
        "{scan}"
    );
    assert_eq!(
        child_names(&rig.config()),
        vec!["/sim/d0", "/sim/n0", "/sim/d2", "/sim/d3"]
    );
    assert_eq!(status.state, "ONLINE");
    // The replaced device's labels are wiped: no import will take it for a member.
    assert!(
        tarn_pool::read_labels(rig.device("/sim/d1").as_ref())
            .config
            .is_none()
    );
    rig.device("/sim/d2").set_gone(true);
    rig.check_data();
    rig.device("/sim/d2").set_gone(false);
    rig.engine.export_pool("tank", false).unwrap();
    rig.import();
    // d2 missed the export's blocks while it was gone: the scrub repairs them, then no more.
    assert_eq!(rig.scrub().errors, 0);
    let scrub = rig.scrub();
    assert_eq!((scrub.errors, scrub.repaired), (0, 0), "{scrub:?}");
    rig.check_data();
}

/// Blocks written while the resilver runs reach the new device: after the resilver the old
/// device's neighbour vanishes and both the old and the new data read back.
#[test]
fn writes_during_resilver_are_not_missed() {
    let mut rig = rig(TopLayout::Raidz(1), 4, 0);
    rig.write_object(3, 4 << 20);
    rig.engine
        .replace(
            "tank",
            "d3",
            Some("/sim/n0"),
            "pool replace tank d3 /sim/n0",
        )
        .unwrap();
    let first = rig.step(256 << 10);
    assert_eq!(first.state, ScanState::Scanning);
    assert!(first.issued < first.to_examine);
    rig.write_object(4, 3 << 20);
    rig.write_object(5, 1 << 20);
    let done = rig.finish();
    assert_eq!((done.state, done.errors), (ScanState::Finished, 0));
    rig.device("/sim/d0").set_gone(true);
    rig.check_data();
    rig.device("/sim/d0").set_gone(false);
}

/// A crash in the middle of a resilver: the reimported pool still has the replacing vdev and
/// the resilver record with its bookmark, resumes, and finishes with correct data.
#[test]
fn crash_during_resilver_resumes() {
    let mut rig = rig(TopLayout::Raidz(1), 4, 0);
    rig.write_object(6, 6 << 20);
    rig.engine
        .replace(
            "tank",
            "d2",
            Some("/sim/n0"),
            "pool replace tank d2 /sim/n0",
        )
        .unwrap();
    rig.step(512 << 10);
    let before = rig.step(512 << 10);
    rig.engine.sync_pool("tank").unwrap();
    crash_all(&rig.provider);
    rig.import();
    let resumed = rig.engine.scan_progress("tank").unwrap().unwrap();
    assert_eq!(resumed.function, ScanFunction::Resilver);
    assert_eq!(resumed.state, ScanState::Scanning);
    assert_eq!(resumed.bookmark, before.bookmark);
    assert_eq!(rig.config().children[2].name, "replacing-2");
    let done = rig.finish();
    assert_eq!((done.state, done.errors), (ScanState::Finished, 0));
    assert_eq!(
        child_names(&rig.config()),
        vec!["/sim/d0", "/sim/d1", "/sim/n0", "/sim/d3"]
    );
    rig.device("/sim/d1").set_gone(true);
    rig.check_data();
}

/// Export during a resilver, rename every device file, import: found by GUID, resumed from
/// the bookmark, finished.
#[test]
fn export_rename_import_resumes_resilver() {
    let mut rig = rig(TopLayout::Mirror, 2, 0);
    rig.write_object(7, 4 << 20);
    rig.engine
        .attach("tank", "d1", "/sim/n0", "pool attach tank d1 /sim/n0")
        .unwrap();
    let partial = rig.step(256 << 10);
    rig.engine.export_pool("tank", false).unwrap();
    for (name, _) in rig.provider.all() {
        let renamed = name.replace("/sim/", "/sim/moved-");
        assert!(rig.provider.rename(&name, &renamed));
    }
    rig.import();
    let resumed = rig.engine.scan_progress("tank").unwrap().unwrap();
    assert_eq!(
        (resumed.function, resumed.state, resumed.bookmark),
        (
            ScanFunction::Resilver,
            ScanState::Scanning,
            partial.bookmark
        )
    );
    let done = rig.finish();
    assert_eq!(done.errors, 0);
    assert_eq!(
        child_names(&rig.config()),
        vec!["/sim/moved-d0", "/sim/moved-d1", "/sim/moved-n0"]
    );
    rig.device("/sim/moved-d0").set_gone(true);
    rig.device("/sim/moved-d1").set_gone(true);
    rig.check_data();
}

/// attach turns a single disk into a mirror; detach takes it back; the last copy cannot go.
#[test]
fn attach_and_detach() {
    let mut rig = rig(TopLayout::Disk, 1, 0);
    rig.write_object(8, 2 << 20);
    rig.engine
        .attach("tank", "d0", "/sim/n0", "pool attach tank d0 /sim/n0")
        .unwrap();
    assert_eq!(rig.config().kind, "mirror");
    let done = rig.finish();
    assert!(done.repaired >= 2 << 20, "{done:?}");
    rig.device("/sim/d0").set_gone(true);
    rig.check_data();
    rig.device("/sim/d0").set_gone(false);
    rig.engine.clear("tank", None, "pool clear tank").unwrap();
    rig.engine
        .online("tank", "d0", "pool online tank d0")
        .unwrap();
    rig.finish();
    rig.engine
        .detach("tank", "/sim/n0", "pool detach tank /sim/n0")
        .unwrap();
    let config = rig.config();
    assert_eq!(
        (config.name.as_str(), config.kind.as_str()),
        ("/sim/d0", "disk")
    );
    let refused = rig.engine.detach("tank", "d0", "pool detach tank d0");
    assert!(
        matches!(refused, Err(EngineError::InvalidArgument(_))),
        "{refused:?}"
    );
    rig.engine.export_pool("tank", false).unwrap();
    rig.import();
    rig.check_data();
}

/// A device vanishes from an idle pool (the GridPP bench deletes a device file): no access
/// fails, yet the next fault check finds it gone by probing (`Leaf::probe`), takes it out
/// of service, activates the spare and resilvers; the events say so in order, and the
/// resilver's bytes are in its finish event. A spare that vanished is never activated.
#[test]
fn idle_pool_notices_a_vanished_device_by_probing() {
    let mut rig = rig(TopLayout::Raidz(1), 4, 2);
    rig.write_object(11, 4 << 20);
    rig.engine.events(None, 0, true);
    assert_eq!(rig.engine.fault_check(), Vec::<String>::new());
    rig.device("/sim/s0").set_gone(true);
    rig.device("/sim/d1").set_gone(true);
    let refusals = rig.device("/sim/d1").stats().gone_refusals;
    assert_eq!(rig.engine.fault_check(), vec!["tank".to_string()]);
    assert_eq!(
        rig.device("/sim/d1").stats().gone_refusals,
        refusals,
        "the probe made no access"
    );
    let config = rig.config();
    assert_eq!(config.children[1].name, "spare-1");
    assert_eq!(child_names(&config.children[1]), vec!["/sim/d1", "/sim/s1"]);
    let done = rig.finish();
    assert_eq!((done.function, done.errors), (ScanFunction::Resilver, 0));
    let events = rig.engine.events(Some("tank"), 0, false);
    let classes: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.class.as_str(), e.vdev_path.as_str()))
        .collect();
    assert_eq!(
        classes,
        vec![
            ("ereport.fs.zfs.probe_failure", "/sim/d1"),
            ("ereport.fs.zfs.probe_failure", "/sim/s0"),
            ("sysevent.fs.zfs.statechange", "/sim/d1"),
            ("sysevent.fs.zfs.vdev_spare", "/sim/d1"),
            ("sysevent.fs.zfs.resilver_start", ""),
            ("sysevent.fs.zfs.statechange", "/sim/s0"),
            ("sysevent.fs.zfs.statechange", "/sim/s1"),
            ("sysevent.fs.zfs.resilver_finish", ""),
        ]
    );
    // The spares' changes are posted like any device's: s0 went out of service, s1 in use.
    let spare_change = |i: usize| -> Vec<(String, String)> { events[i].payload.clone() };
    assert_eq!(
        spare_change(5),
        vec![
            ("vdev_state".into(), "REMOVED".into()),
            ("vdev_laststate".into(), "AVAIL".into()),
            ("vdev_spare".into(), "true".into())
        ]
    );
    assert_eq!(
        spare_change(6),
        vec![
            ("vdev_state".into(), "INUSE".into()),
            ("vdev_laststate".into(), "AVAIL".into()),
            ("vdev_spare".into(), "true".into())
        ]
    );
    let repaired = events[7]
        .payload
        .iter()
        .find(|(k, _)| k == "scan_bytes_repaired")
        .map(|(_, v)| v.parse::<u64>().unwrap());
    assert_eq!(repaired, Some(done.repaired));
    assert!(done.repaired > 0);
    rig.check_data();
}

/// Every event class of a failure and a return, with payloads, when no spare steps in: a
/// device that fails is reported by `statechange` (REMOVED, from ONLINE) although nothing
/// replaces it; when it is back and onlined, the resilver of what it missed posts
/// `resilver_start` and `resilver_finish` (the start was missing for `online`), and the
/// next look posts `statechange` ONLINE from REMOVED. The bug: `statechange` was posted
/// only beside a spare's activation, so a pool without a free spare never reported it.
#[test]
fn failure_and_return_events_without_a_spare() {
    let mut rig = rig(TopLayout::Raidz(1), 4, 0);
    rig.write_object(21, 2 << 20);
    assert!(rig.engine.fault_check().is_empty());
    rig.engine.events(None, 0, true);
    rig.device("/sim/d3").set_gone(true);
    rig.write_object(22, 2 << 20);
    assert!(rig.engine.fault_check().is_empty(), "no spare to activate");
    rig.device("/sim/d3").set_gone(false);
    rig.engine
        .online("tank", "d3", "pool online tank d3")
        .unwrap();
    let done = rig.finish();
    assert_eq!((done.function, done.errors), (ScanFunction::Resilver, 0));
    assert!(rig.engine.fault_check().is_empty());
    assert!(rig.engine.fault_check().is_empty());
    let events = rig.engine.events(Some("tank"), 0, false);
    type Seen<'a> = (&'a str, &'a str, Vec<(String, String)>);
    let seen: Vec<Seen<'_>> = events
        .iter()
        .filter(|e| !e.class.ends_with(".io"))
        .map(|e| {
            let class = e.class.rsplit('.').next().unwrap();
            let payload = if class == "resilver_finish" {
                Vec::new()
            } else {
                e.payload.clone()
            };
            (class, e.vdev_path.as_str(), payload)
        })
        .collect();
    let state = |now: &str, last: &str| {
        vec![
            ("vdev_state".to_string(), now.to_string()),
            ("vdev_laststate".to_string(), last.to_string()),
        ]
    };
    assert_eq!(
        seen,
        vec![
            ("statechange", "/sim/d3", state("REMOVED", "ONLINE")),
            ("resilver_start", "", Vec::new()),
            ("resilver_finish", "", Vec::new()),
            ("statechange", "/sim/d3", state("ONLINE", "REMOVED")),
        ]
    );
    let io = events.iter().find(|e| e.class.ends_with(".io")).unwrap();
    assert_eq!(io.vdev_path, "/sim/d3");
    assert_eq!(io.payload[0].0, "count");
    let finish = events
        .iter()
        .find(|e| e.class.ends_with("resilver_finish"))
        .unwrap();
    let repaired = finish
        .payload
        .iter()
        .find(|(k, _)| k == "scan_bytes_repaired")
        .unwrap();
    assert_eq!(repaired.1, done.repaired.to_string());
    rig.check_data();
}

/// The scrub and checksum events with their payloads: silent damage on one device is found
/// by a scrub, whose `scrub_start` and `scrub_finish` (bytes issued and repaired, errors 0)
/// frame it, and the next look posts one `checksum` ereport for that device whose count is
/// its CKSUM counter; nothing for the other devices.
#[test]
fn scrub_and_checksum_events_carry_their_payloads() {
    let mut rig = rig(TopLayout::Raidz(1), 4, 0);
    rig.write_object(31, 4 << 20);
    assert!(rig.engine.fault_check().is_empty());
    rig.engine.events(None, 0, true);
    let rotted = rig.device("/sim/d1").rot_random(64);
    assert!(!rotted.is_empty());
    let done = rig.scrub();
    assert_eq!((done.function, done.errors), (ScanFunction::Scrub, 0));
    assert!(done.repaired > 0, "the scrub repaired the damage");
    assert!(rig.engine.fault_check().is_empty());
    let cksum = rig.config().children[1].cksum;
    assert!(cksum > 0);
    let events = rig.engine.events(Some("tank"), 0, false);
    let classes: Vec<&str> = events.iter().map(|e| e.class.as_str()).collect();
    assert_eq!(
        classes,
        vec![
            "sysevent.fs.zfs.scrub_start",
            "sysevent.fs.zfs.scrub_finish",
            "ereport.fs.zfs.checksum",
        ]
    );
    let payload = |i: usize, key: &str| {
        events[i]
            .payload
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        payload(1, "scan_bytes_repaired"),
        Some(done.repaired.to_string())
    );
    assert_eq!(
        payload(1, "scan_bytes_issued"),
        Some(done.issued.to_string())
    );
    assert_eq!(payload(1, "scan_errors"), Some("0".to_string()));
    assert_eq!(events[2].vdev_path, "/sim/d1");
    assert_eq!(payload(2, "count"), Some(cksum.to_string()));
    rig.check_data();
}

/// The events of a device that vanished while busy and was spared: the io ereport, the
/// statechange (REMOVED from ONLINE), the spare named, the resilver's start, the spare's
/// statechange (INUSE from AVAIL) and the resilver's finish.
fn check_spare_events(events: &[tarn_engine::Event]) {
    let classes: Vec<&str> = events.iter().map(|e| e.class.as_str()).collect();
    assert_eq!(
        classes,
        vec![
            "ereport.fs.zfs.io",
            "sysevent.fs.zfs.statechange",
            "sysevent.fs.zfs.vdev_spare",
            "sysevent.fs.zfs.resilver_start",
            "sysevent.fs.zfs.statechange",
            "sysevent.fs.zfs.resilver_finish",
        ]
    );
    assert_eq!(events[4].vdev_path, "/sim/s0");
    assert_eq!(
        events[4].payload,
        vec![
            ("vdev_state".into(), "INUSE".into()),
            ("vdev_laststate".into(), "AVAIL".into()),
            ("vdev_spare".into(), "true".into())
        ]
    );
    assert_eq!(events[0].vdev_path, "/sim/d2");
    assert_eq!(
        events[1].payload,
        vec![
            ("vdev_state".into(), "REMOVED".into()),
            ("vdev_laststate".into(), "ONLINE".into())
        ]
    );
    assert_eq!(events[2].payload, vec![("spare".into(), "/sim/s0".into())]);
    assert!(events.windows(2).all(|w| w[0].eid < w[1].eid));
}

/// A device vanishes while the pool is busy: its leaf goes REMOVED, the pool DEGRADED, the
/// spare activates by itself and is resilvered; replacing the failed device returns the
/// spare to AVAIL.
#[test]
fn vanished_device_is_replaced_by_a_spare() {
    let mut rig = rig(TopLayout::Raidz(1), 4, 1);
    rig.write_object(9, 4 << 20);
    rig.device("/sim/d2").set_gone(true);
    rig.write_object(10, 2 << 20);
    rig.check_data();
    let status = rig.engine.status("tank").unwrap();
    assert_eq!(status.state, "DEGRADED");
    assert_eq!(rig.config().children[2].state, "REMOVED");
    assert_eq!(rig.engine.fault_check(), vec!["tank".to_string()]);
    assert_eq!(rig.engine.fault_check(), Vec::<String>::new());
    let config = rig.config();
    assert_eq!(config.children[2].name, "spare-2");
    assert_eq!(child_names(&config.children[2]), vec!["/sim/d2", "/sim/s0"]);
    let status = rig.engine.status("tank").unwrap();
    assert_eq!(status.spares[0].state, "INUSE");
    let done = rig.finish();
    assert_eq!((done.function, done.errors), (ScanFunction::Resilver, 0));
    assert!(done.repaired > 0);
    assert_eq!(rig.engine.status("tank").unwrap().state, "DEGRADED");
    let events = rig.engine.events(Some("tank"), 0, false);
    check_spare_events(&events);
    let last = events[5].eid;
    assert_eq!(rig.engine.events(None, 0, true).len(), 6);
    assert!(rig.engine.events(None, 0, false).is_empty());
    assert!(rig.engine.events(None, last, false).is_empty());
    rig.device("/sim/d0").set_gone(true);
    rig.check_data();
    rig.device("/sim/d0").set_gone(false);
    rig.engine.clear("tank", None, "pool clear tank").unwrap();
    rig.engine
        .online("tank", "d0", "pool online tank d0")
        .unwrap();
    rig.finish();
    rig.engine
        .replace(
            "tank",
            "d2",
            Some("/sim/n1"),
            "pool replace tank d2 /sim/n1",
        )
        .unwrap();
    assert_eq!(
        child_names(&rig.config().children[2]),
        vec!["/sim/s0", "/sim/n1"]
    );
    rig.finish();
    let status = rig.engine.status("tank").unwrap();
    assert_eq!(child_names(&status.config.children[0])[2], "/sim/n1");
    assert_eq!(status.spares[0].state, "AVAIL");
    assert_eq!(status.state, "ONLINE");
    // Its return to AVAIL was posted (by the scan step that ended the replace's resilver).
    let back = rig.engine.events(Some("tank"), 0, false);
    let back: Vec<_> = back
        .iter()
        .filter(|e| e.vdev_path == "/sim/s0" && e.class == "sysevent.fs.zfs.statechange")
        .map(|e| e.payload[..2].to_vec())
        .collect();
    assert_eq!(
        back.last().unwrap(),
        &vec![
            ("vdev_state".to_string(), "AVAIL".to_string()),
            ("vdev_laststate".to_string(), "INUSE".to_string())
        ]
    );
    rig.engine.export_pool("tank", false).unwrap();
    rig.import();
    assert_eq!(rig.engine.status("tank").unwrap().spares[0].state, "AVAIL");
    rig.check_data();
}

/// A device that fails reads intermittently: reads heal around it, and once it has
/// IO_ERRORS_FAULT errors it is faulted and spared.
#[test]
fn intermittent_eio_faults_and_spares() {
    let mut rig = rig(TopLayout::Raidz(1), 4, 1);
    rig.write_object(11, 4 << 20);
    rig.engine.export_pool("tank", false).unwrap();
    rig.import();
    let plan = FaultPlan {
        read_eio: 500_000,
        ..FaultPlan::seeded(5)
    };
    rig.device("/sim/d1").set_plan(plan);
    rig.check_data();
    let read_errors = rig.config().children[1].read;
    assert!(
        read_errors >= tarn_engine::replace::IO_ERRORS_FAULT,
        "{read_errors}"
    );
    assert_eq!(rig.engine.status("tank").unwrap().state, "ONLINE");
    assert_eq!(rig.engine.fault_check(), vec!["tank".to_string()]);
    let config = rig.config();
    assert_eq!(config.children[1].children[0].state, "FAULTED");
    assert_eq!(child_names(&config.children[1]), vec!["/sim/d1", "/sim/s0"]);
    let done = rig.finish();
    assert_eq!(done.errors, 0);
    rig.check_data();
}

/// Every refused replace, attach and detach leaves every device byte-identical.
#[test]
fn refused_commands_change_nothing() {
    let rig = rig(TopLayout::Raidz(1), 4, 1);
    let before = images(&rig.provider);
    let e = &rig.engine;
    let cases: Vec<(&str, Result<(), EngineError>)> = vec![
        (
            "too small",
            e.replace("tank", "d1", Some("/sim/small"), "x"),
        ),
        ("same", e.replace("tank", "d1", Some("/sim/d1"), "x")),
        ("member", e.replace("tank", "d1", Some("/sim/d2"), "x")),
        ("spare", e.replace("tank", "d1", Some("/sim/s0"), "x")),
        ("missing", e.replace("tank", "d1", Some("/sim/nope"), "x")),
        ("in place", e.replace("tank", "d1", None, "x")),
        ("no device", e.replace("tank", "d9", Some("/sim/n0"), "x")),
        ("raidz attach", e.attach("tank", "d1", "/sim/n0", "x")),
        ("raidz detach", e.detach("tank", "d1", "x")),
    ];
    for (what, result) in cases {
        let error = result.expect_err(what);
        assert!(!error.to_string().is_empty(), "{what}");
        assert!(!error.to_string().contains('\n'), "{what}: {error}");
    }
    assert!(
        before == images(&rig.provider),
        "a refused command changed a device"
    );
}
