//! The txg pipeline on simulated devices: a txg's commit phase runs without the pool lock
//! while the next txg is open, and the crash guarantees stay those of one txg at a time.
//!
//! Method: the devices are `SimDevice`s behind a gate (`common::gate`) whose flush can be
//! held (to hold a commit phase open while other threads work) and which can cut the power
//! after a number of device operations (every later write and flush fails, as in the
//! simulator), then `SimDevice::crash` drops or tears what was not flushed.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::gate::GatedProvider;
use common::{Host, PLAIN, committed, crash_all, images, in_root_dir, sim_devices_with};
use tarn_base::{ObjectId, Txg};
use tarn_device::FaultPlan;
use tarn_engine::{
    CreateSpec, DatasetId, Engine, EngineError, FsOp, ImportOptions, PoolError, TopLayout,
    TxgSyncer, check,
};
use tarn_posix::{Creds, FileKind};

const ME: Creds = Creds { uid: 0, gid: 0 };

const HOST: Host = Host {
    hostid: 9,
    seed: 5,
    ..PLAIN
};

/// A raidz1 of four devices whose unflushed writes are dropped or torn at a crash.
fn setup(seed: u64, size: u64) -> (Arc<GatedProvider>, Engine, ObjectId) {
    setup_with(seed, size, "wait")
}

/// [`setup`] with the pool's `failmode`.
fn setup_with(seed: u64, size: u64, failmode: &str) -> (Arc<GatedProvider>, Engine, ObjectId) {
    let provider = Arc::new(GatedProvider::default());
    let names = sim_devices_with(&provider.sims, "d", 0..4, size, |i| FaultPlan {
        seed: seed + i as u64,
        drop_on_crash: 500_000,
        torn_on_crash: 300_000,
        ..FaultPlan::default()
    });
    let spec = CreateSpec::one_top("tank", TopLayout::Raidz(1), names);
    let engine = HOST.create_tank(&provider, &spec, &[("failmode", failmode)]);
    let object = engine.object_create("tank", 4096).unwrap();
    (provider, engine, object)
}

fn read(engine: &Engine, object: ObjectId, offset: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    engine
        .object_read("tank", object, offset, &mut buf)
        .unwrap();
    buf
}

fn import(provider: &Arc<GatedProvider>) -> Engine {
    HOST.import(provider, &ImportOptions::default()).unwrap()
}

/// Txg `base` commits 1s at offset 0 of `object`, then the next txg's write phase writes 2s
/// there; returns `base` and the txg written (its commit phase not run).
fn commit_then_write_phase(engine: &Engine, object: ObjectId) -> (Txg, Txg) {
    engine
        .object_write("tank", object, 0, &[1u8; 4096])
        .unwrap();
    let base = engine.sync_pool("tank").unwrap();
    engine
        .object_write("tank", object, 0, &[2u8; 4096])
        .unwrap();
    let written = engine.sync_write_phase("tank").unwrap();
    (base, written)
}

/// Makes the empty file `name` in the root directory of `dataset`.
fn make(engine: &Engine, dataset: DatasetId, name: &[u8]) {
    engine
        .fs_op("tank", dataset, FsOp::Modify, |fs| {
            let root = fs.root()?;
            fs.mknod(root, name, FileKind::Regular, 0o644, 0, ME)
        })
        .unwrap();
}

