//! Block cloning (`copy_file_range`, OpenZFS 2.2) through the engine on simulated devices:
//! a clone reads as its source and takes no data space; the pool counts a cloned block once
//! (`bcloneused`, `bclonesaved`, `bcloneratio`) and frees it exactly when its last
//! reference goes, whichever free path that is (overwrite, truncate, unlink, snapshot
//! destroy through the dead lists, rollback, dataset destroy); scrub, export/import and a
//! power cut between a clone and its sync (or after its fsync) keep everything consistent;
//! ranges that cannot be cloned are refused (EXDEV) and change nothing.
//!
//! Method: files of two filesystems of one pool hold seeded bytes that do not compress, so
//! every record is a full 128 KiB block. After every step `check::verify_pool` walks the
//! committed tree: each cloned block must be named by exactly one more block pointer than
//! its table count, the table must equal the space log's replay, and space must close
//! (a block freed while a clone still names it is reported as reachable but free). Space
//! figures are compared exactly where the table fixes them.

#![allow(clippy::unwrap_used)] // Test code: a failed unwrap is a failed test.

mod common;

use std::sync::Arc;

use common::{
    CutProvider, Host, PLAIN, crash_all, dataset_bytes as bytes_of, seeded_bytes, sim_devices_with,
};
use tarn_device::FaultPlan;
use tarn_engine::posix::{Creds, FileKind, PosixError};
use tarn_engine::{
    CreateSpec, DatasetId, Engine, EngineError, FileRange, FsOp, ImportOptions, TopLayout, check,
};

const HOST: Host = Host {
    hostid: 13,
    seed: 9,
    ..PLAIN
};

/// Record size of the datasets (the default).
const RECORD: usize = 128 << 10;
/// The source file: eight whole records and a partial last one.
const LEN: usize = 8 * RECORD + 3000;

fn setup(seed: u64) -> (Arc<CutProvider>, Engine) {
    let provider = Arc::new(CutProvider::default());
    let names = sim_devices_with(&provider.sims, "d", 0..2, 128 << 20, |i| FaultPlan {
        seed: seed + i as u64,
        drop_on_crash: 500_000,
        torn_on_crash: 300_000,
        ..FaultPlan::default()
    });
    let spec = CreateSpec::one_top("tank", TopLayout::Mirror, names);
    let engine = HOST.create_tank(&provider, &spec, &[]);
    for name in ["tank/a", "tank/b"] {
        engine.create_dataset(name, &[], false, "create").unwrap();
    }
    settle(&engine);
    (provider, engine)
}

fn import(provider: &Arc<CutProvider>) -> Engine {
    HOST.import(provider, &ImportOptions::default()).unwrap()
}

fn dataset(engine: &Engine, name: &str) -> DatasetId {
    engine.find_dataset(name).unwrap().1
}

/// Creates `name` in the root of `dataset` holding `data`; returns its inode.
fn create(engine: &Engine, dataset: DatasetId, name: &str, data: &[u8]) -> u64 {
    let op = FsOp::Write(data.len() as u64);
    engine
        .fs_op("tank", dataset, op, |fs| {
            let root = fs.root()?;
            let kind = FileKind::Regular;
            let ino = fs.mknod(root, name.as_bytes(), kind, 0o644, 0, Creds::default())?;
            if !data.is_empty() {
                fs.write(ino.ino, 0, data)?;
            }
            Ok(ino.ino)
        })
        .unwrap()
}

fn read(engine: &Engine, dataset: DatasetId, ino: u64) -> Vec<u8> {
    engine
        .fs_op("tank", dataset, FsOp::Read, |fs| {
            fs.read(ino, 0, u32::try_from(LEN * 2).unwrap())
        })
        .unwrap()
}

fn write(engine: &Engine, dataset: DatasetId, ino: u64, offset: u64, data: &[u8]) {
    let op = FsOp::Write(data.len() as u64);
    engine
        .fs_op("tank", dataset, op, |fs| fs.write(ino, offset, data))
        .unwrap();
}

