//! The pre-write (module `prewrite`): the open txg's whole dirty records written ahead of
//! its sync, mostly without the pool lock, and adopted by the sync when unchanged. Goal: a
//! record written ahead and not changed is adopted (the sync does not write its data
//! again) and reads back after export and import; one changed, unlinked, or of a
//! destroyed dataset meanwhile is not adopted and its space is freed (the pool's space
//! closes exactly, `check::verify_pool`); a power cut at any device operation between the
//! pre-write and the commit leaves an importable pool whose space closes; writers and a
//! sync thread pre-writing and syncing at once never lose or mix up bytes. Method:
//! filesystem `tank/fs` (64 KiB records) on simulated devices; the engine's counts of
//! pre-written, adopted and dropped blocks; file contents compared with what was written.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::{CutProvider, Host, PLAIN, crash_all, crash_plan, seeded_bytes, sim_devices_with};
use tarn_engine::{DatasetId, Engine, EngineError, FsOp, ImportOptions, TopLayout, check};
use tarn_posix::{Creds, FileKind, Fs, Ino, PosixError};

const ME: Creds = Creds {
    uid: 1000,
    gid: 100,
};

const HOST: Host = Host {
    hostid: 11,
    seed: 31,
    ..PLAIN
};

const RECORD: usize = 64 << 10;

struct World {
    provider: Arc<CutProvider>,
    engine: Engine,
    dataset: DatasetId,
}

impl World {
    /// Pool `tank`, raidz1 over 3 devices, with filesystem `tank/fs` of 64 KiB records.
    fn new(seed: u64) -> World {
        let provider = Arc::new(CutProvider::default());
        let names = sim_devices_with(&provider.sims, "d", 0..3, 256 << 20, |i| {
            crash_plan(seed * 10 + i as u64)
        });
        let spec = common::spec_with_logs(TopLayout::Raidz(1), names, Vec::new());
        let engine = HOST.create_tank(&provider, &spec, &[]);
        let props = [("recordsize".to_string(), "64K".to_string())];
        engine
            .create_dataset("tank/fs", &props, false, "create")
            .unwrap();
        let (_, dataset) = engine.find_dataset("tank/fs").unwrap();
        World {
            provider,
            engine,
            dataset,
        }
    }

