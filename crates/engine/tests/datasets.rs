//! The dataset tree through the engine on simulated devices: create (with `-p` and
//! properties), inheritance and SOURCE, user properties, rename, destroy, persistence across
//! export/import, refused commands leaving every device byte-identical, and space that
//! closes (nothing leaked) after datasets come and go.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::sync::Arc;

use tarn_engine::{
    CreateOptions, DatasetQuery, DatasetRow, Engine, EngineError, FsOp, TopLayout, check,
};
use tarn_pool::{CreateSpec, ImportOptions, SimProvider};

mod common;
use common::{PLAIN, engine_on, sim_devices};

fn setup() -> (Arc<SimProvider>, Engine) {
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..4, 256 << 20);
    let engine = engine_on(&provider);
    let spec = CreateSpec::one_top("tank", TopLayout::Raidz(1), names);
    let options = CreateOptions {
        command: "pool create tank".into(),
        root_properties: vec![("mountpoint".into(), "/mnt/tank".into())],
        ..CreateOptions::default()
    };
    engine.create_pool(&spec, &options).unwrap();
    (provider, engine)
}

fn props(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(p, v)| ((*p).to_string(), (*v).to_string()))
        .collect()
}

fn get(engine: &Engine, name: &str, properties: &[&str]) -> DatasetRow {
    let query = DatasetQuery {
        names: vec![name.into()],
        properties: properties.iter().map(|p| (*p).to_string()).collect(),
        ..DatasetQuery::default()
    };
    engine.dataset_props(&query).unwrap().remove(0)
}

/// (value, source) of one property.
fn value(engine: &Engine, name: &str, property: &str) -> (String, String) {
    let row = get(engine, name, &[property]);
    (row.props[0].value.clone(), row.props[0].source.clone())
}

fn names(engine: &Engine) -> Vec<String> {
    let query = DatasetQuery {
        properties: vec!["name".into()],
        ..DatasetQuery::default()
    };
    engine
        .dataset_props(&query)
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect()
}

fn images(provider: &SimProvider) -> Vec<Vec<u8>> {
    provider.all().iter().map(|(_, d)| d.image()).collect()
}

#[test]
fn properties_inherit_with_zfs_sources() {
    let (_provider, engine) = setup();
    let local = props(&[("compression", "zstd"), ("com.example:owner", "ann")]);
    engine
        .create_dataset("tank/home", &local, false, "c")
        .unwrap();
    engine
        .create_dataset("tank/home/ann/src", &[], true, "c")
        .unwrap();
    assert_eq!(
        names(&engine),
        ["tank", "tank/home", "tank/home/ann", "tank/home/ann/src"]
    );
    let src = "tank/home/ann/src";
    assert_eq!(
        value(&engine, src, "compression"),
        ("zstd".into(), "inherited from tank/home".into())
    );
    assert_eq!(
        value(&engine, src, "com.example:owner"),
        ("ann".into(), "inherited from tank/home".into())
    );
    assert_eq!(
        value(&engine, src, "mountpoint"),
        (
            "/mnt/tank/home/ann/src".into(),
            "inherited from tank".into()
        )
    );
    assert_eq!(value(&engine, "tank", "mountpoint").1, "local");
    assert_eq!(
        value(&engine, src, "atime"),
        ("on".into(), "default".into())
    );
    assert_eq!(value(&engine, src, "used").1, "-");
    // Non-inherited properties stay where they are set.
    engine
        .set_dataset_props("tank/home", &props(&[("quota", "10G")]), "s")
        .unwrap();
    assert_eq!(
        value(&engine, "tank/home", "quota"),
        ("10G".into(), "local".into())
    );
    assert_eq!(
        value(&engine, src, "quota"),
        ("none".into(), "default".into())
    );
    let row = get(&engine, "tank/home", &["quota"]);
    assert_eq!(row.props[0].parsable, (10u64 << 30).to_string());
    // A local value on the child wins; inherit -r takes it back.
    engine
        .set_dataset_props(src, &props(&[("compression", "off")]), "s")
        .unwrap();
    assert_eq!(
        value(&engine, src, "compression"),
        ("off".into(), "local".into())
    );
    engine
        .inherit_prop("tank/home", "compression", true, "i")
        .unwrap();
    assert_eq!(
        value(&engine, src, "compression"),
        ("on".into(), "default".into())
    );
}

