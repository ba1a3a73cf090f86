//! Intent-log commits that write and flush their blocks without the pool lock
//! (`tarn_engine` module `zil`, "Commits off the pool lock").
//!
//! Goal: while a commit's log blocks are being written, other requests of the pool go on;
//! commits that arrive meanwhile are written together after it; an `fsync` that returned is
//! durable whatever happens next (a power cut at any device operation, EIO on the log
//! device), and replay never shows a later commit without an earlier one; a txg that frees
//! the chain does not commit (and so release the chain's blocks for reuse) while a log
//! write is still going to them. Method: simulated devices behind a gate (`common::gate`)
//! that holds writes or flushes, or cuts the power after a number of operations; then
//! `SimDevice::crash` drops or tears what was not flushed, and an import replays the log.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use common::gate::GatedProvider;
use common::{Host, PLAIN, committed, crash_all, in_root_dir, sim_devices_with, spec_with_logs};
use tarn_device::FaultPlan;
use tarn_engine::{DatasetId, Engine, FsOp, ImportOptions, TopLayout, check};
use tarn_posix::{Creds, FileKind};

const ME: Creds = Creds { uid: 0, gid: 0 };

const HOST: Host = Host {
    hostid: 11,
    seed: 19,
    ..PLAIN
};

/// A raidz1 of four devices and one log device (`/sim/log0`), unflushed writes dropped or
/// torn at a crash; the gate applies to `gated` (a path fragment) or every device. The
/// root dataset's chain is started (its first fsync syncs a txg) before the gate is used.
fn setup(seed: u64, gated: Option<&str>, failmode: &str) -> (Arc<GatedProvider>, Engine) {
    let provider = Arc::new(GatedProvider {
        only: gated.map(str::to_string),
        ..GatedProvider::default()
    });
    let plan = |i: usize| FaultPlan {
        seed: seed + i as u64,
        drop_on_crash: 500_000,
        torn_on_crash: 300_000,
        ..FaultPlan::default()
    };
    let names = sim_devices_with(&provider.sims, "d", 0..4, 64 << 20, plan);
    let logs = sim_devices_with(&provider.sims, "log", 0..1, 64 << 20, |i| plan(10 + i));
    let spec = spec_with_logs(TopLayout::Raidz(1), names, logs);
    let engine = HOST.create_tank(&provider, &spec, &[("failmode", failmode)]);
    let dataset = root(&engine);
    make(&engine, dataset, b"start").unwrap();
    engine.fs_sync("tank", dataset).unwrap();
    (provider, engine)
}

fn root(engine: &Engine) -> DatasetId {
    engine.find_dataset("tank").unwrap().1
}

fn import(provider: &Arc<GatedProvider>) -> Engine {
    HOST.import(provider, &ImportOptions::default()).unwrap()
}

/// Makes the empty file `name` in the root directory of `dataset`.
fn make(engine: &Engine, dataset: DatasetId, name: &[u8]) -> Result<(), tarn_engine::EngineError> {
    engine
        .fs_op("tank", dataset, FsOp::Modify, |fs| {
            let root = fs.root()?;
            fs.mknod(root, name, FileKind::Regular, 0o644, 0, ME)
        })
        .map(drop)
}

fn name(thread: usize, i: usize) -> Vec<u8> {
    format!("t{thread}-{i}").into_bytes()
}

