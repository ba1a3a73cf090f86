//! Suspended pools: `clear` resumes them, `failmode` decides what writers see meanwhile.
//!
//! Goal: a pool that loses more devices than its redundancy while a txg syncs is SUSPENDED
//! with the txg kept in memory; `clear` while the devices are still gone refuses and writes
//! nothing; once they answer again `clear` writes the failed txg again, commits it and
//! resumes, and every byte written before and after is there (scrub clean, reimport).
//! Under `failmode=wait` a writer blocks until `clear` (then succeeds) or `export -f`
//! (then fails); under `failmode=continue` it fails at once. Method: a raidz1 of four
//! simulated devices; two of them vanish (`SimDevice::set_gone`) between a write and its
//! sync, and come back with their contents as they were.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tarn_base::{ManualClock, ObjectId, SeededRng};
use tarn_engine::{
    CreateOptions, CreateSpec, Engine, EngineError, HostIdentity, ImportOptions, PoolError,
    ScanState, ScrubAction, SimProvider, TopLayout, TopSpec,
};

const NAMES: [&str; 4] = ["/sim/d0", "/sim/d1", "/sim/d2", "/sim/d3"];
const GONE: [&str; 2] = ["/sim/d1", "/sim/d2"];

fn engine_on(provider: &Arc<SimProvider>) -> Engine {
    let identity = HostIdentity {
        hostid: 1,
        hostname: "sim".into(),
    };
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    Engine::new(provider.clone(), identity, clock, 5)
}

struct Rig {
    provider: Arc<SimProvider>,
    engine: Arc<Engine>,
    objects: Vec<(ObjectId, Vec<u8>)>,
}

impl Rig {
    fn new(failmode: &str) -> Rig {
        let provider = SimProvider::with_devices(&NAMES, 128 << 20);
        let engine = engine_on(&provider);
        let names = NAMES.iter().map(|n| (*n).to_string()).collect();
        let spec = CreateSpec::one_top("tank", TopLayout::Raidz(1), names);
        let options = CreateOptions {
            properties: vec![("failmode".into(), failmode.into())],
            ..CreateOptions::default()
        };
        engine.create_pool(&spec, &options).unwrap();
        let mut rig = Rig {
            provider,
            engine: Arc::new(engine),
            objects: Vec::new(),
        };
        rig.write(1);
        rig.engine.sync_pool("tank").unwrap();
        rig
    }

    /// Writes a new object (not synced).
    fn write(&mut self, seed: u64) {
        let object = self.engine.object_create("tank", 128 << 10).unwrap();
        let mut data = vec![0u8; 1 << 20];
        SeededRng::new(seed).fill(&mut data);
        self.engine.object_write("tank", object, 0, &data).unwrap();
        self.objects.push((object, data));
    }

    fn set_gone(&self, gone: bool) {
        for name in GONE {
            self.provider.get(name).unwrap().set_gone(gone);
        }
    }

    /// Writes an object, makes two devices vanish, and syncs: the pool suspends.
    fn suspend(&mut self) {
        self.write(2);
        self.set_gone(true);
        let failed = self.engine.sync_pool("tank");
        assert!(
            matches!(failed, Err(EngineError::Pool(PoolError::Suspended(_)))),
            "{failed:?}"
        );
        assert_eq!(self.engine.status("tank").unwrap().state, "SUSPENDED");
    }

    /// Turns the block cache off, so that reads of data go to the devices.
    /// Bit rot over every data sector of device `name`.
    fn rot_data(&self, name: &str) {
        let device = self.provider.get(name).unwrap();
        let (start, end) = tarn_format::label::data_area(128 << 20).unwrap();
        device.rot(start, end - start).unwrap();
    }

    /// A reader of the first object fails with EIO without waiting (`why` says why it
    /// cannot read), and the pool is not suspended.
    fn assert_read_fails_at_once(&self, why: &str) {
        let reader = self.spawn_reader();
        assert!(finishes(&reader), "{why}: the read does not wait");
        match reader.join().unwrap() {
            Err(error) => assert_eq!(error.errno(), libc::EIO, "{error:?}"),
            Ok(_) => panic!("{why}: the read returns bytes"),
        }
        assert_ne!(self.engine.status("tank").unwrap().state, "SUSPENDED");
    }

