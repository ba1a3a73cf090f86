//! Slow-device handling on simulated devices in virtual time.
//!
//! Goal: a leaf whose latency stays far above its siblings' is found by comparing its p99
//! with their median, read around while slow (its reads drop to zero, data still right),
//! counted in the SLOW column, reported with a `delay` event, and after `slow_io_period`
//! faulted and replaced by a hot spare, with every byte intact after the resilver. The
//! thresholds are pool properties; bad values are refused and change nothing.
//! Method: raidz2 of six 128 MiB `SimDevice`s plus a spare, all on one `ManualClock` shared
//! with the engine, so injected latency advances virtual time and the engine measures it
//! exactly. Data is written in three sets larger together than the block cache, so reading
//! a set in the order written always reaches the devices.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use tarn_base::{ManualClock, ObjectId, SeededRng};
use tarn_device::{FaultPlan, SimDevice};
use tarn_engine::slow::SLOW_WINDOW_NS;
use tarn_engine::{
    CreateOptions, Engine, EngineError, ScanFunction, ScanState, TopLayout, VdevNode,
};
use tarn_pool::{CreateSpec, HostIdentity, SimProvider};

const DEVICE_SIZE: u64 = 128 << 20;
const SET_BYTES: usize = 32 << 20;
const FAST_NS: u64 = 100_000;
const SLOW_NS: u64 = 20_000_000;

struct Rig {
    provider: Arc<SimProvider>,
    clock: Arc<ManualClock>,
    engine: Engine,
    sets: Vec<Vec<(ObjectId, Vec<u8>)>>,
}

fn plan(latency_ns: u64) -> FaultPlan {
    FaultPlan {
        latency_ns,
        ..FaultPlan::default()
    }
}

/// The `index`th 128 KiB record of set 0's objects, in order: the object, its bytes and the
/// record's offset in it.
fn record(rig: &Rig, index: u64) -> (&ObjectId, &Vec<u8>, u64) {
    let per_object = 4 << 20 >> 17;
    let (object, data) = &rig.sets[0][usize::try_from(index / per_object).unwrap()];
    (object, data, (index % per_object) << 17)
}

fn rig() -> Rig {
    rig_with(&["/sim/s0"])
}

/// A raidz2 `tank` of `/sim/d0..5` with hot spares `spares`.
fn rig_with(spares: &[&str]) -> Rig {
    let provider = Arc::new(SimProvider::new());
    let clock = Arc::new(ManualClock::new(1_795_357_800));
    let names: Vec<String> = (0..6).map(|i| format!("/sim/d{i}")).collect();
    let spares: Vec<String> = spares.iter().map(|s| s.to_string()).collect();
    for name in names.iter().chain(&spares) {
        let device = SimDevice::with_clock(name, DEVICE_SIZE, plan(FAST_NS), clock.clone());
        provider.insert(name, device);
    }
    let identity = HostIdentity {
        hostid: 7,
        hostname: "host".into(),
    };
    let engine = Engine::new(provider.clone(), identity, clock.clone(), 42);
    let spec = CreateSpec {
        spares,
        ..CreateSpec::one_top("tank", TopLayout::Raidz(2), names)
    };
    let options = CreateOptions {
        command: "pool create tank".into(),
        ..CreateOptions::default()
    };
    engine.create_pool(&spec, &options).unwrap();
    Rig {
        provider,
        clock,
        engine,
        sets: Vec::new(),
    }
}

impl Rig {
    /// Writes one set of objects (`SET_BYTES` in 4 MiB objects) and commits it.
    fn write_set(&mut self, seed: u64) {
        let mut set = Vec::new();
        for i in 0..(SET_BYTES >> 22) as u64 {
            let object = self.engine.object_create("tank", 128 << 10).unwrap();
            let mut data = vec![0u8; 4 << 20];
            SeededRng::new(seed * 100 + i).fill(&mut data);
            self.engine.object_write("tank", object, 0, &data).unwrap();
            set.push((object, data));
        }
        self.engine.sync_pool("tank").unwrap();
        self.sets.push(set);
    }