fn remove(engine: &Engine, dataset: DatasetId, name: &str) {
    engine
        .fs_op("tank", dataset, FsOp::Free, |fs| {
            let root = fs.root()?;
            if let Some(ino) = fs.unlink(root, name.as_bytes())? {
                fs.reclaim(ino)?;
            }
            Ok(())
        })
        .unwrap();
}

fn clone(
    engine: &Engine,
    source: (DatasetId, u64, u64),
    target: (DatasetId, u64, u64),
    len: u64,
) -> Result<u64, EngineError> {
    let range = |(dataset, ino, offset)| FileRange {
        dataset,
        ino,
        offset,
    };
    engine.fs_clone_range("tank", range(source), range(target), len)
}

/// Syncs until deferred frees are reusable and checks the pool from its committed state.
fn settle(engine: &Engine) -> check::CheckReport {
    for _ in 0..4 {
        engine.sync_pool("tank").unwrap();
    }
    check::verify_pool(engine, "tank").unwrap()
}

fn pool_prop(engine: &Engine, property: &str) -> String {
    engine.get_props("tank", &[property.into()]).unwrap()[0]
        .value
        .clone()
}

fn pool_bytes(engine: &Engine, property: &str) -> u64 {
    pool_prop(engine, property).parse().unwrap()
}

fn is_exdev(result: Result<u64, EngineError>) -> bool {
    matches!(result, Err(EngineError::Posix(PosixError::CannotClone(_))))
}

/// The source file in tank/a, synced: (dataset, inode, bytes).
fn source(engine: &Engine, seed: u64) -> (DatasetId, u64, Vec<u8>) {
    let a = dataset(engine, "tank/a");
    let data = seeded_bytes(LEN, seed);
    let ino = create(engine, a, "src", &data);
    settle(engine);
    (a, ino, data)
}

#[test]
fn a_clone_shares_blocks_within_and_across_datasets() {
    let (_provider, engine) = setup(1);
    let (a, src, data) = source(&engine, 1);
    let b = dataset(&engine, "tank/b");
    let before = settle(&engine);
    let b_before = bytes_of(&engine, "tank/b", "referenced");
    assert_eq!(pool_bytes(&engine, "bcloneused"), 0);
    assert_eq!(pool_prop(&engine, "bcloneratio"), "1.00");
    assert_eq!(pool_prop(&engine, "feature@block_cloning"), "enabled");

    // Within the dataset and into another one, the whole file in one call as `cp` asks.
    let near = create(&engine, a, "near", &[]);
    let far = create(&engine, b, "far", &[]);
    let len = LEN as u64;
    assert_eq!(clone(&engine, (a, src, 0), (a, near, 0), len).unwrap(), len);
    // Longer than the source: clamped to its end, as copy_file_range does.
    assert_eq!(
        clone(&engine, (a, src, 0), (b, far, 0), 2 * len).unwrap(),
        len
    );
    assert_eq!(read(&engine, a, near), data, "readable before the sync");
    let after = settle(&engine);
    assert_eq!(read(&engine, a, near), data);
    assert_eq!(read(&engine, b, far), data);

    // Nine blocks of one copy each, each cloned twice: counted once, saved twice.
    let used = pool_bytes(&engine, "bcloneused");
    assert!(used >= 8 * RECORD as u64, "bcloneused {used}");
    assert_eq!(pool_bytes(&engine, "bclonesaved"), 2 * used);
    assert_eq!(pool_prop(&engine, "bcloneratio"), "3.00");
    assert_eq!(pool_prop(&engine, "feature@block_cloning"), "active");
    // The data was not written again: only metadata moved (two dnodes, their indirect
    // blocks, the object sets and the MOS).
    let grown = after.allocated_bytes - before.allocated_bytes;
    assert!(grown < used / 4, "allocated grew {grown} for {used} cloned");
    // Each dataset is charged the whole of what it references, as in OpenZFS.
    let charged = bytes_of(&engine, "tank/b", "referenced") - b_before;
    assert!(
        charged >= used,
        "tank/b charged {charged} for {used} cloned"
    );
}