#[test]
fn everything_survives_export_and_import() {
    let (provider, engine) = setup();
    engine
        .create_dataset("tank/a", &props(&[("recordsize", "1M")]), false, "c")
        .unwrap();
    engine.create_dataset("tank/a/b", &[], false, "c").unwrap();
    engine.rename_dataset("tank/a/b", "tank/c", "r").unwrap();
    let guid = value(&engine, "tank/c", "guid").0;
    engine.export_pool("tank", false).unwrap();
    let engine = PLAIN.import(&provider, &ImportOptions::default()).unwrap();
    assert_eq!(names(&engine), ["tank", "tank/a", "tank/c"]);
    assert_eq!(
        value(&engine, "tank/a", "recordsize"),
        ("1M".into(), "local".into())
    );
    assert_eq!(value(&engine, "tank/c", "guid").0, guid);
    assert_eq!(value(&engine, "tank/c", "mountpoint").0, "/mnt/tank/c");
    let report = check::verify_pool(&engine, "tank").unwrap();
    assert!(report.blocks > 0, "{report:?}");
}

#[test]
fn destroy_removes_the_subtree_and_leaks_nothing() {
    let (_provider, engine) = setup();
    for name in ["tank/x", "tank/x/y", "tank/x/y/z", "tank/w"] {
        engine.create_dataset(name, &[], false, "c").unwrap();
    }
    let refused = engine.destroy_dataset("tank/x", false, "d").unwrap_err();
    assert!(refused.to_string().contains("has children"), "{refused}");
    engine.destroy_dataset("tank/x", true, "d").unwrap();
    assert_eq!(names(&engine), ["tank", "tank/w"]);
    for _ in 0..4 {
        engine.sync_pool("tank").unwrap();
    }
    check::verify_pool(&engine, "tank").unwrap();
    // The name is free again.
    engine.create_dataset("tank/x", &[], false, "c").unwrap();
}

/// Every dataset command below must be refused (on tank, tank/a, tank/a/b).
fn refusals(engine: &Engine) -> Vec<(&'static str, Result<(), EngineError>)> {
    let none: &[(String, String)] = &[];
    vec![
        (
            "double slash",
            engine.create_dataset("tank//a", none, false, "c"),
        ),
        (
            "snapshot name",
            engine.create_dataset("tank/a@b", none, false, "c"),
        ),
        ("exists", engine.create_dataset("tank/a", none, false, "c")),
        (
            "no parent",
            engine.create_dataset("tank/q/r", none, false, "c"),
        ),
        (
            "no pool",
            engine.create_dataset("nosuch/a", none, false, "c"),
        ),
        (
            "bad property",
            engine.create_dataset("tank/n", &props(&[("nosuch", "1")]), false, "c"),
        ),
        (
            "bad value",
            engine.create_dataset("tank/n", &props(&[("compression", "gzip")]), false, "c"),
        ),
        (
            "second value bad",
            engine.set_dataset_props("tank/a", &props(&[("atime", "off"), ("copies", "9")]), "s"),
        ),
        (
            "read-only",
            engine.set_dataset_props("tank/a", &props(&[("used", "1")]), "s"),
        ),
        (
            "reservation too big",
            engine.set_dataset_props("tank/a", &props(&[("reservation", "100T")]), "s"),
        ),
        ("children", engine.destroy_dataset("tank/a", false, "d")),
        ("root", engine.destroy_dataset("tank", true, "d")),
        ("missing", engine.destroy_dataset("tank/zz", false, "d")),
        (
            "other pool",
            engine.rename_dataset("tank/a", "other/a", "r"),
        ),
        (
            "under itself",
            engine.rename_dataset("tank/a", "tank/a/b/c", "r"),
        ),
        (
            "target exists",
            engine.rename_dataset("tank/a/b", "tank/a", "r"),
        ),
        (
            "inherit quota",
            engine.inherit_prop("tank/a", "quota", false, "i"),
        ),
        (
            "inherit stat",
            engine.inherit_prop("tank/a", "used", false, "i"),
        ),
        (
            "userquota",
            engine.set_dataset_props("tank/a", &props(&[("userquota@ann", "1G")]), "s"),
        ),
    ]
}

#[test]
fn refused_dataset_commands_change_nothing() {
    let (provider, engine) = setup();
    engine.create_dataset("tank/a", &[], false, "c").unwrap();
    engine.create_dataset("tank/a/b", &[], false, "c").unwrap();
    engine.sync_pool("tank").unwrap();
    let before = images(&provider);
    let cases = refusals(&engine);
    for (what, result) in cases {
        assert!(result.is_err(), "{what} should be refused");
    }
    assert_eq!(names(&engine), ["tank", "tank/a", "tank/a/b"]);
    assert_eq!(value(&engine, "tank/a", "atime").1, "default");
    assert!(
        before == images(&provider),
        "a refused command changed a device"
    );
}