    fn op<R>(
        &self,
        f: impl FnOnce(&mut Fs<'_>, Ino) -> Result<R, PosixError>,
    ) -> Result<R, EngineError> {
        self.engine.fs_op("tank", self.dataset, FsOp::Modify, |fs| {
            let root = fs.root()?;
            f(fs, root)
        })
    }

    /// Writes `data` at `offset` of the file `name` in the root, made when missing.
    fn write(&self, name: &[u8], offset: u64, data: &[u8]) {
        self.op(|fs, root| {
            let ino = match fs.lookup(root, name) {
                Ok(attr) => attr.ino,
                Err(_) => fs.mknod(root, name, FileKind::Regular, 0o644, 0, ME)?.ino,
            };
            fs.write(ino, offset, data).map(drop)
        })
        .unwrap();
    }

    fn unlink(&self, name: &[u8]) {
        self.op(|fs, root| fs.unlink(root, name).map(drop)).unwrap();
    }

    fn read(&self, name: &[u8], len: usize) -> Vec<u8> {
        self.engine
            .fs_op("tank", self.dataset, FsOp::Read, |fs| {
                let root = fs.root()?;
                let ino = fs.lookup(root, name)?.ino;
                fs.read(ino, 0, len as u32)
            })
            .unwrap()
    }

    /// Bytes written to every device so far.
    fn device_bytes(&self) -> u64 {
        let devices = self.provider.sims.all();
        devices.iter().map(|(_, d)| d.stats().bytes_written).sum()
    }

    fn stats(&self) -> tarn_engine::prewrite::PrewriteStats {
        self.engine.prewrite_stats("tank").unwrap()
    }

    fn export_import(&mut self) {
        self.engine.export_pool("tank", false).unwrap();
        self.engine = HOST.engine(&self.provider);
        common::import_tank(&self.engine, &ImportOptions::default()).unwrap();
        let (_, dataset) = self.engine.find_dataset("tank/fs").unwrap();
        self.dataset = dataset;
    }
}

/// Goal: records written ahead and unchanged are adopted by the next sync, which then
/// writes far less than their data, and they read back after export and import. Method:
/// a 1 MiB file (16 records) pre-written, then synced; device bytes of the sync against the
/// same sync without a pre-write.
#[test]
fn prewritten_records_are_adopted_and_read_back() {
    const DATA: usize = 16 * RECORD;
    let mut synced = Vec::new();
    for prewrite in [false, true] {
        let mut world = World::new(1);
        let data = seeded_bytes(DATA, 5);
        world.write(b"big", 0, &data);
        if prewrite {
            let report = world.engine.prewrite("tank").unwrap().unwrap();
            assert_eq!(report.blocks, 16, "every whole record written ahead");
            assert_eq!(report.bytes, DATA as u64);
        }
        let before = world.device_bytes();
        world.engine.sync_pool("tank").unwrap();
        synced.push(world.device_bytes() - before);
        let stats = world.stats();
        let expected = if prewrite { 16 } else { 0 };
        assert_eq!(
            (stats.written, stats.adopted, stats.dropped),
            (expected, expected, 0)
        );
        check::verify_pool(&world.engine, "tank").unwrap();
        world.export_import();
        assert_eq!(world.read(b"big", DATA), data, "adopted records read back");
        check::verify_pool(&world.engine, "tank").unwrap();
    }
    // raidz1 of 3 writes each record's data and half as much parity: 1.5 MiB.
    assert!(
        synced[0] >= DATA as u64,
        "without a pre-write the sync writes the data"
    );
    assert!(
        synced[1] < DATA as u64 / 4,
        "the sync adopted the records: {} bytes written against {}",
        synced[1],
        synced[0]
    );
}

/// Goal: a record changed (whole or in part), or whose dataset is destroyed, after it was
/// written ahead is not adopted; its space is freed (the space closes), and the file holds
/// the new bytes; an unlinked file's records are adopted and freed with the file. Method:
/// two files and a second dataset pre-written, then changed in every such way before the
/// sync; the adopted and dropped counts, the checker, the contents after export and
/// import.
#[test]
fn prewritten_records_changed_before_the_sync_are_freed() {
    const DATA: usize = 8 * RECORD;
    let mut world = World::new(2);
    // Made first: a dataset's create commits a txg.
    world
        .engine
        .create_dataset("tank/other", &[], false, "create")
        .unwrap();
    let mut data = seeded_bytes(DATA, 7);
    world.write(b"a", 0, &data);
    world.write(b"gone", 0, &seeded_bytes(2 * RECORD, 8));
    let (_, other) = world.engine.find_dataset("tank/other").unwrap();
    world
        .engine
        .fs_op("tank", other, FsOp::Modify, |fs| {
            let root = fs.root()?;
            let ino = fs.mknod(root, b"x", FileKind::Regular, 0o644, 0, ME)?.ino;
            fs.write(ino, 0, &seeded_bytes(4 * (128 << 10), 9))
                .map(drop)
        })
        .unwrap();
    let report = world.engine.prewrite("tank").unwrap().unwrap();
    assert_eq!(report.blocks, 8 + 2 + 4);
    // Record 1 rewritten whole, record 3 in part; file `gone` unlinked; `tank/other`
    // destroyed.
    let whole = seeded_bytes(RECORD, 10);
    world.write(b"a", RECORD as u64, &whole);
    data[RECORD..2 * RECORD].copy_from_slice(&whole);
    let part = seeded_bytes(100, 11);
    let at = 3 * RECORD + 5;
    world.write(b"a", at as u64, &part);
    data[at..at + 100].copy_from_slice(&part);
    world.unlink(b"gone");
    world
        .engine
        .destroy_dataset("tank/other", false, "destroy")
        .unwrap();
    // Adopted: the 6 unchanged records of `a`, and the 2 of `gone`, which stays on the
    // unlinked set with its data until it is reclaimed (then freed through its tree).
    // Dropped: the 2 changed records and the 4 of the destroyed dataset.
    let stats = world.stats();
    assert_eq!((stats.written, stats.adopted, stats.dropped), (14, 8, 6));
    check::verify_pool(&world.engine, "tank").unwrap();
    assert_eq!(world.read(b"a", DATA), data);
    world.engine.sync_pool("tank").unwrap();
    check::verify_pool(&world.engine, "tank").unwrap();
    world.export_import();
    assert_eq!(
        world.read(b"a", DATA),
        data,
        "the changed records, not the pre-written"
    );
    check::verify_pool(&world.engine, "tank").unwrap();
}

/// Goal: a power cut at any device operation from a pre-write to the commit of the txg
/// that adopts its blocks leaves an importable pool whose space closes (the pre-written
/// blocks are free unless that txg committed) and whose file holds either the committed or
/// the new bytes. Method: for every cut point k, a committed file, its records rewritten
/// and pre-written, then a sync, with the power cut after k device operations.
#[test]
fn a_power_cut_between_prewrite_and_commit_leaves_space_exact() {
    const DATA: usize = 4 * RECORD;
    let old = seeded_bytes(DATA, 20);
    let new = seeded_bytes(DATA, 21);
    let mut k = 0;
    let mut committed_once = false;
    loop {
        let mut world = World::new(3 + k);
        world.write(b"f", 0, &old);
        world.engine.sync_pool("tank").unwrap();
        world.write(b"f", 0, &new);
        *world.provider.cut.0.lock().unwrap() = Some(k);
        let prewrote = world.engine.prewrite("tank").unwrap();
        let synced = world.engine.sync_pool("tank");
        let cut = *world.provider.cut.0.lock().unwrap() == Some(0);
        world.engine = HOST.engine(&world.provider);
        crash_all(&world.provider.sims);
        *world.provider.cut.0.lock().unwrap() = None;
        common::import_tank(&world.engine, &ImportOptions::default()).unwrap();
        let (_, dataset) = world.engine.find_dataset("tank/fs").unwrap();
        world.dataset = dataset;
        check::verify_pool(&world.engine, "tank").unwrap();
        let got = world.read(b"f", DATA);
        assert!(
            got == old || got == new,
            "cut at {k}: the file is one txg or the other"
        );
        if !cut {
            assert!(synced.is_ok() && prewrote.is_some());
            assert_eq!(got, new, "no cut: the txg committed");
            break;
        }
        committed_once |= got == new;
        k += 1;
    }
    assert!(
        k > 10,
        "the cut points cover the pre-write and the sync: {k}"
    );
    assert!(committed_once || k > 0);
}

/// Writer `w` of [`writers_and_a_prewriting_syncer_keep_every_byte`]: file `fw` written,
/// then its records rewritten (whole, and in part every third time) until the syncer's
/// pre-writes wrote something at least 20 times; returns the file's bytes.
fn rewrite_records(world: &World, w: u64, prewrites: &AtomicU64) -> Vec<u8> {
    const DATA: usize = 8 * RECORD;
    let name = format!("f{w}");
    let mut data = seeded_bytes(DATA, 100 + w);
    world.write(name.as_bytes(), 0, &data);
    let mut round = 0u64;
    while round < 60 || prewrites.load(Ordering::Relaxed) < 20 && round < 20_000 {
        round += 1;
        let seed = 1000 * w + round;
        let record = (seed * 7 % 8) as usize;
        let (at, len) = if round.is_multiple_of(3) {
            (record * RECORD + 300, 5000)
        } else {
            (record * RECORD, RECORD)
        };
        let bytes = seeded_bytes(len, seed);
        world.write(name.as_bytes(), at as u64, &bytes);
        data[at..at + len].copy_from_slice(&bytes);
    }
    data
}

/// Goal: with writers rewriting records while a sync thread pre-writes and syncs, every
/// file ends with its last bytes, in memory and after export and import, and the space
/// closes. Method: 3 writer threads, each rewriting the records of its own file with
/// seeded bytes (whole records and parts of them); one thread alternating pre-writes and
/// pipelined syncs until the writers are done.
#[test]
fn writers_and_a_prewriting_syncer_keep_every_byte() {
    const DATA: usize = 8 * RECORD;
    let mut world = World::new(4);
    let stop = AtomicBool::new(false);
    // Pre-writes that wrote something: the writers go on until there were enough.
    let prewrites = AtomicU64::new(0);
    let finals: Vec<Vec<u8>> = std::thread::scope(|scope| {
        let world = &world;
        let (stop, prewrites) = (&stop, &prewrites);
        let syncer = scope.spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if world.engine.prewrite("tank").unwrap().is_some() {
                    prewrites.fetch_add(1, Ordering::Relaxed);
                }
                if rounds % 2 == 1 {
                    world.engine.sync_pool_pipelined("tank").unwrap();
                }
                rounds += 1;
            }
        });
        let writers: Vec<_> = (0..3u64)
            .map(|w| scope.spawn(move || rewrite_records(world, w, prewrites)))
            .collect();
        let finals = writers.into_iter().map(|w| w.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        syncer.join().unwrap();
        finals
    });
    let stats = world.stats();
    assert!(stats.written > 0 && stats.adopted > 0, "{stats:?}");
    for (w, data) in finals.iter().enumerate() {
        assert_eq!(
            &world.read(format!("f{w}").as_bytes(), DATA),
            data,
            "file {w}"
        );
    }
    world.engine.sync_pool("tank").unwrap();
    check::verify_pool(&world.engine, "tank").unwrap();
    world.export_import();
    for (w, data) in finals.iter().enumerate() {
        assert_eq!(
            &world.read(format!("f{w}").as_bytes(), DATA),
            data,
            "file {w}"
        );
    }
    check::verify_pool(&world.engine, "tank").unwrap();
}

