//! A dataset whose object-set root block is lost beyond its copies (every copy on every side
//! of the mirror rotten) costs that dataset, not the pool: the pool imports, every other
//! dataset (its own child included) reads and writes, and the lost one refuses every call
//! in one line naming it, is listed by `status -v`, is never rewritten with another root
//! (repair the devices and it reads again, with what a property change made meanwhile),
//! and can be rolled back to a snapshot or destroyed.
//!
//! Method: a pool `tank` on a mirror of two simulated devices; the root's copies are the
//! object-set blocks a last write to `tank/b` added (`check::dataset_blocks`); garbage goes
//! over them on both devices of an exported copy, which a new engine imports.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::replica::{Images, host};
use common::volume::{LEN, noise, read, volume, write};
use common::{PLAIN, images, import_tank};
use tarn_device::{FaultPlan, SimDevice};
use tarn_engine::{Engine, FsOp, ImportOptions, SimProvider, check};
use tarn_format::BlockType;
use tarn_posix::{Creds, FileKind};

const ME: Creds = Creds { uid: 0, gid: 0 };

/// (device offset, bytes) of every copy of the object-set roots of `tank`'s datasets.
fn root_copies(engine: &Engine) -> BTreeSet<(u64, u64)> {
    check::dataset_blocks(engine, "tank")
        .unwrap()
        .into_iter()
        .filter(|bp| bp.block_type == BlockType::ObjectSet)
        .flat_map(|bp| bp.dvas)
        .filter(|dva| dva.asize > 0)
        .map(|dva| (tarn_format::label::DATA_START + dva.offset, dva.asize))
        .collect()
}

/// Writes `data` to the new file `name` in the root directory of `dataset`.
fn write_file(engine: &Engine, dataset: &str, name: &[u8], data: &[u8]) -> Result<(), String> {
    let (_, id) = engine.find_dataset(dataset).unwrap();
    engine
        .fs_op("tank", id, FsOp::Modify, |fs| {
            let root = fs.root()?;
            let ino = fs.mknod(root, name, FileKind::Regular, 0o644, 0, ME)?.ino;
            fs.write(ino, 0, data).map(drop)
        })
        .map_err(|e| e.to_string())
}

/// The whole file `name` in the root directory of `dataset`.
fn read_file(engine: &Engine, dataset: &str, name: &[u8]) -> Result<Vec<u8>, String> {
    let (_, id) = engine.find_dataset(dataset).unwrap();
    engine
        .fs_op("tank", id, FsOp::Read, |fs| {
            let root = fs.root()?;
            let ino = fs.lookup(root, name)?.ino;
            fs.read(ino, 0, 1 << 20)
        })
        .map_err(|e| e.to_string())
}

/// The pool of every test: `tank/a`, `tank/b` (snapshot `@s` after its first file, then a
/// second file) with a child `tank/b/c`, and a volume `tank/v`; exported. Returns its
/// images and the copies of `tank/b`'s root.
fn exported_pool() -> (Images, BTreeSet<(u64, u64)>) {
    let (sims, engine) = host(11);
    for name in ["tank/a", "tank/b", "tank/b/c"] {
        engine.create_dataset(name, &[], false, "create").unwrap();
    }
    write_file(&engine, "tank/a", b"f", &noise(200 << 10, 1)).unwrap();
    write_file(&engine, "tank/b", b"first", &noise(100 << 10, 2)).unwrap();
    write_file(&engine, "tank/b/c", b"f", &noise(50 << 10, 3)).unwrap();
    volume(&engine, "tank/v");
    write(&engine, "tank/v", 0, &noise(LEN, 4));
    engine
        .snapshot(&["tank/b@s".into()], false, &[], "snapshot")
        .unwrap();
    engine.sync_pool("tank").unwrap();
    let before = root_copies(&engine);
    write_file(&engine, "tank/b", b"second", &noise(100 << 10, 5)).unwrap();
    engine.sync_pool("tank").unwrap();
    let doomed: BTreeSet<_> = root_copies(&engine).difference(&before).copied().collect();
    assert!(doomed.len() >= 2, "the root's copies: {doomed:?}");
    engine.export_pool("tank", false).unwrap();
    (images(&sims), doomed)
}

/// A new engine importing `images` with garbage over `doomed` on both devices.
fn import_damaged(images: &Images, doomed: &BTreeSet<(u64, u64)>) -> (Arc<SimProvider>, Engine) {
    let provider = Arc::new(SimProvider::new());
    for (path, image) in images {
        let device = SimDevice::from_image(path, image, FaultPlan::default());
        for (offset, len) in doomed {
            device.rot(*offset, *len).unwrap();
        }
        provider.insert(path, device);
    }
    let engine = PLAIN.engine(&provider);
    if let Err(e) = import_tank(&engine, &ImportOptions::default()) {
        panic!("the pool must import: {e}");
    }
    (provider, engine)
}

/// The file `name` of `dataset` reads back as `noise(len, seed)`.
fn file_is(engine: &Engine, dataset: &str, name: &[u8], len: usize, seed: u64) {
    let got = read_file(engine, dataset, name).unwrap();
    assert!(
        got == noise(len, seed),
        "{dataset} {:?}",
        String::from_utf8_lossy(name)
    );
}

/// Everything but `tank/b` reads back as written.
fn others_intact(engine: &Engine) {
    file_is(engine, "tank/a", b"f", 200 << 10, 1);
    file_is(engine, "tank/b/c", b"f", 50 << 10, 3);
    assert_eq!(read(engine, "tank/v"), noise(LEN, 4));
}

