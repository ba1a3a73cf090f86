//! Clones through the engine on simulated devices: a clone reads as its origin snapshot,
//! shares its blocks, and counts only what it writes; overwriting shared blocks from the
//! clone never frees them while the origin holds them; the origin snapshot refuses destroy
//! while clones exist (devices unchanged) and `-R` takes the clones with it; clones of
//! clones, snapshots and rollbacks of clones, export/import, and a power cut at any instant
//! of a clone's verbs keep everything consistent.
//!
//! Method: volumes carry the data (their verbs read and write any dataset of the pool).
//! After every step `check::verify_pool` walks every head, snapshot and dead list from the
//! committed uberblock: each block is reached once (a block freed while a snapshot or
//! clone still references it is reported as reachable-but-free), a clone's shared bytes,
//! `usedbysnapshots` and the space log all close. Space figures are compared exactly with
//! what the writes must have cost.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;

use common::dataset_prop as prop;
use common::volume::{LEN, noise, read, snap, volume, write};
use common::{CutProvider, Host, PLAIN, crash_all, images, sim_devices_with};
use tarn_device::FaultPlan;
use tarn_engine::{CreateSpec, DatasetQuery, Engine, ImportOptions, TopLayout, check};

const HOST: Host = Host {
    hostid: 11,
    seed: 7,
    ..PLAIN
};

/// Volume block size: every write below is whole blocks.
const BLOCK: usize = 16 << 10;

fn setup(seed: u64) -> (Arc<CutProvider>, Engine) {
    let provider = Arc::new(CutProvider::default());
    let names = sim_devices_with(&provider.sims, "d", 0..4, 128 << 20, |i| FaultPlan {
        seed: seed + i as u64,
        drop_on_crash: 500_000,
        torn_on_crash: 300_000,
        ..FaultPlan::default()
    });
    let spec = CreateSpec::one_top("tank", TopLayout::Mirror, names);
    let engine = HOST.create_tank(&provider, &spec, &[]);
    volume(&engine, "tank/v");
    (provider, engine)
}

fn import(provider: &Arc<CutProvider>) -> Engine {
    HOST.import(provider, &ImportOptions::default()).unwrap()
}

fn bytes_of(engine: &Engine, name: &str, property: &str) -> u64 {
    prop(engine, name, property).parse().unwrap()
}

fn clone(engine: &Engine, origin: &str, name: &str) {
    engine
        .clone_dataset(origin, name, &[], false, "clone")
        .unwrap();
}

fn settle(engine: &Engine) {
    for _ in 0..4 {
        engine.sync_pool("tank").unwrap();
    }
    check::verify_pool(engine, "tank").unwrap();
}

/// Every dataset's `usedbydataset + usedbysnapshots`: each block the pool's datasets
/// reference is charged to exactly one of them, so this is the same however the blocks are
/// shared.
fn charged(engine: &Engine) -> u64 {
    let query = DatasetQuery {
        names: vec!["tank".into()],
        recursive: true,
        properties: vec!["usedbydataset".into(), "usedbysnapshots".into()],
        ..DatasetQuery::default()
    };
    engine
        .dataset_props(&query)
        .unwrap()
        .iter()
        .flat_map(|row| row.props.iter())
        .map(|p| p.parsable.parse::<u64>().unwrap())
        .sum()
}