#[test]
fn reads_and_writes_go_on_while_a_log_commit_flushes() {
    // Goal: the pool lock is not held across a commit's device I/O: with the log device's
    // flush held, another file is created, looked up and read, and the held fsync returns
    // once the flush does. Method: hold the log device's flushes, fsync on a thread, work on
    // this one. The work runs on a helper thread whose end is awaited for a minute: only a
    // pool lock held across the flush (a deadlock here) takes that long.
    let (provider, engine) = setup(1, Some("log"), "wait");
    let dataset = root(&engine);
    make(&engine, dataset, b"synced").unwrap();
    provider.gate.set_closed(true);
    std::thread::scope(|scope| {
        let fsync = scope.spawn(|| engine.fs_sync("tank", dataset));
        provider.gate.wait_for_a_held_flush();
        let (done, finished) = mpsc::channel();
        let engine = &engine;
        scope.spawn(move || {
            make(engine, dataset, b"meanwhile").unwrap();
            let found = in_root_dir(engine, dataset, b"synced");
            done.send(found).unwrap();
        });
        let outcome = finished.recv_timeout(Duration::from_secs(60));
        provider.gate.set_closed(false);
        assert_eq!(outcome, Ok(true), "work waited for the held log flush");
        fsync.join().unwrap().unwrap();
    });
    drop(engine);
    crash_all(&provider.sims);
    let engine = import(&provider);
    assert!(in_root_dir(&engine, root(&engine), b"synced"));
    check::verify_pool(&engine, "tank").unwrap();
}

#[test]
fn fsyncs_that_arrive_during_a_commit_are_written_together() {
    // Goal: commits queue behind the one in flight and the first of them writes everything
    // pending for all (ZFS's commit waiters): three fsyncs behind a held one cost one more
    // log write and flush, not three. Method: hold the log device's flushes while one fsync
    // is in flight; three other threads each create a file and fsync; open the gate and
    // count the log device's flushes; then a power cut keeps all four files.
    let (provider, engine) = setup(2, Some("log"), "wait");
    let dataset = root(&engine);
    let log = provider.sims.get("/sim/log0").unwrap();
    make(&engine, dataset, b"first").unwrap();
    let before = log.stats().flushes;
    provider.gate.set_closed(true);
    std::thread::scope(|scope| {
        let first = scope.spawn(|| engine.fs_sync("tank", dataset));
        provider.gate.wait_for_a_held_flush();
        // Created here, before the others' fsyncs start: whichever of those runs first
        // finds all three pending, however the threads are scheduled.
        for t in 0..3 {
            make(&engine, dataset, &name(t, 0)).unwrap();
        }
        let others: Vec<_> = (0..3)
            .map(|_| scope.spawn(|| engine.fs_sync("tank", dataset)))
            .collect();
        provider.gate.set_closed(false);
        first.join().unwrap().unwrap();
        for other in others {
            other.join().unwrap().unwrap();
        }
    });
    assert_eq!(
        log.stats().flushes - before,
        2,
        "the held commit and one for the three behind it"
    );
    drop(engine);
    crash_all(&provider.sims);
    let engine = import(&provider);
    let dataset = root(&engine);
    assert!(in_root_dir(&engine, dataset, b"first"));
    for t in 0..3 {
        assert!(in_root_dir(&engine, dataset, &name(t, 0)), "file {t} lost");
    }
}