    fn read_set(&self, index: usize) {
        for (object, data) in &self.sets[index] {
            let mut buf = vec![0u8; data.len()];
            self.engine
                .object_read("tank", *object, 0, &mut buf)
                .unwrap();
            assert!(buf == *data, "object {object:?} differs");
        }
    }

    fn device(&self, i: usize) -> Arc<SimDevice> {
        self.provider.get(&format!("/sim/d{i}")).unwrap()
    }

    fn reads(&self) -> Vec<u64> {
        (0..6).map(|i| self.device(i).stats().reads).collect()
    }

    fn config(&self) -> VdevNode {
        self.engine.status("tank").unwrap().config.children[0].clone()
    }

    fn set(&self, property: &str, value: &str) -> Result<(), EngineError> {
        let command = format!("pool set {property}={value} tank");
        self.engine.set_prop("tank", property, value, &command)
    }

    fn prop(&self, property: &str) -> (String, String) {
        let found = self
            .engine
            .get_props("tank", &[property.to_string()])
            .unwrap();
        (found[0].value.clone(), found[0].source.clone())
    }

    /// One `delay` ereport for d2 with the measured p99 (the upper end of 20 ms's log2
    /// bucket), the siblings' median (of 100 us's) and the slow I/Os of the window.
    fn check_delay_event(&self, slow_ios: u64) {
        let events = self.engine.events(Some("tank"), 0, false);
        let delay: Vec<_> = events
            .iter()
            .filter(|e| e.class == "ereport.fs.zfs.delay")
            .collect();
        assert_eq!(delay.len(), 1);
        assert_eq!(delay[0].vdev_path, "/sim/d2");
        assert_eq!(
            delay[0].payload,
            vec![
                ("p99_ns".to_string(), (32u64 << 20).to_string()),
                ("siblings_median_ns".to_string(), (128u64 << 10).to_string()),
                ("slow_ios".to_string(), slow_ios.to_string()),
            ]
        );
    }

    /// The events of the whole story, in order (io ereports of the healing aside).
    fn check_spare_events(&self) {
        let classes: Vec<String> = self
            .engine
            .events(Some("tank"), 0, false)
            .into_iter()
            .map(|e| e.class)
            .filter(|c| !c.starts_with("ereport.fs.zfs.io"))
            .collect();
        assert_eq!(
            classes,
            vec![
                "ereport.fs.zfs.delay",
                "sysevent.fs.zfs.statechange",
                "sysevent.fs.zfs.vdev_spare",
                "sysevent.fs.zfs.resilver_start",
                // The spare's own change, INUSE from AVAIL.
                "sysevent.fs.zfs.statechange",
                "sysevent.fs.zfs.resilver_finish",
            ]
        );
        let events = self.engine.events(Some("tank"), 0, false);
        let change = events
            .iter()
            .find(|e| e.class.ends_with("statechange"))
            .unwrap();
        assert_eq!(change.vdev_path, "/sim/d2");
        assert_eq!(
            change.payload,
            vec![
                ("vdev_state".to_string(), "FAULTED".to_string()),
                ("vdev_laststate".to_string(), "ONLINE".to_string()),
                ("reason".to_string(), "slow".to_string()),
            ],
            "one statechange, saying why"
        );
    }

    fn finish_scan(&self) {
        for _ in 0..100_000 {
            let progress = self.engine.scrub_step("tank", 1 << 20).unwrap().unwrap();
            if progress.state != ScanState::Scanning {
                assert_eq!(progress.function, ScanFunction::Resilver);
                assert_eq!(progress.errors, 0);
                return;
            }
        }
        panic!("scan did not finish");
    }
}