/// Goal: a pre-write hands each queued device its columns as runs, so that its I/O thread
/// writes a run of adjacent columns as one access instead of being woken for each column
/// (tarn-device `plug`). Method: raidz1 of 3 simulated devices behind write-behind queues
/// (as real files are), 64 records (64 KiB, 192 columns) of one file pre-written; the
/// devices' write accesses to the data area counted until the pre-write's bytes have all
/// landed. Negative control: without the plug in the pre-write's step 4 the I/O threads,
/// woken at the first column of each run, took 9 to 28 accesses (6 with it).
#[test]
fn prewrite_writes_runs_of_columns_per_device_access() {
    const BLOCKS: usize = 64;
    let provider = Arc::new(common::gate::GatedProvider {
        queued: true,
        ..common::gate::GatedProvider::default()
    });
    let names = common::sim_devices(&provider.sims, "d", 0..3, 256 << 20);
    let spec = common::spec_with_logs(TopLayout::Raidz(1), names, Vec::new());
    let engine = HOST.create_tank(&provider, &spec, &[]);
    let props = [("recordsize".to_string(), "64K".to_string())];
    engine
        .create_dataset("tank/fs", &props, false, "create")
        .unwrap();
    let (_, dataset) = engine.find_dataset("tank/fs").unwrap();
    // Whatever the create queued has landed: the count starts idle.
    engine.sync_pool("tank").unwrap();
    let data = seeded_bytes(BLOCKS * RECORD, 7);
    engine
        .fs_op("tank", dataset, FsOp::Modify, |fs| {
            let root = fs.root()?;
            let ino = fs.mknod(root, b"f", FileKind::Regular, 0o644, 0, ME)?.ino;
            fs.write(ino, 0, &data).map(drop)
        })
        .unwrap();
    let (accesses0, bytes0) = provider.gate.data_writes();
    let report = engine.prewrite("tank").unwrap().unwrap();
    assert_eq!(report.blocks, BLOCKS as u64);
    // raidz1 of 3: each 64 KiB record is two 32 KiB data columns and a parity column.
    let expected = (BLOCKS * RECORD * 3 / 2) as u64;
    let mut landed = (0, 0);
    // Polled every 5 ms for up to 20 s.
    for _ in 0..4000 {
        let (accesses, bytes) = provider.gate.data_writes();
        landed = (accesses - accesses0, bytes - bytes0);
        if landed.1 >= expected {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(landed.1, expected, "the pre-write's columns landed");
    // 2 MiB per device, in one run (the simulated layout is deterministic): 2 accesses
    // each at AGGREGATE_MAX (1 MiB). Unplugged, 9 to 28 on a loaded host.
    assert!(
        landed.0 <= 6,
        "{} accesses for {} columns",
        landed.0,
        BLOCKS * 3
    );
    engine.sync_pool("tank").unwrap();
    check::verify_pool(&engine, "tank").unwrap();
}
