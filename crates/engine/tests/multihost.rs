//! Multihost protection with two engines (two host ids) on the same simulated devices.
//!
//! Goal: a pool with `multihost=on` cannot be imported by another host while its owner's
//! heartbeat advances; it can once the owner exported it or stopped (died); one failed leaf
//! never stops the heartbeat, and an owner that cannot write it for too long suspends.
//! Method: engine A owns the pool; engine B imports with a clock whose every sleep first lets
//! A write a heartbeat (standing for A's daemon thread running while B waits), or with a
//! plain manual clock (A is dead). Time is the engines' manual clocks, so runs are exact.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::sync::{Arc, Mutex};

use tarn_base::limits::{MULTIHOST_FAIL_INTERVALS, MULTIHOST_IMPORT_INTERVALS};
use tarn_base::{Clock, ManualClock};
use tarn_device::{FaultPlan, SimDevice};
use tarn_engine::{CreateOptions, Engine, EngineError, TopLayout};
use tarn_pool::{CreateSpec, HostIdentity, ImportOptions, PoolError, SimProvider};

const INTERVAL_MS: u64 = 100;
const INTERVAL_NS: u64 = INTERVAL_MS * 1_000_000;

type Hook = Box<dyn Fn() + Send + Sync>;

/// A manual clock whose sleeps first run a hook: the other host's thread gets to run while
/// this one waits.
struct HookClock {
    base: Arc<ManualClock>,
    hook: Mutex<Option<Hook>>,
}

impl std::fmt::Debug for HookClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookClock").finish_non_exhaustive()
    }
}

impl Clock for HookClock {
    fn now_unix_secs(&self) -> u64 {
        self.base.now_unix_secs()
    }

    fn monotonic_ns(&self) -> u64 {
        self.base.monotonic_ns()
    }

    fn sleep_ns(&self, ns: u64) {
        if let Some(hook) = self.hook.lock().unwrap().as_ref() {
            hook();
        }
        self.base.sleep_ns(ns);
    }
}

fn devices(count: usize) -> (Arc<SimProvider>, Vec<String>) {
    let names: Vec<String> = (0..count).map(|i| format!("/sim/d{i}")).collect();
    (SimProvider::with_devices(&names, 128 << 20), names)
}

fn host(provider: &Arc<SimProvider>, hostid: u64, clock: Arc<dyn Clock>) -> Arc<Engine> {
    let identity = HostIdentity {
        hostid,
        hostname: format!("host{hostid}"),
    };
    let engine = Engine::new(provider.clone(), identity, clock, hostid);
    engine.set_multihost_interval_ms(INTERVAL_MS);
    Arc::new(engine)
}

fn create(engine: &Engine, layout: TopLayout, names: &[String], multihost: bool) {
    let spec = CreateSpec::one_top("tank", layout, names.to_vec());
    let value = if multihost { "on" } else { "off" };
    let options = CreateOptions {
        properties: vec![("multihost".into(), value.into())],
        command: "pool create tank".into(),
        ..CreateOptions::default()
    };
    engine.create_pool(&spec, &options).unwrap();
}

fn import(engine: &Engine, force: bool) -> Result<String, EngineError> {
    let options = ImportOptions {
        force,
        ..ImportOptions::default()
    };
    engine.import_pool(&["/sim/".into()], "tank", &options, "pool import tank")
}

/// Why the pool is suspended, found the way a writer would: by trying to commit a txg.
fn suspended(engine: &Engine) -> Option<String> {
    match engine.sync_pool("tank") {
        Ok(_) => None,
        Err(EngineError::Pool(PoolError::Suspended(why))) => Some(why),
        Err(other) => panic!("sync failed otherwise: {other}"),
    }
}

fn writes(provider: &SimProvider) -> u64 {
    provider.all().iter().map(|(_, d)| d.stats().writes).sum()
}

