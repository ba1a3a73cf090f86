//! Per-user, group and project quotas through the engine on simulated devices: set and get
//! with ZFS's values and SOURCE, refusals that change nothing, EDQUOT at the right byte
//! (committed usage plus the write against the quota), chown into an owner over quota,
//! inode quotas, `userspace` rows, counts that survive export/import, and the upgrade scan
//! of a dataset whose filesystem has no counts.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::sync::Arc;

use tarn_engine::posix::{Creds, FileKind, Ino, SetAttr};
use tarn_engine::{
    CreateOptions, DatasetQuery, Engine, EngineError, FsOp, OwnerSpace, ProjectChange, TopLayout,
    check,
};
use tarn_pool::{CreateSpec, ImportOptions, SimProvider};

mod common;
use common::{PLAIN, engine_on, sim_devices};

fn setup(layout: TopLayout) -> (Arc<SimProvider>, Engine) {
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..4, 128 << 20);
    let engine = engine_on(&provider);
    let spec = CreateSpec::one_top("tank", layout, names);
    let options = CreateOptions {
        command: "pool create tank".into(),
        root_properties: vec![("mountpoint".into(), "/mnt/tank".into())],
        ..CreateOptions::default()
    };
    engine.create_pool(&spec, &options).unwrap();
    let home = [
        ("compression".to_string(), "off".to_string()),
        ("recordsize".to_string(), "128K".to_string()),
    ];
    engine
        .create_dataset("tank/home", &home, false, "c")
        .unwrap();
    (provider, engine)
}

fn set(engine: &Engine, property: &str, value: &str) -> Result<(), EngineError> {
    let assignment = [(property.to_string(), value.to_string())];
    engine.set_dataset_props("tank/home", &assignment, "set")
}

/// (value, parsable, source) of one property of tank/home.
fn get(engine: &Engine, property: &str) -> (String, String, String) {
    let query = DatasetQuery {
        names: vec!["tank/home".into()],
        properties: vec![property.into()],
        ..DatasetQuery::default()
    };
    let row = engine.dataset_props(&query).unwrap().remove(0);
    let prop = &row.props[0];
    (
        prop.value.clone(),
        prop.parsable.clone(),
        prop.source.clone(),
    )
}

fn used(engine: &Engine, property: &str) -> u64 {
    get(engine, property).1.parse().unwrap()
}

fn create(engine: &Engine, name: &str, creds: Creds) -> Result<Ino, EngineError> {
    let (pool, id) = engine.find_dataset("tank/home").unwrap();
    engine.fs_op(&pool, id, FsOp::Modify, |fs| {
        let root = fs.root()?;
        Ok(fs
            .mknod(root, name.as_bytes(), FileKind::Regular, 0o644, 0, creds)?
            .ino)
    })
}

fn write(engine: &Engine, ino: Ino, at: u64, len: usize) -> Result<u32, EngineError> {
    let (pool, id) = engine.find_dataset("tank/home").unwrap();
    let mut rng = tarn_base::SeededRng::new(at ^ len as u64);
    let mut data = vec![0u8; len];
    rng.fill(&mut data);
    engine.fs_op(&pool, id, FsOp::Write(len as u64), |fs| {
        fs.write(ino, at, &data)
    })
}

fn images(provider: &SimProvider) -> Vec<Vec<u8>> {
    provider.all().iter().map(|(_, d)| d.image()).collect()
}

const ALICE: Creds = Creds {
    uid: 1000,
    gid: 100,
};

#[test]
fn set_get_and_refusals() {
    let (provider, engine) = setup(TopLayout::Mirror);
    assert_eq!(
        get(&engine, "userquota@1000"),
        ("none".into(), "0".into(), "local".into())
    );
    set(&engine, "userquota@1000", "10G").unwrap();
    set(&engine, "groupobjquota@100", "5000").unwrap();
    set(&engine, "projectquota@7", "1.5G").unwrap();
    assert_eq!(get(&engine, "userquota@1000").0, "10G");
    assert_eq!(get(&engine, "userquota@1000").1, "10737418240");
    assert_eq!(get(&engine, "groupobjquota@100").0, "5000");
    assert_eq!(get(&engine, "projectquota@7").0, "1.50G");
    assert_eq!(get(&engine, "userused@1000").0, "0B");
    // Not inherited: a child sees none.
    engine
        .create_dataset("tank/home/sub", &[], false, "c")
        .unwrap();
    let query = DatasetQuery {
        names: vec!["tank/home/sub".into()],
        properties: vec!["userquota@1000".into()],
        ..DatasetQuery::default()
    };
    assert_eq!(
        engine.dataset_props(&query).unwrap()[0].props[0].value,
        "none"
    );
    set(&engine, "userquota@1000", "none").unwrap();
    assert_eq!(get(&engine, "userquota@1000").0, "none");
    // Refusals change nothing on the devices.
    engine.sync_pool("tank").unwrap();
    let before = images(&provider);
    for (property, value) in [
        ("userquota@alice", "1G"),
        ("userquota@1000", "lots"),
        ("userobjquota@1000", "1G"),
        ("userused@1000", "1G"),
        ("groupquota@-5", "1G"),
        ("projectquota@x", "1G"),
    ] {
        let refused = set(&engine, property, value);
        assert!(
            matches!(refused, Err(EngineError::Dataset(_))),
            "{property}={value}: {refused:?}"
        );
    }
    assert!(
        images(&provider) == before,
        "a refused set changed the devices"
    );
}