#[test]
fn the_last_reference_frees_whatever_path_it_goes() {
    let (_provider, engine) = setup(2);
    let (a, src, data) = source(&engine, 2);
    let b = dataset(&engine, "tank/b");
    let baseline = settle(&engine).allocated_bytes;
    let copy = create(&engine, b, "copy", &[]);
    clone(&engine, (a, src, 0), (b, copy, 0), LEN as u64).unwrap();
    // Overwrite the whole source in the same txg as the clone: its sync frees the old
    // blocks (a free the clone's reference then takes back) or counts them (clone first).
    write(&engine, a, src, 0, &seeded_bytes(LEN, 99));
    settle(&engine);
    assert_eq!(pool_bytes(&engine, "bcloneused"), 0, "one reference each");
    assert_eq!(read(&engine, b, copy), data);

    // Clone the copy back, then truncate and unlink one side: the other keeps the bytes.
    let again = create(&engine, a, "again", &[]);
    clone(&engine, (b, copy, 0), (a, again, 0), LEN as u64).unwrap();
    let with_two = settle(&engine);
    let used = pool_bytes(&engine, "bcloneused");
    assert!(used >= 8 * RECORD as u64);
    engine
        .fs_op("tank", b, FsOp::Free, |fs| {
            let changes = tarn_engine::posix::SetAttr {
                size: Some(0),
                ..Default::default()
            };
            fs.setattr(copy, &changes)
        })
        .unwrap();
    let truncated = settle(&engine);
    assert_eq!(pool_bytes(&engine, "bcloneused"), 0);
    assert_eq!(read(&engine, a, again), data);
    // Dropping a reference freed nothing but metadata.
    assert!(truncated.allocated_bytes + used / 4 > with_two.allocated_bytes);
    // The last reference goes: now the space comes back (less what the metadata of the
    // txgs moved, well under a record).
    remove(&engine, a, "again");
    let gone = settle(&engine);
    let given = truncated.allocated_bytes - gone.allocated_bytes;
    assert!(
        given + RECORD as u64 / 2 >= used,
        "the last free gave back {given} of {used}"
    );
    assert!(gone.allocated_bytes < baseline + LEN as u64);
}

#[test]
fn snapshots_dead_lists_rollback_and_dataset_destroy_keep_the_count() {
    let (_provider, engine) = setup(3);
    let (a, src, data) = source(&engine, 3);
    let b = dataset(&engine, "tank/b");
    // A snapshot holds the source; the clone goes to tank/b; the source file goes.
    engine
        .snapshot(&["tank/a@s".into()], false, &[], "snapshot")
        .unwrap();
    let copy = create(&engine, b, "copy", &[]);
    clone(&engine, (a, src, 0), (b, copy, 0), LEN as u64).unwrap();
    remove(&engine, a, "src");
    settle(&engine);
    let used = pool_bytes(&engine, "bcloneused");
    assert!(
        used >= 8 * RECORD as u64,
        "the dead list still names the blocks"
    );
    // Destroying the snapshot frees its dead list: each block drops to one reference.
    engine
        .destroy_snapshots("tank/a@s", false, false, "destroy")
        .unwrap();
    settle(&engine);
    assert_eq!(pool_bytes(&engine, "bcloneused"), 0);
    assert_eq!(read(&engine, b, copy), data);

    // A clone made after a snapshot is undone by a rollback to it.
    engine
        .snapshot(&["tank/a@t".into()], false, &[], "snapshot")
        .unwrap();
    let back = create(&engine, a, "back", &[]);
    clone(&engine, (b, copy, 0), (a, back, 0), LEN as u64).unwrap();
    settle(&engine);
    assert_eq!(pool_bytes(&engine, "bcloneused"), used);
    engine.rollback("tank/a@t", false, "rollback").unwrap();
    settle(&engine);
    assert_eq!(pool_bytes(&engine, "bcloneused"), 0);

    // A dataset destroyed whole drops its references too; the copy in tank/b stays.
    let back = create(&engine, a, "back", &[]);
    clone(&engine, (b, copy, 0), (a, back, 0), LEN as u64).unwrap();
    settle(&engine);
    assert_eq!(pool_bytes(&engine, "bcloneused"), used);
    engine.destroy_dataset("tank/a", true, "destroy").unwrap();
    settle(&engine);
    assert_eq!(pool_bytes(&engine, "bcloneused"), 0);
    assert_eq!(read(&engine, b, copy), data);
}