#[test]
fn a_clone_shares_its_origin_and_counts_only_what_it_writes() {
    // Goal: a new clone reads as the snapshot, uses 0 and refers to what the snapshot does;
    // overwriting a quarter from the clone charges the clone exactly those blocks (plus its
    // metadata) and frees none the origin holds; the origin and its snapshot read as before;
    // `origin` and `clones` name each other; all of it survives export and import.
    let (provider, engine) = setup(1);
    let data = noise(LEN, 1);
    write(&engine, "tank/v", 0, &data);
    settle(&engine);
    snap(&engine, "tank/v@s");
    let total = charged(&engine);
    clone(&engine, "tank/v@s", "tank/c");
    settle(&engine);
    assert_eq!(read(&engine, "tank/c"), data);
    assert_eq!(
        bytes_of(&engine, "tank/c", "used"),
        0,
        "a new clone owns nothing"
    );
    assert_eq!(
        bytes_of(&engine, "tank/c", "referenced"),
        bytes_of(&engine, "tank/v@s", "referenced")
    );
    assert_eq!(charged(&engine), total, "cloning charges nothing");
    assert_eq!(prop(&engine, "tank/c", "origin"), "tank/v@s");
    assert_eq!(prop(&engine, "tank/v@s", "clones"), "tank/c");
    assert_eq!(prop(&engine, "tank/v", "origin"), "-");
    assert_eq!(prop(&engine, "tank/c", "type"), "volume");
    // A scrub with a clone sharing the origin's blocks verifies everything without error.
    assert_eq!(common::scrub_tank(&engine, 1 << 20).errors, 0);

    let fresh = noise(LEN / 4, 2);
    write(&engine, "tank/c", 0, &fresh);
    settle(&engine);
    let mut expect = data.clone();
    expect[..LEN / 4].copy_from_slice(&fresh);
    assert_eq!(read(&engine, "tank/c"), expect);
    assert_eq!(read(&engine, "tank/v"), data, "the origin is untouched");
    let used = bytes_of(&engine, "tank/c", "used");
    assert!(
        used >= (LEN / 4) as u64 && used < (LEN / 4 + 16 * BLOCK) as u64,
        "the clone is charged what it wrote: {used}"
    );
    let written = bytes_of(&engine, "tank/c", "written");
    assert_eq!(written, used, "written since the origin is what it owns");
    engine.export_pool("tank", false).unwrap();
    let engine = import(&provider);
    check::verify_pool(&engine, "tank").unwrap();
    assert_eq!(read(&engine, "tank/c"), expect);
    assert_eq!(bytes_of(&engine, "tank/c", "used"), used);
    assert_eq!(prop(&engine, "tank/c", "origin"), "tank/v@s");
    assert_eq!(prop(&engine, "tank/v@s", "clones"), "tank/c");
}

#[test]
fn the_origin_refuses_destroy_while_clones_exist_and_r_takes_them() {
    // Goal: destroying the origin snapshot, or its dataset with -r, is refused with one
    // line naming the clone and changes no device byte; destroying the clone frees only
    // what it wrote; then the snapshot goes and frees the rest; -R destroys snapshot and
    // clones (and the clones' children) in one command. Space closes at every step.
    let (provider, engine) = setup(2);
    let data = noise(LEN, 3);
    write(&engine, "tank/v", 0, &data);
    snap(&engine, "tank/v@s");
    clone(&engine, "tank/v@s", "tank/c");
    write(&engine, "tank/c", LEN / 2, &noise(LEN / 4, 4));
    write(&engine, "tank/v", 0, &noise(LEN / 2, 5));
    settle(&engine);
    let before = images(&provider.sims);
    for (name, recursive) in [("tank/v@s", false), ("tank/v", true)] {
        let refused = engine
            .destroy_dataset(name, recursive, "destroy")
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("dependent clones") && refused.contains("tank/c"),
            "{refused}"
        );
        assert!(!refused.contains('\n'), "one line: {refused}");
    }
    assert!(images(&provider.sims) == before, "a refused destroy wrote");
    let total = charged(&engine);
    let clone_used = bytes_of(&engine, "tank/c", "used");
    engine.destroy_dataset("tank/c", false, "destroy").unwrap();
    settle(&engine);
    assert_eq!(
        charged(&engine),
        total - clone_used,
        "the clone freed what it owned"
    );
    assert_eq!(read(&engine, "tank/v")[LEN / 2..], data[LEN / 2..]);
    engine
        .destroy_dataset("tank/v@s", false, "destroy")
        .unwrap();
    settle(&engine);

    snap(&engine, "tank/v@t");
    clone(&engine, "tank/v@t", "tank/d");
    engine.create_dataset("tank/d2", &[], false, "").unwrap();
    snap(&engine, "tank/d@u");
    clone(&engine, "tank/d@u", "tank/d2/e");
    let report = engine
        .destroy_snapshots_with("tank/v@t", false, true, false, true, "")
        .unwrap();
    assert_eq!(report.datasets, vec!["tank/d", "tank/d2/e"]);
    engine
        .destroy_dataset_with("tank/v@t", false, true, "destroy -R")
        .unwrap();
    settle(&engine);
    let names: Vec<String> = engine
        .dataset_props(&DatasetQuery {
            properties: vec!["name".into()],
            types: vec!["all".into()],
            ..DatasetQuery::default()
        })
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, vec!["tank", "tank/d2", "tank/v"]);
}

