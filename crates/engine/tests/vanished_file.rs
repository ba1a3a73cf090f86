//! A file device deleted while the pool is imported.
//!
//! Goal: the leaf of a deleted file goes REMOVED at the next txg (its flush reports the
//! device gone instead of pretending the writes are safe), the hot spare activates by itself
//! and is resilvered, and every byte reads back. Method: a raidz1 of four sparse files plus
//! a spare in a temporary directory, opened the way the daemon opens them (`FileProvider`:
//! `FileDevice` behind a write-behind `QueuedDevice`).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use tarn_base::{ManualClock, SeededRng};
use tarn_engine::{
    CreateOptions, CreateSpec, Engine, FileProvider, HostIdentity, ScanFunction, ScanState,
    TopLayout,
};

const DEVICE_SIZE: u64 = 96 << 20;

#[test]
fn deleted_file_is_removed_and_spared() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    for name in ["d0", "d1", "d2", "d3", "s0"] {
        let file = std::fs::File::create(path(name)).unwrap();
        file.set_len(DEVICE_SIZE).unwrap();
    }
    let identity = HostIdentity {
        hostid: 7,
        hostname: "host".into(),
    };
    let clock = Arc::new(ManualClock::new(1_795_357_800));
    let engine = Engine::new(Arc::new(FileProvider { direct: false }), identity, clock, 9);
    let spec = CreateSpec {
        spares: vec![path("s0")],
        caches: Vec::new(),
        ..CreateSpec::one_top(
            "tank",
            TopLayout::Raidz(1),
            ["d0", "d1", "d2", "d3"].iter().map(|n| path(n)).collect(),
        )
    };
    let options = CreateOptions {
        command: "pool create tank".into(),
        ..CreateOptions::default()
    };
    engine.create_pool(&spec, &options).unwrap();
    let mut written = Vec::new();
    let mut write = |seed: u64| {
        let object = engine.object_create("tank", 128 << 10).unwrap();
        let mut data = vec![0u8; 3 << 20];
        SeededRng::new(seed).fill(&mut data);
        engine.object_write("tank", object, 0, &data).unwrap();
        engine.sync_pool("tank").unwrap();
        written.push((object, data));
    };
    write(1);
    std::fs::remove_file(path("d2")).unwrap();
    write(2);
    let status = engine.status("tank").unwrap();
    assert_eq!(status.state, "DEGRADED");
    assert_eq!(status.config.children[0].children[2].state, "REMOVED");
    assert_eq!(engine.fault_check(), vec!["tank".to_string()]);
    let config = engine.status("tank").unwrap().config.children[0].clone();
    assert_eq!(config.children[2].name, "spare-2");
    assert_eq!(config.children[2].children[1].name, path("s0"));
    loop {
        let progress = engine.scrub_step("tank", 1 << 20).unwrap().unwrap();
        if progress.state != ScanState::Scanning {
            assert_eq!(
                (progress.function, progress.errors),
                (ScanFunction::Resilver, 0)
            );
            break;
        }
    }
    for (object, data) in &written {
        let mut buf = vec![0u8; data.len()];
        engine.object_read("tank", *object, 0, &mut buf).unwrap();
        assert!(buf == *data, "object {object:?} differs");
    }
    assert_eq!(engine.status("tank").unwrap().spares[0].state, "INUSE");
    engine.export_pool("tank", false).unwrap();
}