#[test]
fn a_live_owner_is_refused_even_with_force() {
    let (provider, names) = devices(3);
    let base = Arc::new(ManualClock::new(1_700_000_000));
    let owner = host(&provider, 1, base.clone());
    create(&owner, TopLayout::Raidz(1), &names, true);
    owner.multihost_heartbeat();
    let clock = Arc::new(HookClock {
        base: base.clone(),
        hook: Mutex::new(None),
    });
    let importer = host(&provider, 2, clock.clone());
    let beating = owner.clone();
    let written = Arc::new(Mutex::new(0));
    let (seen, probe) = (written.clone(), provider.clone());
    *clock.hook.lock().unwrap() = Some(Box::new(move || {
        beating.multihost_heartbeat();
        *seen.lock().unwrap() = writes(&probe);
    }));
    let start = base.monotonic_ns();
    let error = import(&importer, true).unwrap_err();
    assert!(
        matches!(
            error,
            EngineError::Pool(PoolError::InUseByHost { hostid: 1 })
        ),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .starts_with("pool is in use by host 0x1 (multihost=on); "),
        "{error}"
    );
    // The first heartbeat after the importer's first look is enough; the refusal wrote
    // nothing after it.
    assert_eq!(base.monotonic_ns() - start, INTERVAL_NS);
    assert_eq!(writes(&provider), *written.lock().unwrap());
    assert!(importer.pool_names().is_empty());
    assert_eq!(suspended(&owner), None);
}

#[test]
fn a_dead_owner_is_waited_out_and_imported_without_force() {
    let (provider, names) = devices(2);
    let base = Arc::new(ManualClock::new(1_700_000_000));
    let owner = host(&provider, 1, base.clone());
    create(&owner, TopLayout::Mirror, &names, true);
    owner.multihost_heartbeat();
    // The owner stops here: its heartbeats never advance again.
    let importer = host(&provider, 2, base.clone());
    let start = base.monotonic_ns();
    assert_eq!(import(&importer, false).unwrap(), "tank");
    assert_eq!(
        base.monotonic_ns() - start,
        MULTIHOST_IMPORT_INTERVALS * INTERVAL_NS
    );
    // The new owner's heartbeat is what a third host would now see.
    importer.multihost_heartbeat();
    let third = host(&provider, 3, base.clone());
    importer.export_pool("tank", false).unwrap();
    let start = base.monotonic_ns();
    assert_eq!(import(&third, false).unwrap(), "tank");
    assert_eq!(base.monotonic_ns(), start, "an exported pool needs no wait");
}

/// Goal: the importer's wait scales with what the owner's heartbeat records, not a fixed
/// time. The owner's last heartbeat landed five intervals after the one before (a slow
/// host); its gap is recorded in the heartbeat, and an importer that finds the owner gone
/// watches twenty such gaps before it imports (twenty intervals when heartbeats are on
/// time, as in `a_dead_owner_is_waited_out_and_imported_without_force`).
#[test]
fn the_import_wait_scales_with_the_owners_recorded_heartbeat_gap() {
    let (provider, names) = devices(2);
    let base = Arc::new(ManualClock::new(1_700_000_000));
    let owner = host(&provider, 1, base.clone());
    create(&owner, TopLayout::Mirror, &names, true);
    owner.multihost_heartbeat();
    base.sleep_ns(5 * INTERVAL_NS);
    owner.multihost_heartbeat();
    let device = provider.get(&names[0]).unwrap();
    let beats = tarn_pool::multihost::read_heartbeats(device.as_ref(), pool_guid(&owner));
    let gaps: Vec<u64> = beats.iter().flatten().map(|b| b.gap_ms).collect();
    assert!(gaps.contains(&(5 * INTERVAL_MS)), "{gaps:?}");
    // The owner stops here.
    let importer = host(&provider, 2, base.clone());
    let start = base.monotonic_ns();
    assert_eq!(import(&importer, false).unwrap(), "tank");
    assert_eq!(
        base.monotonic_ns() - start,
        MULTIHOST_IMPORT_INTERVALS * 5 * INTERVAL_NS
    );
}