/// The whole story: slow, read around, counted, reported, spared after the period.
#[test]
fn slow_device_is_read_around_then_spared() {
    let mut rig = rig();
    for seed in 1..=3 {
        rig.write_set(seed);
    }
    rig.set("slow_io_period", "120").unwrap();
    assert!(
        rig.engine.fault_check().is_empty(),
        "the first look opens windows"
    );
    rig.device(2).set_plan(plan(SLOW_NS));

    let before = rig.reads();
    rig.read_set(0);
    let window = rig.reads();
    let slow_reads = window[2] - before[2];
    assert!(
        slow_reads > 16,
        "the slow device served reads: {slow_reads}"
    );
    rig.clock.advance_ns(SLOW_WINDOW_NS);
    assert!(
        rig.engine.fault_check().is_empty(),
        "slow is not yet faulted"
    );
    let config = rig.config();
    assert_eq!(
        config.children[2].slow, slow_reads,
        "every read of d2 was slow"
    );
    for i in [0, 1, 3, 4, 5] {
        assert_eq!(config.children[i].slow, 0, "d{i} is not slow");
    }
    assert_eq!(config.slow, slow_reads, "the vdev sums its children");
    rig.check_delay_event(slow_reads);

    // Read around: d2 serves no read while the others serve more than before.
    rig.read_set(1);
    let around = rig.reads();
    assert_eq!(around[2], window[2], "the slow device is read around");
    for i in [0, 1, 3, 4, 5] {
        assert!(around[i] > window[i], "d{i} serves reads");
    }
    assert_eq!(rig.config().children[2].state, "ONLINE");

    // Not before the period is over...
    rig.clock.advance_ns(60_000_000_000);
    assert!(rig.engine.fault_check().is_empty());
    // ...and then faulted and spared.
    rig.clock.advance_ns(60_000_000_000);
    assert_eq!(rig.engine.fault_check(), vec!["tank".to_string()]);
    let config = rig.config();
    assert_eq!(config.children[2].name, "spare-2");
    assert_eq!(config.children[2].children[0].state, "FAULTED");
    assert_eq!(config.children[2].children[1].name, "/sim/s0");
    rig.finish_scan();
    for set in 0..3 {
        rig.read_set(set);
    }
    rig.check_spare_events();
    assert_eq!(rig.engine.status("tank").unwrap().state, "DEGRADED");
}

/// A pool without spares whose d2 was just found slow (and read around).
fn slow_without_spare() -> Rig {
    let mut rig = rig_with(&[]);
    for seed in 1..=3 {
        rig.write_set(seed);
    }
    assert!(rig.engine.fault_check().is_empty());
    rig.device(2).set_plan(plan(SLOW_NS));
    rig.read_set(0);
    rig.clock.advance_ns(SLOW_WINDOW_NS);
    assert!(rig.engine.fault_check().is_empty());
    rig
}

impl Rig {
    fn classes(&self) -> Vec<String> {
        let events = self.engine.events(Some("tank"), 0, false);
        events.into_iter().map(|e| e.class).collect()
    }

    /// Reads set `index` and returns how many reads d2 served meanwhile.
    fn d2_reads_of(&self, index: usize) -> u64 {
        let before = self.reads()[2];
        self.read_set(index);
        self.reads()[2] - before
    }
}

/// Without an AVAIL spare a slow device is not faulted when the period ends: it stays in
/// service (writes, redundancy), read around. A window in which it served no read is
/// followed by a trial window in which it is read again; still slow, it is marked again
/// without a new event.
#[test]
fn slow_device_without_a_spare_stays_in_service() {
    let rig = slow_without_spare();
    rig.clock.advance_ns(600_000_000_000);
    assert!(rig.engine.fault_check().is_empty(), "no spare: not faulted");
    assert_eq!(rig.config().children[2].state, "ONLINE");
    let status = rig.engine.status("tank").unwrap();
    assert_eq!(status.state, "ONLINE");
    assert_eq!(status.see.as_deref(), Some("TARN-0007"));
    assert!(rig.d2_reads_of(1) > 0, "the trial window reads it");
    rig.clock.advance_ns(SLOW_WINDOW_NS);
    assert!(rig.engine.fault_check().is_empty());
    assert_eq!(rig.d2_reads_of(2), 0, "still slow: read around again");
    assert_eq!(rig.classes(), vec!["ereport.fs.zfs.delay"]);
}

