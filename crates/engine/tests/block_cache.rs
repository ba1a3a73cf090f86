//! The engine's clean-block cache (one store for every pool, one domain per import) never
//! returns bytes a file no longer holds.
//!
//! Goal: with the cache warm, every change to a file (overwrite, truncate, extend, punch a
//! hole, unlink and recreate, destroy and recreate the dataset, a `primarycache` change,
//! export and import) is what the next read returns, before and after its txg commits, and
//! the cache really answers the reads in between (its hit counter moves). Method: one file
//! on a raidz1 of simulated devices, a reference copy of its bytes changed alongside, and
//! every record of the file read back and compared after each step and after each sync.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

use std::sync::Arc;

use tarn_base::SeededRng;
use tarn_engine::posix::{Creds, Fallocate, FileKind, Ino, SetAttr};
use tarn_engine::{Engine, FsOp, TopLayout};
use tarn_pool::{CreateSpec, ImportOptions, SimProvider};

mod common;
use common::{PLAIN, import_tank, sim_devices};

const RECORD: usize = 128 << 10;

fn setup() -> (Arc<SimProvider>, Engine) {
    let provider = Arc::new(SimProvider::new());
    let names = sim_devices(&provider, "d", 0..4, 256 << 20);
    let spec = CreateSpec::one_top("tank", TopLayout::Raidz(1), names);
    let engine = PLAIN.create_tank(&provider, &spec, &[]);
    engine.create_dataset("tank/a", &[], false, "c").unwrap();
    (provider, engine)
}

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut data = vec![0u8; len];
    SeededRng::new(seed).fill(&mut data);
    data
}

/// Makes `name` in the root of `dataset` and writes `data` into it.
fn create(engine: &Engine, dataset: &str, name: &str, data: &[u8]) -> Ino {
    let (pool, id) = engine.find_dataset(dataset).unwrap();
    engine
        .fs_op(&pool, id, FsOp::Write(data.len() as u64), |fs| {
            let root = fs.root()?;
            let attr = fs.mknod(
                root,
                name.as_bytes(),
                FileKind::Regular,
                0o644,
                0,
                Creds::default(),
            )?;
            fs.write(attr.ino, 0, data)?;
            Ok(attr.ino)
        })
        .unwrap()
}

fn write(engine: &Engine, dataset: &str, ino: Ino, at: u64, data: &[u8]) {
    let (pool, id) = engine.find_dataset(dataset).unwrap();
    let len = data.len() as u64;
    engine
        .fs_op(&pool, id, FsOp::Write(len), |fs| fs.write(ino, at, data))
        .unwrap();
}