/// Goal: `clear` never resumes a `multihost=on` pool that another host imported while it was
/// suspended (its heartbeats stop with the suspension, so an importer waits them out).
/// Method: two of three raidz1 devices vanish and the owner's sync suspends; they return;
/// a second host imports (no heartbeat moved) and commits; the owner's `clear` refuses and
/// the pool stays suspended.
#[test]
fn clear_refuses_when_another_host_imported_the_suspended_pool() {
    let (provider, names) = devices(3);
    let base = Arc::new(ManualClock::new(1_700_000_000));
    let owner = host(&provider, 1, base.clone());
    create(&owner, TopLayout::Raidz(1), &names, true);
    owner.multihost_heartbeat();
    for name in &names[1..] {
        provider.get(name).unwrap().set_gone(true);
    }
    assert!(suspended(&owner).is_some());
    for name in &names[1..] {
        provider.get(name).unwrap().set_gone(false);
    }
    let importer = host(&provider, 2, base.clone());
    assert_eq!(import(&importer, false).unwrap(), "tank");
    importer.multihost_heartbeat();
    let refused = owner.clear("tank", None, "pool clear tank");
    match refused {
        Err(EngineError::Pool(PoolError::CannotResume(why))) => {
            assert!(why.starts_with("host 0x2 has written to the pool"), "{why}");
        }
        other => panic!("clear must refuse: {other:?}"),
    }
    assert!(suspended(&owner).is_some());
}

fn pool_guid(engine: &Engine) -> tarn_base::Guid {
    tarn_base::Guid(engine.status("tank").unwrap().guid)
}

#[test]
fn multihost_off_keeps_the_host_id_check() {
    let (provider, names) = devices(2);
    let base = Arc::new(ManualClock::new(1_700_000_000));
    let owner = host(&provider, 1, base.clone());
    create(&owner, TopLayout::Mirror, &names, false);
    owner.multihost_heartbeat();
    let importer = host(&provider, 2, base.clone());
    let error = import(&importer, false).unwrap_err();
    assert!(
        matches!(
            error,
            EngineError::Pool(PoolError::ActiveElsewhere { hostid: 1, .. })
        ),
        "{error}"
    );
    let start = base.monotonic_ns();
    assert_eq!(import(&importer, true).unwrap(), "tank");
    assert_eq!(base.monotonic_ns(), start);
}

#[test]
fn turning_multihost_on_later_protects_the_pool() {
    let (provider, names) = devices(2);
    let base = Arc::new(ManualClock::new(1_700_000_000));
    let owner = host(&provider, 1, base.clone());
    create(&owner, TopLayout::Mirror, &names, false);
    owner
        .set_prop("tank", "multihost", "on", "pool set multihost=on tank")
        .unwrap();
    let clock = Arc::new(HookClock {
        base: base.clone(),
        hook: Mutex::new(None),
    });
    let beating = owner.clone();
    *clock.hook.lock().unwrap() = Some(Box::new(move || {
        beating.multihost_heartbeat();
    }));
    let importer = host(&provider, 2, clock);
    let error = import(&importer, true).unwrap_err();
    assert!(
        matches!(
            error,
            EngineError::Pool(PoolError::InUseByHost { hostid: 1 })
        ),
        "{error}"
    );
}

#[test]
fn one_failed_leaf_never_suspends_the_pool() {
    let (provider, names) = devices(2);
    let base = Arc::new(ManualClock::new(1_700_000_000));
    let owner = host(&provider, 1, base.clone());
    create(&owner, TopLayout::Mirror, &names, true);
    provider.get(&names[1]).unwrap().set_gone(true);
    for _ in 0..3 * MULTIHOST_FAIL_INTERVALS {
        base.advance_ns(INTERVAL_NS);
        owner.multihost_heartbeat();
    }
    assert_eq!(suspended(&owner), None);
}