/// A slow device that becomes fast again is cleared by what its trial window's reads show:
/// a second `delay` event says so, and reads use it again.
#[test]
fn slow_device_that_recovers_is_cleared() {
    let rig = slow_without_spare();
    rig.device(2).set_plan(plan(FAST_NS));
    rig.clock.advance_ns(SLOW_WINDOW_NS);
    assert!(
        rig.engine.fault_check().is_empty(),
        "no reads of d2: a trial follows"
    );
    assert!(rig.d2_reads_of(1) > 0);
    rig.clock.advance_ns(SLOW_WINDOW_NS);
    assert!(rig.engine.fault_check().is_empty());
    let events = rig.engine.events(Some("tank"), 0, false);
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].class, "ereport.fs.zfs.delay");
    assert_eq!(events[1].payload, vec![("slow".into(), "cleared".into())]);
    assert!(rig.d2_reads_of(2) > 0, "read again");
    assert_eq!(rig.engine.status("tank").unwrap().see, None);
    rig.clock.advance_ns(600_000_000_000);
    assert!(rig.engine.fault_check().is_empty());
    assert_eq!(rig.config().children[2].state, "ONLINE");
}

/// Regression: the detector's memory of a pool ends at export. A slow period begun before
/// must not fault the device right after the pool is imported again (the import starts
/// with fresh counters and no mark), even with a spare at hand.
#[test]
fn export_forgets_slow_periods() {
    let mut rig = rig();
    for seed in 1..=3 {
        rig.write_set(seed);
    }
    assert!(rig.engine.fault_check().is_empty());
    rig.device(2).set_plan(plan(SLOW_NS));
    rig.read_set(0);
    rig.clock.advance_ns(SLOW_WINDOW_NS);
    assert!(rig.engine.fault_check().is_empty());
    rig.engine.export_pool("tank", false).unwrap();
    let dirs = ["/sim".to_string()];
    let options = tarn_pool::ImportOptions::default();
    rig.engine
        .import_pool(&dirs, "tank", &options, "pool import tank")
        .unwrap();
    rig.clock.advance_ns(600_000_000_000);
    assert!(rig.engine.fault_check().is_empty(), "no stale period");
    assert_eq!(rig.config().children[2].state, "ONLINE");
    assert_eq!(rig.engine.status("tank").unwrap().spares[0].state, "AVAIL");
}

/// With `slow_io_ratio=off` nothing is judged: the same slow device is read as usual.
#[test]
fn slow_detection_can_be_turned_off() {
    let mut rig = rig();
    rig.write_set(1);
    rig.write_set(2);
    rig.write_set(3);
    rig.set("slow_io_ratio", "off").unwrap();
    assert!(rig.engine.fault_check().is_empty());
    rig.device(2).set_plan(plan(SLOW_NS));
    rig.read_set(0);
    rig.clock.advance_ns(SLOW_WINDOW_NS);
    assert!(rig.engine.fault_check().is_empty());
    let before = rig.reads();
    rig.read_set(1);
    assert!(rig.reads()[2] > before[2], "d2 is still read");
    assert_eq!(rig.config().children[2].slow, 0);
    assert!(rig.engine.events(Some("tank"), 0, false).is_empty());
}