    fn uncached(&self) {
        let policy = tarn_objects::CachePolicy::None;
        tarn_engine::check::set_data_cache_policy(&self.engine, "tank", policy).unwrap();
    }

    /// A thread writing 4 KiB of nines at the start of the first object.
    fn spawn_writer(&self) -> JoinHandle<Result<(), EngineError>> {
        let engine = Arc::clone(&self.engine);
        let object = self.objects[0].0;
        std::thread::spawn(move || engine.object_write("tank", object, 0, &[9u8; 4096]))
    }

    /// A thread reading the first object whole.
    fn spawn_reader(&self) -> JoinHandle<Result<Vec<u8>, EngineError>> {
        let engine = Arc::clone(&self.engine);
        let (object, data) = &self.objects[0];
        let (object, len) = (*object, data.len());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; len];
            engine
                .object_read("tank", object, 0, &mut buf)
                .map(|()| buf)
        })
    }

    fn images(&self) -> Vec<Vec<u8>> {
        NAMES
            .iter()
            .map(|n| self.provider.get(n).unwrap().image())
            .collect()
    }

    fn check_data(&self) {
        for (object, data) in &self.objects {
            let mut buf = vec![0u8; data.len()];
            self.engine
                .object_read("tank", *object, 0, &mut buf)
                .unwrap();
            assert!(buf == *data, "object {object:?} differs");
        }
    }

    fn scrub_errors(&self) -> u64 {
        let names = ["tank".to_string()];
        self.engine
            .scrub(&names, ScrubAction::Start, "pool scrub tank")
            .unwrap();
        loop {
            let progress = self.engine.scrub_step("tank", 1 << 20).unwrap().unwrap();
            if progress.state != ScanState::Scanning {
                return progress.errors;
            }
        }
    }
}

/// The devices come back: `clear` retries the failed txg and resumes; nothing is lost.
/// Before that, a `clear` while they are gone refuses, names them and writes nothing, and
/// under `failmode=continue` a write fails at once.
#[test]
fn clear_resumes_once_the_devices_are_back() {
    let mut rig = Rig::new("continue");
    rig.suspend();
    // The fault check reports the suspension once, with why and the failmode.
    assert!(rig.engine.fault_check().is_empty());
    assert!(rig.engine.fault_check().is_empty());
    let failures: Vec<_> = rig
        .engine
        .events(Some("tank"), 0, false)
        .into_iter()
        .filter(|e| e.class == "ereport.fs.zfs.io_failure")
        .collect();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(
        failures[0].payload[1],
        ("failmode".into(), "continue".into())
    );
    assert!(failures[0].payload[0].1.starts_with("txg "), "{failures:?}");
    let refused = rig
        .engine
        .object_write("tank", rig.objects[0].0, 0, &[7u8; 512]);
    assert!(
        matches!(refused, Err(EngineError::Pool(PoolError::Suspended(_)))),
        "failmode=continue fails a write at once: {refused:?}"
    );
    let before = rig.images();
    let refused = rig.engine.clear("tank", None, "pool clear tank");
    match refused {
        Err(EngineError::Pool(PoolError::StillFailing { devices })) => {
            assert_eq!(devices, GONE.to_vec());
        }
        other => panic!("clear must refuse while the devices are gone: {other:?}"),
    }
    assert!(rig.images() == before, "a refused clear writes nothing");
    assert_eq!(rig.engine.status("tank").unwrap().state, "SUSPENDED");

    rig.set_gone(false);
    rig.engine.clear("tank", None, "pool clear tank").unwrap();
    let status = rig.engine.status("tank").unwrap();
    assert_eq!(status.state, "ONLINE", "{status:?}");
    let classes: Vec<String> = rig
        .engine
        .events(Some("tank"), 0, false)
        .into_iter()
        .map(|e| e.class)
        .collect();
    assert!(
        classes.contains(&"sysevent.fs.zfs.resume".to_string()),
        "{classes:?}"
    );
    rig.check_data();
    rig.write(3);
    rig.engine.sync_pool("tank").unwrap();
    tarn_engine::check::verify_pool(&rig.engine, "tank").unwrap();
    assert_eq!(rig.scrub_errors(), 0);

    rig.engine.export_pool("tank", false).unwrap();
    rig.engine = Arc::new(engine_on(&rig.provider));
    let dirs = ["/sim".to_string()];
    let options = ImportOptions::default();
    rig.engine
        .import_pool(&dirs, "tank", &options, "pool import tank")
        .unwrap();
    rig.check_data();
    assert_eq!(rig.scrub_errors(), 0);
}