#[test]
fn scrub_and_export_import_find_the_clones_intact() {
    let (provider, engine) = setup(4);
    let (a, src, data) = source(&engine, 4);
    let b = dataset(&engine, "tank/b");
    let copy = create(&engine, b, "copy", &[]);
    clone(&engine, (a, src, 0), (b, copy, 0), LEN as u64).unwrap();
    settle(&engine);
    let used = pool_bytes(&engine, "bcloneused");
    let scan = common::scrub_tank(&engine, 1 << 20);
    assert_eq!(scan.errors, 0);
    // A base of the space log carries the table as well as the deltas do.
    check::condense_next_sync(&engine, "tank").unwrap();
    settle(&engine);
    engine.export_pool("tank", false).unwrap();
    let engine = import(&provider);
    let (a, b) = (dataset(&engine, "tank/a"), dataset(&engine, "tank/b"));
    assert_eq!(
        pool_bytes(&engine, "bcloneused"),
        used,
        "the table is on disk"
    );
    assert_eq!(read(&engine, b, copy), data);
    assert_eq!(read(&engine, a, src), data);
    settle(&engine);
    remove(&engine, a, "src");
    settle(&engine);
    assert_eq!(pool_bytes(&engine, "bcloneused"), 0);
    assert_eq!(read(&engine, b, copy), data);
}

#[test]
fn a_power_cut_loses_an_unsynced_clone_and_keeps_an_fsynced_one() {
    let (provider, engine) = setup(5);
    let (a, src, data) = source(&engine, 5);
    let b = dataset(&engine, "tank/b");
    let lost = create(&engine, b, "lost", &[]);
    engine.sync_pool("tank").unwrap();
    clone(&engine, (a, src, 0), (b, lost, 0), LEN as u64).unwrap();
    crash_all(&provider.sims);
    drop(engine);
    let engine = import(&provider);
    settle(&engine);
    assert!(
        read(&engine, b, lost).is_empty(),
        "never synced, never fsynced"
    );
    assert_eq!(pool_bytes(&engine, "bcloneused"), 0);

    // An fsync of the destination's dataset makes the clone durable (a txg: module zil),
    // also when the dataset has an intent-log chain (the first fsync gives it one).
    let kept = create(&engine, b, "kept", &[]);
    engine.fs_sync("tank", b).unwrap();
    clone(&engine, (a, src, 0), (b, kept, 0), LEN as u64).unwrap();
    engine.fs_sync("tank", b).unwrap();
    crash_all(&provider.sims);
    drop(engine);
    let engine = import(&provider);
    settle(&engine);
    assert_eq!(read(&engine, b, kept), data);
    assert!(pool_bytes(&engine, "bcloneused") >= 8 * RECORD as u64);
}

#[test]
fn ranges_that_cannot_be_cloned_are_refused_and_change_nothing() {
    let (_provider, engine) = setup(6);
    let (a, src, data) = source(&engine, 6);
    let dst = create(&engine, a, "dst", &[]);
    let record = RECORD as u64;
    let refused = [
        // A source offset inside a block.
        clone(&engine, (a, src, 512), (a, dst, 0), record),
        // A destination offset inside a block.
        clone(&engine, (a, src, 0), (a, dst, 512), record),
        // A length that ends inside a block before the source's end.
        clone(&engine, (a, src, 0), (a, dst, 0), record + 512),
        // Overlapping ranges of one file.
        clone(&engine, (a, src, 0), (a, src, record), 2 * record),
    ];
    for (i, result) in refused.into_iter().enumerate() {
        assert!(is_exdev(result), "case {i} was not refused with EXDEV");
    }
    // A destination of another block size that holds data.
    let small = create(&engine, a, "small", b"a small file");
    let result = clone(&engine, (a, src, 0), (a, small, 0), record);
    assert!(is_exdev(result));
    settle(&engine);
    assert!(read(&engine, a, dst).is_empty());
    assert_eq!(read(&engine, a, small), b"a small file");
    assert_eq!(read(&engine, a, src), data);
    assert_eq!(pool_bytes(&engine, "bcloneused"), 0);
    // A range of whole blocks in the middle clones.
    let mid = clone(&engine, (a, src, record), (a, dst, 2 * record), 3 * record).unwrap();
    assert_eq!(mid, 3 * record);
    settle(&engine);
    let got = read(&engine, a, dst);
    assert_eq!(got.len(), 5 * RECORD);
    assert!(got[..2 * RECORD].iter().all(|b| *b == 0));
    assert_eq!(got[2 * RECORD..], data[RECORD..4 * RECORD]);
}