/// The window properties: `slow_io_ms` above the slow device's latency means no access of
/// it is slow; `slow_io_n` above the slow accesses of one window means the leaf is not
/// slow; a longer `slow_io_t` keeps the window open past the default length, and the leaf
/// is judged (and marked) when it closes.
#[test]
fn window_properties_decide() {
    let mut rig = rig();
    for seed in 1..=3 {
        rig.write_set(seed);
    }
    rig.set("slow_io_ms", "50").unwrap();
    assert!(rig.engine.fault_check().is_empty());
    rig.device(2).set_plan(plan(SLOW_NS));
    rig.read_set(0);
    rig.clock.advance_ns(SLOW_WINDOW_NS);
    assert!(rig.engine.fault_check().is_empty());
    assert_eq!(
        rig.config().children[2].slow,
        0,
        "20 ms is under a 50 ms floor"
    );
    assert!(rig.engine.events(Some("tank"), 0, false).is_empty());

    rig.set("slow_io_ms", "10").unwrap();
    rig.set("slow_io_n", "1000000").unwrap();
    rig.read_set(1);
    rig.clock.advance_ns(SLOW_WINDOW_NS);
    assert!(rig.engine.fault_check().is_empty());
    let counted = rig.config().children[2].slow;
    assert!(counted > 16, "the slow I/Os are counted: {counted}");
    assert!(
        rig.engine.events(Some("tank"), 0, false).is_empty(),
        "fewer than slow_io_n slow I/Os: not slow"
    );

    rig.set("slow_io_n", "10").unwrap();
    rig.set("slow_io_t", "12").unwrap();
    rig.read_set(2);
    rig.clock.advance_ns(SLOW_WINDOW_NS);
    assert!(rig.engine.fault_check().is_empty());
    assert!(
        rig.engine.events(Some("tank"), 0, false).is_empty(),
        "a 12 s window is still open after 5 s"
    );
    rig.clock.advance_ns(7_000_000_000);
    assert!(rig.engine.fault_check().is_empty());
    let events = rig.engine.events(Some("tank"), 0, false);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].class, "ereport.fs.zfs.delay");
    assert_eq!(events[0].vdev_path, "/sim/d2");
}

/// `io_n` errors count only within `io_t` seconds: errors older than that fault nothing,
/// and `io_n` new ones within the window do.
#[test]
fn io_errors_age_out_after_io_t() {
    let mut rig = rig();
    rig.write_set(1);
    rig.write_set(2);
    rig.write_set(3);
    let leaf_errors = |rig: &Rig| rig.config().children[4].read;
    let mut offsets = 0u64..;
    let read_until = |rig: &Rig, offsets: &mut dyn Iterator<Item = u64>, errors: u64| {
        rig.device(4).set_plan(FaultPlan {
            read_eio: tarn_device::PER_MILLION,
            ..plan(FAST_NS)
        });
        let mut buf = vec![0u8; 128 << 10];
        while leaf_errors(rig) < errors {
            // Record after record of set 0's objects: reads whose columns on leaf 4 are
            // parity (a third of them) fail nothing, so one object may not be enough.
            let (object, data, offset) = record(rig, offsets.next().unwrap());
            rig.engine
                .object_read("tank", *object, offset, &mut buf)
                .unwrap();
            let at = usize::try_from(offset).unwrap();
            assert!(buf[..] == data[at..at + buf.len()]);
        }
        rig.device(4).set_plan(plan(FAST_NS));
    };
    read_until(&rig, &mut offsets, 1);
    let first = leaf_errors(&rig);
    rig.set("io_n", &(first + 1).to_string()).unwrap();
    rig.set("io_t", "60").unwrap();
    assert!(rig.engine.fault_check().is_empty(), "below io_n");
    rig.clock.advance_ns(61_000_000_000);
    assert!(rig.engine.fault_check().is_empty());
    read_until(&rig, &mut offsets, first + 1);
    let recent = leaf_errors(&rig) - first;
    if recent <= first {
        assert!(
            rig.engine.fault_check().is_empty(),
            "the first errors aged out"
        );
        assert_eq!(rig.config().children[4].state, "ONLINE");
        read_until(&rig, &mut offsets, 2 * first + 1);
    }
    assert_eq!(rig.engine.fault_check(), vec!["tank".to_string()]);
    assert_eq!(rig.config().children[4].name, "spare-4");
    rig.finish_scan();
    rig.read_set(0);
}