/// A scrub started while devices have vanished unnoticed: its txg suspends the pool, and the
/// error says the scrub is recorded and starts once `clear` resumes the pool, which it then
/// does (a refusal would have changed nothing; this one is a change waiting to be written).
#[test]
fn a_scrub_whose_txg_suspends_says_it_starts_after_clear() {
    let rig = Rig::new("continue");
    rig.set_gone(true);
    let names = ["tank".to_string()];
    let (pool, error) = rig
        .engine
        .scrub(&names, ScrubAction::Start, "pool scrub tank")
        .unwrap_err();
    assert_eq!(pool, "tank");
    let text = error.to_string();
    assert!(
        text.starts_with("pool I/O is suspended: ")
            && text.ends_with("; the scrub starts when 'tarn pool clear tank' resumes the pool"),
        "{text}"
    );
    assert_eq!(rig.engine.status("tank").unwrap().state, "SUSPENDED");
    rig.set_gone(false);
    rig.engine.clear("tank", None, "pool clear tank").unwrap();
    let progress = loop {
        let progress = rig.engine.scrub_step("tank", 1 << 20).unwrap().unwrap();
        if progress.state != ScanState::Scanning {
            break progress;
        }
    };
    assert_eq!((progress.state, progress.errors), (ScanState::Finished, 0));
    rig.check_data();
}

/// Under `failmode=wait` a writer blocks, without holding the pool, until `clear`.
#[test]
fn failmode_wait_blocks_a_writer_until_clear() {
    let mut rig = Rig::new("wait");
    rig.suspend();
    let writer = rig.spawn_writer();
    std::thread::sleep(Duration::from_millis(200));
    assert!(!writer.is_finished(), "the writer waits for clear");
    // The pool lock is free meanwhile: status and a refused clear answer.
    assert_eq!(rig.engine.status("tank").unwrap().state, "SUSPENDED");
    assert!(rig.engine.clear("tank", None, "pool clear tank").is_err());
    assert!(
        !writer.is_finished(),
        "a refused clear does not wake it for good"
    );
    rig.set_gone(false);
    rig.engine.clear("tank", None, "pool clear tank").unwrap();
    writer.join().unwrap().unwrap();
    rig.objects[0].1[..4096].fill(9);
    rig.engine.sync_pool("tank").unwrap();
    rig.check_data();
    assert_eq!(rig.scrub_errors(), 0);
}

/// Under `failmode=wait`, `export -f` succeeds while a writer waits, and the writer fails.
#[test]
fn failmode_wait_writer_fails_when_the_pool_is_exported() {
    let mut rig = Rig::new("wait");
    rig.suspend();
    let writer = rig.spawn_writer();
    std::thread::sleep(Duration::from_millis(200));
    assert!(!writer.is_finished(), "the writer waits");
    rig.engine.export_pool("tank", false).unwrap_err();
    rig.engine.export_pool("tank", true).unwrap();
    let failed = writer.join().unwrap();
    assert!(
        matches!(failed, Err(EngineError::Pool(PoolError::Suspended(_)))),
        "{failed:?}"
    );
    assert!(rig.engine.pool_names().is_empty());
}

/// Two mirrors of two simulated devices each, `failmode=continue`, the block cache off.
fn two_mirrors() -> (Arc<SimProvider>, Engine) {
    let provider = SimProvider::with_devices(&NAMES, 128 << 20);
    let engine = engine_on(&provider);
    let mut spec = CreateSpec::one_top(
        "tank",
        TopLayout::Mirror,
        vec![NAMES[0].into(), NAMES[1].into()],
    );
    spec.tops.push(TopSpec {
        layout: TopLayout::Mirror,
        devices: vec![NAMES[2].into(), NAMES[3].into()],
    });
    let options = CreateOptions {
        properties: vec![("failmode".into(), "continue".into())],
        ..CreateOptions::default()
    };
    engine.create_pool(&spec, &options).unwrap();
    let policy = tarn_objects::CachePolicy::None;
    tarn_engine::check::set_data_cache_policy(&engine, "tank", policy).unwrap();
    (provider, engine)
}