#[test]
fn a_power_cut_at_any_instant_of_concurrent_commits_keeps_every_acknowledged_fsync() {
    // Goal: with several threads creating files and fsyncing at once, a power cut at any
    // device operation keeps every file whose fsync returned, and what replay shows of each
    // thread is a prefix of what it did (its files in order, none after a missing one).
    // Method: cut the power after k operations, for every k until a run completes; three
    // threads make four files each, fsyncing after each; crash the devices and import.
    let mut cut_runs = 0;
    for k in 0..400u64 {
        let (provider, engine) = setup(100 + k, None, "continue");
        let dataset = root(&engine);
        provider.gate.cut_after(Some(k));
        let acked: Vec<Vec<bool>> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..3)
                .map(|t| {
                    let engine = &engine;
                    scope.spawn(move || {
                        let mut acked = Vec::new();
                        for i in 0..4 {
                            let made = make(engine, dataset, &name(t, i)).is_ok();
                            acked.push(made && engine.fs_sync("tank", dataset).is_ok());
                        }
                        acked
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        drop(engine);
        crash_all(&provider.sims);
        provider.gate.cut_after(None);
        let engine = import(&provider);
        let dataset = root(&engine);
        for (t, acked) in acked.iter().enumerate() {
            let present: Vec<bool> = (0..4)
                .map(|i| in_root_dir(&engine, dataset, &name(t, i)))
                .collect();
            for i in 0..4 {
                assert!(
                    !acked[i] || present[i],
                    "cut after {k}: acked t{t}-{i} lost"
                );
                if i > 0 {
                    assert!(
                        present[i - 1] || !present[i],
                        "cut after {k}: t{t} not a prefix"
                    );
                }
            }
        }
        check::verify_pool(&engine, "tank").unwrap();
        if acked.iter().flatten().all(|a| *a) {
            break;
        }
        cut_runs += 1;
    }
    assert!(cut_runs > 10, "the cuts landed inside the commits");
}

#[test]
fn eio_on_the_log_device_during_a_commit_falls_back_to_a_txg() {
    // Goal: a log write that fails off the pool lock is not acknowledged as a log commit:
    // the fsync makes its records durable by a txg instead, and they survive a power cut.
    // Method: every write to the log device fails with EIO; fsync; the commit counts as one
    // that synced a txg; crash and import.
    let (provider, engine) = setup(3, None, "wait");
    let dataset = root(&engine);
    let log = provider.sims.get("/sim/log0").unwrap();
    let by_txg = engine.sync_times("tank").unwrap().log_commits_by_txg;
    let txg = committed(&engine);
    log.set_plan(FaultPlan {
        write_eio: 1_000_000,
        ..log.plan()
    });
    make(&engine, dataset, b"after-eio").unwrap();
    engine.fs_sync("tank", dataset).unwrap();
    assert!(
        log.stats().injected_write_eio > 0,
        "the log write was tried"
    );
    assert_eq!(
        engine.sync_times("tank").unwrap().log_commits_by_txg,
        by_txg + 1
    );
    assert!(committed(&engine) > txg, "a txg made the records durable");
    drop(engine);
    crash_all(&provider.sims);
    log.set_plan(FaultPlan::seeded(3));
    let engine = import(&provider);
    assert!(in_root_dir(&engine, root(&engine), b"after-eio"));
    check::verify_pool(&engine, "tank").unwrap();
}

#[test]
fn a_txg_that_frees_the_chain_waits_for_the_log_write_in_flight() {
    // Goal: a txg written while a commit's blocks are still being written frees the chain
    // those blocks belong to, and does not commit (which would let the blocks be allocated
    // again) until that write ended; the fsync and the txg both hold after a power cut.
    // Method: hold writes to the log device with an fsync in flight; write the next txg's
    // phase and run its commit phase on another thread; the committed txg stays where it
    // was until the gate opens; then both finish; crash and import.
    let (provider, engine) = setup(4, Some("log"), "wait");
    let dataset = root(&engine);
    make(&engine, dataset, b"in-flight").unwrap();
    let before = committed(&engine);
    provider.gate.set_writes_closed(true);
    let written = std::thread::scope(|scope| {
        let fsync = scope.spawn(|| engine.fs_sync("tank", dataset));
        provider.gate.wait_for_a_held_flush();
        make(&engine, dataset, b"in-the-txg").unwrap();
        let written = engine.sync_write_phase("tank").unwrap();
        let commit = scope.spawn(|| engine.sync_commit_phase("tank"));
        // The commit phase waits for the log write; give it every chance not to.
        for _ in 0..50 {
            std::thread::yield_now();
            std::thread::sleep(Duration::from_millis(2));
        }
        let during = committed(&engine);
        provider.gate.set_writes_closed(false);
        assert_eq!(
            during, before,
            "the txg committed while a log write to its freed blocks was in flight"
        );
        fsync.join().unwrap().unwrap();
        // Whoever finishes the txg first (the fsync waits for it too) reports it.
        commit.join().unwrap().unwrap();
        written
    });
    assert_eq!(committed(&engine), written);
    check::verify_pool(&engine, "tank").unwrap();
    drop(engine);
    crash_all(&provider.sims);
    let engine = import(&provider);
    let dataset = root(&engine);
    assert!(in_root_dir(&engine, dataset, b"in-flight"));
    assert!(in_root_dir(&engine, dataset, b"in-the-txg"));
    check::verify_pool(&engine, "tank").unwrap();
}