/// Bad values are refused with the valid range and change nothing (value, source, device
/// bytes); good ones are stored and shown with source `local`.
#[test]
fn threshold_properties_validate() {
    let rig = rig();
    assert_eq!(rig.prop("slow_io_ratio"), ("8".into(), "default".into()));
    assert_eq!(rig.prop("slow_io_period"), ("60".into(), "default".into()));
    assert_eq!(rig.prop("io_n"), ("10".into(), "default".into()));
    assert_eq!(rig.prop("io_t"), ("600".into(), "default".into()));
    assert_eq!(rig.prop("slow_io_n"), ("10".into(), "default".into()));
    assert_eq!(rig.prop("slow_io_t"), ("5".into(), "default".into()));
    assert_eq!(rig.prop("slow_io_ms"), ("10".into(), "default".into()));
    rig.engine.sync_pool("tank").unwrap();
    let images: Vec<Vec<u8>> = (0..6).map(|i| rig.device(i).image()).collect();
    for (property, value) in [
        ("slow_io_ratio", "1"),
        ("slow_io_ratio", "x"),
        ("slow_io_period", "0"),
        ("slow_io_period", "1h"),
        ("io_n", "0"),
        ("io_n", "-3"),
        ("io_t", "0"),
        ("slow_io_n", "0"),
        ("slow_io_t", "3601"),
        ("slow_io_ms", "1ms"),
    ] {
        let refused = rig.set(property, value).unwrap_err();
        assert!(
            matches!(&refused, EngineError::InvalidProperty(m) if m.contains("whole number")),
            "{property}={value}: {refused}"
        );
    }
    let after: Vec<Vec<u8>> = (0..6).map(|i| rig.device(i).image()).collect();
    assert!(images == after, "a refused set changes no byte");
    assert_eq!(rig.prop("slow_io_ratio"), ("8".into(), "default".into()));
    rig.set("slow_io_ratio", "4").unwrap();
    rig.set("io_n", "3").unwrap();
    assert_eq!(rig.prop("slow_io_ratio"), ("4".into(), "local".into()));
    assert_eq!(rig.prop("io_n"), ("3".into(), "local".into()));
}

/// `io_n` replaces the fixed fault threshold: a leaf with fewer read errors than `io_n`
/// stays online; once it reaches `io_n` it is faulted and the spare takes over.
#[test]
fn io_n_sets_the_fault_threshold() {
    let mut rig = rig();
    rig.write_set(1);
    rig.write_set(2);
    rig.write_set(3);
    rig.device(4).set_plan(FaultPlan {
        read_eio: tarn_device::PER_MILLION,
        ..plan(FAST_NS)
    });
    let leaf_errors = |rig: &Rig| rig.config().children[4].read;
    let mut offsets = 0u64..;
    let read_until = |rig: &Rig, offsets: &mut dyn Iterator<Item = u64>, errors: u64| {
        let mut buf = vec![0u8; 128 << 10];
        while leaf_errors(rig) < errors {
            // Record after record of set 0's objects: reads whose columns on leaf 4 are
            // parity (a third of them) fail nothing, so one object may not be enough.
            let (object, data, offset) = record(rig, offsets.next().unwrap());
            rig.engine
                .object_read("tank", *object, offset, &mut buf)
                .unwrap();
            let at = usize::try_from(offset).unwrap();
            assert!(buf[..] == data[at..at + buf.len()]);
        }
    };
    read_until(&rig, &mut offsets, 1);
    let errors = leaf_errors(&rig);
    rig.set("io_n", &(errors + 1).to_string()).unwrap();
    assert!(rig.engine.fault_check().is_empty(), "below io_n");
    assert_eq!(rig.config().children[4].state, "ONLINE");
    read_until(&rig, &mut offsets, errors + 1);
    rig.device(4).set_plan(plan(FAST_NS));
    assert_eq!(rig.engine.fault_check(), vec!["tank".to_string()]);
    assert_eq!(rig.config().children[4].name, "spare-4");
    rig.finish_scan();
    rig.read_set(0);
}

