//! A commit phase that fails on the daemon's own txg-sync thread, then `tarn pool clear`.
//!
//! Goal: the engine tests fail commits through engine calls on the test's thread; here the
//! txg whose commit fails is written and committed by the daemon's txg-sync thread (the
//! thread that runs `PendingCommit::commit` off the pool lock), as in production, and the
//! pool then goes through the daemon's own request path for `clear`. Method: the daemon's
//! backend (`EngineBackend::with_engine`: its txg-sync, scrub/fault-check and heartbeat
//! threads) over a raidz1 of four simulated devices; an object is committed, then two
//! devices start failing every flush (writes still land, so the write phase succeeds and
//! the failure is in the commit phase, whose first step is a flush of every leaf); a second
//! object is written below `DIRTY_SYNC` and the test thread never syncs, so only the
//! daemon's txg timer commits it. The pool suspends with a reason naming the commit phase of
//! that txg, with the last committed txg unchanged; a writer waits (failmode=wait); a
//! `clear` while the flushes still fail is refused; the devices heal, `clear` through the
//! daemon's handler resumes, the writer goes ahead, every byte is there, a scrub is clean,
//! and again after export and import.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tarn_base::{ObjectId, SeededRng, SystemClock};
use tarn_daemon::Handler;
use tarn_daemon::backend::EngineBackend;
use tarn_device::{FaultPlan, PER_MILLION};
use tarn_engine::{
    CreateOptions, CreateSpec, Engine, EngineError, HostIdentity, ImportOptions, ScanState,
    ScrubAction, SimProvider, TopLayout,
};
use tarn_proto::{Request, Response};

const NAMES: [&str; 4] = ["/sim/d0", "/sim/d1", "/sim/d2", "/sim/d3"];
const FAILING: [&str; 2] = ["/sim/d1", "/sim/d2"];

fn engine_on(provider: &Arc<SimProvider>) -> Arc<Engine> {
    let identity = HostIdentity {
        hostid: 1,
        hostname: "sim".into(),
    };
    // The daemon's threads keep real time; so does the engine here.
    Arc::new(Engine::new(
        provider.clone(),
        identity,
        Arc::new(SystemClock::new()),
        5,
    ))
}

/// Writes a new 1 MiB object of seeded bytes (not synced); returns it with its bytes.
fn write_object(engine: &Engine, seed: u64) -> (ObjectId, Vec<u8>) {
    let object = engine.object_create("tank", 128 << 10).unwrap();
    let mut data = vec![0u8; 1 << 20];
    SeededRng::new(seed).fill(&mut data);
    engine.object_write("tank", object, 0, &data).unwrap();
    (object, data)
}

fn check_objects(engine: &Engine, objects: &[(ObjectId, Vec<u8>)]) {
    for (object, data) in objects {
        let mut buf = vec![0u8; data.len()];
        engine.object_read("tank", *object, 0, &mut buf).unwrap();
        assert!(buf == *data, "object {object:?} differs");
    }
}

fn set_flush_failing(provider: &SimProvider, failing: bool) {
    let plan = FaultPlan {
        flush_eio: if failing { PER_MILLION } else { 0 },
        ..FaultPlan::default()
    };
    for name in FAILING {
        provider.get(name).unwrap().set_plan(plan.clone());
    }
}

/// Polls until `engine`'s pool is SUSPENDED (the txg timer runs every 5 s); its status.
fn wait_suspended(engine: &Engine) -> tarn_engine::PoolStatus {
    for _ in 0..300 {
        let status = engine.status("tank").unwrap();
        if status.state == "SUSPENDED" {
            return status;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("not suspended: {:?}", engine.status("tank"));
}

fn scrub_errors(engine: &Engine) -> u64 {
    let names = ["tank".to_string()];
    engine
        .scrub(&names, ScrubAction::Start, "pool scrub tank")
        .unwrap();
    loop {
        // The daemon's scrub thread may run batches too; either way the scan ends.
        match engine.scrub_step("tank", 1 << 20).unwrap() {
            Some(progress) if progress.state == ScanState::Scanning => {}
            Some(progress) => return progress.errors,
            None => {
                let status = engine.scan_progress("tank").unwrap().unwrap();
                return status.errors;
            }
        }
    }
}

fn spawn_writer(engine: &Arc<Engine>, object: ObjectId) -> JoinHandle<Result<(), EngineError>> {
    let engine = Arc::clone(engine);
    std::thread::spawn(move || engine.object_write("tank", object, 0, &[9u8; 4096]))
}

/// A raidz1 of four simulated devices (`failmode=wait`, the default).
fn raidz1() -> (Arc<SimProvider>, Arc<Engine>) {
    let provider = SimProvider::with_devices(&NAMES, 128 << 20);
    let engine = engine_on(&provider);
    let names = NAMES.iter().map(|n| (*n).to_string()).collect();
    let spec = CreateSpec::one_top("tank", TopLayout::Raidz(1), names);
    engine
        .create_pool(&spec, &CreateOptions::default())
        .unwrap();
    (provider, engine)
}

#[test]
fn a_commit_failed_on_the_txg_sync_thread_resumes_at_clear() {
    let (provider, engine) = raidz1();
    let backend = EngineBackend::with_engine(Arc::clone(&engine)).unwrap();
    let mut objects = vec![write_object(&engine, 1)];
    engine.sync_pool("tank").unwrap();
    let committed = tarn_engine::check::committed_txg(&engine, "tank").unwrap();

    set_flush_failing(&provider, true);
    objects.push(write_object(&engine, 2));
    let status = wait_suspended(&engine);
    let why = status.status.clone().unwrap_or_default();
    let txg = committed.unwrap().0 + 1;
    assert!(
        why.contains(&format!("txg {txg}: commit phase")),
        "the txg after the committed one failed in its commit phase: {why}"
    );
    assert_eq!(
        tarn_engine::check::committed_txg(&engine, "tank").unwrap(),
        committed,
        "nothing committed past the failure"
    );

    let writer = spawn_writer(&engine, objects[0].0);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!writer.is_finished(), "a writer waits (failmode=wait)");
    let clear = Request::PoolClear {
        name: "tank".into(),
        device: None,
    };
    assert!(
        matches!(backend.handle(clear.clone()), Response::Error(_)),
        "clear fails while the flushes still fail"
    );
    assert_eq!(engine.status("tank").unwrap().state, "SUSPENDED");
    assert!(
        !writer.is_finished(),
        "a failed clear does not end the wait"
    );

    set_flush_failing(&provider, false);
    match backend.handle(clear) {
        Response::Ok(_) => {}
        Response::Error(e) => panic!("clear: {}", e.message),
    }
    writer.join().unwrap().unwrap();
    objects[0].1[..4096].fill(9);
    assert_eq!(engine.status("tank").unwrap().state, "ONLINE");
    engine.sync_pool("tank").unwrap();
    check_objects(&engine, &objects);
    tarn_engine::check::verify_pool(&engine, "tank").unwrap();
    assert_eq!(scrub_errors(&engine), 0);

    drop(backend);
    engine.export_pool("tank", false).unwrap();
    let engine = engine_on(&provider);
    let dirs = ["/sim".to_string()];
    engine
        .import_pool(&dirs, "tank", &ImportOptions::default(), "pool import tank")
        .unwrap();
    check_objects(&engine, &objects);
    assert_eq!(scrub_errors(&engine), 0);
}
