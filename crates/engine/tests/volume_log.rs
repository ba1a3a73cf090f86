//! Volume writes through the intent log on simulated devices. Goal: what a volume flush or a
//! FUA write (or any change under `sync=always`) acknowledged survives a power cut at any
//! instant, without a txg commit, from a log on the data vdevs or on a log device, also
//! with a data device gone after the cut (within parity); nothing after the last durable
//! point is replayed; the pool checks clean. Method: the volume's bytes, tracked by the
//! test as it writes, are the model; the model at the last acknowledged durable point must
//! be what the volume reads after the cut and the import (or, when the cut fell inside a
//! flush that then failed, the model at that flush). The crash tests run with both
//! `logbias` values: `throughput` writes the volume's blocks in place and logs pointers to
//! them (indirect records), which the next txg adopts.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;

use common::{CutProvider, Host, PLAIN, crash_all, crash_plan, seeded_bytes, sim_devices_with};
use tarn_base::SeededRng;
use tarn_device::FaultPlan;
use tarn_engine::{DatasetId, Engine, EngineError, ImportOptions, TopLayout, VolumeSpec, check};

/// The volume: 4 MiB of 4 KiB blocks.
const SIZE: usize = 4 << 20;

const HOST: Host = Host {
    hostid: 5,
    seed: 19,
    ..PLAIN
};

struct World {
    provider: Arc<CutProvider>,
    engine: Engine,
    dataset: DatasetId,
    /// What the volume holds now (every acknowledged change).
    model: Vec<u8>,
}

impl World {
    /// Pool `tank` of raidz1 over three devices (and a log device with `log`), failmode
    /// continue (a cut flush returns its error instead of waiting for `clear`), with sparse
    /// volume `tank/v` whose log chain is started (one flush after a first write).
    fn new(seed: u64, log: bool) -> World {
        World::with_logbias(seed, log, "latency")
    }

    /// [`World::new`] with the volume's `logbias`.
    fn with_logbias(seed: u64, log: bool, logbias: &str) -> World {
        let provider = Arc::new(CutProvider::default());
        let count = 3 + usize::from(log);
        let mut names = sim_devices_with(&provider.sims, "d", 0..count, 64 << 20, |i| {
            crash_plan(seed * 10 + i as u64)
        });
        let logs = names.split_off(3);
        let spec = common::spec_with_logs(TopLayout::Raidz(1), names, logs);
        let engine = HOST.create_tank(&provider, &spec, &[("failmode", "continue")]);
        let volume = VolumeSpec {
            size: "4M".into(),
            block_size: Some("4K".into()),
            sparse: true,
        };
        let props = [("logbias".to_string(), logbias.to_string())];
        engine
            .create_volume("tank/v", &volume, &props, false, "create -V")
            .unwrap();
        let dataset = engine.volume_stat("tank/v").unwrap().dataset;
        let mut world = World {
            provider,
            engine,
            dataset,
            model: vec![0; SIZE],
        };
        world.write(0, &seeded_bytes(8192, seed), false).unwrap();
        world.flush().unwrap();
        world
    }