#[test]
fn reservations_are_taken_from_everyone_else() {
    let (_provider, engine) = setup();
    engine.create_dataset("tank/r", &[], false, "c").unwrap();
    engine.create_dataset("tank/o", &[], false, "c").unwrap();
    let avail = |name| {
        get(&engine, name, &["available"]).props[0]
            .parsable
            .parse::<u64>()
            .unwrap()
    };
    let before = avail("tank/o");
    engine
        .set_dataset_props("tank/r", &props(&[("reservation", "100M")]), "s")
        .unwrap();
    let after = avail("tank/o");
    // Less what tank/r already uses (its metadata: master node, root directory, unlinked
    // set, the three used-by ZAPs, with raidz parity), which the reservation covers.
    let taken = before - after;
    assert!(
        taken > (100 << 20) - (128 << 10) && taken <= 100 << 20,
        "{before} -> {after}"
    );
    // The reserving dataset still sees the reserved space as its own.
    assert!(avail("tank/r") >= before - (1 << 20), "{}", avail("tank/r"));
    let used = get(&engine, "tank", &["used"]).props[0]
        .parsable
        .parse::<u64>()
        .unwrap();
    assert!(
        used >= 100 << 20,
        "the parent is charged the reservation: {used}"
    );
    engine
        .set_dataset_props("tank/o", &props(&[("quota", "50M")]), "s")
        .unwrap();
    assert!(avail("tank/o") <= 50 << 20);
}

/// Writes `len` bytes of incompressible data into a new file `name` of `dataset`, in 1 MiB
/// writes, through the filesystem door front ends use; returns the bytes written before the
/// first error and the error.
fn fill(engine: &Engine, dataset: &str, name: &str, len: u64) -> (u64, Option<EngineError>) {
    let (pool, id) = engine.find_dataset(dataset).unwrap();
    let creds = tarn_engine::posix::Creds::default();
    let ino = engine
        .fs_op(&pool, id, FsOp::Modify, |fs| {
            let root = fs.root()?;
            let kind = tarn_engine::posix::FileKind::Regular;
            Ok(fs.mknod(root, name.as_bytes(), kind, 0o644, 0, creds)?.ino)
        })
        .unwrap();
    let mut rng = tarn_base::SeededRng::new(len);
    let mut chunk = vec![0u8; 1 << 20];
    let mut written = 0;
    while written < len {
        rng.fill(&mut chunk);
        let n = (len - written).min(chunk.len() as u64) as usize;
        let data = &chunk[..n];
        let at = written;
        match engine.fs_op(&pool, id, FsOp::Write(n as u64), |fs| {
            fs.write(ino, at, data)
        }) {
            Ok(_) => written += n as u64,
            Err(e) => return (written, Some(e)),
        }
    }
    (written, None)
}

fn bytes_of(engine: &Engine, name: &str, property: &str) -> u64 {
    get(engine, name, &[property]).props[0]
        .parsable
        .parse()
        .unwrap()
}

#[test]
fn quotas_refuse_writes_at_the_limit_and_used_adds_up() {
    let (_provider, engine) = setup();
    let quota = props(&[("quota", "20M"), ("compression", "off")]);
    engine.create_dataset("tank/q", &quota, false, "c").unwrap();
    let (written, error) = fill(&engine, "tank/q", "f", 64 << 20);
    assert!(
        matches!(error, Some(EngineError::QuotaExceeded)),
        "{error:?}"
    );
    assert_eq!(error.unwrap().errno(), libc::EDQUOT);
    assert!(
        (18 << 20..=20 << 20).contains(&written),
        "stopped after {written} bytes"
    );
    engine.sync_pool("tank").unwrap();
    let used = bytes_of(&engine, "tank/q", "used");
    assert!(
        used >= written && used <= 21 << 20,
        "used {used} for {written} written"
    );
    assert!(bytes_of(&engine, "tank/q", "available") < 2 << 20);
    let stat = engine
        .fs_statfs("tank", engine.find_dataset("tank/q").unwrap().1)
        .unwrap();
    let size = stat.blocks * u64::from(stat.bsize);
    assert!(
        (19 << 20..=21 << 20).contains(&size),
        "df shows the quota: {size}"
    );
    // The parent is charged what the child uses; a quota below that is refused.
    assert!(bytes_of(&engine, "tank", "used") >= used);
    let refused = engine.set_dataset_props("tank/q", &props(&[("quota", "1M")]), "s");
    assert!(refused.is_err());
    // refquota limits only the dataset's own data.
    let refquota = props(&[("refquota", "5M"), ("compression", "off")]);
    engine
        .create_dataset("tank/r", &refquota, false, "c")
        .unwrap();
    let (written, error) = fill(&engine, "tank/r", "f", 16 << 20);
    assert!(
        matches!(error, Some(EngineError::QuotaExceeded)),
        "{error:?}"
    );
    assert!(written <= 5 << 20, "{written}");
    // Destroying gives the space back; nothing leaks.
    let before = bytes_of(&engine, "tank", "used");
    engine.destroy_dataset("tank/q", false, "d").unwrap();
    for _ in 0..4 {
        engine.sync_pool("tank").unwrap();
    }
    let after = bytes_of(&engine, "tank", "used");
    assert!(before - after >= 18 << 20, "{before} -> {after}");
    check::verify_pool(&engine, "tank").unwrap();
}

