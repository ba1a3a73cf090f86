//! User holds on snapshots through the engine: `hold`, `release`, `holds`, the `userrefs`
//! and `defer_destroy` properties, destroy of a held snapshot refused (and `destroy -d`
//! deferred until the last release), holds kept across export and import, every refusal
//! leaving the devices byte for byte as they were.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;

use common::{Host, PLAIN, dataset_prop as prop, images, sim_devices};
use tarn_engine::{
    CreateSpec, DatasetQuery, Engine, HoldRow, ImportOptions, SimProvider, TopLayout, check,
};

const HOST: Host = Host {
    hostid: 11,
    seed: 7,
    ..PLAIN
};

fn setup() -> (Arc<SimProvider>, Engine) {
    let provider = Arc::new(SimProvider::default());
    let names = sim_devices(&provider, "d", 0..3, 64 << 20);
    let spec = CreateSpec::one_top("tank", TopLayout::Raidz(1), names);
    let engine = HOST.create_tank(&provider, &spec, &[]);
    engine.create_dataset("tank/a", &[], false, "").unwrap();
    engine
        .snapshot(&["tank@s".into()], true, &[], "snapshot -r tank@s")
        .unwrap();
    engine
        .snapshot(&["tank@t".into()], false, &[], "snapshot tank@t")
        .unwrap();
    (provider, engine)
}

fn owned(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_string()).collect()
}

fn snapshots(engine: &Engine) -> Vec<String> {
    let query = DatasetQuery {
        properties: vec!["name".into()],
        types: vec!["snapshot".into()],
        ..DatasetQuery::default()
    };
    let rows = engine.dataset_props(&query).unwrap();
    rows.into_iter().map(|r| r.name).collect()
}

fn tags(rows: &[HoldRow]) -> Vec<(String, String)> {
    rows.iter()
        .map(|r| (r.name.clone(), r.tag.clone()))
        .collect()
}

#[test]
fn holds_are_placed_listed_and_kept_across_import() {
    // Goal: `hold -r` reaches every descendant's snapshot, `userrefs` counts holds, rows are
    // per snapshot then tag, and holds survive export and import with their times.
    let (provider, engine) = setup();
    engine
        .hold("keep", &owned(&["tank@s"]), true, "hold -r keep tank@s")
        .unwrap();
    engine
        .hold("zz", &owned(&["tank@s"]), false, "hold zz tank@s")
        .unwrap();
    assert_eq!(prop(&engine, "tank@s", "userrefs"), "2");
    assert_eq!(prop(&engine, "tank/a@s", "userrefs"), "1");
    assert_eq!(prop(&engine, "tank@t", "userrefs"), "0");
    assert_eq!(prop(&engine, "tank@s", "defer_destroy"), "off");
    assert_eq!(prop(&engine, "tank", "userrefs"), "-");
    let rows = engine.holds(&owned(&["tank@s"]), true).unwrap();
    let want = vec![
        ("tank@s".to_string(), "keep".to_string()),
        ("tank@s".to_string(), "zz".to_string()),
        ("tank/a@s".to_string(), "keep".to_string()),
    ];
    assert_eq!(tags(&rows), want);
    assert!(rows.iter().all(|r| r.time > 1_600_000_000));
    // Holds are not user properties.
    let query = DatasetQuery {
        names: vec!["tank@s".into()],
        properties: vec!["all".into()],
        ..DatasetQuery::default()
    };
    let all = engine.dataset_props(&query).unwrap();
    assert!(all[0].props.iter().all(|p| !p.property.contains("Hold")));
    engine.export_pool("tank", false).unwrap();
    let engine = HOST.import(&provider, &ImportOptions::default()).unwrap();
    assert_eq!(engine.holds(&owned(&["tank@s"]), true).unwrap(), rows);
    check::verify_pool(&engine, "tank").unwrap();
}