#[test]
fn writes_and_reads_proceed_while_a_commit_phase_is_held() {
    // Goal: the open txg takes writes and serves reads while the previous txg's commit phase
    // waits for its flush, and that txg commits without the later writes. Method: hold every
    // flush at the gate, sync on a second thread, write and read on this one meanwhile.
    let (provider, engine, object) = setup(1, 64 << 20);
    engine
        .object_write("tank", object, 0, &[1u8; 4096])
        .unwrap();
    let before = committed(&engine);
    provider.gate.set_closed(true);
    std::thread::scope(|scope| {
        let syncing = scope.spawn(|| engine.sync_pool_pipelined("tank"));
        provider.gate.wait_for_a_held_flush();
        engine
            .object_write("tank", object, 4096, &[2u8; 4096])
            .unwrap();
        assert_eq!(read(&engine, object, 0), vec![1u8; 4096]);
        assert_eq!(read(&engine, object, 4096), vec![2u8; 4096]);
        assert_eq!(
            committed(&engine),
            before,
            "the held txg is not committed yet"
        );
        assert!(engine.pool_dirty_bytes("tank").unwrap() > 0);
        provider.gate.set_closed(false);
        let txg = syncing.join().unwrap().unwrap();
        assert_eq!(txg, Some(before.next()));
    });
    assert_eq!(committed(&engine), before.next());
    assert!(
        engine.pool_dirty_bytes("tank").unwrap() > 0,
        "the write made during the commit belongs to the next txg"
    );
    assert_eq!(engine.sync_pool("tank").unwrap(), before.next().next());
    check::verify_pool(&engine, "tank").unwrap();
    engine.export_pool("tank", false).unwrap();
    let engine = import(&provider);
    assert_eq!(read(&engine, object, 0), vec![1u8; 4096]);
    assert_eq!(read(&engine, object, 4096), vec![2u8; 4096]);
}

#[test]
fn a_crash_at_any_instant_of_the_commit_phase_keeps_txg_n_minus_1_or_n() {
    // Goal: with txg N written and N+1's changes in memory, a power cut anywhere in N's
    // commit phase leaves exactly N-1 or exactly N on disk, never a part of N+1. Method: cut
    // the power after k device operations of the commit phase, for every k until the commit
    // completes, crash the devices and import.
    let mut seen = [false; 2];
    for k in 0..64u64 {
        let (provider, engine, object) = setup(100 + k, 64 << 20);
        let (base, n) = commit_then_write_phase(&engine, object);
        assert_eq!(n, base.next());
        engine
            .object_write("tank", object, 0, &[3u8; 4096])
            .unwrap();
        engine
            .object_write("tank", object, 8192, &[3u8; 4096])
            .unwrap();
        provider.gate.cut_after(Some(k));
        let outcome = engine.sync_commit_phase("tank");
        drop(engine);
        crash_all(&provider.sims);
        provider.gate.cut_after(None);
        let engine = import(&provider);
        let opened = check::imported_txg(&engine, "tank").unwrap().unwrap();
        let expected = if opened == n {
            seen[1] = true;
            2u8
        } else {
            assert_eq!(opened, base, "cut after {k}: import opened txg {opened}");
            assert!(outcome.is_err(), "cut after {k}: a committed txg was lost");
            seen[0] = true;
            1u8
        };
        assert_eq!(
            read(&engine, object, 0),
            vec![expected; 4096],
            "cut after {k}"
        );
        assert_eq!(
            read(&engine, object, 8192),
            vec![0u8; 4096],
            "cut after {k}"
        );
        check::verify_pool(&engine, "tank").unwrap();
        if outcome.is_ok() {
            break;
        }
    }
    assert_eq!(
        seen,
        [true, true],
        "the cuts landed before and after the commit point"
    );
}

#[test]
fn a_failed_flush_in_the_commit_phase_suspends_and_commits_nothing() {
    // Goal: a commit phase whose first flush fails suspends the pool, writes nothing more,
    // and the next import opens the previous txg. Method: cut the power at the commit
    // phase's first operation and compare the device images before and after it.
    let (provider, engine, object) = setup_with(7, 64 << 20, "continue");
    let (base, _) = commit_then_write_phase(&engine, object);
    let before = images(&provider.sims);
    provider.gate.cut_after(Some(0));
    let failed = engine.sync_commit_phase("tank").unwrap_err();
    assert!(
        matches!(failed, EngineError::Pool(PoolError::Suspended(_))),
        "{failed}"
    );
    assert!(
        images(&provider.sims) == before,
        "a failed commit phase wrote nothing more"
    );
    let refused = engine.object_write("tank", object, 0, &[4u8; 4096]);
    assert!(matches!(
        refused,
        Err(EngineError::Pool(PoolError::Suspended(_)))
    ));
    assert_eq!(committed(&engine), base);
    provider.gate.cut_after(None);
    drop(engine);
    let engine = import(&provider);
    assert_eq!(check::imported_txg(&engine, "tank").unwrap(), Some(base));
    assert_eq!(read(&engine, object, 0), vec![1u8; 4096]);
}