/// (vdev, offset) of every copy of every reachable level-0 data block.
fn data_copies(engine: &Engine) -> Vec<(u32, u64)> {
    let blocks = tarn_engine::check::reachable_blocks(engine, "tank").unwrap();
    let data = blocks
        .into_iter()
        .filter(|bp| bp.level == 0 && bp.block_type == tarn_format::BlockType::Data);
    data.flat_map(|bp| {
        bp.copies()
            .map(|d| (d.vdev.0, d.offset))
            .collect::<Vec<_>>()
    })
    .collect()
}

/// Under `failmode=continue`, data on healthy devices still reads while the pool is
/// suspended. Method: two mirrors, the block cache off; an object whose data blocks all sit
/// on one mirror; both sides of the other vanish and a sync suspends the pool; the object
/// reads back from the devices, a write fails at once.
#[test]
fn failmode_continue_still_reads_healthy_data() {
    let (provider, engine) = two_mirrors();
    let before = data_copies(&engine);
    let object = engine.object_create("tank", 128 << 10).unwrap();
    let mut data = vec![0u8; 1 << 20];
    SeededRng::new(7).fill(&mut data);
    engine.object_write("tank", object, 0, &data).unwrap();
    engine.sync_pool("tank").unwrap();
    let mut tops: Vec<u32> = data_copies(&engine)
        .into_iter()
        .filter(|d| !before.contains(d))
        .map(|(vdev, _)| vdev)
        .collect();
    tops.sort_unstable();
    tops.dedup();
    assert_eq!(
        tops.len(),
        1,
        "the object's data sits on one mirror: {tops:?}"
    );
    let lost = if tops[0] == 0 {
        &NAMES[2..]
    } else {
        &NAMES[..2]
    };
    for name in lost {
        provider.get(name).unwrap().set_gone(true);
    }
    let other = engine.object_create("tank", 128 << 10).unwrap();
    engine.object_write("tank", other, 0, &data).unwrap();
    assert!(engine.sync_pool("tank").is_err());
    assert_eq!(engine.status("tank").unwrap().state, "SUSPENDED");
    let mut buf = vec![0u8; data.len()];
    engine.object_read("tank", object, 0, &mut buf).unwrap();
    assert!(buf == data, "healthy data reads back while suspended");
    let refused = engine.object_write("tank", object, 0, &data[..4096]);
    assert!(
        matches!(refused, Err(EngineError::Pool(PoolError::Suspended(_)))),
        "{refused:?}"
    );
}