#[test]
fn user_quota_refuses_at_the_right_byte_and_chown_is_allowed() {
    let (_provider, engine) = setup(TopLayout::Raidz(1));
    set(&engine, "userquota@1000", "1M").unwrap();
    let file = create(&engine, "a", ALICE).unwrap();
    let chunk = 128 << 10;
    let mut at = 0u64;
    let error = loop {
        match write(&engine, file, at, chunk) {
            Ok(_) => at += chunk as u64,
            Err(e) => break e,
        }
        assert!(at < 4 << 20, "the quota never refused");
    };
    assert_eq!(error.errno(), libc::EDQUOT, "{error:?}");
    // The refusal was decided on committed usage: it plus the write passes the quota. The
    // data admitted stayed within it (metadata of the last sync may take usage past it).
    engine.sync_pool("tank").unwrap();
    let charged = used(&engine, "userused@1000");
    assert!(charged + chunk as u64 > 1 << 20, "refused early: {charged}");
    assert!(at <= 1 << 20, "admitted {at} bytes past the quota");
    assert!(
        charged >= at,
        "raidz parity is deflated: {charged} for {at} written"
    );
    // At the byte: with the quota 4 KiB above usage, 4 KiB + 1 is refused, 4 KiB is not.
    let quota = (charged + 4096).to_string();
    set(&engine, "userquota@1000", &quota).unwrap();
    let refused = write(&engine, file, at, 4097);
    assert_eq!(refused.unwrap_err().errno(), libc::EDQUOT);
    write(&engine, file, at, 4096).unwrap();
    let refused = write(&engine, file, at + 4096, 1);
    assert_eq!(
        refused.unwrap_err().errno(),
        libc::EDQUOT,
        "pending bytes count"
    );
    // Another user writes freely; chown into the full owner is allowed, later writes not.
    let bob = Creds {
        uid: 2000,
        gid: 100,
    };
    let other = create(&engine, "b", bob).unwrap();
    write(&engine, other, 0, chunk).unwrap();
    let (pool, id) = engine.find_dataset("tank/home").unwrap();
    let chown = SetAttr {
        uid: Some(1000),
        ..SetAttr::default()
    };
    engine
        .fs_op(&pool, id, FsOp::Modify, |fs| fs.setattr(other, &chown))
        .unwrap();
    engine.sync_pool("tank").unwrap();
    assert!(used(&engine, "userused@1000") > 1 << 20);
    assert_eq!(used(&engine, "userused@2000"), 0);
    let refused = write(&engine, other, chunk as u64, 1);
    assert_eq!(refused.unwrap_err().errno(), libc::EDQUOT);
    // Raising the quota lets writes through again.
    set(&engine, "userquota@1000", "4M").unwrap();
    write(&engine, other, chunk as u64, 1).unwrap();
}

#[test]
fn inode_quotas_and_group_quotas() {
    let (_provider, engine) = setup(TopLayout::Mirror);
    set(&engine, "userobjquota@1000", "3").unwrap();
    for name in ["a", "b", "c"] {
        create(&engine, name, ALICE).unwrap();
    }
    let refused = create(&engine, "d", ALICE).unwrap_err();
    assert_eq!(refused.errno(), libc::EDQUOT);
    engine.sync_pool("tank").unwrap();
    assert_eq!(used(&engine, "userobjused@1000"), 3);
    assert_eq!(used(&engine, "groupobjused@100"), 3);
    set(&engine, "groupquota@100", "256K").unwrap();
    let bob = Creds {
        uid: 2000,
        gid: 100,
    };
    let file = create(&engine, "e", bob).unwrap();
    let refused = write(&engine, file, 0, 300 << 10).unwrap_err();
    assert_eq!(refused.errno(), libc::EDQUOT);
    write(&engine, file, 0, 128 << 10).unwrap();
}