fn send(engine: &Engine, snapshot: &str, from: Option<&str>) -> Vec<u8> {
    let spec = tarn_engine::SendSpec {
        snapshot: snapshot.into(),
        from: from.map(Into::into),
        ..tarn_engine::SendSpec::default()
    };
    let mut out = Vec::new();
    engine.send(&spec, &mut out, &mut |_| {}).unwrap();
    out
}

fn receive(engine: &Engine, target: &str, stream: &[u8]) {
    let spec = tarn_engine::ReceiveSpec {
        target: target.into(),
        ..tarn_engine::ReceiveSpec::default()
    };
    engine
        .receive(&spec, &mut &stream[..], &mut |_| {})
        .unwrap();
}

#[test]
fn send_carries_clones_as_ordinary_writes() {
    // Goal: a clone is born in the txg that made it, so an incremental stream since an
    // earlier snapshot carries it, as data (the receiving pool has no reference to share).
    let (_provider, engine) = setup(7);
    let (a, src, data) = source(&engine, 7);
    let b = dataset(&engine, "tank/b");
    engine
        .snapshot(&["tank/b@one".into()], false, &[], "snapshot")
        .unwrap();
    let copy = create(&engine, b, "copy", &[]);
    clone(&engine, (a, src, 0), (b, copy, 0), LEN as u64).unwrap();
    settle(&engine);
    engine
        .snapshot(&["tank/b@two".into()], false, &[], "snapshot")
        .unwrap();
    receive(&engine, "tank/c", &send(&engine, "tank/b@one", None));
    let stream = send(&engine, "tank/b@two", Some("tank/b@one"));
    assert!(stream.len() > LEN, "the clone's bytes are in the stream");
    receive(&engine, "tank/c", &stream);
    settle(&engine);
    let c = dataset(&engine, "tank/c");
    let ino = engine
        .fs_op("tank", c, FsOp::Read, |fs| {
            let root = fs.root()?;
            Ok(fs.lookup(root, b"copy")?.ino)
        })
        .unwrap();
    assert_eq!(read(&engine, c, ino), data);
    assert_eq!(
        pool_bytes(&engine, "bclonesaved"),
        pool_bytes(&engine, "bcloneused")
    );
}

#[test]
fn two_clones_of_one_block_in_one_txg_are_two_references_to_the_checker() {
    // Goal: the pool checker's edge case: a block cloned twice in one txg into one dataset
    // gives two pointers with the same address and the same birth. The checker must count
    // both against the table, and when a snapshot holds both and the head lets go of one,
    // exactly that one sits on a dead list while the head still names the block (it once
    // took the dead-list entry for a stray: a block "the head still holds"). Each dataset's
    // `referenced` counts every pointer in full. Method: clone one source into two files of
    // tank/b in one txg, snapshot, overwrite one clone, then the other, then destroy the
    // snapshot, checking the pool and the table's counts after each step.
    let (_provider, engine) = setup(6);
    let (a, src, data) = source(&engine, 6);
    let b = dataset(&engine, "tank/b");
    let len = LEN as u64;
    let (one, two) = (
        create(&engine, b, "one", &[]),
        create(&engine, b, "two", &[]),
    );
    settle(&engine);
    clone(&engine, (a, src, 0), (b, one, 0), len).unwrap();
    clone(&engine, (a, src, 0), (b, two, 0), len).unwrap();
    settle(&engine);
    // Both clones in one txg: pairs of pointers alike in address and birth.
    let mut seen = std::collections::BTreeMap::new();
    for bp in check::reachable_blocks(&engine, "tank").unwrap() {
        *seen
            .entry((bp.dvas[0].vdev, bp.dvas[0].offset, bp.birth))
            .or_insert(0) += 1;
    }
    assert_eq!(
        seen.values().filter(|n| **n == 2).count(),
        9,
        "nine blocks, twice each"
    );
    let used = pool_bytes(&engine, "bcloneused");
    assert!(used >= 8 * RECORD as u64, "bcloneused {used}");
    assert_eq!(pool_bytes(&engine, "bclonesaved"), 2 * used);
    let referenced = bytes_of(&engine, "tank/b", "referenced");
    assert!(referenced >= 2 * used, "tank/b referenced {referenced}");

    engine
        .snapshot(&["tank/b@s".into()], false, &[], "snapshot")
        .unwrap();
    write(&engine, b, one, 0, &seeded_bytes(LEN, 61));
    settle(&engine);
    assert_eq!(
        pool_bytes(&engine, "bclonesaved"),
        2 * used,
        "the snapshot holds it"
    );
    let held = bytes_of(&engine, "tank/b", "usedbysnapshots");
    assert!(held >= used, "usedbysnapshots {held}");
    write(&engine, b, two, 0, &seeded_bytes(LEN, 62));
    settle(&engine);
    assert_eq!(read(&engine, a, src), data);
    engine
        .destroy_snapshots("tank/b@s", false, false, "destroy")
        .unwrap();
    settle(&engine);
    assert_eq!(pool_bytes(&engine, "bcloneused"), 0, "one reference left");
    assert_eq!(read(&engine, a, src), data);
}