#[test]
fn a_heartbeat_without_quorum_for_too_long_suspends_the_pool() {
    let (provider, names) = devices(3);
    let base = Arc::new(ManualClock::new(1_700_000_000));
    let owner = host(&provider, 1, base.clone());
    create(&owner, TopLayout::Raidz(1), &names, true);
    owner.multihost_heartbeat();
    for name in &names[..2] {
        provider.get(name).unwrap().set_gone(true);
    }
    for _ in 0..MULTIHOST_FAIL_INTERVALS - 1 {
        base.advance_ns(INTERVAL_NS);
        owner.multihost_heartbeat();
        assert_ne!(owner.status("tank").unwrap().state, "SUSPENDED");
    }
    base.advance_ns(INTERVAL_NS);
    owner.multihost_heartbeat();
    let status = owner.status("tank").unwrap();
    assert_eq!(status.state, "SUSPENDED");
    let why = status.status.unwrap();
    assert!(
        why.starts_with(
            "The pool is suspended: the multihost heartbeat could not be written for 1000 ms"
        ),
        "{why}"
    );
    assert!(suspended(&owner).is_some());
    let events = owner.events(Some("tank"), 0, false);
    assert!(
        events
            .iter()
            .any(|e| e.class.ends_with("multihost_suspend"))
    );
}

#[test]
fn an_owner_that_stalled_past_the_limit_suspends_instead_of_writing() {
    let (provider, names) = devices(2);
    let base = Arc::new(ManualClock::new(1_700_000_000));
    let owner = host(&provider, 1, base.clone());
    create(&owner, TopLayout::Mirror, &names, true);
    owner.multihost_heartbeat();
    // A paused VM: long enough for another host to have watched the silence and imported.
    base.advance_ns(MULTIHOST_FAIL_INTERVALS * INTERVAL_NS);
    let before = writes(&provider);
    owner.multihost_heartbeat();
    assert_eq!(writes(&provider), before, "no heartbeat after the stall");
    let status = owner.status("tank").unwrap();
    assert_eq!(status.state, "SUSPENDED");
    let why = status.status.unwrap();
    assert!(why.contains("this host stalled"), "{why}");
}

/// A heartbeat write that hangs is noticed while it hangs. The bug: heartbeats were written
/// synchronously by the one thread that also checked the deadline, so while a flush hung
/// the owner could not suspend, and an importer watching the silence could import a pool
/// still in use. Method: the engine on a manual clock, d0 with 2 s of real latency per
/// access (a SimDevice without a clock sleeps), the heartbeat written from another thread;
/// while it is stuck in d0, virtual time passes the limit and `multihost_watch` (the
/// daemon's second thread) suspends the pool at once, the write still in flight. When the
/// write completes it counts for nothing: the pool stays suspended.
#[test]
fn a_hanging_heartbeat_write_is_noticed_while_it_hangs() {
    let (provider, names) = devices(2);
    let base = Arc::new(ManualClock::new(1_700_000_000));
    let owner = host(&provider, 1, base.clone());
    create(&owner, TopLayout::Mirror, &names, true);
    owner.multihost_heartbeat();
    owner.multihost_watch();
    assert_ne!(owner.status("tank").unwrap().state, "SUSPENDED");
    let slow = provider.get(&names[0]).unwrap();
    let writes_before = slow.stats().writes;
    slow.set_plan(FaultPlan {
        latency_ns: 2_000_000_000,
        ..FaultPlan::default()
    });
    base.advance_ns(INTERVAL_NS);
    let writer = owner.clone();
    let hanging = std::thread::spawn(move || writer.multihost_heartbeat());
    while slow.stats().writes == writes_before {
        std::thread::yield_now();
    }
    base.advance_ns(MULTIHOST_FAIL_INTERVALS * INTERVAL_NS);
    owner.multihost_watch();
    assert!(!hanging.is_finished(), "the heartbeat write still hangs");
    let status = owner.status("tank").unwrap();
    assert_eq!(status.state, "SUSPENDED");
    let why = status.status.unwrap();
    assert!(
        why.contains("no multihost heartbeat completed for 1100 ms (one has been written for"),
        "{why}"
    );
    let events = owner.events(Some("tank"), 0, false);
    let suspend: Vec<_> = events
        .iter()
        .filter(|e| e.class.ends_with("multihost_suspend"))
        .collect();
    assert_eq!(suspend.len(), 1);
    assert!(
        suspend[0].payload[0].1.contains("1100 ms"),
        "{:?}",
        suspend[0]
    );
    hanging.join().unwrap();
    slow.set_plan(FaultPlan::default());
    assert_eq!(owner.status("tank").unwrap().state, "SUSPENDED");
    let before = writes(&provider);
    base.advance_ns(INTERVAL_NS);
    assert!(owner.multihost_heartbeat().is_empty());
    assert!(
        owner.multihost_watch().is_empty(),
        "failmode=wait: no stop asked for"
    );
    assert_eq!(
        writes(&provider),
        before,
        "a suspended pool writes no heartbeat"
    );
    assert!(suspended(&owner).is_some());
}