/// Waits up to two seconds for `thread` to finish; whether it did.
fn finishes<T>(thread: &JoinHandle<T>) -> bool {
    for _ in 0..200 {
        if thread.is_finished() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// Under `failmode=wait` a read that needs missing devices waits for `clear` and then
/// returns the right bytes (ZFS: failmode=wait blocks all I/O until the devices are back and
/// the errors cleared). Method: a raidz1 of four, the block cache off, the first object
/// synced; two devices vanish with no txg in flight, so only the read finds them gone. The
/// reader blocks and the pool is SUSPENDED, saying a read could not reach enough devices;
/// status and a refused `clear` answer meanwhile (the reader holds no pool lock); the
/// devices come back, `clear` resumes, the reader returns the object's bytes. Before the
/// change the read failed at once with EIO.
#[test]
fn failmode_wait_blocks_a_reader_until_clear() {
    let rig = Rig::new("wait");
    rig.uncached();
    rig.set_gone(true);
    let reader = rig.spawn_reader();
    assert!(!finishes(&reader), "the reader waits for clear");
    let status = rig.engine.status("tank").unwrap();
    assert_eq!(status.state, "SUSPENDED", "{status:?}");
    let why = format!("{status:?}");
    assert!(
        why.contains("a read could not reach enough devices"),
        "{why}"
    );
    assert!(rig.engine.clear("tank", None, "pool clear tank").is_err());
    assert!(
        !reader.is_finished(),
        "a refused clear does not end the wait"
    );
    // A writer waits too: the whole pool's I/O is suspended.
    let writer = rig.spawn_writer();
    assert!(!finishes(&writer), "a writer waits beside the reader");
    rig.set_gone(false);
    rig.engine.clear("tank", None, "pool clear tank").unwrap();
    let read = reader.join().unwrap().unwrap();
    // Both wake at `clear`, in either order: the read sees the write whole or not at all.
    let mut written = rig.objects[0].1.clone();
    written[..4096].fill(9);
    assert!(
        read == rig.objects[0].1 || read == written,
        "the reader gets the object's bytes"
    );
    writer.join().unwrap().unwrap();
    assert_eq!(rig.engine.status("tank").unwrap().state, "ONLINE");
    rig.engine.sync_pool("tank").unwrap();
    assert_eq!(rig.scrub_errors(), 0);
}

/// Under `failmode=wait`, `export -f` ends a reader waiting on missing devices with an
/// error (EIO to a front end), and the export succeeds.
#[test]
fn failmode_wait_reader_fails_when_the_pool_is_exported() {
    let rig = Rig::new("wait");
    rig.uncached();
    rig.set_gone(true);
    let reader = rig.spawn_reader();
    assert!(!finishes(&reader), "the reader waits");
    rig.engine.export_pool("tank", true).unwrap();
    let failed = reader.join().unwrap();
    match failed {
        Err(error) => assert_eq!(error.errno(), libc::EIO, "{error:?}"),
        Ok(_) => panic!("a reader of an exported pool gets no bytes"),
    }
    assert!(rig.engine.pool_names().is_empty());
}

/// Damage with every device present is EIO at once, even under `failmode=wait`: `clear`
/// cannot repair it, so nothing waits and the pool is not suspended. Method: bit rot in
/// every data sector of two of the raidz1's four devices, more than its parity.
#[test]
fn failmode_wait_damage_with_all_devices_present_is_eio_at_once() {
    let rig = Rig::new("wait");
    rig.uncached();
    for name in GONE {
        rig.rot_data(name);
    }
    rig.assert_read_fails_at_once("damaged data beyond parity");
}

/// A degraded vdev with damage on top is damage, not an outage: one device of the raidz1
/// gone (within its parity) and bit rot on another make the block unreadable, but the vdev
/// still has every child its parity needs, so `clear` could not bring the block back. The
/// read is EIO at once under `failmode=wait` and the pool is not suspended (before, any
/// missing leaf anywhere made every unreadable block suspend the whole pool).
#[test]
fn failmode_wait_damage_in_a_degraded_vdev_is_eio_at_once() {
    let rig = Rig::new("wait");
    rig.uncached();
    rig.provider.get(GONE[0]).unwrap().set_gone(true);
    rig.rot_data(GONE[1]);
    rig.assert_read_fails_at_once("a missing and a damaged column, beyond raidz1's parity");
}

/// Under `failmode=continue` a read that needs missing devices fails at once, as before,
/// and does not suspend the pool.
#[test]
fn failmode_continue_read_of_missing_devices_fails_at_once() {
    let rig = Rig::new("continue");
    rig.uncached();
    rig.set_gone(true);
    rig.assert_read_fails_at_once("failmode=continue, data beyond parity on missing devices");
}

/// Goal: a thread that waits for a suspended pool tells its `tarn_base::wait` hint first (a
/// FUSE session thread hands its reading on then, so the mount's other requests are still
/// read while it waits). Method: a writer with a counting hint blocks on the suspended pool;
/// the hint has been told before `clear` lets it go.
#[test]
fn a_writer_waiting_for_clear_tells_its_wait_hint() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    struct Count(AtomicUsize);
    impl tarn_base::wait::WaitHint for Count {
        fn before_wait(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let mut rig = Rig::new("wait");
    rig.suspend();
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let writer = {
        let engine = Arc::clone(&rig.engine);
        let object = rig.objects[0].0;
        let hint = Arc::clone(&count);
        std::thread::spawn(move || {
            tarn_base::wait::set_hint(Some(hint));
            engine.object_write("tank", object, 0, &[9u8; 4096])
        })
    };
    assert!(!finishes(&writer), "the writer waits for clear");
    assert!(count.0.load(Ordering::SeqCst) >= 1, "told before it waited");
    rig.set_gone(false);
    rig.engine.clear("tank", None, "pool clear tank").unwrap();
    writer.join().unwrap().unwrap();
}