#[test]
fn snapshots_rollbacks_and_clones_of_clones_stay_exact() {
    // Goal: a clone's own snapshots hold only blocks born after the origin (its first
    // snapshot's `used` never counts the origin's blocks), rollback of a clone restores its
    // snapshot, a clone of a clone shares through both, and every dataset's charge adds up
    // to what the pool's datasets reference after each step and after export/import.
    let (provider, engine) = setup(3);
    let data = noise(LEN, 6);
    write(&engine, "tank/v", 0, &data);
    snap(&engine, "tank/v@s");
    clone(&engine, "tank/v@s", "tank/c");
    write(&engine, "tank/c", 0, &noise(4 * BLOCK, 7));
    snap(&engine, "tank/c@x");
    let at_x = read(&engine, "tank/c");
    write(&engine, "tank/c", 0, &noise(8 * BLOCK, 8));
    write(&engine, "tank/c", LEN / 2, &noise(8 * BLOCK, 9));
    settle(&engine);
    let unique = bytes_of(&engine, "tank/c@x", "used");
    assert!(
        unique >= (4 * BLOCK) as u64 && unique < (8 * BLOCK) as u64,
        "x holds its own 4 blocks, not the origin's 4 it replaced: {unique}"
    );
    assert_eq!(bytes_of(&engine, "tank/c", "usedbysnapshots"), unique);
    clone(&engine, "tank/c@x", "tank/g");
    write(&engine, "tank/g", LEN - 2 * BLOCK, &noise(2 * BLOCK, 10));
    settle(&engine);
    let total = charged(&engine);
    engine
        .rollback("tank/c@x", false, "rollback tank/c@x")
        .unwrap();
    settle(&engine);
    assert_eq!(read(&engine, "tank/c"), at_x);
    assert_eq!(bytes_of(&engine, "tank/c", "usedbysnapshots"), 0);
    assert!(
        charged(&engine) < total,
        "rollback freed what the clone wrote after x"
    );
    assert_eq!(read(&engine, "tank/g")[..LEN / 2], at_x[..LEN / 2]);
    engine.export_pool("tank", false).unwrap();
    let engine = import(&provider);
    check::verify_pool(&engine, "tank").unwrap();
    assert_eq!(prop(&engine, "tank/g", "origin"), "tank/c@x");
    engine.destroy_dataset("tank/g", false, "").unwrap();
    engine.destroy_dataset("tank/c@x", false, "").unwrap();
    engine.destroy_dataset("tank/c", false, "").unwrap();
    engine.destroy_dataset("tank/v@s", false, "").unwrap();
    settle(&engine);
    assert_eq!(read(&engine, "tank/v"), data);
    assert_eq!(bytes_of(&engine, "tank/v", "usedbysnapshots"), 0);
}

type Props<'a> = &'a [(String, String)];

#[test]
fn refused_clones_change_nothing() {
    // Goal: every refused clone (no such snapshot, name taken, missing parent, another
    // pool, a property that does not apply) changes no device byte.
    let (provider, engine) = setup(4);
    write(&engine, "tank/v", 0, &noise(LEN, 11));
    snap(&engine, "tank/v@s");
    settle(&engine);
    let before = images(&provider.sims);
    let volsize = [("volsize".to_string(), "16M".to_string())];
    let mountpoint = [("mountpoint".to_string(), "/x".to_string())];
    let cases: [(&str, &str, Props); 6] = [
        ("tank/v@nope", "tank/c", &[]),
        ("tank/v@s", "tank/v", &[]),
        ("tank/v@s", "tank/a/b", &[]),
        ("tank/v@s", "other/c", &[]),
        ("tank/v@s", "tank/c", &volsize),
        ("tank/v@s", "tank/c", &mountpoint),
    ];
    for (origin, name, props) in cases {
        let refused = engine.clone_dataset(origin, name, props, false, "clone");
        assert!(refused.is_err(), "{origin} {name}");
    }
    assert!(images(&provider.sims) == before, "a refused clone wrote");
}

