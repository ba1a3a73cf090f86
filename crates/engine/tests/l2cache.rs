//! Cache devices (L2ARC) through the engine: `secondarycache` decides what reads copy to
//! them, and their persistent index comes back at import with an `l2arc_rebuild` event and
//! the cache rows' ALLOC in iostat.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::sync::Arc;

use tarn_base::SeededRng;
use tarn_engine::{DatasetQuery, Engine, TopLayout};
use tarn_pool::{CreateSpec, ImportOptions, SimProvider};

mod common;
use common::{PLAIN, sim_devices};

/// A mirror of two devices with one cache device, and a file-like object of 512 KiB.
fn setup() -> (Arc<SimProvider>, Engine, tarn_base::ObjectId, Vec<u8>) {
    let provider = Arc::new(SimProvider::new());
    let mirror = sim_devices(&provider, "d", 0..2, 256 << 20);
    let caches = sim_devices(&provider, "c", 0..1, 256 << 20);
    let spec = CreateSpec {
        caches,
        ..CreateSpec::one_top("tank", TopLayout::Mirror, mirror)
    };
    let engine = PLAIN.create_tank(&provider, &spec, &[]);
    let object = engine.object_create("tank", 128 << 10).unwrap();
    // Incompressible, so that the cache holds at least the data's size.
    let mut data = vec![0u8; 512 << 10];
    SeededRng::new(11).fill(&mut data);
    engine.object_write("tank", object, 0, &data).unwrap();
    engine.sync_pool("tank").unwrap();
    set(&engine, "primarycache", "none");
    (provider, engine, object, data)
}

fn set(engine: &Engine, property: &str, value: &str) {
    let props = [(property.to_string(), value.to_string())];
    engine.set_dataset_props("tank", &props, "set").unwrap();
}

fn read(engine: &Engine, object: tarn_base::ObjectId, data: &[u8]) {
    let mut back = vec![0u8; data.len()];
    engine.object_read("tank", object, 0, &mut back).unwrap();
    assert_eq!(back, data);
}

/// Reads the data leaves (not the cache device) have issued since import.
fn data_reads(engine: &Engine) -> u64 {
    let stats = engine.iostat(&[]).unwrap();
    stats[0]
        .root
        .children
        .iter()
        .filter(|c| c.name != "cache")
        .map(|c| c.read_ops)
        .sum()
}

fn cache_alloc(engine: &Engine) -> u64 {
    let stats = engine.iostat(&[]).unwrap();
    let cache = stats[0].root.children.iter().find(|c| c.name == "cache");
    cache.unwrap().children[0].alloc.unwrap()
}

/// Goal: `secondarycache` decides what reads copy to the cache devices, inherited as ZFS
/// does. Method: with `primarycache=none` every read reaches the pipeline; count the cache's
/// feeds and the data leaves' reads for none, metadata and all.
#[test]
fn secondarycache_decides_what_reaches_the_cache_devices() {
    let (_provider, engine, object, data) = setup();
    set(&engine, "secondarycache", "none");
    let fed = engine.l2_stats("tank").unwrap().feeds;
    read(&engine, object, &data);
    read(&engine, object, &data);
    assert_eq!(
        engine.l2_stats("tank").unwrap().feeds,
        fed,
        "none: nothing fed"
    );
    set(&engine, "secondarycache", "metadata");
    read(&engine, object, &data);
    let before = data_reads(&engine);
    read(&engine, object, &data);
    assert!(
        data_reads(&engine) > before,
        "metadata: file data still read from the pool"
    );
    let l2 = engine.l2_stats("tank").unwrap();
    assert!(l2.feeds > fed, "metadata: the tree's blocks are fed");
    assert!(l2.size < data.len() as u64, "but not the data");
    set(&engine, "secondarycache", "all");
    read(&engine, object, &data);
    let before = data_reads(&engine);
    read(&engine, object, &data);
    assert_eq!(
        data_reads(&engine),
        before,
        "all: served by the cache device"
    );
    assert!(engine.l2_stats("tank").unwrap().size >= data.len() as u64);
    // Inherited, with ZFS's values and SOURCE column; anything else refused.
    set(&engine, "secondarycache", "metadata");
    engine.create_dataset("tank/home", &[], false, "c").unwrap();
    let query = DatasetQuery {
        names: vec!["tank/home".into()],
        properties: vec!["secondarycache".into()],
        ..DatasetQuery::default()
    };
    let row = engine.dataset_props(&query).unwrap().remove(0);
    assert_eq!(row.props[0].value, "metadata");
    assert_eq!(row.props[0].source, "inherited from tank");
    let bad = [("secondarycache".to_string(), "some".to_string())];
    assert!(engine.set_dataset_props("tank", &bad, "set").is_err());
}

/// Goal: the cache device comes back warm after export/import (persistent L2ARC): the
/// rebuild is an event with what it restored, iostat shows the same ALLOC, and the reads
/// after the import do not touch the data leaves.
#[test]
fn the_cache_comes_back_warm_after_export_and_import() {
    let (provider, engine, object, data) = setup();
    read(&engine, object, &data);
    let alloc = cache_alloc(&engine);
    assert!(alloc >= data.len() as u64, "{alloc}");
    engine.export_pool("tank", false).unwrap();
    let engine = PLAIN.import(&provider, &ImportOptions::default()).unwrap();
    // The import's own reads (after the rebuild) may feed a few more metadata blocks.
    let alloc_after = cache_alloc(&engine);
    assert!(
        alloc_after >= alloc,
        "ALLOC after import {alloc_after} < {alloc}"
    );
    let events = engine.events(Some("tank"), 0, false);
    let rebuild = events
        .iter()
        .find(|e| e.class == "sysevent.fs.zfs.l2arc_rebuild")
        .expect("an l2arc_rebuild event");
    assert_eq!(rebuild.vdev_path, "/sim/c0");
    let field = |name: &str| {
        let found = rebuild.payload.iter().find(|(k, _)| k == name);
        found.unwrap().1.clone()
    };
    let restored: u64 = field("l2_rebuild_bytes").parse().unwrap();
    assert!(restored >= alloc && restored <= alloc_after, "{restored}");
    assert!(field("l2_rebuild_entries").parse::<u64>().unwrap() >= 4);
    assert_eq!(field("l2_rebuild_stopped"), "end of chain");
    let before = data_reads(&engine);
    read(&engine, object, &data);
    assert_eq!(data_reads(&engine), before, "served by the rebuilt cache");
    assert!(engine.l2_stats("tank").unwrap().restored_hits >= 4);
}