#[test]
fn an_fsync_while_a_txg_syncs_waits_for_it_and_survives_a_crash() {
    // Goal: an fsync issued while txg N is between its phases is durable through the intent
    // log of the chain N's header names. Method: start the dataset's chain, write txg N's
    // phase, change a file in N+1, fsync, crash with N+1 uncommitted and import.
    let (provider, engine, _) = setup(11, 64 << 20);
    let (_, dataset) = engine.find_dataset("tank").unwrap();
    make(&engine, dataset, b"first");
    engine.fs_sync("tank", dataset).unwrap();
    make(&engine, dataset, b"second");
    let n = engine.sync_write_phase("tank").unwrap();
    make(&engine, dataset, b"third");
    engine.fs_sync("tank", dataset).unwrap();
    assert_eq!(committed(&engine), n, "the fsync finished txg N first");
    drop(engine);
    crash_all(&provider.sims);
    let engine = import(&provider);
    let (_, dataset) = engine.find_dataset("tank").unwrap();
    for name in [&b"first"[..], b"second", b"third"] {
        let found = in_root_dir(&engine, dataset, name);
        assert!(found, "{} lost", String::from_utf8_lossy(name));
    }
}

#[derive(Default)]
struct CountingSyncer {
    wakes: AtomicUsize,
}