#[test]
fn a_crash_at_any_instant_of_a_clone_verb_keeps_before_or_after() {
    // Goal: a power cut after k device operations of clone, a write to the clone, the
    // clone's destroy or its promote leaves after import the state before or after it, with
    // the origin and its snapshot intact and the checker's space and sharing checks
    // passing. Method: cut after k = 0, 3, 6, ... operations until a run completes.
    for verb in 0..4 {
        let mut seen = [false, false];
        for k in (0..600u64).step_by(3) {
            let (provider, engine) = setup(100 + k);
            let data = noise(LEN, 12);
            write(&engine, "tank/v", 0, &data);
            snap(&engine, "tank/v@s");
            if verb > 0 {
                clone(&engine, "tank/v@s", "tank/c");
            }
            settle(&engine);
            let fresh = noise(LEN / 2, 13);
            *provider.cut.0.lock().unwrap() = Some(k);
            let outcome = match verb {
                0 => engine.clone_dataset("tank/v@s", "tank/c", &[], false, ""),
                1 => {
                    write(&engine, "tank/c", 0, &fresh);
                    engine.sync_pool("tank").map(|_| ())
                }
                2 => engine.destroy_dataset("tank/c", false, ""),
                _ => engine.promote("tank/c", ""),
            };
            drop(engine);
            crash_all(&provider.sims);
            *provider.cut.0.lock().unwrap() = None;
            let engine = import(&provider);
            check::verify_pool(&engine, "tank").unwrap();
            assert_eq!(read(&engine, "tank/v"), data, "verb {verb} k={k}");
            let exists = engine.volume_stat("tank/c").is_ok();
            let after = match verb {
                0 => exists,
                1 => read(&engine, "tank/c")[..LEN / 2] == fresh[..],
                2 => !exists,
                _ => prop(&engine, "tank/c", "origin") == "-",
            };
            if verb == 3 {
                let moved = if after { "tank/c@s" } else { "tank/v@s" };
                assert_eq!(frozen(&engine, moved), data, "k={k}");
            }
            if !after {
                assert!(
                    outcome.is_err(),
                    "verb {verb} k={k}: a committed change lost"
                );
                if verb == 1 {
                    assert_eq!(read(&engine, "tank/c"), data, "k={k}");
                }
            }
            seen[usize::from(after)] = true;
            if outcome.is_ok() {
                break;
            }
        }
        assert!(seen[0] && seen[1], "verb {verb}: cuts gave both states");
    }
}

#[test]
fn rollback_past_an_origin_needs_capital_r() {
    // Goal: `rollback -r` past a snapshot with clones is refused with one line naming the
    // clone (devices unchanged); `rollback -R` destroys the later snapshots and their
    // clones in one txg and the dataset reads as the snapshot rolled back to.
    let (provider, engine) = setup(5);
    let data = noise(LEN, 14);
    write(&engine, "tank/v", 0, &data);
    snap(&engine, "tank/v@a");
    write(&engine, "tank/v", 0, &noise(LEN / 2, 15));
    snap(&engine, "tank/v@b");
    clone(&engine, "tank/v@b", "tank/c");
    write(&engine, "tank/c", LEN / 2, &noise(LEN / 4, 16));
    settle(&engine);
    let before = images(&provider.sims);
    let refused = engine
        .rollback("tank/v@a", true, "rollback -r")
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("dependent clones") && refused.contains("tank/c"),
        "{refused}"
    );
    assert!(images(&provider.sims) == before, "a refused rollback wrote");
    assert_eq!(
        engine.rollback_targets("tank/v@a", false, true).unwrap(),
        vec!["tank/c"]
    );
    engine
        .rollback_with("tank/v@a", false, true, "rollback -R")
        .unwrap();
    settle(&engine);
    assert_eq!(read(&engine, "tank/v"), data);
    assert!(engine.volume_stat("tank/c").is_err(), "the clone went");
    assert_eq!(bytes_of(&engine, "tank/v", "usedbysnapshots"), 0);
}

