//! `logbias=throughput` for files on simulated devices (ZFS's `WR_INDIRECT`): an `fsync`
//! writes the files' whole dirty records in place and logs block pointers to them (record
//! type 16) instead of their bytes; the next txg adopts each block still current and frees
//! the others. Goal: what an `fsync` acknowledged survives a power cut at any instant, the
//! data goes to the pool once, an unlink, truncate, overwrite or rename before the txg
//! never brings back wrong bytes, write errors during the write-ahead lose no `fsync`, and
//! a block that does not verify at replay is reported and never installed. Method: a
//! filesystem snapshot (`common::tree`) taken when `fsync` returns is the model; after the
//! power cut (every unflushed write dropped or torn) and an import it must be equal, and
//! the pool must check clean (space: every block written ahead adopted or freed once).

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;

use common::tree::Snapshot;
use common::{CutProvider, Host, PLAIN, crash_all, crash_plan, seeded_bytes, sim_devices_with};
use tarn_device::FaultPlan;
use tarn_engine::{DatasetId, Engine, EngineError, FsOp, ImportOptions, TopLayout, check};
use tarn_posix::{Creds, FileKind, Fs, Ino, PosixError, RenameFlags, SetAttr};

const ME: Creds = Creds {
    uid: 1000,
    gid: 100,
};

const HOST: Host = Host {
    hostid: 9,
    seed: 29,
    ..PLAIN
};
const HOST_LATER: Host = Host {
    secs: 1_800_000_000,
    ..HOST
};

struct World {
    provider: Arc<CutProvider>,
    engine: Engine,
    dataset: DatasetId,
}

impl World {
    /// Pool `tank` of `layout` over `count` devices (and a log device with `log`), failmode
    /// continue, with dataset `tank/fs` of `logbias` and 64 KiB records whose log chain is
    /// started (one fsync).
    fn new(seed: u64, layout: TopLayout, count: usize, log: bool, logbias: &str) -> World {
        let provider = Arc::new(CutProvider::default());
        let all = count + usize::from(log);
        let mut names = sim_devices_with(&provider.sims, "d", 0..all, 128 << 20, |i| {
            crash_plan(seed * 10 + i as u64)
        });
        let logs = names.split_off(count);
        let spec = common::spec_with_logs(layout, names, logs);
        let engine = HOST.create_tank(&provider, &spec, &[("failmode", "continue")]);
        let props = [("logbias", logbias), ("recordsize", "64K")]
            .map(|(k, v)| (k.to_string(), v.to_string()));
        engine
            .create_dataset("tank/fs", &props, false, "create")
            .unwrap();
        let (_, dataset) = engine.find_dataset("tank/fs").unwrap();
        let mut world = World {
            provider,
            engine,
            dataset,
        };
        world.write(b"start", 0, b"chain").unwrap();
        world.fsync().unwrap();
        world
    }