impl TxgSyncer for CountingSyncer {
    fn sync_wanted(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn with_a_syncer_the_writer_never_syncs_below_dirty_max() {
    // Goal: past DIRTY_SYNC a writer only wakes the syncer (no txg commits on its thread);
    // the syncer's pass then commits it. Method: a syncer that counts wakes.
    let (_, engine, object) = setup(13, 256 << 20);
    let syncer = Arc::new(CountingSyncer::default());
    engine.set_txg_syncer(syncer.clone());
    let before = committed(&engine);
    let chunk = vec![7u8; 1 << 20];
    let mut offset = 0;
    while engine.pool_dirty_bytes("tank").unwrap() < tarn_engine::DIRTY_SYNC {
        engine.object_write("tank", object, offset, &chunk).unwrap();
        offset += chunk.len() as u64;
    }
    assert_eq!(committed(&engine), before, "the writer did not sync");
    assert_eq!(
        syncer.wakes.load(Ordering::SeqCst),
        1,
        "woken once, past the mark"
    );
    engine.object_write("tank", object, offset, &chunk).unwrap();
    assert_eq!(syncer.wakes.load(Ordering::SeqCst), 2);
    assert_eq!(committed(&engine), before);
    assert!(engine.sync_wanted_pools());
    assert_eq!(committed(&engine), before.next());
    assert!(!engine.sync_wanted_pools(), "nothing more to sync");
    assert_eq!(engine.pool_dirty_bytes("tank").unwrap(), 0);
    check::verify_pool(&engine, "tank").unwrap();
}

#[test]
fn with_a_loan_the_open_txg_borrows_from_the_cache_and_gives_it_back() {
    // Goal: with a dirty loan (the daemon's), a txg of whole records borrows nothing (its
    // sync would rewrite no more than its dirty bytes) and wakes the syncer at DIRTY_SYNC;
    // a txg of records written in part (32K of each 128K record: its sync rewrites four
    // times its dirty bytes) borrows room from the clean-block cache instead, in LOAN_STEP steps
    // and only as much as the cache lends (half its limit), so the syncer is woken at half
    // the larger limit; the cache keeps its entries within what it has left; the commit
    // gives the loan back. Negative control: without the loan the syncer is woken at
    // DIRTY_SYNC in the second txg too (fails at its first check).
    let (_, engine, blocks4k) = setup(17, 512 << 20);
    let records = engine.object_create("tank", 128 << 10).unwrap();
    let syncer = Arc::new(CountingSyncer::default());
    engine.set_txg_syncer(syncer.clone());
    engine.set_cache_limit(4 * tarn_engine::LOAN_STEP);
    engine.set_dirty_loan_max(8 * tarn_engine::LOAN_STEP);
    let wakes = || syncer.wakes.load(Ordering::SeqCst);
    let write_past = |object, step: u64, len: usize, limit: u64| {
        let chunk = vec![7u8; len];
        let mut offset = 0;
        while engine.pool_dirty_bytes("tank").unwrap() < limit {
            engine.object_write("tank", object, offset, &chunk).unwrap();
            offset += step;
        }
    };
    write_past(blocks4k, 1 << 20, 1 << 20, tarn_engine::DIRTY_SYNC);
    assert_eq!(wakes(), 1, "whole records: woken at DIRTY_SYNC");
    assert_eq!(
        engine.cache_stats().reserved,
        0,
        "whole records borrow nothing"
    );
    assert!(engine.sync_wanted_pools());

    let before = committed(&engine);
    let (step, part) = (128 << 10, 32 << 10);
    write_past(records, step, part, tarn_engine::DIRTY_SYNC + (1 << 20));
    assert_eq!(wakes(), 1, "the loan moved the sync point");
    assert_eq!(
        engine.cache_stats().reserved,
        tarn_engine::LOAN_STEP,
        "one step"
    );
    // The cache lends half its limit, two steps: the sync point ends at half of
    // DIRTY_MAX and the loan.
    let sync_at = (2 * tarn_engine::DIRTY_SYNC + 2 * tarn_engine::LOAN_STEP) / 2;
    write_past(records, step, part, sync_at - (1 << 20));
    assert_eq!(wakes(), 1);
    let stats = engine.cache_stats();
    assert_eq!(
        stats.reserved,
        2 * tarn_engine::LOAN_STEP,
        "half the cache lent"
    );
    assert!(
        stats.bytes + stats.headers <= stats.limit - stats.reserved,
        "{stats:?}"
    );
    write_past(records, step, part, sync_at);
    assert_eq!(wakes(), 2, "woken at the moved point");
    assert_eq!(committed(&engine), before, "the writer did not sync");
    assert!(engine.sync_wanted_pools());
    assert_eq!(committed(&engine), before.next());
    assert_eq!(
        engine.cache_stats().reserved,
        0,
        "the commit gave the loan back"
    );
    assert_eq!(engine.pool_dirty_bytes("tank").unwrap(), 0);
    check::verify_pool(&engine, "tank").unwrap();
}

#[test]
fn a_failed_commit_phase_with_the_next_txg_dirty_resumes_both_at_clear() {
    // Goal: a commit phase of txg T that fails (outside the pool lock) while T+1 has changes
    // in memory leaves T kept for `clear` and T+1 open: nothing is written while suspended
    // (T+1 does not start its write phase), a writer under failmode=wait sleeps until
    // `clear`, which commits T at the same places; then T+1 (and the writer's change)
    // commit, and after a crash an import finds every byte. Method: the gate cuts the
    // power at the commit phase's first flush, then restores it; `clear` retries.
    let (provider, engine, object) = setup(11, 64 << 20);
    let engine = Arc::new(engine);
    let write = |offset: u64, byte: u8| engine.object_write("tank", object, offset, &[byte; 4096]);
    let (base, txg) = commit_then_write_phase(&engine, object);
    assert_eq!(txg, base.next());
    // T+1, dirty in memory while T commits.
    write(4096, 3).unwrap();
    provider.gate.cut_after(Some(0));
    let failed = engine.sync_commit_phase("tank").unwrap_err();
    assert!(
        matches!(failed, EngineError::Pool(PoolError::Suspended(_))),
        "{failed}"
    );
    assert_eq!(committed(&engine), base);
    provider.gate.cut_after(None);
    let before = images(&provider.sims);
    let waiter = Arc::clone(&engine);
    let writer =
        std::thread::spawn(move || waiter.object_write("tank", object, 8192, &[4u8; 4096]));
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        !writer.is_finished(),
        "failmode=wait: the writer waits for clear"
    );
    assert_eq!(read(&engine, object, 0), vec![2u8; 4096]);
    assert_eq!(read(&engine, object, 4096), vec![3u8; 4096]);
    let refused = engine.sync_pool("tank").unwrap_err();
    assert!(
        matches!(refused, EngineError::Pool(PoolError::Suspended(_))),
        "{refused}"
    );
    assert!(
        images(&provider.sims) == before,
        "a suspended pool writes nothing: T+1 waits for T"
    );
    assert!(!writer.is_finished(), "a refused sync wakes nobody");
    engine.clear("tank", None, "pool clear tank").unwrap();
    writer.join().unwrap().unwrap();
    assert_eq!(
        committed(&engine),
        txg,
        "clear committed the kept txg itself"
    );
    let next = engine.sync_pool("tank").unwrap();
    assert_eq!(next, txg.next(), "T+1 commits after T");
    check::verify_pool(&engine, "tank").unwrap();
    drop(engine);
    crash_all(&provider.sims);
    let engine = import(&provider);
    assert_eq!(check::imported_txg(&engine, "tank").unwrap(), Some(next));
    assert_eq!(read(&engine, object, 0), vec![2u8; 4096]);
    assert_eq!(read(&engine, object, 4096), vec![3u8; 4096]);
    assert_eq!(read(&engine, object, 8192), vec![4u8; 4096]);
    check::verify_pool(&engine, "tank").unwrap();
}

#[test]
fn an_fsync_that_waited_for_a_failed_commit_logs_its_records_after_clear() {
    // Goal: an fsync whose wait for txg N ends in a failed commit phase waits for `clear`
    // (failmode=wait), and once `clear` committed N it commits its own records (of N+1)
    // into the intent log, so a crash before N+1 commits loses nothing. Method: write N's
    // phase, change a file in N+1, cut the power, fsync on a thread (it runs N's commit,
    // which fails), restore the power, clear, crash and import.
    let (provider, engine, _) = setup(13, 64 << 20);
    let engine = Arc::new(engine);
    let (_, dataset) = engine.find_dataset("tank").unwrap();
    make(&engine, dataset, b"first");
    engine.fs_sync("tank", dataset).unwrap();
    let base = committed(&engine);
    make(&engine, dataset, b"second");
    let n = engine.sync_write_phase("tank").unwrap();
    make(&engine, dataset, b"third");
    provider.gate.cut_after(Some(0));
    let syncer = Arc::clone(&engine);
    let fsync = std::thread::spawn(move || syncer.fs_sync("tank", dataset));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!fsync.is_finished(), "the fsync waits for clear");
    assert_eq!(committed(&engine), base, "txg N did not commit");
    provider.gate.cut_after(None);
    engine.clear("tank", None, "pool clear tank").unwrap();
    fsync.join().unwrap().unwrap();
    assert_eq!(committed(&engine), n, "clear committed txg N, not N+1");
    drop(engine);
    crash_all(&provider.sims);
    let engine = import(&provider);
    assert_eq!(check::imported_txg(&engine, "tank").unwrap(), Some(n));
    let (_, dataset) = engine.find_dataset("tank").unwrap();
    for name in [&b"first"[..], b"second", b"third"] {
        let found = in_root_dir(&engine, dataset, name);
        assert!(found, "{} lost", String::from_utf8_lossy(name));
    }
    check::verify_pool(&engine, "tank").unwrap();
}