/// `refused` is the one-line refusal of the unavailable `tank/b`.
fn names_the_loss(refused: &str) {
    assert!(!refused.contains('\n'), "one line: {refused}");
    assert!(
        refused.starts_with("dataset 'tank/b' is unavailable: its object set cannot be read"),
        "{refused}"
    );
}

// DESCRIPTION: the pool imports with tank/b's root lost; everything else works, tank/b
// refuses reads, writes and snapshots in one line, status names it, a property set on it
// meanwhile is kept, and once the devices are repaired tank/b reads again, both files.
#[test]
fn a_lost_root_costs_one_dataset_and_comes_back_when_repaired() {
    let (pristine, doomed) = exported_pool();
    let (sims, engine) = import_damaged(&pristine, &doomed);
    others_intact(&engine);
    write_file(&engine, "tank/a", b"g", &noise(10 << 10, 6)).unwrap();
    names_the_loss(&read_file(&engine, "tank/b", b"first").unwrap_err());
    names_the_loss(&write_file(&engine, "tank/b", b"new", b"x").unwrap_err());
    let snapshot = |names: &[&str], recursive| {
        let names: Vec<String> = names.iter().map(|n| (*n).to_string()).collect();
        engine
            .snapshot(&names, recursive, &[], "snapshot")
            .unwrap_err()
            .to_string()
    };
    names_the_loss(&snapshot(&["tank/b@x"], false));
    names_the_loss(&snapshot(&["tank@x"], true));
    assert!(
        !common::dataset_exists(&engine, "tank@x"),
        "-r is all or nothing"
    );
    // Listing the pool, every property included, still works and shows tank/b.
    let rows = common::tank_rows(&engine, &["all"]);
    assert!(
        rows.iter().any(|row| row.contains(&"/tank/b".to_string())),
        "{rows:?}"
    );
    let lost = vec!["tank/b:<object set: dataset unavailable>".to_string()];
    assert_eq!(engine.status("tank").unwrap().errors, lost, "at import");
    common::scrub_tank(&engine, 64);
    assert_eq!(engine.status("tank").unwrap().errors, lost, "after a scrub");
    let note = [("org.test:note".to_string(), "kept".to_string())];
    engine.set_dataset_props("tank/b", &note, "set").unwrap();
    engine.sync_pool("tank").unwrap();
    engine.export_pool("tank", false).unwrap();
    // The repair: the lost copies' bytes as they were, everything else as the damaged
    // pool left it (its txgs since the import).
    let mut repaired = images(&sims);
    for ((_, image), (_, good)) in repaired.iter_mut().zip(&pristine) {
        for (offset, len) in &doomed {
            let range = *offset as usize..(*offset + *len) as usize;
            image[range.clone()].copy_from_slice(&good[range]);
        }
    }
    let (_, engine) = import_damaged(&repaired, &BTreeSet::new());
    others_intact(&engine);
    file_is(&engine, "tank/a", b"g", 10 << 10, 6);
    file_is(&engine, "tank/b", b"first", 100 << 10, 2);
    file_is(&engine, "tank/b", b"second", 100 << 10, 5);
    assert_eq!(
        common::dataset_prop(&engine, "tank/b", "org.test:note"),
        "kept"
    );
}

// DESCRIPTION: an unavailable dataset rolled back to its snapshot reads as the snapshot
// again, and survives an export and import.
#[test]
fn an_unavailable_dataset_rolls_back_to_its_snapshot() {
    let (pristine, doomed) = exported_pool();
    let (sims, engine) = import_damaged(&pristine, &doomed);
    engine.rollback("tank/b@s", false, "rollback").unwrap();
    file_is(&engine, "tank/b", b"first", 100 << 10, 2);
    assert!(
        read_file(&engine, "tank/b", b"second").is_err(),
        "after the snapshot"
    );
    write_file(&engine, "tank/b", b"third", &noise(30 << 10, 7)).unwrap();
    engine.export_pool("tank", false).unwrap();
    let (_, engine) = import_damaged(&images(&sims), &BTreeSet::new());
    others_intact(&engine);
    file_is(&engine, "tank/b", b"first", 100 << 10, 2);
    file_is(&engine, "tank/b", b"third", 30 << 10, 7);
}

// DESCRIPTION: an unavailable dataset is destroyed with its child and snapshot; the rest of
// the pool is untouched, `leaked` counts the head's bytes, the error log forgets it after a
// scrub, and the pool imports again.
#[test]
fn an_unavailable_dataset_can_be_destroyed() {
    let (pristine, doomed) = exported_pool();
    let (sims, engine) = import_damaged(&pristine, &doomed);
    let leaked = |engine: &Engine| {
        engine.get_props("tank", &["leaked".into()]).unwrap()[0]
            .value
            .clone()
    };
    assert_eq!(leaked(&engine), "0");
    let referenced = common::dataset_bytes(&engine, "tank/b", "referenced");
    engine
        .destroy_dataset("tank/b", true, "destroy -r")
        .unwrap();
    assert!(!common::dataset_exists(&engine, "tank/b"));
    // What lay below the lost root stays allocated, and `leaked` says about how much.
    assert_eq!(leaked(&engine), referenced.to_string());
    common::scrub_tank(&engine, 64);
    assert_eq!(engine.status("tank").unwrap().errors, Vec::<String>::new());
    engine.export_pool("tank", false).unwrap();
    let (_, engine) = import_damaged(&images(&sims), &BTreeSet::new());
    assert_eq!(
        leaked(&engine),
        referenced.to_string(),
        "kept across an import"
    );
    file_is(&engine, "tank/a", b"f", 200 << 10, 1);
    assert_eq!(read(&engine, "tank/v"), noise(LEN, 4));
    engine
        .snapshot(&["tank@after".into()], true, &[], "snapshot")
        .unwrap();
}