    fn write(&mut self, offset: usize, data: &[u8], fua: bool) -> Result<(), EngineError> {
        self.engine
            .volume_write("tank", self.dataset, offset as u64, data, fua)?;
        self.model[offset..offset + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// [`World::write`] through [`Engine::volume_write_owned`]: `lengths` cut the seeded
    /// bytes into pieces, as the NBD server cuts a payload.
    fn write_owned(
        &mut self,
        offset: usize,
        lengths: &[usize],
        seed: u64,
        fua: bool,
    ) -> Result<(), EngineError> {
        let data = seeded_bytes(lengths.iter().sum(), seed);
        let mut pieces = Vec::new();
        let mut at = 0;
        for len in lengths {
            pieces.push(data[at..at + len].to_vec());
            at += len;
        }
        (self.engine).volume_write_owned("tank", self.dataset, offset as u64, pieces, fua)?;
        self.model[offset..offset + data.len()].copy_from_slice(&data);
        Ok(())
    }

    fn zero(&mut self, offset: usize, len: usize, fua: bool) -> Result<(), EngineError> {
        self.engine
            .volume_zero("tank", self.dataset, offset as u64, len as u64, fua)?;
        self.model[offset..offset + len].fill(0);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), EngineError> {
        self.engine.volume_flush("tank", self.dataset)
    }

    fn committed(&self) -> u64 {
        check::committed_txg(&self.engine, "tank")
            .unwrap()
            .unwrap()
            .0
    }

    fn content(&self) -> Vec<u8> {
        let mut buf = vec![0xee; SIZE];
        self.engine
            .volume_read("tank", self.dataset, 0, &mut buf)
            .unwrap();
        buf
    }

    /// Power cut: the engine is gone and every device drops or tears its unflushed writes;
    /// `before_import` runs on the devices, then a new engine imports the pool (replaying
    /// the log) and the model becomes what the volume reads.
    fn cut_and_import(&mut self, before_import: impl FnOnce(&CutProvider)) {
        self.engine = HOST.engine(&self.provider);
        crash_all(&self.provider.sims);
        *self.provider.cut.0.lock().unwrap() = None;
        before_import(&self.provider);
        let options = ImportOptions::default();
        common::import_tank(&self.engine, &options).unwrap();
        self.dataset = self.engine.volume_stat("tank/v").unwrap().dataset;
        self.model = self.content();
    }
}

/// Goal: a flush, a FUA write and a FUA zero are durable through the log without a txg,
/// the changes after them are not replayed, and a raidz1 that lost a device after the cut
/// still brings every flushed byte back. Method: writes (aligned, unaligned, across
/// blocks), a zero, flush (the committed txg must not move), a FUA write, a FUA zero, then
/// changes never flushed; power cut; one data device removed; import: the volume reads
/// the model at the FUA zero, the replay report counts the records, the pool checks
/// clean.
#[test]
fn flushed_and_fua_writes_survive_a_power_cut_without_a_txg() {
    let mut world = World::new(1, false);
    let txg = world.committed();
    world.write(0, &seeded_bytes(65536, 2), false).unwrap();
    world
        .write((1 << 20) + 100, &seeded_bytes(10_000, 3), false)
        .unwrap();
    world.zero(8192, 8192, false).unwrap();
    world.flush().unwrap();
    world.write(2 << 20, &seeded_bytes(4096, 4), true).unwrap();
    world.zero(0, 4096, true).unwrap();
    assert_eq!(world.committed(), txg, "flushes go to the log, not a txg");
    let durable = world.model.clone();
    world.write(3 << 20, &seeded_bytes(4096, 5), false).unwrap();
    world.zero(1 << 20, 4096, false).unwrap();
    assert_ne!(world.model, durable);
    world.cut_and_import(|provider| {
        provider.sims.remove("/sim/d1").unwrap();
    });
    assert!(
        world.model == durable,
        "the flushed state, nothing after it"
    );
    let reports = world.engine.log_replay_reports("tank").unwrap();
    let report = reports.iter().find(|r| r.dataset == "tank/v").unwrap();
    assert_eq!(report.records, 5, "{report:?}");
    assert_eq!(report.stopped, None);
    assert_eq!(world.engine.status("tank").unwrap().state, "DEGRADED");
    check::verify_pool(&world.engine, "tank").unwrap();
}

/// Goal: the log goes to a log device when the pool has one, `sync=always` makes every
/// change durable without a flush, and `sync=disabled` logs nothing (ZFS's meaning).
/// Method: on a pool with a log device, FUA writes (log blocks must be on vdev 1), then
/// sync=always writes never flushed, power cut: all there; then sync=disabled writes and a
/// flush, power cut: the state before them.
#[test]
fn a_log_device_takes_the_log_and_sync_always_logs_every_write() {
    let mut world = World::new(2, true);
    let txg = world.committed();
    world.write(4096, &seeded_bytes(20_000, 6), true).unwrap();
    let blocks = check::log_blocks(&world.engine, "tank", world.dataset).unwrap();
    assert!(
        blocks.iter().all(|dva| dva.vdev.0 == 1),
        "log blocks live on the log vdev: {blocks:?}"
    );
    let set = |world: &World, value: &str| {
        let props = [("sync".to_string(), value.to_string())];
        world
            .engine
            .set_dataset_props("tank/v", &props, "set sync")
            .unwrap();
    };
    set(&world, "always");
    world.write(1 << 20, &seeded_bytes(5000, 7), false).unwrap();
    world.zero(4096, 4096, false).unwrap();
    let durable = world.model.clone();
    assert_eq!(
        world.committed(),
        txg + 1,
        "only the property change synced a txg"
    );
    world.cut_and_import(|_| {});
    assert!(world.model == durable, "sync=always: every write durable");
    set(&world, "disabled");
    let before = world.model.clone();
    world.write(0, &seeded_bytes(4096, 8), true).unwrap();
    world.flush().unwrap();
    world.cut_and_import(|_| {});
    assert!(world.model == before, "sync=disabled: nothing logged");
    check::verify_pool(&world.engine, "tank").unwrap();
}

/// Goal (issue 19, NBD writes copied once): a write handed over as owned pieces (whole
/// blocks kept as the volume's records, ragged pieces written as usual) reads back as the
/// bytes sent and is as durable as a write from a slice: flushed, FUA and `sync=always`
/// owned writes survive a power cut through the intent log, which reads their bytes back
/// from the volume at commit; unflushed ones are not replayed; a range past the end is
/// refused and changes nothing. Method: owned writes aligned (whole 4K blocks), unaligned
/// (ragged head, blocks, tail), all zeros, one piece inside a block, read back; flush, a
/// FUA owned write (the committed txg must not move), a refused one, an unflushed one; cut,
/// import: the model at the FUA write. Then `sync=always` owned writes, cut, import: all
/// there. The pool checks clean.
#[test]
fn owned_piece_writes_read_back_and_survive_a_power_cut_through_the_log() {
    let mut world = World::new(3, false);
    let txg = world.committed();
    world.write_owned(65536, &[4096; 4], 10, false).unwrap();
    let ragged = [2784, 4096, 4096, 1000];
    world.write_owned(100_000, &ragged, 11, false).unwrap();
    world.write_owned(200_000, &[300], 12, false).unwrap();
    let zeros = vec![vec![0u8; 4096]; 2];
    (world.engine)
        .volume_write_owned("tank", world.dataset, 65536, zeros, false)
        .unwrap();
    world.model[65536..65536 + 8192].fill(0);
    assert!(world.content() == world.model, "owned pieces read back");
    world.flush().unwrap();
    world
        .write_owned(1 << 20, &[4096, 4096, 10], 13, true)
        .unwrap();
    assert_eq!(
        world.committed(),
        txg,
        "flush and FUA go to the log, not a txg"
    );
    let durable = world.model.clone();
    let past = vec![vec![7u8; 4096]; 2];
    let end = SIZE as u64 - 4096;
    let refused = (world.engine).volume_write_owned("tank", world.dataset, end, past, true);
    assert!(refused.is_err(), "a range past the end is refused");
    assert!(
        world.content() == durable,
        "a refused write changes nothing"
    );
    world.write_owned(3 << 20, &[4096; 2], 14, false).unwrap();
    assert_ne!(world.model, durable);
    world.cut_and_import(|_| {});
    assert!(
        world.model == durable,
        "every flushed owned write, nothing after"
    );
    let props = [("sync".to_string(), "always".to_string())];
    (world.engine)
        .set_dataset_props("tank/v", &props, "set sync")
        .unwrap();
    // The first commit after an import starts a new chain with a txg.
    world.write_owned(2 << 20, &[4096], 17, false).unwrap();
    let txg = world.committed();
    world
        .write_owned(2 << 20, &[4096, 4096], 15, false)
        .unwrap();
    world
        .write_owned((2 << 20) + 9000, &[100], 16, false)
        .unwrap();
    assert_eq!(
        world.committed(),
        txg,
        "sync=always goes to the log, not a txg"
    );
    let durable = world.model.clone();
    world.cut_and_import(|_| {});
    assert!(
        world.model == durable,
        "sync=always: every owned write durable"
    );
    check::verify_pool(&world.engine, "tank").unwrap();
}

/// One step of the crash-at-any-instant workload.
#[derive(Clone, Copy, Debug)]
enum Step {
    Write(usize, usize, bool),
    Zero(usize, usize, bool),
    Flush,
}

const WORKLOAD: [Step; 9] = [
    Step::Write(0, 12_000, false),
    Step::Write(1 << 20, 4096, false),
    Step::Flush,
    Step::Zero(4096, 8192, false),
    Step::Write((2 << 20) + 7, 70_000, true),
    Step::Write(100, 300, false),
    Step::Flush,
    Step::Zero(0, 65536, true),
    Step::Write(3 << 20, 4096, true),
];

/// Goal: a power cut after k device operations of a workload of writes, zeroes, flushes and
/// FUA writes leaves, after import, the state at the last flush or FUA that returned, or at
/// the one the cut interrupted (its commit may have reached the disks before the power
/// went); never anything else, and the pool checks clean. Method: for k = 0, 1, 2, ...
/// until the workload runs to its end, run it with a cut after k operations, crash, import,
/// compare with the models; both outcomes must be seen over the run.
#[test]
fn a_crash_at_any_instant_keeps_every_acknowledged_flush() {
    crash_at_any_instant("latency");
}

/// Goal: the same with `logbias=throughput`, whose commits write the volume's blocks in
/// place before the log records naming them: a cut between the two, or with only some of
/// them on the disks, never loses an acknowledged flush nor replays a commit in part.
/// Method: as above.
#[test]
fn a_crash_at_any_instant_keeps_every_acknowledged_flush_with_logbias_throughput() {
    crash_at_any_instant("throughput");
}

fn crash_at_any_instant(logbias: &str) {
    let (mut seen_acked, mut seen_interrupted) = (false, false);
    for k in 0..500u64 {
        let mut world = World::with_logbias(100 + k, k % 2 == 1, logbias);
        // Half the writes not yet flushed at the cut survive it: a commit whose flush the
        // cut stopped may be whole on the disks.
        for (_, device) in world.provider.sims.all() {
            device.set_plan(FaultPlan {
                drop_on_crash: 300_000,
                torn_on_crash: 200_000,
                ..device.plan()
            });
        }
        *world.provider.cut.0.lock().unwrap() = Some(k);
        let mut durable = world.model.clone();
        let mut interrupted = None;
        for (i, step) in WORKLOAD.iter().enumerate() {
            let data = seeded_bytes(65536 + 8192, k * 100 + i as u64);
            let (result, sync_point) = match *step {
                Step::Write(at, len, fua) => (world.write(at, &data[..len], fua), fua),
                Step::Zero(at, len, fua) => (world.zero(at, len, fua), fua),
                Step::Flush => (world.flush(), true),
            };
            match result {
                Ok(()) if sync_point => durable = world.model.clone(),
                Ok(()) => {}
                Err(_) => {
                    // The failed change is in memory (the model did not take it): what
                    // the cut may have left durable is the state with it.
                    let mut with = world.model.clone();
                    if let Step::Write(at, len, _) = *step {
                        with[at..at + len].copy_from_slice(&data[..len]);
                    } else if let Step::Zero(at, len, _) = *step {
                        with[at..at + len].fill(0);
                    }
                    interrupted = Some(with);
                    break;
                }
            }
        }
        let completed = interrupted.is_none();
        world.cut_and_import(|_| {});
        if world.model == durable {
            seen_acked = true;
        } else {
            let interrupted = interrupted.unwrap_or_else(|| panic!("k={k}: flushed state lost"));
            assert!(world.model == interrupted, "k={k}: neither model");
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

/// Goal: against the model, a random workload of writes, zeroes, flushes, FUA writes, txg
/// syncs and power cuts (some in the middle of a flush whose device flush fails) never
/// loses an acknowledged write and never shows a state that was not the volume's at a
/// durable point. Method: the model at the last durable point (a flush or FUA that
/// returned, a committed txg) must be what the volume reads after a plain cut; after a cut
/// during a failing flush, that or the state at the flush.
#[test]
fn random_volume_workload_with_power_cuts_matches_the_flush_model() {
    random_workload("latency");
}

/// Goal: the same with `logbias=throughput` (blocks written ahead, adopted by the txg or
/// freed when changed again before it). Method: as above; the pool's space must close
/// after every cut and at the end.
#[test]
fn random_volume_workload_with_power_cuts_matches_the_flush_model_with_logbias_throughput() {
    random_workload("throughput");
}

fn random_workload(logbias: &str) {
    let seeds = std::env::var("TARN_ZIL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4u64);
    for seed in 0..seeds {
        let mut rng = SeededRng::new(seed);
        let mut world = World::with_logbias(1000 + seed, seed % 2 == 1, logbias);
        let mut durable = world.model.clone();
        let mut txg = world.committed();
        for step in 0..300u64 {
            let offset = rng.below(SIZE as u64 - 70_000) as usize;
            let len = 1 + rng.below(65536) as usize;
            let fua = rng.below(5) == 0;
            if rng.below(4) == 0 {
                world.zero(offset, len, fua).unwrap();
            } else {
                world
                    .write(offset, &seeded_bytes(len, seed << 32 | step), fua)
                    .unwrap();
            }
            if fua || world.committed() != txg {
                durable = world.model.clone();
            }
            match rng.below(16) {
                0..=2 => {
                    world.flush().unwrap();
                    durable = world.model.clone();
                }
                3 => {
                    world.engine.sync_pool("tank").unwrap();
                    durable = world.model.clone();
                }
                4 if step % 2 == 0 => {
                    // The power fails during a flush: its device flushes never complete.
                    for (_, device) in world.provider.sims.all() {
                        device.set_plan(FaultPlan {
                            flush_eio: 1_000_000,
                            ..crash_plan(seed ^ step)
                        });
                    }
                    let at_flush = world.model.clone();
                    let _ = world.flush();
                    cut(&mut world, seed ^ step);
                    assert!(
                        world.model == durable || world.model == at_flush,
                        "seed {seed} step {step}: not a durable state"
                    );
                    durable = world.model.clone();
                }
                5 => {
                    cut(&mut world, seed ^ step);
                    assert!(world.model == durable, "seed {seed} step {step}");
                }
                _ => {}
            }
            txg = world.committed();
        }
        check::verify_pool(&world.engine, "tank").unwrap();
    }
}

fn cut(world: &mut World, seed: u64) {
    for (_, device) in world.provider.sims.all() {
        device.set_plan(crash_plan(seed));
    }
    world.cut_and_import(|_| {});
    check::verify_pool(&world.engine, "tank").unwrap();
}

/// Bytes written to every device of the world so far.
fn device_bytes(world: &World) -> u64 {
    world
        .provider
        .sims
        .all()
        .iter()
        .map(|(_, device)| device.stats().bytes_written)
        .sum()
}

/// Goal: under `logbias=throughput` a flush writes the volume's blocks in place and the log
/// holds only pointers to them; the next txg adopts those blocks instead of writing the
/// data again (ZFS's WR_INDIRECT and dmu_sync override), a block changed again before the
/// txg is freed instead, the pool's space closes, and a power cut after the flush replays
/// the indirect records. Method: the same 512 KiB of writes and a flush in a `latency`
/// and a `throughput` world: the throughput log's blocks are a small fraction of the
/// latency log's, and the following txg sync writes at most half the data there but at
/// least all of it in the latency world (bytes written to the devices); one block
/// rewritten after the flush is not adopted (the checker finds no leak and no double use);
/// then a flush and a cut: the volume reads the model, the replay counted the records.
#[test]
fn logbias_throughput_writes_blocks_once_and_logs_pointers() {
    const DATA: usize = 512 << 10;
    let mut measured = Vec::new();
    for logbias in ["latency", "throughput"] {
        let mut world = World::with_logbias(7, false, logbias);
        let txg = world.committed();
        world.write(65536, &seeded_bytes(DATA, 8), false).unwrap();
        world.flush().unwrap();
        assert_eq!(
            world.committed(),
            txg,
            "{logbias}: the flush went to the log"
        );
        let log_bytes: u64 = check::log_blocks(&world.engine, "tank", world.dataset)
            .unwrap()
            .iter()
            .map(|dva| dva.asize)
            .sum();
        let ahead = check::written_ahead(&world.engine, "tank", world.dataset).unwrap();
        // A block changed after its flush is not the one written ahead any more.
        world.write(65536, &seeded_bytes(4096, 9), false).unwrap();
        let before = device_bytes(&world);
        world.engine.sync_pool("tank").unwrap();
        let sync_bytes = device_bytes(&world) - before;
        check::verify_pool(&world.engine, "tank").unwrap();
        assert!(
            check::written_ahead(&world.engine, "tank", world.dataset)
                .unwrap()
                .is_empty(),
            "{logbias}: the sync adopted or freed every block written ahead"
        );
        world
            .write(1 << 20, &seeded_bytes(8192, 10), false)
            .unwrap();
        world.write(3 << 20, &seeded_bytes(100, 11), true).unwrap();
        let durable = world.model.clone();
        world.cut_and_import(|_| {});
        assert!(world.model == durable, "{logbias}: flushed writes replayed");
        let reports = world.engine.log_replay_reports("tank").unwrap();
        let report = reports.iter().find(|r| r.dataset == "tank/v").unwrap();
        assert_eq!(report.stopped, None, "{logbias}");
        // Two writes of three and one block: per block with throughput, one each without.
        let records = if logbias == "throughput" { 3 } else { 2 };
        assert_eq!(report.records, records, "{logbias}: {report:?}");
        check::verify_pool(&world.engine, "tank").unwrap();
        measured.push((log_bytes, ahead.len(), sync_bytes));
    }
    let (latency, throughput) = (measured[0], measured[1]);
    assert_eq!(latency.1, 0, "latency writes nothing ahead");
    assert_eq!(
        throughput.1,
        DATA / 4096,
        "one block written ahead per volume block"
    );
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