/// The bytes of volume snapshot `full` (its data is object 1).
fn frozen(engine: &Engine, full: &str) -> Vec<u8> {
    let mut buf = vec![0u8; LEN];
    check::snapshot_read(engine, full, tarn_base::ObjectId(1), 0, &mut buf)
        .unwrap_or_else(|e| panic!("{full}: {e}"));
    buf
}

fn names(engine: &Engine) -> Vec<String> {
    let query = DatasetQuery {
        properties: vec!["name".into()],
        types: vec!["all".into()],
        ..DatasetQuery::default()
    };
    let rows = engine.dataset_props(&query).unwrap();
    rows.into_iter().map(|r| r.name).collect()
}

#[test]
fn promote_swaps_origin_and_clone_with_space_exact() {
    // Goal: promote moves the origin's snapshots up to the clone's origin to the clone and
    // makes the origin a clone of it: names, `origin`, `clones` and every snapshot's bytes
    // follow; the sum of what every dataset is charged stays exactly the same and the
    // checker (sharing, dead lists, usedbysnapshots, space) passes; a promote back restores
    // the first shape; a clone of a clone promotes past both; refusals change nothing; all
    // of it survives export and import.
    let (provider, engine) = setup(6);
    write(&engine, "tank/v", 0, &noise(LEN, 20));
    snap(&engine, "tank/v@a");
    write(&engine, "tank/v", 0, &noise(LEN / 4, 21));
    snap(&engine, "tank/v@b");
    clone(&engine, "tank/v@b", "tank/c");
    write(&engine, "tank/c", LEN / 8, &noise(LEN / 4, 22));
    snap(&engine, "tank/c@x");
    write(&engine, "tank/c", LEN / 2, &noise(LEN / 4, 23));
    write(&engine, "tank/v", 0, &noise(LEN / 2, 24));
    snap(&engine, "tank/v@after");
    settle(&engine);
    let total = charged(&engine);
    let frozen_all: Vec<(String, Vec<u8>)> = ["tank/v@a", "tank/v@b", "tank/c@x", "tank/v@after"]
        .iter()
        .map(|n| ((*n).to_string(), frozen(&engine, n)))
        .collect();
    let heads = (read(&engine, "tank/v"), read(&engine, "tank/c"));
    let before = images(&provider.sims);
    assert!(engine.promote("tank/v", "promote").is_err(), "not a clone");
    assert!(images(&provider.sims) == before, "a refused promote wrote");
    engine.promote("tank/c", "promote tank/c").unwrap();
    settle(&engine);
    assert_eq!(
        names(&engine),
        vec![
            "tank",
            "tank/c",
            "tank/c@a",
            "tank/c@b",
            "tank/c@x",
            "tank/v",
            "tank/v@after"
        ]
    );
    assert_eq!(prop(&engine, "tank/v", "origin"), "tank/c@b");
    assert_eq!(prop(&engine, "tank/c", "origin"), "-");
    assert_eq!(prop(&engine, "tank/c@b", "clones"), "tank/v");
    assert_eq!(
        charged(&engine),
        total,
        "promote moves charges, frees and adds nothing"
    );
    for (name, bytes) in &frozen_all {
        let now = match name.as_str() {
            "tank/v@a" => "tank/c@a",
            "tank/v@b" => "tank/c@b",
            other => other,
        };
        assert!(frozen(&engine, now) == *bytes, "{now}");
    }
    assert!((read(&engine, "tank/v"), read(&engine, "tank/c")) == heads);
    promote_through_a_clone_of_a_clone_and_back(&provider, engine, &frozen_all, &heads.0);
}