/// `failmode=panic`: the suspension asks the caller (the daemon) to stop the process, with
/// the reason; the event says which failmode applied.
#[test]
fn failmode_panic_asks_to_stop_the_process() {
    let (provider, names) = devices(2);
    let base = Arc::new(ManualClock::new(1_700_000_000));
    let owner = host(&provider, 1, base.clone());
    create(&owner, TopLayout::Mirror, &names, true);
    owner
        .set_prop("tank", "failmode", "panic", "pool set failmode=panic tank")
        .unwrap();
    assert!(owner.multihost_heartbeat().is_empty());
    base.advance_ns(MULTIHOST_FAIL_INTERVALS * INTERVAL_NS);
    let panics = owner.multihost_watch();
    assert_eq!(
        panics,
        vec![
            "pool 'tank': no multihost heartbeat counted in the last 1000 ms (failmode=panic)"
                .to_string()
        ]
    );
    assert_eq!(owner.status("tank").unwrap().state, "SUSPENDED");
    let events = owner.events(Some("tank"), 0, false);
    let suspend = events
        .iter()
        .find(|e| e.class.ends_with("multihost_suspend"))
        .unwrap();
    assert_eq!(suspend.payload[1], ("failmode".into(), "panic".into()));
    assert!(owner.multihost_watch().is_empty(), "asked once");
}

/// A slow heartbeat that completes is counted from its start. Method: devices on the
/// engine's manual clock with latency in virtual time; a write taking 4 intervals keeps the
/// pool alive (the next heartbeat and the watch find it counted), and the deadline runs
/// from its start: a write taking 12 intervals completes, yet the watch suspends, because an
/// importer may have seen it land 12 intervals before the owner heard back.
#[test]
fn a_slow_heartbeat_counts_from_its_start() {
    let provider = Arc::new(SimProvider::new());
    let base = Arc::new(ManualClock::new(1_700_000_000));
    let names: Vec<String> = (0..2).map(|i| format!("/sim/d{i}")).collect();
    for name in &names {
        let device = SimDevice::with_clock(name, 128 << 20, FaultPlan::default(), base.clone());
        provider.insert(name, device);
    }
    let owner = host(&provider, 1, base.clone());
    create(&owner, TopLayout::Mirror, &names, true);
    owner.multihost_heartbeat();
    // Four accesses (write and flush on two devices) of one interval each.
    let slow = |ns: u64| {
        for name in &names {
            provider.get(name).unwrap().set_plan(FaultPlan {
                latency_ns: ns,
                ..FaultPlan::default()
            });
        }
    };
    slow(INTERVAL_NS);
    base.advance_ns(INTERVAL_NS);
    let started = base.monotonic_ns();
    owner.multihost_heartbeat();
    assert_eq!(base.monotonic_ns() - started, 4 * INTERVAL_NS);
    owner.multihost_watch();
    assert_ne!(owner.status("tank").unwrap().state, "SUSPENDED");
    slow(0);
    base.advance_ns((MULTIHOST_FAIL_INTERVALS - 5) * INTERVAL_NS);
    owner.multihost_watch();
    assert_ne!(
        owner.status("tank").unwrap().state,
        "SUSPENDED",
        "9 intervals after the slow heartbeat started"
    );
    owner.multihost_heartbeat();
    slow(3 * INTERVAL_NS);
    base.advance_ns(INTERVAL_NS);
    owner.multihost_heartbeat();
    owner.multihost_watch();
    let status = owner.status("tank").unwrap();
    assert_eq!(status.state, "SUSPENDED");
    assert!(
        status
            .status
            .unwrap()
            .contains("no multihost heartbeat counted in the last 1200 ms"),
    );
}