#[test]
fn readonly_datasets_refuse_changes() {
    let (_provider, engine) = setup();
    engine
        .create_dataset("tank/ro", &props(&[("readonly", "on")]), false, "c")
        .unwrap();
    let (pool, id) = engine.find_dataset("tank/ro").unwrap();
    let creds = tarn_engine::posix::Creds::default();
    let refused = engine.fs_op(&pool, id, FsOp::Modify, |fs| {
        let root = fs.root()?;
        fs.mkdir(root, b"d", 0o755, creds)
    });
    assert_eq!(refused.unwrap_err().errno(), libc::EROFS);
    assert!(engine.fs_op(&pool, id, FsOp::Read, |fs| fs.root()).is_ok());
}

/// Whether `name` accepts a change through `fs_op` (a directory made and removed again), or
/// the errno it refuses with.
fn try_modify(engine: &Engine, name: &str) -> Result<(), i32> {
    let (pool, id) = engine.find_dataset(name).unwrap();
    let creds = tarn_engine::posix::Creds::default();
    engine
        .fs_op(&pool, id, FsOp::Modify, |fs| {
            let root = fs.root()?;
            fs.mkdir(root, b"probe", 0o755, creds)?;
            fs.rmdir(root, b"probe").map(|_| ())
        })
        .map_err(|e| e.errno())
}

// Goal: the engine resolves a dataset's filesystem settings once and caches them; every way a
// setting can change must reach the next request. Method: use the dataset first (so its
// settings are cached), change `readonly` by each path (set on the parent, inherit on the
// parent, rename under another parent, destroy and create again), and check that the next
// `fs_op` follows.

#[test]
fn settings_cache_follows_a_property_set_on_the_parent() {
    let (_provider, engine) = setup();
    engine.create_dataset("tank/a/b", &[], true, "c").unwrap();
    assert_eq!(try_modify(&engine, "tank/a/b"), Ok(()));
    engine
        .set_dataset_props("tank/a", &props(&[("readonly", "on")]), "s")
        .unwrap();
    assert_eq!(try_modify(&engine, "tank/a/b"), Err(libc::EROFS));
    assert_eq!(
        try_modify(&engine, "tank"),
        Ok(()),
        "the parent's parent is untouched"
    );
}

#[test]
fn settings_cache_follows_inherit() {
    let (_provider, engine) = setup();
    engine
        .create_dataset("tank/a", &props(&[("readonly", "on")]), false, "c")
        .unwrap();
    engine.create_dataset("tank/a/b", &[], false, "c").unwrap();
    assert_eq!(try_modify(&engine, "tank/a/b"), Err(libc::EROFS));
    engine
        .inherit_prop("tank/a", "readonly", false, "i")
        .unwrap();
    assert_eq!(try_modify(&engine, "tank/a/b"), Ok(()));
    assert_eq!(try_modify(&engine, "tank/a"), Ok(()));
}

#[test]
fn settings_cache_follows_a_rename_to_another_parent() {
    let (_provider, engine) = setup();
    engine
        .create_dataset("tank/ro", &props(&[("readonly", "on")]), false, "c")
        .unwrap();
    engine.create_dataset("tank/rw", &[], false, "c").unwrap();
    engine.create_dataset("tank/rw/x", &[], false, "c").unwrap();
    assert_eq!(try_modify(&engine, "tank/rw/x"), Ok(()));
    engine
        .rename_dataset("tank/rw/x", "tank/ro/x", "r")
        .unwrap();
    assert_eq!(try_modify(&engine, "tank/ro/x"), Err(libc::EROFS));
    engine
        .rename_dataset("tank/ro/x", "tank/rw/x", "r")
        .unwrap();
    assert_eq!(try_modify(&engine, "tank/rw/x"), Ok(()));
}

#[test]
fn settings_cache_forgets_a_destroyed_dataset() {
    let (_provider, engine) = setup();
    engine
        .create_dataset("tank/a", &props(&[("readonly", "on")]), false, "c")
        .unwrap();
    assert_eq!(try_modify(&engine, "tank/a"), Err(libc::EROFS));
    let (_, old) = engine.find_dataset("tank/a").unwrap();
    engine.destroy_dataset("tank/a", false, "d").unwrap();
    engine.create_dataset("tank/a", &[], false, "c").unwrap();
    let (_, new) = engine.find_dataset("tank/a").unwrap();
    assert_eq!(
        try_modify(&engine, "tank/a"),
        Ok(()),
        "ids {old:?} then {new:?}"
    );
}