/// A device without a queue: the device's time is the whole time, no queue waits; every
/// read of the window (`ops`, all of `latency`) is in that latency's histogram bucket, and
/// every access in the request-size histogram.
fn check_leaf_histograms(
    leaf: &tarn_engine::IostatNode,
    was: &tarn_engine::IostatNode,
    latency: u64,
    ops: u64,
) {
    let name = &leaf.name;
    let (waits, was_waits) = (&leaf.waits, &was.waits);
    assert_eq!(waits.disk_read, waits.total_read, "{name}");
    assert_eq!(waits.disk_write, waits.total_write, "{name}");
    assert_eq!(waits.syncq_read.count() + waits.asyncq_write.count(), 0);
    let bucket = tarn_vdev::stats::latency_bucket(latency);
    let window = waits.total_read.buckets[bucket] - was_waits.total_read.buckets[bucket];
    assert_eq!(window, ops, "{name}: every read in the {latency} ns bucket");
    assert_eq!(
        waits.total_read.count() - was_waits.total_read.count(),
        ops,
        "{name}: nothing elsewhere"
    );
    assert_eq!(leaf.read_sizes.iter().sum::<u64>(), leaf.read_ops, "{name}");
    assert_eq!(
        leaf.write_sizes.iter().sum::<u64>(),
        leaf.write_ops,
        "{name}"
    );
    assert_eq!(leaf.reads_pending, 0);
}

/// `iostat` totals: every leaf's operations match what its device saw, latency sums are
/// exactly the injected latency (virtual time), and each row above sums the rows below.
#[test]
fn iostat_counts_and_times_every_leaf() {
    let mut rig = rig();
    for seed in 1..=3 {
        rig.write_set(seed);
    }
    rig.device(2).set_plan(plan(SLOW_NS));
    let before = rig.engine.iostat(&[]).unwrap();
    let reads_before = rig.reads();
    rig.read_set(0);
    let after = rig.engine.iostat(&["tank".to_string()]).unwrap();
    let reads = rig.reads();
    assert_eq!(after.len(), 1);
    assert!(after[0].time_ns > before[0].time_ns);
    assert_eq!(after[0].imported_ns, before[0].imported_ns);
    assert!(after[0].imported_ns < before[0].time_ns);
    let (top, top_before) = (&after[0].root.children[0], &before[0].root.children[0]);
    assert_eq!(top.name, "raidz2-0");
    for i in 0..6 {
        let (leaf, was) = (&top.children[i], &top_before.children[i]);
        assert_eq!(leaf.name, format!("/sim/d{i}"));
        let ops = leaf.read_ops - was.read_ops;
        assert_eq!(ops, reads[i] - reads_before[i], "d{i} reads");
        let latency = if i == 2 { SLOW_NS } else { FAST_NS };
        assert_eq!(
            leaf.read_wait_ns - was.read_wait_ns,
            ops * latency,
            "d{i} wait"
        );
        assert_eq!((leaf.reads_active, leaf.writes_active), (0, 0));
        assert_eq!(
            leaf.writes_pending, 0,
            "SimDevice writes before it acknowledges"
        );
        assert_eq!((leaf.alloc, leaf.free), (None, None));
        check_leaf_histograms(leaf, was, latency, ops);
    }
    assert_eq!(
        top.waits.total_read.count(),
        top.children
            .iter()
            .map(|c| c.waits.total_read.count())
            .sum::<u64>(),
        "a vdev's histogram sums its leaves'"
    );
    let sum = |f: fn(&tarn_engine::IostatNode) -> u64| top.children.iter().map(f).sum::<u64>();
    assert_eq!(top.read_ops, sum(|n| n.read_ops));
    assert_eq!(top.write_bytes, sum(|n| n.write_bytes));
    assert_eq!(top.read_wait_ns, sum(|n| n.read_wait_ns));
    let root = &after[0].root;
    assert_eq!(
        (root.read_ops, root.alloc, root.free),
        (top.read_ops, top.alloc, top.free)
    );
    let summary = &rig.engine.list(&[]).unwrap()[0];
    assert_eq!(root.alloc, Some(summary.allocated));
    assert_eq!(root.free, Some(summary.free));
    assert!(matches!(
        rig.engine.iostat(&["nosuch".to_string()]),
        Err(EngineError::NoSuchPool)
    ));
}