#[test]
fn held_snapshots_refuse_destroy_and_refusals_change_nothing() {
    // Goal: a held snapshot cannot be destroyed (alone, in a range, by `destroy -r` of its
    // dataset, by `rollback -r` past it); bad holds and releases are refused whole; each
    // refusal names what was wrong and leaves every device byte-identical.
    let (provider, engine) = setup();
    engine
        .hold("keep", &owned(&["tank@s"]), true, "hold")
        .unwrap();
    engine
        .hold("late", &owned(&["tank@t"]), false, "hold")
        .unwrap();
    let before = images(&provider);
    let err = |r: Result<(), tarn_engine::EngineError>| r.unwrap_err().to_string();
    let cases = vec![
        (
            err(engine
                .destroy_snapshots("tank@s", false, false, "")
                .map(|_| ())),
            "dataset is busy",
        ),
        (
            err(engine
                .destroy_snapshots("tank@s%t", false, false, "")
                .map(|_| ())),
            "dataset is busy",
        ),
        (
            err(engine
                .destroy_snapshots("tank@s", true, true, "")
                .map(|_| ())),
            "dataset is busy",
        ),
        (
            err(engine.destroy_dataset("tank/a", true, "")),
            "dataset is busy",
        ),
        (err(engine.rollback("tank@s", true, "")), "dataset is busy"),
        (
            err(engine.hold("keep", &owned(&["tank@s"]), false, "")),
            "tag already exists",
        ),
        (
            err(engine.release("keep", &owned(&["tank@s", "tank@t"]), false, "")),
            "no such tag",
        ),
        (
            err(engine.hold("x", &owned(&["tank@nope"]), false, "")),
            "does not exist",
        ),
        (
            err(engine.hold("", &owned(&["tank@s"]), false, "")),
            "empty hold tag",
        ),
        (
            err(engine.hold("x", &owned(&["tank"]), false, "")),
            "missing '@'",
        ),
    ];
    for (got, want) in &cases {
        assert!(got.contains(want), "{got:?} should say {want:?}");
    }
    assert!(images(&provider) == before, "a refusal wrote");
}

#[test]
fn a_name_given_twice_is_one_hold() {
    // Goal: `hold TAG A B B` places one hold on B; release takes it off again.
    let (provider, engine) = setup();
    let twice = owned(&["tank@t", "tank@s", "tank@s"]);
    engine.hold("new", &twice, false, "").unwrap();
    assert_eq!(prop(&engine, "tank@s", "userrefs"), "1");
    assert_eq!(prop(&engine, "tank@t", "userrefs"), "1");
    let before = images(&provider);
    engine
        .release("new", &owned(&["tank@s", "tank@t"]), false, "")
        .unwrap();
    assert_eq!(prop(&engine, "tank@s", "userrefs"), "0");
    assert!(images(&provider) != before, "the release wrote nothing");
    assert_eq!(snapshots(&engine), owned(&["tank@s", "tank@t", "tank/a@s"]));
}

#[test]
fn destroy_d_defers_until_the_last_release() {
    // Goal: `destroy -d` of a held snapshot marks it (`defer_destroy=on`) and it goes in the
    // txg that releases its last hold; `destroy -d` of an unheld snapshot destroys it now.
    let (provider, engine) = setup();
    engine.hold("a", &owned(&["tank@s"]), false, "").unwrap();
    engine.hold("b", &owned(&["tank@s"]), false, "").unwrap();
    let report = engine
        .destroy_snapshots_or_defer("tank@s", false, false, true, "destroy -d tank@s")
        .unwrap();
    assert!(report.destroyed.is_empty());
    assert_eq!(prop(&engine, "tank@s", "defer_destroy"), "on");
    engine.export_pool("tank", false).unwrap();
    let engine = HOST.import(&provider, &ImportOptions::default()).unwrap();
    assert_eq!(prop(&engine, "tank@s", "defer_destroy"), "on");
    engine.release("a", &owned(&["tank@s"]), false, "").unwrap();
    assert!(snapshots(&engine).contains(&"tank@s".to_string()));
    engine.release("b", &owned(&["tank@s"]), false, "").unwrap();
    assert_eq!(snapshots(&engine), owned(&["tank@t", "tank/a@s"]));
    engine
        .destroy_snapshots_or_defer("tank@t", false, false, true, "destroy -d tank@t")
        .unwrap();
    assert_eq!(snapshots(&engine), owned(&["tank/a@s"]));
    check::verify_pool(&engine, "tank").unwrap();
}

#[test]
fn the_longest_tag_fits_and_a_longer_one_is_refused() {
    // Goal: a tag of HOLD_TAG_MAX bytes is stored and read back after import; one byte more
    // is refused by name, before anything is written.
    let (provider, engine) = setup();
    let longest = "t".repeat(tarn_dataset::snapshot::HOLD_TAG_MAX);
    engine
        .hold(&longest, &owned(&["tank@s"]), false, "")
        .unwrap();
    let before = images(&provider);
    let longer = format!("{longest}t");
    let got = engine.hold(&longer, &owned(&["tank@s"]), false, "");
    assert!(
        got.unwrap_err()
            .to_string()
            .contains("hold tag is too long")
    );
    assert!(images(&provider) == before, "a refusal wrote");
    engine.export_pool("tank", false).unwrap();
    let engine = HOST.import(&provider, &ImportOptions::default()).unwrap();
    let rows = engine.holds(&owned(&["tank@s"]), false).unwrap();
    assert_eq!(tags(&rows), vec![("tank@s".to_string(), longest)]);
}