#[test]
fn a_nearly_full_pool_clones_what_it_cannot_copy() {
    // Goal: admission counts what a clone allocates (its block pointers), not its length:
    // on a pool too full for one more copy of a file, a clone of it goes ahead (quotas still
    // count a clone in full). Method: an 8 MiB source; fill the pool with noise in
    // shrinking writes until even 128 KiB is refused, give 4 MiB back and let the frees
    // settle; a write of the source's length is refused with ENOSPC and changes nothing,
    // the clone succeeds, reads back, and the pool checks. It was admitted as a write of
    // its whole length and refused here.
    let (_provider, engine) = setup(7);
    let a = dataset(&engine, "tank/a");
    let b = dataset(&engine, "tank/b");
    let len = 64 * RECORD;
    let data = seeded_bytes(len, 7);
    let src = create(&engine, a, "src", &data);
    let (filler, copy) = (
        create(&engine, b, "filler", &[]),
        create(&engine, a, "copy", &[]),
    );
    settle(&engine);
    let read_all = |ino| {
        engine
            .fs_op("tank", a, FsOp::Read, |fs| fs.read(ino, 0, 16 << 20))
            .unwrap()
    };
    let mut offset = 0u64;
    for chunk in [8 << 20, 1 << 20, RECORD] {
        let piece = seeded_bytes(chunk, offset);
        let op = FsOp::Write(chunk as u64);
        loop {
            match engine.fs_op("tank", b, op, |fs| fs.write(filler, offset, &piece)) {
                Ok(_) => offset += chunk as u64,
                Err(EngineError::NoSpace) => break,
                Err(e) => panic!("filling: {e}"),
            }
        }
    }
    let smaller = tarn_engine::posix::SetAttr {
        size: Some(offset - (4 << 20)),
        ..Default::default()
    };
    engine
        .fs_op("tank", b, FsOp::Free, |fs| fs.setattr(filler, &smaller))
        .unwrap();
    settle(&engine);
    let op = FsOp::Write(len as u64);
    let refused = engine.fs_op("tank", a, op, |fs| fs.write(copy, 0, &data));
    assert!(
        matches!(refused, Err(EngineError::NoSpace)),
        "the pool still takes a copy: {refused:?}"
    );
    assert!(
        read_all(copy).is_empty(),
        "the refused write changed nothing"
    );
    clone(&engine, (a, src, 0), (a, copy, 0), len as u64).unwrap();
    settle(&engine);
    assert_eq!(read_all(copy), data);
    assert!(pool_bytes(&engine, "bcloneused") >= len as u64);

    // Quotas count a clone in full: tank/b with room for half the source refuses it.
    let referenced = bytes_of(&engine, "tank/b", "referenced");
    let quota = (referenced + len as u64 / 2).to_string();
    let set = [("refquota".to_string(), quota)];
    engine.set_dataset_props("tank/b", &set, "set").unwrap();
    let far = create(&engine, b, "far", &[]);
    let over = clone(&engine, (a, src, 0), (b, far, 0), len as u64);
    assert!(matches!(over, Err(EngineError::QuotaExceeded)), "{over:?}");
    settle(&engine);
    assert_eq!(bytes_of(&engine, "tank/b", "referenced"), referenced);
}