fn change(engine: &Engine, dataset: &str, ino: Ino, f: impl Fn(&mut tarn_engine::posix::Fs<'_>)) {
    let (pool, id) = engine.find_dataset(dataset).unwrap();
    engine
        .fs_op(&pool, id, FsOp::Write(0), |fs| {
            f(fs);
            fs.getattr(ino)
        })
        .unwrap();
}

/// Reads the whole file record by record (4 KiB reads at every record's start and middle
/// too) and compares it with `model`; returns the cache hits the reads had.
fn check(engine: &Engine, dataset: &str, ino: Ino, model: &[u8]) -> u64 {
    let (pool, id) = engine.find_dataset(dataset).unwrap();
    let hits = engine.cache_stats().hits;
    let size = engine
        .fs_op(&pool, id, FsOp::Read, |fs| fs.getattr(ino))
        .unwrap()
        .size;
    assert_eq!(size, model.len() as u64, "file size");
    let mut at = 0usize;
    while at < model.len() {
        let len = RECORD.min(model.len() - at);
        let got = engine
            .fs_op(&pool, id, FsOp::Read, |fs| {
                fs.read(ino, at as u64, len as u32)
            })
            .unwrap();
        assert!(got == model[at..at + len], "bytes at {at}");
        let small = (at + RECORD / 2).min(model.len() - 1);
        let got = engine
            .fs_op(&pool, id, FsOp::Read, |fs| fs.read(ino, small as u64, 4096))
            .unwrap();
        let end = (small + 4096).min(model.len());
        assert!(got == model[small..end], "4 KiB at {small}");
        at += len;
    }
    engine.cache_stats().hits - hits
}

/// `check` now and after the txg commits; the second pass must be served by the cache.
fn check_and_sync(engine: &Engine, ino: Ino, model: &[u8]) {
    check(engine, "tank/a", ino, model);
    engine.sync_pool("tank").unwrap();
    check(engine, "tank/a", ino, model);
    let hits = check(engine, "tank/a", ino, model);
    assert!(hits > 0, "a warm cache answers reads");
}

#[test]
fn reads_follow_writes_truncates_and_punched_holes() {
    let (_provider, engine) = setup();
    let mut model = random(6 * RECORD, 1);
    let ino = create(&engine, "tank/a", "f", &model);
    check_and_sync(&engine, ino, &model);

    // Overwrite the middle of a record and the span of two records.
    let patch = random(RECORD, 2);
    write(&engine, "tank/a", ino, 1000, &patch[..5000]);
    model[1000..6000].copy_from_slice(&patch[..5000]);
    write(&engine, "tank/a", ino, (2 * RECORD - 100) as u64, &patch);
    model[2 * RECORD - 100..3 * RECORD - 100].copy_from_slice(&patch);
    check_and_sync(&engine, ino, &model);

    // Truncate into the middle of a record, then extend again: the tail reads as zeros.
    let cut = 3 * RECORD + 777;
    change(&engine, "tank/a", ino, |fs| {
        fs.setattr(
            ino,
            &SetAttr {
                size: Some(cut as u64),
                ..SetAttr::default()
            },
        )
        .unwrap();
    });
    model.truncate(cut);
    check_and_sync(&engine, ino, &model);
    change(&engine, "tank/a", ino, |fs| {
        let size = Some(5 * RECORD as u64);
        fs.setattr(
            ino,
            &SetAttr {
                size,
                ..SetAttr::default()
            },
        )
        .unwrap();
    });
    model.resize(5 * RECORD, 0);
    check_and_sync(&engine, ino, &model);

    // Punch a whole record and part of another.
    let punch = Fallocate {
        keep_size: true,
        punch_hole: true,
        zero_range: false,
    };
    change(&engine, "tank/a", ino, |fs| {
        fs.fallocate(ino, 0, (RECORD + 4096) as u64, punch).unwrap();
    });
    model[..RECORD + 4096].fill(0);
    check_and_sync(&engine, ino, &model);

    // Unlink and make a file of the same name with other bytes.
    let (pool, id) = engine.find_dataset("tank/a").unwrap();
    engine
        .fs_op(&pool, id, FsOp::Modify, |fs| {
            let root = fs.root()?;
            fs.unlink(root, b"f")
        })
        .unwrap();
    engine.sync_pool("tank").unwrap();
    let model = random(3 * RECORD, 3);
    let ino = create(&engine, "tank/a", "f", &model);
    check_and_sync(&engine, ino, &model);
}

/// Goal: `primarycache` decides what the cache keeps for a dataset: `none` nothing (reads
/// never hit), `metadata` no file data, `all` everything again.
#[test]
fn primarycache_is_honoured_and_narrowing_it_drops_data() {
    let (_provider, engine) = setup();
    let model = random(4 * RECORD, 4);
    let ino = create(&engine, "tank/a", "f", &model);
    engine.sync_pool("tank").unwrap();
    check(&engine, "tank/a", ino, &model);
    let warm = engine.cache_stats().bytes;
    assert!(warm >= model.len() as u64, "file data cached: {warm}");
    let set = |value: &str| {
        let assignment = [("primarycache".to_string(), value.to_string())];
        engine
            .set_dataset_props("tank/a", &assignment, "set")
            .unwrap();
    };
    set("metadata");
    let narrowed = engine.cache_stats().bytes;
    assert!(
        narrowed <= warm - model.len() as u64,
        "data dropped: {narrowed}"
    );
    check(&engine, "tank/a", ino, &model);
    let metadata = engine.cache_stats().bytes;
    check(&engine, "tank/a", ino, &model);
    assert_eq!(
        engine.cache_stats().bytes,
        metadata,
        "no data kept under metadata"
    );
    assert!(metadata < model.len() as u64, "{metadata}");
    set("none");
    check(&engine, "tank/a", ino, &model);
    assert_eq!(
        check(&engine, "tank/a", ino, &model),
        0,
        "no hits under none"
    );
    set("all");
    check(&engine, "tank/a", ino, &model);
    assert!(
        check(&engine, "tank/a", ino, &model) > 0,
        "hits again under all"
    );
}

/// Goal: a destroyed dataset's blocks, freed and reused by a new dataset of the same name,
/// never come back from the cache; an export drops the pool's entries and an import reads
/// everything afresh.
#[test]
fn destroy_recreate_export_and_import_read_the_current_bytes() {
    let (provider, engine) = setup();
    let first = random(4 * RECORD, 5);
    let ino = create(&engine, "tank/a", "f", &first);
    check_and_sync(&engine, ino, &first);
    engine.destroy_dataset("tank/a", false, "d").unwrap();
    for _ in 0..4 {
        // Past the deferred frees, so the destroyed blocks' space is reusable.
        engine.sync_pool("tank").unwrap();
    }
    engine.create_dataset("tank/a", &[], false, "c").unwrap();
    let second = random(4 * RECORD, 6);
    let ino = create(&engine, "tank/a", "f", &second);
    check_and_sync(&engine, ino, &second);

    assert!(engine.cache_stats().entries > 0);
    engine.export_pool("tank", false).unwrap();
    assert_eq!(
        engine.cache_stats().entries,
        0,
        "export drops the pool's entries"
    );
    import_tank(&engine, &ImportOptions::default()).unwrap();
    check_and_sync(&engine, ino, &second);
    drop(provider);
}

/// Goal: the cache holds one version of a record, not one per txg that rewrote it: the old
/// version of a record overwritten leaves the cache when its txg syncs (random writes
/// otherwise filled the cache with superseded records), except while a snapshot keeps it
/// readable, and an unlinked file's records leave too. Negative control: with
/// `forget_freed` not forgetting, the first assertion fails (five versions cached).
#[test]
fn superseded_records_leave_the_cache_unless_a_snapshot_keeps_them() {
    let (_provider, engine) = setup();
    const RECORDS: usize = 8;
    let mut model = random(RECORDS * RECORD, 1);
    let ino = create(&engine, "tank/a", "f", &model);
    engine.sync_pool("tank").unwrap();
    let one_version = engine.cache_stats().data_bytes;
    assert!(
        one_version >= (RECORDS * RECORD) as u64,
        "written records are cached"
    );
    for round in 2..6 {
        model = random(RECORDS * RECORD, round);
        write(&engine, "tank/a", ino, 0, &model);
        engine.sync_pool("tank").unwrap();
    }
    assert_eq!(
        engine.cache_stats().data_bytes,
        one_version,
        "one version cached"
    );
    check(&engine, "tank/a", ino, &model);

    let snap = vec!["tank/a@s".to_string()];
    engine.snapshot(&snap, false, &[], "").unwrap();
    model = random(RECORDS * RECORD, 9);
    write(&engine, "tank/a", ino, 0, &model);
    engine.sync_pool("tank").unwrap();
    assert_eq!(
        engine.cache_stats().data_bytes,
        2 * one_version,
        "the snapshot's versions stay cached"
    );
    check(&engine, "tank/a", ino, &model);

    let (pool, id) = engine.find_dataset("tank/a").unwrap();
    engine
        .fs_op(&pool, id, FsOp::Write(0), |fs| {
            let root = fs.root()?;
            fs.unlink(root, b"f")?;
            fs.reclaim(ino)
        })
        .unwrap();
    engine.sync_pool("tank").unwrap();
    assert_eq!(
        engine.cache_stats().data_bytes,
        one_version,
        "the unlinked file's own records leave; the snapshot's stay"
    );
}