/// The second half of `promote_swaps_origin_and_clone_with_space_exact`: after `tank/c` was
/// promoted over `tank/v`, a clone `tank/g` of `tank/c@x` is promoted past both, then `c`
/// and `v` are promoted back; every snapshot reads as it did and everything goes at the end.
fn promote_through_a_clone_of_a_clone_and_back(
    provider: &Arc<CutProvider>,
    engine: Engine,
    frozen_all: &[(String, Vec<u8>)],
    head_v: &[u8],
) {
    clone(&engine, "tank/c@x", "tank/g");
    write(&engine, "tank/g", 0, &noise(2 * BLOCK, 25));
    engine.promote("tank/g", "promote tank/g").unwrap();
    settle(&engine);
    assert_eq!(prop(&engine, "tank/g", "origin"), "-");
    assert_eq!(prop(&engine, "tank/c", "origin"), "tank/g@x");
    assert_eq!(prop(&engine, "tank/v", "origin"), "tank/g@b");
    engine.promote("tank/c", "promote tank/c").unwrap();
    engine.promote("tank/v", "promote tank/v").unwrap();
    settle(&engine);
    assert_eq!(prop(&engine, "tank/c", "origin"), "tank/v@b");
    assert_eq!(prop(&engine, "tank/g", "origin"), "tank/c@x");
    engine.export_pool("tank", false).unwrap();
    let engine = import(provider);
    check::verify_pool(&engine, "tank").unwrap();
    for (name, bytes) in frozen_all {
        assert!(
            frozen(&engine, name) == *bytes,
            "{name} after promoting back"
        );
    }
    for doomed in ["tank/g", "tank/c@x", "tank/c", "tank/v@a%after"] {
        engine.destroy_dataset(doomed, false, "destroy").unwrap();
        settle(&engine);
    }
    assert_eq!(bytes_of(&engine, "tank/v", "usedbysnapshots"), 0);
    assert_eq!(read(&engine, "tank/v"), head_v);
}

#[test]
fn a_promote_refused_by_a_name_conflict_changes_nothing() {
    // Goal: a clone with a snapshot named like one the promote would move is refused with
    // one line naming it; no device byte changes.
    let (provider, engine) = setup(7);
    write(&engine, "tank/v", 0, &noise(LEN, 26));
    snap(&engine, "tank/v@a");
    clone(&engine, "tank/v@a", "tank/c");
    snap(&engine, "tank/c@a");
    settle(&engine);
    let before = images(&provider.sims);
    let refused = engine.promote("tank/c", "promote").unwrap_err().to_string();
    assert!(
        refused.contains("conflicts") && refused.contains("tank/c@a"),
        "{refused}"
    );
    assert!(images(&provider.sims) == before, "a refused promote wrote");
}

fn set(engine: &Engine, name: &str, property: &str, value: &str) {
    let assignment = [(property.to_string(), value.to_string())];
    engine.set_dataset_props(name, &assignment, "set").unwrap();
}