/// Garbage over copies `copies` of every block of `space_log`, on both sides of the mirror.
fn rot_space_log(provider: &CutProvider, space_log: &[tarn_format::BlockPtr], copies: usize) {
    for bp in space_log {
        assert!(bp.copies().count() > 1, "the space log has metadata copies");
        for dva in bp.copies().take(copies) {
            for side in ["/sim/d0", "/sim/d1"] {
                let device = provider.sims.get(side).unwrap();
                let at = tarn_format::label::DATA_START + dva.offset;
                device.rot(at, dva.asize).unwrap();
            }
        }
    }
}

fn space_log(engine: &Engine) -> Vec<tarn_format::BlockPtr> {
    let all = check::reachable_blocks(engine, "tank").unwrap();
    let log = all
        .into_iter()
        .filter(|bp| bp.block_type == tarn_format::BlockType::SpaceLog);
    log.collect()
}

fn rebuilt(engine: &Engine) -> bool {
    let events = engine.events(Some("tank"), 0, false);
    events.iter().any(|e| e.class.ends_with("space_rebuild"))
}

#[test]
fn a_damaged_space_log_heals_or_rebuilds_the_reference_table() {
    // Goal: the space log's blocks carry the reference table's records (ops 3 and 4). Damage
    // to some of their metadata copies heals: the import reads another copy and the table
    // is exact. Damage to every copy loses the log: the pool still imports, says so (a
    // space_rebuild event), and the table rebuilt from the block tree is exact (a block
    // named by n pointers has n - 1 references), so no cloned block is freed while a
    // pointer names it. Method: clones into two files of tank/b in one txg (same address,
    // same birth), a snapshot and a block of one clone overwritten (a clone on a dead list);
    // export, rot the first copy of each space-log block, import; export, rot every copy,
    // import; then free the source, the snapshot and one clone: the other reads intact.
    let (provider, engine) = setup(8);
    let (a, src, data) = source(&engine, 8);
    let b = dataset(&engine, "tank/b");
    let (one, two) = (
        create(&engine, b, "one", &[]),
        create(&engine, b, "two", &[]),
    );
    for target in [one, two] {
        clone(&engine, (a, src, 0), (b, target, 0), LEN as u64).unwrap();
    }
    settle(&engine);
    engine
        .snapshot(&["tank/b@s".into()], false, &[], "snapshot")
        .unwrap();
    write(&engine, b, one, 0, &seeded_bytes(RECORD, 81));
    settle(&engine);
    let counts = |engine: &Engine| {
        (
            pool_bytes(engine, "bcloneused"),
            pool_bytes(engine, "bclonesaved"),
        )
    };
    let before = counts(&engine);
    assert!(before.0 >= 8 * RECORD as u64, "{before:?}");

    let mut engine = engine;
    for (copies, lost) in [(1, false), (3, true)] {
        let log = space_log(&engine);
        engine.export_pool("tank", false).unwrap();
        rot_space_log(&provider, &log, copies);
        engine = import(&provider);
        assert_eq!(rebuilt(&engine), lost, "{copies} copies rotted");
        assert_eq!(counts(&engine), before, "{copies} copies rotted");
        check::verify_pool(&engine, "tank").unwrap();
        settle(&engine);
    }
    let (a, b) = (dataset(&engine, "tank/a"), dataset(&engine, "tank/b"));
    remove(&engine, a, "src");
    engine
        .destroy_snapshots("tank/b@s", false, false, "destroy")
        .unwrap();
    remove(&engine, b, "one");
    settle(&engine);
    assert_eq!(counts(&engine), (0, 0));
    assert_eq!(read(&engine, b, two), data);
}