    fn op<R>(
        &mut self,
        f: impl FnOnce(&mut Fs<'_>, Ino) -> Result<R, PosixError>,
    ) -> Result<R, EngineError> {
        self.engine.fs_op("tank", self.dataset, FsOp::Modify, |fs| {
            let root = fs.root()?;
            f(fs, root)
        })
    }

    /// Writes `data` at `offset` of the file `name` in the root, made when missing.
    fn write(&mut self, name: &[u8], offset: u64, data: &[u8]) -> Result<(), EngineError> {
        self.op(|fs, root| {
            let ino = match fs.lookup(root, name) {
                Ok(attr) => attr.ino,
                Err(_) => fs.mknod(root, name, FileKind::Regular, 0o644, 0, ME)?.ino,
            };
            fs.write(ino, offset, data).map(drop)
        })
    }

    fn fsync(&mut self) -> Result<(), EngineError> {
        self.engine.fs_sync("tank", self.dataset)
    }

    fn committed(&self) -> u64 {
        common::committed(&self.engine).0
    }

    fn snapshot(&self) -> Snapshot {
        common::tree::snapshot(&self.engine, self.dataset)
    }

    /// Bytes of the log's blocks now.
    fn log_bytes(&self) -> u64 {
        check::log_blocks(&self.engine, "tank", self.dataset)
            .unwrap()
            .iter()
            .map(|dva| dva.asize)
            .sum()
    }

    /// Bytes written to every device so far.
    fn device_bytes(&self) -> u64 {
        let devices = self.provider.sims.all();
        devices.iter().map(|(_, d)| d.stats().bytes_written).sum()
    }

    /// Power cut: the engine is gone and every device drops or tears its unflushed writes;
    /// `before_import` runs on the devices, then a new engine imports the pool (replaying
    /// the log).
    fn cut_and_import(&mut self, before_import: impl FnOnce(&CutProvider)) {
        self.engine = HOST_LATER.engine(&self.provider);
        crash_all(&self.provider.sims);
        *self.provider.cut.0.lock().unwrap() = None;
        before_import(&self.provider);
        common::import_tank(&self.engine, &ImportOptions::default()).unwrap();
        let (_, dataset) = self.engine.find_dataset("tank/fs").unwrap();
        self.dataset = dataset;
    }

    /// What the import replayed from `tank/fs`: records, and why it stopped.
    fn replayed(&self) -> (u64, Option<String>) {
        let reports = self.engine.log_replay_reports("tank").unwrap();
        let report = reports.iter().find(|r| r.dataset == "tank/fs").unwrap();
        (report.records, report.stopped.clone())
    }
}

/// Goal: under `logbias=throughput` an fsync writes the file's whole records in place and
/// the log holds only pointers to them; the next txg adopts those blocks instead of writing
/// the data again, a record changed again before the txg is freed instead (the pool's
/// space closes), and a power cut after a later fsync replays the indirect records. Method:
/// the same 1 MiB file written and fsync'd in a `latency` and a `throughput` world: the
/// throughput log is a small fraction of the latency log, the following txg writes less
/// than half the data there and at least all of it under latency (device bytes); one record
/// overwritten after the fsync is not adopted (the checker finds no leak, no double use);
/// a partial write stays a data record; then an fsync and a cut: the fsync'd tree is back.
#[test]
fn fsync_writes_whole_records_once_and_logs_pointers() {
    const DATA: usize = 1 << 20;
    let mut measured = Vec::new();
    for logbias in ["latency", "throughput"] {
        let mut world = World::new(3, TopLayout::Raidz(1), 3, false, logbias);
        let txg = world.committed();
        let log_before = world.log_bytes();
        world.write(b"big", 0, &seeded_bytes(DATA, 8)).unwrap();
        world.fsync().unwrap();
        assert_eq!(
            world.committed(),
            txg,
            "{logbias}: the fsync went to the log"
        );
        let log_bytes = world.log_bytes() - log_before;
        let ahead = check::written_ahead(&world.engine, "tank", world.dataset).unwrap();
        // A record changed after its fsync is not the one written ahead any more.
        world.write(b"big", 70_000, &seeded_bytes(4096, 9)).unwrap();
        let before = world.device_bytes();
        world.engine.sync_pool("tank").unwrap();
        let sync_bytes = world.device_bytes() - before;
        check::verify_pool(&world.engine, "tank").unwrap();
        let left = check::written_ahead(&world.engine, "tank", world.dataset).unwrap();
        assert!(left.is_empty(), "{logbias}: the sync adopted or freed all");
        // A whole record and a partial write, fsync'd; a write never fsync'd.
        world
            .write(b"big", 128 << 10, &seeded_bytes(64 << 10, 10))
            .unwrap();
        world.write(b"small", 0, &seeded_bytes(100, 11)).unwrap();
        world.fsync().unwrap();
        let durable = world.snapshot();
        world.write(b"big", 0, &seeded_bytes(64 << 10, 12)).unwrap();
        world.cut_and_import(|_| {});
        assert_eq!(
            world.snapshot(),
            durable,
            "{logbias}: fsync'd writes replayed"
        );
        let (records, stopped) = world.replayed();
        assert_eq!(stopped, None, "{logbias}");
        // mknod of small and three writes under either logbias.
        assert_eq!(records, 3, "{logbias}");
        check::verify_pool(&world.engine, "tank").unwrap();
        measured.push((log_bytes, ahead.len(), sync_bytes));
    }
    let (latency, throughput) = (measured[0], measured[1]);
    assert_eq!(latency.1, 0, "latency writes nothing ahead");
    assert_eq!(throughput.1, DATA / (64 << 10), "one block per record");
    assert!(
        throughput.0 * 4 < latency.0,
        "the log holds pointers, not data: {measured:?}"
    );
    assert!(
        latency.2 >= DATA as u64,
        "latency's txg writes the data: {measured:?}"
    );
    assert!(
        throughput.2 < DATA as u64 / 2,
        "throughput's txg adopts the blocks: {measured:?}"
    );
}

/// One step of the crash-at-any-instant workload.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Write (file, offset, length).
    Write(&'static [u8], u64, usize),
    /// Truncate (file, size).
    Truncate(&'static [u8], u64),
    Unlink(&'static [u8]),
    Rename(&'static [u8], &'static [u8]),
    Fsync,
}

const WORKLOAD: [Step; 12] = [
    Step::Write(b"a", 0, 200_000),
    Step::Write(b"b", 0, 64 << 10),
    Step::Fsync,
    Step::Write(b"a", 65536, 65536),
    Step::Truncate(b"b", 10_000),
    Step::Write(b"c", 4096, 130_000),
    Step::Fsync,
    Step::Unlink(b"a"),
    Step::Rename(b"c", b"d"),
    Step::Write(b"d", 0, 3000),
    Step::Write(b"e", 0, 128 << 10),
    Step::Fsync,
];

fn step(world: &mut World, step: Step, seed: u64) -> Result<(), EngineError> {
    match step {
        Step::Write(name, offset, len) => world.write(name, offset, &seeded_bytes(len, seed)),
        Step::Truncate(name, size) => world.op(|fs, root| {
            let ino = fs.lookup(root, name)?.ino;
            let changes = SetAttr {
                size: Some(size),
                ..SetAttr::default()
            };
            fs.setattr(ino, &changes).map(drop)
        }),
        Step::Unlink(name) => world.op(|fs, root| {
            let ino = fs.lookup(root, name)?.ino;
            fs.unlink(root, name)?;
            fs.reclaim(ino)
        }),
        Step::Rename(from, to) => world.op(|fs, root| {
            fs.rename(root, from, root, to, RenameFlags::default())
                .map(drop)
        }),
        Step::Fsync => world.fsync(),
    }
}

/// Goal: a power cut after k device operations of a workload of writes (whole records and
/// partial ones), truncates, unlinks, renames and fsyncs under `logbias=throughput` leaves,
/// after import, the tree at the last fsync that returned or at the one the cut interrupted
/// (its commit may have reached the disks); never anything else, and the pool checks clean.
/// Method: for k = 0, 1, 2, ... until the workload runs to its end, run it with a cut after
/// k writes or flushes, crash, import, compare; both outcomes must be seen over the run.
#[test]
fn a_crash_at_any_instant_keeps_every_fsync_with_logbias_throughput() {
    let (mut seen_acked, mut seen_interrupted) = (false, false);
    for k in 0..1000u64 {
        let mut world = World::new(100 + k, TopLayout::Raidz(1), 3, k % 2 == 1, "throughput");
        for (_, device) in world.provider.sims.all() {
            device.set_plan(FaultPlan {
                drop_on_crash: 300_000,
                torn_on_crash: 200_000,
                ..device.plan()
            });
        }
        *world.provider.cut.0.lock().unwrap() = Some(k);
        let mut durable = world.snapshot();
        let mut interrupted = None;
        for (i, &s) in WORKLOAD.iter().enumerate() {
            let before = world.snapshot();
            match step(&mut world, s, k * 100 + i as u64) {
                Ok(()) if matches!(s, Step::Fsync) => durable = world.snapshot(),
                Ok(()) => {}
                Err(_) => {
                    interrupted = Some(before);
                    break;
                }
            }
        }
        let completed = interrupted.is_none();
        world.cut_and_import(|_| {});
        let found = world.snapshot();
        if found == durable {
            seen_acked = true;
        } else {
            let interrupted = interrupted.unwrap_or_else(|| panic!("k={k}: fsync'd state lost"));
            assert!(found == interrupted, "k={k}: neither model");
            seen_interrupted = true;
        }
        check::verify_pool(&world.engine, "tank").unwrap_or_else(|e| panic!("k={k}: {e}"));
        if completed {
            assert!(seen_acked && seen_interrupted, "cuts on both sides");
            return;
        }
    }
    panic!("the workload never completed");
}

/// What happens to a file between its fsync and the txg.
#[derive(Clone, Copy, Debug)]
enum After {
    Unlink,
    Truncate,
    Overwrite,
    Rename,
}

/// Goal: an unlink, truncate, overwrite or rename of a file after its fsync wrote its
/// records ahead: with a cut before anything else is durable the fsync'd file is back
/// whole; with a second fsync the change is back too (the file gone, cut, rewritten,
/// renamed: never the written-ahead bytes where they no longer belong); with a txg
/// between, the blocks the change made stale are freed, the others adopted, and space
/// closes. Method: for each change, three worlds: cut after the change, fsync then cut,
/// sync then cut; each compares the tree with the model and checks the pool.
#[test]
fn unlink_truncate_overwrite_or_rename_after_an_fsync() {
    for after in [
        After::Unlink,
        After::Truncate,
        After::Overwrite,
        After::Rename,
    ] {
        for ending in 0..3 {
            let mut world = World::new(40, TopLayout::Disk, 1, false, "throughput");
            world.write(b"f", 0, &seeded_bytes(256 << 10, 1)).unwrap();
            world.fsync().unwrap();
            let fsynced = world.snapshot();
            let ahead = check::written_ahead(&world.engine, "tank", world.dataset).unwrap();
            assert_eq!(ahead.len(), 4, "{after:?}: four records written ahead");
            let changed = match after {
                After::Unlink => step(&mut world, Step::Unlink(b"f"), 0),
                After::Truncate => step(&mut world, Step::Truncate(b"f", 70_000), 0),
                After::Overwrite => step(&mut world, Step::Write(b"f", 60_000, 80_000), 2),
                After::Rename => step(&mut world, Step::Rename(b"f", b"g"), 0),
            };
            changed.unwrap();
            let model = match ending {
                0 => fsynced,
                1 => {
                    world.fsync().unwrap();
                    world.snapshot()
                }
                _ => {
                    world.engine.sync_pool("tank").unwrap();
                    check::verify_pool(&world.engine, "tank").unwrap();
                    world.snapshot()
                }
            };
            assert_eq!(ending == 0, model != world.snapshot(), "{after:?}");
            world.cut_and_import(|_| {});
            assert_eq!(world.snapshot(), model, "{after:?} ending {ending}");
            check::verify_pool(&world.engine, "tank").unwrap();
        }
    }
}

/// Goal: write errors during the write-ahead lose no fsync and never leave wrong bytes:
/// within parity (one device of a raidz1 failing every write) the fsync succeeds and its
/// tree survives a cut; beyond it (every data device failing, the log device healthy: the
/// log could take the records but the blocks they would name are not written) an fsync
/// that returns success must be durable, and one that fails leaves the last durable tree
/// or the one it was making. Method: fsync under the fault, cut, import with the fault
/// gone, compare, check the pool.
#[test]
fn write_errors_during_the_write_ahead_lose_no_fsync() {
    for (failing, log) in [(1usize, false), (3, true)] {
        let mut world = World::new(50, TopLayout::Raidz(1), 3, log, "throughput");
        let durable = world.snapshot();
        world.write(b"f", 0, &seeded_bytes(320 << 10, 3)).unwrap();
        let wanted = world.snapshot();
        for (name, device) in world.provider.sims.all() {
            let data = (0..failing).any(|i| name == format!("/sim/d{i}"));
            if data {
                device.set_plan(FaultPlan {
                    write_eio: 1_000_000,
                    ..device.plan()
                });
            }
        }
        let result = world.fsync();
        if failing == 1 {
            assert!(result.is_ok(), "{result:?}");
        }
        world.cut_and_import(|provider| {
            for (_, device) in provider.sims.all() {
                device.set_plan(crash_plan(51));
            }
        });
        let found = world.snapshot();
        if result.is_ok() {
            assert_eq!(
                found, wanted,
                "{failing}: an fsync that returned is durable"
            );
        } else {
            assert!(
                found == durable || found == wanted,
                "{failing}: neither model"
            );
        }
        check::verify_pool(&world.engine, "tank").unwrap();
    }
}

/// Goal: a block an indirect record names that does not verify at replay is never
/// installed as the file's bytes: in the chain's last commit that commit is dropped whole
/// (its single flush had not returned: every block it wrote would be intact if it had), in
/// an earlier commit the replay stops there and says why. Method: two fsyncs of a file
/// each (`a` then `b`), bit rot in one record of one of them on the single device, cut,
/// import: the tree is the one before the rotten commit (for `b`), or holds `a` without
/// its rotten record's bytes (the replay stopped at it, and the report names the block).
#[test]
fn a_rotten_indirect_block_is_reported_and_never_installed() {
    for rotten in [b"a", b"b"] {
        let mut world = World::new(60, TopLayout::Disk, 1, false, "throughput");
        world.write(b"a", 0, &seeded_bytes(128 << 10, 4)).unwrap();
        world.fsync().unwrap();
        let after_a = world.snapshot();
        let ahead_a = check::written_ahead(&world.engine, "tank", world.dataset).unwrap();
        world.write(b"b", 0, &seeded_bytes(128 << 10, 5)).unwrap();
        world.fsync().unwrap();
        let ahead = check::written_ahead(&world.engine, "tank", world.dataset).unwrap();
        let ahead_b: Vec<_> = ahead.iter().filter(|bp| !ahead_a.contains(bp)).collect();
        assert_eq!((ahead_a.len(), ahead_b.len()), (2, 2));
        let block = if rotten == b"a" {
            ahead_a[1]
        } else {
            *ahead_b[0]
        };
        world.cut_and_import(|provider| {
            let device = provider.sims.get("/sim/d0").unwrap();
            device
                .rot((4 << 20) + block.dvas[0].offset + 100, 1)
                .unwrap();
        });
        let found = world.snapshot();
        let (_, stopped) = world.replayed();
        if rotten == b"b" {
            assert_eq!(found, after_a, "the last commit is dropped whole");
            assert_eq!(stopped, None);
        } else {
            let why = stopped.expect("the replay says why it stopped");
            assert!(why.contains("indirect block"), "{why}");
            let content = world
                .engine
                .fs_op("tank", world.dataset, FsOp::Read, |fs| {
                    let root = fs.root()?;
                    let ino = fs.lookup(root, b"a")?.ino;
                    fs.read(ino, 0, 1 << 20)
                })
                .unwrap();
            let original = seeded_bytes(128 << 10, 4);
            assert_eq!(
                content,
                original[..64 << 10],
                "a's first record, nothing after"
            );
            assert!(
                !found.keys().any(|path| path == b"/b"),
                "b's commit not replayed"
            );
        }
        check::verify_pool(&world.engine, "tank").unwrap();
    }
}