#[test]
fn userspace_lists_owners_and_counts_survive_import() {
    let (provider, engine) = setup(TopLayout::Mirror);
    let a = create(&engine, "a", ALICE).unwrap();
    write(&engine, a, 0, 200_000).unwrap();
    let bob = Creds {
        uid: 2000,
        gid: 200,
    };
    let b = create(&engine, "b", bob).unwrap();
    write(&engine, b, 0, 50_000).unwrap();
    set(&engine, "userquota@3000", "1G").unwrap();
    let rows = engine.userspace("tank/home", OwnerSpace::User).unwrap();
    let ids: Vec<u32> = rows.iter().map(|r| r.id).collect();
    assert_eq!(
        ids,
        [0, 1000, 2000, 3000],
        "root dir, alice, bob, a quota alone"
    );
    assert!(rows[1].used >= 200_000 && rows[1].objused == 1);
    assert_eq!(rows[3].quota, Some(1 << 30));
    assert_eq!((rows[3].used, rows[3].objused), (0, 0));
    let groups = engine.userspace("tank/home", OwnerSpace::Group).unwrap();
    assert_eq!(
        groups.iter().map(|r| r.id).collect::<Vec<_>>(),
        [0, 100, 200]
    );
    let before = engine.userspace("tank/home", OwnerSpace::User).unwrap();
    engine.export_pool("tank", false).unwrap();
    let engine = PLAIN.import(&provider, &ImportOptions::default()).unwrap();
    assert_eq!(
        engine.userspace("tank/home", OwnerSpace::User).unwrap(),
        before
    );
    assert_eq!(get(&engine, "userquota@3000").0, "1G");
    check::verify_pool(&engine, "tank").unwrap();
}

#[test]
fn projects_by_path_inherit_and_are_charged() {
    let (_provider, engine) = setup(TopLayout::Mirror);
    let (pool, id) = engine.find_dataset("tank/home").unwrap();
    let dir = engine
        .fs_op(&pool, id, FsOp::Modify, |fs| {
            let root = fs.root()?;
            let dir = fs.mkdir(root, b"p", 0o755, ALICE)?.ino;
            fs.mknod(dir, b"old", FileKind::Regular, 0o644, 0, ALICE)?;
            Ok(dir)
        })
        .unwrap();
    let set = ProjectChange {
        id: Some(42),
        inherit: true,
        ..ProjectChange::default()
    };
    let rows = engine.fs_project(&pool, id, "p", Some(set), true).unwrap();
    let shown: Vec<(&str, u32, bool)> = rows
        .iter()
        .map(|r| (r.path.as_str(), r.id, r.inherit))
        .collect();
    assert_eq!(shown, [("p", 42, true), ("p/old", 42, false)]);
    let new = engine
        .fs_op(&pool, id, FsOp::Modify, |fs| {
            Ok(fs
                .mknod(dir, b"new", FileKind::Regular, 0o644, 0, ALICE)?
                .ino)
        })
        .unwrap();
    set_quota_and_fill(&engine, new);
    let listed = engine.fs_project(&pool, id, "p/new", None, false).unwrap();
    assert_eq!((listed[0].id, listed[0].inherit), (42, false), "inherited");
    assert_eq!(used(&engine, "projectobjused@42"), 3);
    let clear = ProjectChange {
        clear: true,
        ..ProjectChange::default()
    };
    engine
        .fs_project(&pool, id, "/", Some(clear), true)
        .unwrap();
    engine.sync_pool("tank").unwrap();
    assert_eq!(used(&engine, "projectobjused@42"), 0);
    let missing = engine.fs_project(&pool, id, "p/nope", None, false);
    assert_eq!(missing.unwrap_err().errno(), libc::ENOENT);
}

/// With `projectquota@42=256K`, 300 KiB into `file` (project 42) is refused.
fn set_quota_and_fill(engine: &Engine, file: Ino) {
    set(engine, "projectquota@42", "256K").unwrap();
    let refused = write(engine, file, 0, 300 << 10).unwrap_err();
    assert_eq!(refused.errno(), libc::EDQUOT);
    write(engine, file, 0, 100 << 10).unwrap();
    engine.sync_pool("tank").unwrap();
    assert!(used(engine, "projectused@42") >= 100 << 10);
}