#[test]
fn written_at_a_snapshot_and_the_count_limits() {
    // Goal: `written@SNAP` of the head and of a later snapshot agree with `written` where
    // they must be the same and bound what was written; `snapshot_limit` and
    // `filesystem_limit` refuse what would pass them (one line naming the limit, devices
    // unchanged), counting the whole subtree, and lifting the limit lets it through.
    let (provider, engine) = setup(8);
    write(&engine, "tank/v", 0, &noise(LEN, 30));
    snap(&engine, "tank/v@a");
    write(&engine, "tank/v", 0, &noise(LEN / 4, 31));
    snap(&engine, "tank/v@b");
    write(&engine, "tank/v", LEN / 2, &noise(LEN / 8, 32));
    settle(&engine);
    let at_b = bytes_of(&engine, "tank/v", "written@b");
    assert_eq!(at_b, bytes_of(&engine, "tank/v", "written"));
    assert_eq!(
        bytes_of(&engine, "tank/v@b", "written@a"),
        bytes_of(&engine, "tank/v@b", "written")
    );
    let at_a = bytes_of(&engine, "tank/v", "written@a");
    assert!(at_a >= (LEN / 4 + LEN / 8) as u64, "{at_a}");
    assert!(
        at_a <= at_b + bytes_of(&engine, "tank/v@b", "written"),
        "{at_a}"
    );
    assert!(
        at_a < LEN as u64,
        "the untouched half is not written: {at_a}"
    );

    set(&engine, "tank/v", "snapshot_limit", "3");
    snap(&engine, "tank/v@c");
    engine.create_dataset("tank/f", &[], false, "").unwrap();
    set(&engine, "tank", "filesystem_limit", "2");
    settle(&engine);
    assert_eq!(prop(&engine, "tank/v", "snapshot_count"), "3");
    assert_eq!(prop(&engine, "tank", "snapshot_count"), "3");
    assert_eq!(prop(&engine, "tank", "filesystem_count"), "2");
    let before = images(&provider.sims);
    let refusals = [
        engine
            .snapshot(&["tank/v@d".into()], false, &[], "")
            .unwrap_err(),
        engine
            .snapshot(&["tank@d".into()], true, &[], "")
            .unwrap_err(),
        engine.create_dataset("tank/x", &[], false, "").unwrap_err(),
        engine
            .clone_dataset("tank/v@a", "tank/f/c", &[], false, "")
            .unwrap_err(),
    ];
    for refused in refusals {
        let text = refused.to_string();
        assert!(text.contains("limit exceeded"), "{text}");
        assert!(text.contains("_limit="), "{text}");
    }
    assert!(images(&provider.sims) == before, "a refusal wrote");
    set(&engine, "tank", "filesystem_limit", "none");
    assert_eq!(
        prop(&engine, "tank", "filesystem_limit"),
        u64::MAX.to_string()
    );
    engine.create_dataset("tank/x", &[], false, "").unwrap();
    settle(&engine);
}

#[test]
fn a_deferred_destroy_of_an_origin_waits_for_its_last_clone() {
    // Goal: `destroy -d` of a snapshot with clones marks it (`defer_destroy=on`) instead of
    // refusing; it stays while a clone does, and goes with the last clone's destroy.
    let (_provider, engine) = setup(9);
    write(&engine, "tank/v", 0, &noise(LEN, 40));
    snap(&engine, "tank/v@s");
    clone(&engine, "tank/v@s", "tank/c");
    clone(&engine, "tank/v@s", "tank/d");
    engine
        .destroy_snapshots_or_defer("tank/v@s", false, false, true, "destroy -d")
        .unwrap();
    assert_eq!(prop(&engine, "tank/v@s", "defer_destroy"), "on");
    engine.destroy_dataset("tank/c", false, "").unwrap();
    settle(&engine);
    assert_eq!(prop(&engine, "tank/v@s", "clones"), "tank/d");
    engine.destroy_dataset("tank/d", false, "").unwrap();
    settle(&engine);
    assert_eq!(names(&engine), vec!["tank", "tank/v"]);
}

#[test]
fn a_clone_promoted_over_its_container_refuses_destroy_r_with_one_line() {
    // Goal: a clone made inside its origin's dataset and promoted (found by the simulator,
    // seed 1017 --snapshots) makes the two depend on each other; `destroy -R` of the outer
    // one is refused with one line saying how to proceed (it panicked: "C3: parents and
    // clone origins form no cycle"), no device byte changes, and after promoting back the
    // destroy goes through.
    let (provider, engine) = setup(8);
    engine
        .create_dataset("tank/a", &[], false, "create")
        .unwrap();
    snap(&engine, "tank/a@s");
    clone(&engine, "tank/a@s", "tank/a/b");
    engine.promote("tank/a/b", "promote").unwrap();
    settle(&engine);
    let before = images(&provider.sims);
    let refused = engine
        .destroy_dataset_with("tank/a", true, true, "destroy -R")
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("depend on each other") && refused.contains("'promote tank/a'"),
        "{refused}"
    );
    assert!(images(&provider.sims) == before, "a refused destroy wrote");
    engine.promote("tank/a", "promote").unwrap();
    engine
        .destroy_dataset_with("tank/a", true, true, "destroy -R")
        .unwrap();
    assert!(!names(&engine).iter().any(|n| n.starts_with("tank/a")));
    check::verify_pool(&engine, "tank").unwrap();
}