#[test]
fn export_f_after_a_failed_commit_phase_ends_the_waiting_writer() {
    // Goal: a writer that waits (failmode=wait) after a commit phase failed wakes and fails
    // when the pool is exported with -f, the export succeeds, and an import opens the last
    // committed txg. Method: fail txg T's commit phase at the gate with T+1 dirty, start a
    // writer on a thread, refuse a plain export, then export -f and import.
    let (provider, engine, object) = setup(17, 64 << 20);
    let engine = Arc::new(engine);
    let (base, _) = commit_then_write_phase(&engine, object);
    provider.gate.cut_after(Some(0));
    engine.sync_commit_phase("tank").unwrap_err();
    provider.gate.cut_after(None);
    let waiter = Arc::clone(&engine);
    let writer =
        std::thread::spawn(move || waiter.object_write("tank", object, 4096, &[3u8; 4096]));
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(!writer.is_finished(), "the writer waits");
    engine.export_pool("tank", false).unwrap_err();
    engine.export_pool("tank", true).unwrap();
    let failed = writer.join().unwrap();
    assert!(
        matches!(failed, Err(EngineError::Pool(PoolError::Suspended(_)))),
        "{failed:?}"
    );
    assert!(engine.pool_names().is_empty());
    drop(engine);
    let engine = import(&provider);
    assert_eq!(check::imported_txg(&engine, "tank").unwrap(), Some(base));
    assert_eq!(read(&engine, object, 0), vec![1u8; 4096]);
    check::verify_pool(&engine, "tank").unwrap();
}
