//! Model tests of the object layer against an in-memory block store that checks checksums and
//! tracks live blocks, so that leaks and double frees are caught at every sync.

use crate::testing::{MemStore, check_space};
use crate::{BlockContext, ObjectError, ObjectSet, ObjsetKind};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashSet};
use tarn_base::{ObjectId, SeededRng, Txg};
use tarn_format::BlockPtr;
use tarn_format::compress::is_all_zero;
use tarn_format::dnode::OBJECT_TYPE_PLAIN;
use tarn_zio::{BlockStore, WriteProps, ZioError};

#[derive(Clone, Debug)]
struct ModelObject {
    block_size: u32,
    data: Vec<u8>,
    bonus: Vec<u8>,
    zap: Option<BTreeMap<String, Vec<u8>>>,
}

impl ModelObject {
    fn byte(&self, at: u64) -> u8 {
        self.data.get(at as usize).copied().unwrap_or(0)
    }

    fn block_is_data(&self, blkid: u64) -> bool {
        let size = u64::from(self.block_size);
        let start = (blkid * size) as usize;
        let end = (start + size as usize).min(self.data.len());
        start < end && !is_all_zero(&self.data[start..end])
    }

    fn next_data(&self, offset: u64) -> Option<u64> {
        let size = u64::from(self.block_size);
        let mut blkid = offset / size;
        while blkid * size < self.data.len() as u64 {
            if self.block_is_data(blkid) {
                return Some(offset.max(blkid * size));
            }
            blkid += 1;
        }
        None
    }

    fn next_hole(&self, offset: u64) -> u64 {
        let size = u64::from(self.block_size);
        let mut blkid = offset / size;
        while self.block_is_data(blkid) {
            blkid += 1;
        }
        offset.max(blkid * size)
    }
}

type Model = BTreeMap<u64, ModelObject>;

fn compare(set: &mut ObjectSet, store: &MemStore, model: &Model) {
    let mut ids = Vec::new();
    let mut cursor = ObjectId(0);
    while let Some(next) = set.next_object(store, cursor).expect("next_object") {
        ids.push(next.0);
        cursor = next;
    }
    assert_eq!(
        ids,
        model.keys().copied().collect::<Vec<_>>(),
        "allocated objects"
    );
    for (&id, object) in model {
        let id = ObjectId(id);
        let info = set.object_info(store, id).expect("info");
        assert_eq!(
            info.data_block_size, object.block_size,
            "object {} block size",
            id.0
        );
        assert_eq!(
            set.bonus(store, id).expect("bonus"),
            object.bonus,
            "object {} bonus",
            id.0
        );
        if let Some(zap) = &object.zap {
            let all = set.zap_list_sorted(store, id).expect("zap list");
            let expected: Vec<_> = zap.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            assert_eq!(all, expected, "object {} zap contents", id.0);
            continue;
        }
        let mut buf = vec![0u8; object.data.len() + 3000];
        set.read(store, id, 0, &mut buf).expect("read");
        assert!(
            buf[..object.data.len()] == object.data[..],
            "object {} contents",
            id.0
        );
        assert!(
            is_all_zero(&buf[object.data.len()..]),
            "object {} past the end",
            id.0
        );
    }
}

fn random_bytes(rng: &mut SeededRng, len: usize) -> Vec<u8> {
    let mut data = vec![0u8; len];
    match rng.below(4) {
        0 => {}
        1 => data
            .iter_mut()
            .for_each(|byte| *byte = (rng.below(3)) as u8),
        _ => rng.fill(&mut data),
    }
    data
}

const BLOCK_SIZES: [u32; 4] = [512, 1024, 4096, 16384];

fn pick<T: Copy>(rng: &mut SeededRng, items: &[T]) -> T {
    items[rng.below(items.len() as u64) as usize]
}

fn random_object(model: &Model, rng: &mut SeededRng, zap: bool) -> Option<u64> {
    let ids: Vec<u64> = model
        .iter()
        .filter(|(_, o)| o.zap.is_some() == zap)
        .map(|(&id, _)| id)
        .collect();
    (!ids.is_empty()).then(|| pick(rng, &ids))
}

fn step(set: &mut ObjectSet, store: &mut MemStore, model: &mut Model, rng: &mut SeededRng) {
    match rng.below(100) {
        0..=6 => {
            let block_size = pick(rng, &BLOCK_SIZES);
            let id = set
                .allocate_object(store, OBJECT_TYPE_PLAIN, block_size, 4, 0)
                .expect("allocate");
            assert!(!model.contains_key(&id.0), "allocated a live id {}", id.0);
            assert!(model.keys().all(|&used| used != id.0));
            let lowest_free = (1..)
                .find(|candidate| !model.contains_key(candidate))
                .expect("id");
            assert_eq!(id.0, lowest_free, "allocation picks the lowest free id");
            if rng.chance(1, 2) {
                set.set_indirect_shift(store, id, 10).expect("shift");
            }
            model.insert(
                id.0,
                ModelObject {
                    block_size,
                    data: Vec::new(),
                    bonus: Vec::new(),
                    zap: None,
                },
            );
        }
        7..=8 => {
            let id = set.zap_create(store, 20).expect("zap create");
            model.insert(
                id.0,
                ModelObject {
                    block_size: 4096,
                    data: Vec::new(),
                    bonus: Vec::new(),
                    zap: Some(BTreeMap::new()),
                },
            );
        }
        9..=38 => {
            let Some(id) = random_object(model, rng, false) else {
                return;
            };
            let object = model.get_mut(&id).expect("object");
            let span = u64::from(object.block_size) * 200;
            let offset = rng.below(span);
            let len = 1 + rng.below(u64::from(object.block_size) * 3) as usize;
            let data = random_bytes(rng, len);
            set.write(store, ObjectId(id), offset, &data)
                .expect("write");
            let end = offset as usize + len;
            if object.data.len() < end {
                object.data.resize(end, 0);
            }
            object.data[offset as usize..end].copy_from_slice(&data);
        }
        39..=46 => {
            let Some(id) = random_object(model, rng, false) else {
                return;
            };
            let object = model.get_mut(&id).expect("object");
            let len_max = object.data.len() as u64 + 1;
            let offset = rng.below(len_max);
            let len = if rng.chance(1, 8) {
                u64::MAX
            } else {
                rng.below(len_max)
            };
            set.free_range(store, ObjectId(id), offset, len)
                .expect("punch");
            let end = (offset.saturating_add(len) as usize).min(object.data.len());
            if (offset as usize) < end {
                object.data[offset as usize..end].fill(0);
            }
        }
        47..=50 => {
            let zap = rng.chance(1, 3);
            let Some(id) = random_object(model, rng, zap) else {
                return;
            };
            set.free_object(store, ObjectId(id)).expect("free");
            model.remove(&id);
            let error = set.free_object(store, ObjectId(id));
            assert!(
                matches!(error, Err(ObjectError::NoSuchObject { .. })),
                "double free_object"
            );
        }
        51..=55 => {
            let Some(id) = random_object(model, rng, false) else {
                return;
            };
            let bonus = {
                let len = rng.below(321) as usize;
                random_bytes(rng, len)
            };
            set.set_bonus(store, ObjectId(id), &bonus).expect("bonus");
            model.get_mut(&id).expect("object").bonus = bonus;
        }
        56..=58 => {
            let Some(id) = random_object(model, rng, false) else {
                return;
            };
            let info = set.object_info(store, ObjectId(id)).expect("info");
            let size = pick(rng, &[512u32, 2048, 8192, 16384]);
            let result = set.set_block_size(store, ObjectId(id), size);
            let object = model.get_mut(&id).expect("object");
            if info.maxblkid == 0 {
                result.expect("single-block objects may change block size");
                object.block_size = size;
                object.data.truncate(size as usize);
            } else {
                assert!(matches!(result, Err(ObjectError::InvalidArgument { .. })));
            }
        }
        59..=70 => {
            let Some(id) = random_object(model, rng, false) else {
                return;
            };
            let object = &model[&id];
            let offset = rng.below(object.data.len() as u64 + 2000);
            let mut buf = vec![0u8; rng.below(20_000) as usize];
            set.read(store, ObjectId(id), offset, &mut buf)
                .expect("read");
            for (i, byte) in buf.iter().enumerate() {
                assert_eq!(
                    *byte,
                    object.byte(offset + i as u64),
                    "object {id} byte {}",
                    offset + i as u64
                );
            }
            let data = set
                .next_data(store, ObjectId(id), offset)
                .expect("next_data");
            assert_eq!(
                data,
                object.next_data(offset),
                "next_data of {id} from {offset}"
            );
            let hole = set
                .next_hole(store, ObjectId(id), offset)
                .expect("next_hole");
            assert_eq!(
                hole,
                object.next_hole(offset),
                "next_hole of {id} from {offset}"
            );
        }
        _ => {
            let Some(id) = random_object(model, rng, true) else {
                return;
            };
            let zap = model
                .get_mut(&id)
                .expect("object")
                .zap
                .as_mut()
                .expect("zap");
            let key = format!("k{}", rng.below(400));
            match rng.below(4) {
                0 | 1 => {
                    let value = {
                        let len = rng.below(200) as usize;
                        random_bytes(rng, len)
                    };
                    let result = set.zap_insert(store, ObjectId(id), &key, &value);
                    if zap.contains_key(&key) {
                        assert!(matches!(result, Err(ObjectError::KeyExists { .. })));
                    } else {
                        result.expect("insert");
                        zap.insert(key.clone(), value);
                    }
                }
                2 => {
                    let value = {
                        let len = rng.below(1025) as usize;
                        random_bytes(rng, len)
                    };
                    set.zap_update(store, ObjectId(id), &key, &value)
                        .expect("update");
                    zap.insert(key.clone(), value);
                }
                _ => {
                    let result = set.zap_remove(store, ObjectId(id), &key);
                    if zap.remove(&key).is_some() {
                        result.expect("remove");
                    } else {
                        assert!(matches!(result, Err(ObjectError::NoSuchKey { .. })));
                    }
                }
            }
            let looked = set.zap_lookup(store, ObjectId(id), &key).expect("lookup");
            assert_eq!(looked.as_ref(), zap.get(&key), "zap lookup {key}");
        }
    }
}

/// Goal: the object set matches a reference model through random writes, punches, frees,
/// bonus and block-size changes and ZAP operations, across syncs and reopens, with exactly the
/// reachable blocks live after every sync. Method: seeded random operations; after each sync,
/// reopen from the returned root, compare every object and check space.
#[test]
fn random_workloads_match_the_model() {
    for seed in 0..6 {
        let mut rng = SeededRng::new(seed);
        let mut store = MemStore::new();
        let mut set = ObjectSet::create(ObjsetKind::Filesystem).with_cache_limit(1 << 20);
        let mut model = Model::new();
        for _ in 0..12 {
            for _ in 0..rng.below(120) {
                step(&mut set, &mut store, &mut model, &mut rng);
            }
            compare(&mut set, &store, &model);
            let root = set.sync(&mut store).expect("sync");
            assert_eq!(set.dirty_bytes(), 0, "dirty after sync");
            store.next_txg();
            check_space(&store, &root);
            set = ObjectSet::open(&store, &root)
                .expect("open")
                .with_cache_limit(1 << 20);
            compare(&mut set, &store, &model);
            assert!(set.cached_bytes() <= 1 << 20);
        }
    }
}

/// Goal: trees grow to several levels and shrink their space to nothing when punched.
#[test]
fn deep_trees_grow_and_punch_back_to_holes() {
    let mut store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Volume);
    let id = set
        .allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
        .expect("allocate");
    set.set_indirect_shift(&store, id, 10).expect("shift");
    for blkid in [0u64, 9, 100, 1000] {
        set.write(&store, id, blkid * 512 + 7, &[blkid as u8 + 1; 3])
            .expect("write");
    }
    let root = set.sync(&mut store).expect("sync");
    store.next_txg();
    let info = set.object_info(&store, id).expect("info");
    assert_eq!(
        info.nlevels, 5,
        "8 pointers per indirect: 1000 blocks need 4 indirect levels"
    );
    assert_eq!(info.maxblkid, 1000);
    check_space(&store, &root);
    let mut levels = BTreeMap::new();
    set.visit_blocks(&store, &mut |_bp: &BlockPtr, context: BlockContext| {
        if context.object == id {
            *levels.entry(context.level).or_insert(0) += 1;
        }
    })
    .expect("visit");
    assert_eq!(levels.get(&0), Some(&4), "four data blocks");
    assert_eq!(levels.get(&4), Some(&1), "one root indirect block");
    let mut reopened = ObjectSet::open(&store, &root).expect("open");
    let mut byte = [0u8; 1];
    reopened
        .read(&store, id, 1000 * 512 + 8, &mut byte)
        .expect("read");
    assert_eq!(byte[0], (1000u64 as u8).wrapping_add(1));
    assert_eq!(
        reopened.next_data(&store, id, 513).expect("seek"),
        Some(9 * 512)
    );
    assert_eq!(reopened.next_hole(&store, id, 0).expect("seek"), 512);
    assert_eq!(
        reopened.next_data(&store, id, 1001 * 512).expect("seek"),
        None
    );
    reopened.free_range(&store, id, 0, u64::MAX).expect("punch");
    let root = reopened.sync(&mut store).expect("sync");
    store.next_txg();
    check_space(&store, &root);
    let info = reopened.object_info(&store, id).expect("info");
    assert_eq!(info.used_bytes, 0, "punched object uses no space");
    assert_eq!(reopened.next_data(&store, id, 0).expect("seek"), None);
}

/// Goal: a single-block object grows its block up to the record size, and a multi-block
/// object refuses.
#[test]
fn single_block_objects_change_block_size() {
    let mut store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set
        .allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
        .expect("allocate");
    set.write(&store, id, 0, b"small file").expect("write");
    set.sync(&mut store).expect("sync");
    store.next_txg();
    set.set_block_size(&store, id, 131_072).expect("grow");
    set.write(&store, id, 100_000, b"tail").expect("write");
    let root = set.sync(&mut store).expect("sync");
    store.next_txg();
    check_space(&store, &root);
    let mut set = ObjectSet::open(&store, &root).expect("open");
    let info = set.object_info(&store, id).expect("info");
    assert_eq!(
        (info.data_block_size, info.maxblkid, info.nlevels),
        (131_072, 0, 1)
    );
    let mut buf = [0u8; 10];
    set.read(&store, id, 0, &mut buf).expect("read");
    assert_eq!(&buf, b"small file");
    set.write(&store, id, 131_072, b"x").expect("second block");
    let refused = set.set_block_size(&store, id, 512);
    assert!(matches!(refused, Err(ObjectError::InvalidArgument { .. })));
}

/// Goal: an object whose block grew in the open txg can be freed in that same txg.
/// Regression (tarn-sim seed 7, 2026-11-23): a POSIX write grew a small file's block, an
/// unlink in the same txg freed the file, and the sync walked the committed tree with the
/// grown block size from the dnode in memory: "data block size does not match the dnode",
/// a failed sync and a suspended pool.
#[test]
fn an_object_freed_after_its_block_grew_frees_the_committed_blocks() {
    let mut store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set
        .allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
        .expect("allocate");
    set.write(&store, id, 0, b"small file").expect("write");
    let root = set.sync(&mut store).expect("sync");
    store.next_txg();
    check_space(&store, &root);
    set.set_block_size(&store, id, 4096).expect("grow");
    set.write(&store, id, 1000, b"more").expect("write");
    set.free_object(&store, id).expect("free");
    let root = set.sync(&mut store).expect("sync frees the 512-byte block");
    store.next_txg();
    check_space(&store, &root);
    let mut set = ObjectSet::open(&store, &root).expect("open");
    assert!(set.object_info(&store, id).is_err(), "the object is gone");
}

/// Goal: object ids are allocated lowest-first, claimed ids conflict, freed ids are reused.
#[test]
fn object_ids_allocate_claim_and_free() {
    let mut store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Mos);
    let a = set
        .allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 8)
        .expect("a");
    let b = set
        .allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
        .expect("b");
    assert_eq!((a.0, b.0), (1, 2));
    assert_eq!(set.bonus(&store, a).expect("bonus"), vec![0; 8]);
    set.claim_object(&store, ObjectId(100), OBJECT_TYPE_PLAIN, 4096, 0, 0)
        .expect("claim");
    let again = set.claim_object(&store, ObjectId(100), OBJECT_TYPE_PLAIN, 4096, 0, 0);
    assert!(matches!(again, Err(ObjectError::ObjectInUse { .. })));
    let root = set.sync(&mut store).expect("sync");
    store.next_txg();
    let mut set = ObjectSet::open(&store, &root).expect("open");
    set.free_object(&store, a).expect("free");
    assert_eq!(
        set.allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
            .expect("reuse")
            .0,
        1
    );
    assert_eq!(
        set.allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
            .expect("next")
            .0,
        3
    );
    assert_eq!(
        set.next_object(&store, ObjectId(3)).expect("next"),
        Some(ObjectId(100))
    );
    assert!(matches!(
        set.object_info(&store, ObjectId(0)),
        Err(ObjectError::NoSuchObject { .. })
    ));
    assert!(matches!(
        set.object_info(&store, ObjectId(50)),
        Err(ObjectError::NoSuchObject { .. })
    ));
    let bad = set.allocate_object(&store, OBJECT_TYPE_PLAIN, 1000, 0, 0);
    assert!(matches!(bad, Err(ObjectError::InvalidArgument { .. })));
    let root = set.sync(&mut store).expect("sync");
    check_space(&store, &root);
}

/// Goal: an allocation that may not take some free ids takes the lowest it may, and the ids
/// it passed over are the next plain allocation's (nothing is lost from the free set).
#[test]
fn allocation_passes_over_unusable_ids_without_losing_them() {
    let store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Mos);
    let shape = (OBJECT_TYPE_PLAIN, 512, 0, 0);
    for expected in 1..=5 {
        let id = set
            .allocate_object_where(&store, shape, &|_| true)
            .expect("allocate");
        assert_eq!(id.0, expected);
    }
    for id in [2, 3] {
        set.free_object(&store, ObjectId(id)).expect("free");
    }
    let skipped = set
        .allocate_object_where(&store, shape, &|id| id != 2)
        .expect("skip 2");
    assert_eq!(skipped.0, 3);
    let zap = set
        .zap_create_where(&store, OBJECT_TYPE_PLAIN, &|id| id > 5)
        .expect("zap");
    assert_eq!(zap.0, 6, "past every id at or below 5");
    let plain = set
        .allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
        .expect("plain");
    assert_eq!(plain.0, 2, "the passed-over id is found again");
    assert_eq!(
        set.allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
            .expect("next")
            .0,
        7
    );
}

/// Goal: metadata gets an extra copy and data does not, by default.
#[test]
fn metadata_gets_extra_copies() {
    let mut store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set
        .allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
        .expect("allocate");
    set.write(&store, id, 0, &[1; 4096]).expect("write");
    let root = set.sync(&mut store).expect("sync");
    assert_eq!(root.copies().count(), 2);
    set.visit_blocks(&store, &mut |bp: &BlockPtr, context: BlockContext| {
        let expected = if context.object == id && context.level == 0 {
            1
        } else {
            2
        };
        assert_eq!(bp.copies().count(), expected, "copies at {context:?}");
    })
    .expect("visit");
}

/// Goal: `redundant_metadata` picks which metadata gets the extra copy: all of it, all but
/// the level-1 indirect blocks over file data (`most`), only the object-set root and the
/// dnode blocks (`some`), none; data never.
#[test]
fn redundant_metadata_picks_the_blocks_with_extra_copies() {
    use crate::RedundantMetadata as R;
    for (setting, indirect, zap, critical) in [
        (R::All, 2, 2, 2),
        (R::Most, 1, 2, 2),
        (R::Some, 1, 1, 2),
        (R::None, 1, 1, 1),
    ] {
        let mut store = MemStore::new();
        let mut set = ObjectSet::create(ObjsetKind::Filesystem);
        let config = crate::ObjsetWriteConfig {
            redundant_metadata: setting,
            ..crate::ObjsetWriteConfig::default()
        };
        set.set_write_config(config).expect("config");
        let file = set
            .allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
            .expect("allocate");
        set.write(&store, file, 0, &[1; 8192]).expect("write");
        let dir = set.zap_create(&store, OBJECT_TYPE_PLAIN).expect("zap");
        set.zap_update_u64(&store, dir, "name", 7).expect("entry");
        let root = set.sync(&mut store).expect("sync");
        assert_eq!(root.copies().count(), critical, "{setting:?}: root");
        let mut seen = [false; 3];
        set.visit_blocks(&store, &mut |bp: &BlockPtr, at: BlockContext| {
            let expected = match (at.object, at.level) {
                (ObjectId(0), _) | (_, BlockContext::ROOT_LEVEL) => critical,
                (object, 0) if object == file => 1,
                (object, 1) if object == file => {
                    seen[0] = true;
                    indirect
                }
                (object, _) if object == dir => {
                    seen[1] = true;
                    zap
                }
                _ => return,
            };
            seen[2] |= at.object == ObjectId(0);
            assert_eq!(bp.copies().count(), expected, "{setting:?}: {at:?}");
        })
        .expect("visit");
        assert_eq!(seen, [true; 3], "{setting:?}: every kind of block visited");
    }
}

/// Goal: a ZAP holds 100k entries (fat form, many leaves), lists them incrementally, survives
/// a reopen, and shrinks back to a micro ZAP when emptied.
#[test]
fn zap_scales_to_100k_entries_and_shrinks_back() {
    let mut store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set.zap_create(&store, 20).expect("create");
    let count = 100_000u64;
    for i in 0..count {
        set.zap_insert_u64(&store, id, format!("file-{i:06}"), i)
            .expect("insert");
        if i % 25_000 == 24_999 {
            set.sync(&mut store).expect("sync");
            store.next_txg();
        }
    }
    assert_eq!(set.zap_count(&store, id).expect("count"), count);
    let root = set.sync(&mut store).expect("sync");
    store.next_txg();
    check_space(&store, &root);
    let mut set = ObjectSet::open(&store, &root).expect("open");
    for i in (0..count).step_by(997) {
        assert_eq!(
            set.zap_lookup_u64(&store, id, format!("file-{i:06}"))
                .expect("lookup"),
            Some(i)
        );
    }
    assert_eq!(set.zap_lookup(&store, id, "missing").expect("lookup"), None);
    let mut seen = HashSet::new();
    let mut cursor = None;
    loop {
        let (batch, next) = set
            .zap_list(&store, id, cursor.as_ref(), 1000)
            .expect("list");
        for (key, _) in batch {
            assert!(seen.insert(key), "listed twice");
        }
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len() as u64, count);
    for i in 0..count {
        set.zap_remove(&store, id, format!("file-{i:06}"))
            .expect("remove");
    }
    assert_eq!(set.zap_count(&store, id).expect("count"), 0);
    let root = set.sync(&mut store).expect("sync");
    store.next_txg();
    check_space(&store, &root);
    assert_eq!(
        set.next_data(&store, id, 4096).expect("seek"),
        None,
        "only block 0 remains"
    );
    let info = set.object_info(&store, id).expect("info");
    assert!(
        info.used_bytes <= 2 * 4096,
        "emptied ZAP uses {} bytes",
        info.used_bytes
    );
}

/// Goal: a ZAP cursor keeps its place while other keys are inserted and removed.
#[test]
fn zap_cursor_survives_changes() {
    let store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set.zap_create(&store, 20).expect("create");
    for i in 0..300 {
        set.zap_insert(&store, id, format!("a{i}"), &[7; 40])
            .expect("insert");
    }
    let (first, cursor) = set.zap_list(&store, id, None, 100).expect("list");
    let cursor = cursor.expect("more to come");
    for (key, _) in &first {
        set.zap_remove(&store, id, key).expect("remove listed");
    }
    let (rest, done) = set
        .zap_list(&store, id, Some(&cursor), usize::MAX)
        .expect("list");
    assert!(done.is_none());
    assert_eq!(first.len() + rest.len(), 300);
    let big = "x".repeat(256);
    let refused = set.zap_insert(&store, id, &big, b"");
    assert!(matches!(refused, Err(ObjectError::InvalidArgument { .. })));
    let refused = set.zap_insert(&store, id, "v", &[0; 1025]);
    assert!(matches!(refused, Err(ObjectError::InvalidArgument { .. })));
}

/// Regression: an object whose single block grew with `set_block_size` after a sync and was
/// then freed before the next sync made that sync fail ("data block size does not match the
/// dnode"): the free walk used the new block size against the synced root block. The POSIX
/// layer does exactly this when a small file grows and is deleted within one txg.
#[test]
fn free_after_block_size_change_syncs() {
    let mut store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set
        .allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
        .expect("allocate");
    set.write(&store, id, 0, &[5; 100]).expect("write");
    set.sync(&mut store).expect("sync");
    store.next_txg();
    set.set_block_size(&store, id, 4096).expect("grow");
    set.write(&store, id, 1000, &[6; 100]).expect("write");
    set.free_object(&store, id).expect("free");
    let root = set.sync(&mut store).expect("sync after free");
    store.next_txg();
    check_space(&store, &root);
}

/// Goal: damaged metadata reads as an error, never a panic or wrong data.
#[test]
fn damaged_blocks_are_errors() {
    let mut store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set
        .allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
        .expect("allocate");
    set.write(&store, id, 0, &[3; 2048]).expect("write");
    let root = set.sync(&mut store).expect("sync");
    store.next_txg();
    let mut data_offsets = Vec::new();
    set.visit_blocks(&store, &mut |bp: &BlockPtr, context: BlockContext| {
        if context.object == id && context.level == 0 {
            data_offsets.push(bp.dvas[0].offset);
        }
    })
    .expect("visit");
    store.corrupt_block(data_offsets[1]);
    let mut set = ObjectSet::open(&store, &root).expect("open");
    let mut buf = [0u8; 2048];
    assert!(matches!(
        set.read(&store, id, 0, &mut buf),
        Err(ObjectError::Io { .. })
    ));
    store.corrupt_block(root.dvas[0].offset);
    assert!(ObjectSet::open(&store, &root).is_err());
    let mut garbage = root;
    garbage.block_type = tarn_format::BlockType::Data;
    assert!(matches!(
        ObjectSet::open(&store, &garbage),
        Err(ObjectError::Corrupt { .. })
    ));
}

/// Goal: a store whose writes fail leaves the object set poisoned, not half-synced and usable.
#[test]
fn failed_sync_poisons_the_object_set() {
    struct Failing(MemStore);
    impl BlockStore for Failing {
        fn txg(&self) -> Txg {
            self.0.txg()
        }
        fn write_block(&mut self, _: &[u8], _: &WriteProps) -> Result<BlockPtr, ZioError> {
            Err(ZioError::NoSpace { size: 512 })
        }
        fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
            self.0.read_block(bp)
        }
        fn free_block(&mut self, bp: &BlockPtr) {
            self.0.free_block(bp);
        }
    }
    let mut store = Failing(MemStore::new());
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set
        .allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
        .expect("allocate");
    set.write(&store, id, 0, &[1; 10]).expect("write");
    assert!(matches!(set.sync(&mut store), Err(ObjectError::Io { .. })));
    assert!(matches!(
        set.write(&store, id, 0, &[1]),
        Err(ObjectError::Poisoned)
    ));
}

/// Goal: the stand-in for an object set whose root could not be read keeps that root and
/// refuses every read and change, so its owner can never write an empty set over it.
#[test]
fn an_unavailable_object_set_keeps_its_root_and_refuses_everything() {
    let mut store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set
        .allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
        .expect("allocate");
    set.write(&store, id, 0, &[7; 100]).expect("write");
    let root = set.sync(&mut store).expect("sync");
    let mut lost = ObjectSet::unavailable(&root, "every copy failed".into());
    let refused = |r: Result<(), ObjectError>| {
        assert!(
            matches!(&r, Err(ObjectError::Unavailable { why }) if why == "every copy failed"),
            "{r:?}"
        );
    };
    let mut buf = [0u8; 100];
    refused(lost.read(&store, id, 0, &mut buf));
    refused(lost.write(&store, id, 0, &[1]));
    refused(lost.object_info(&store, id).map(drop));
    refused(lost.next_object(&store, ObjectId(0)).map(drop));
    refused(
        lost.allocate_object(&store, OBJECT_TYPE_PLAIN, 512, 0, 0)
            .map(drop),
    );
    refused(lost.free_object(&store, id));
    assert_eq!(lost.dirty_bytes(), 0, "nothing became dirty");
    assert_eq!(lost.root(), root);
    assert_eq!(lost.unavailable_reason(), Some("every copy failed"));
    refused(lost.sync(&mut store).map(drop));
    assert_eq!(lost.root(), root, "a refused sync keeps the root");
}

/// Goal: inserts, same- and other-length updates and removals edit micro blocks and fat-ZAP
/// leaves in place and every block stays well-formed: a full listing (which decodes every
/// block strictly: byte totals, zeroed tails, order, prefixes) and lookups agree with a model
/// after every batch, through upgrades, splits, merges and returns to the micro form.
/// Method: 30,000 seeded random operations on 3,000 keys, then 10,000 on 25 keys (a ZAP
/// that moves between the forms), values of 0 to 300 bytes, a sync every 5,000.
#[test]
fn zap_edits_in_place_keep_every_block_well_formed() {
    zap_edits_against_a_model(3000, 30_000, 41);
    zap_edits_against_a_model(25, 10_000, 43);
}

fn zap_edits_against_a_model(keys: u64, steps: u32, seed: u64) {
    let mut store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set.zap_create(&store, 20).expect("create");
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut rng = SeededRng::new(seed);
    for step in 0..steps {
        let key = format!("key-{}", rng.below(keys)).into_bytes();
        let value = {
            let len = if rng.chance(1, 2) { 8 } else { rng.below(301) };
            let mut value = vec![0u8; len as usize];
            rng.fill(&mut value);
            value
        };
        match rng.below(10) {
            0..=3 => {
                let result = set.zap_insert(&store, id, &key, &value);
                match model.entry(key) {
                    Entry::Occupied(_) => {
                        assert!(matches!(result, Err(ObjectError::KeyExists { .. })));
                    }
                    Entry::Vacant(slot) => {
                        result.expect("insert");
                        slot.insert(value);
                    }
                }
            }
            4..=6 => {
                set.zap_update(&store, id, &key, &value).expect("update");
                model.insert(key, value);
            }
            _ => {
                let result = set.zap_remove(&store, id, &key);
                match model.remove(&key) {
                    Some(_) => result.expect("remove"),
                    None => assert!(matches!(result, Err(ObjectError::NoSuchKey { .. }))),
                }
            }
        }
        if step % 500 == 499 {
            let (listed, next) = set
                .zap_list_bytes(&store, id, None, usize::MAX)
                .expect("every leaf decodes");
            assert!(next.is_none());
            let listed: BTreeMap<Vec<u8>, Vec<u8>> = listed.into_iter().collect();
            assert_eq!(listed, model, "listing after step {step}");
            assert_eq!(
                set.zap_count(&store, id).expect("count"),
                model.len() as u64
            );
        }
        if step % 5000 == 4999 {
            set.sync(&mut store).expect("sync");
            store.next_txg();
        }
    }
    for (key, value) in &model {
        assert_eq!(
            set.zap_lookup(&store, id, key).expect("lookup").as_ref(),
            Some(value)
        );
    }
    for key in model.keys() {
        set.zap_remove(&store, id, key).expect("remove");
    }
    assert_eq!(set.zap_count(&store, id).expect("count"), 0);
}

/// Goal: `zap_add_u64` adds in place, saturates at both ends, and refuses a missing key or a
/// value that is not a u64 without changing anything.
#[test]
fn zap_add_u64_counts_in_place() {
    let store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set.zap_create(&store, 20).expect("create");
    set.zap_insert_u64(&store, id, "count", 7).expect("insert");
    set.zap_insert(&store, id, "text", b"abc").expect("insert");
    assert_eq!(set.zap_add_u64(&store, id, "count", 5).expect("add"), 12);
    assert_eq!(set.zap_add_u64(&store, id, "count", -20).expect("add"), 0);
    set.zap_update_u64(&store, id, "count", u64::MAX - 1)
        .expect("update");
    assert_eq!(
        set.zap_add_u64(&store, id, "count", 9).expect("add"),
        u64::MAX
    );
    assert!(matches!(
        set.zap_add_u64(&store, id, "missing", 1),
        Err(ObjectError::NoSuchKey { .. })
    ));
    assert!(matches!(
        set.zap_add_u64(&store, id, "text", 1),
        Err(ObjectError::Corrupt { .. })
    ));
    assert_eq!(
        set.zap_lookup(&store, id, "text").expect("lookup"),
        Some(b"abc".to_vec())
    );
    assert_eq!(
        set.zap_lookup_u64(&store, id, "count").expect("lookup"),
        Some(u64::MAX)
    );
    assert_eq!(set.zap_count(&store, id).expect("count"), 2);
}

#[test]
fn a_walk_born_after_a_txg_finds_exactly_the_newer_blocks() {
    // Goal: `visit_object_set_born_after(t)` lists exactly the blocks of a full walk born
    // after t, without reading the subtrees it skips (what snapshot destroy, rollback and
    // scrub rely on). Method: many objects, a sync, changes to a few of them, another sync;
    // compare with the full walk filtered by birth; a walk after the last txg is empty.
    let mut store = MemStore::new();
    let mut os = ObjectSet::create(ObjsetKind::Filesystem);
    let mut objects = Vec::new();
    for i in 0..40u8 {
        let id = os
            .allocate_object(&store, OBJECT_TYPE_PLAIN, 4096, 0, 0)
            .unwrap();
        os.write(&store, id, 0, &vec![i + 1; 64 << 10]).unwrap();
        objects.push(id);
    }
    os.sync(&mut store).unwrap();
    let first = store.txg();
    store.next_txg();
    os.write(&store, objects[3], 8192, &[9u8; 4096]).unwrap();
    os.write(&store, objects[30], 0, &[7u8; 100]).unwrap();
    let root = os.sync(&mut store).unwrap();
    let mut all = Vec::new();
    crate::visit_object_set(&store, &root, &mut |bp: &BlockPtr, _| all.push(*bp)).unwrap();
    let mut newer = Vec::new();
    crate::visit_object_set_born_after(&store, &root, Some(first), &mut |bp: &BlockPtr, _| {
        newer.push(*bp);
    })
    .unwrap();
    let expected: Vec<BlockPtr> = all.iter().copied().filter(|bp| bp.birth > first).collect();
    assert_eq!(newer, expected);
    assert!(
        !newer.is_empty() && newer.len() < all.len() / 4,
        "{} of {}",
        newer.len(),
        all.len()
    );
    let mut none = 0;
    crate::visit_object_set_born_after(&store, &root, Some(store.txg()), &mut |_, _| none += 1)
        .unwrap();
    assert_eq!(none, 0);
}

/// Goal: a decoded dnode kept for reads (module `dnode_cache`) is never served after a sync
/// changed its object: each change below (a rewrite that adds blocks, a truncation, a new
/// bonus, a free, the id allocated again with another block size) is synced between two
/// reads of the object, and the second read must see it. Fails when a sync leaves the
/// kept dnodes in place (the read after it then sees the dnode of before the change).
#[test]
fn kept_dnodes_never_outlive_the_sync_that_changed_them() {
    let mut store = MemStore::new();
    let mut set = ObjectSet::create(ObjsetKind::Filesystem);
    let id = set
        .allocate_object(&store, OBJECT_TYPE_PLAIN, 4096, 0, 8)
        .expect("allocate");
    set.write(&store, id, 0, &[1; 4096]).expect("write");
    let sync = |set: &mut ObjectSet, store: &mut MemStore| {
        let root = set.sync(store).expect("sync");
        store.next_txg();
        check_space(store, &root);
    };
    let read = |set: &mut ObjectSet, store: &MemStore| {
        let mut bytes = vec![0xee; 3 * 4096];
        set.read(store, id, 0, &mut bytes).expect("read");
        let info = set.object_info(store, id).expect("info");
        (info.maxblkid, bytes[0], bytes[4096], bytes[8192])
    };
    sync(&mut set, &mut store);
    assert_eq!(read(&mut set, &store), (0, 1, 0, 0));
    assert_eq!(read(&mut set, &store), (0, 1, 0, 0), "read again");
    set.write(&store, id, 4096, &[2; 8192]).expect("rewrite");
    sync(&mut set, &mut store);
    assert_eq!(read(&mut set, &store), (2, 1, 2, 2), "after the rewrite");
    set.free_range(&store, id, 4096, 8192).expect("truncate");
    sync(&mut set, &mut store);
    assert_eq!(read(&mut set, &store), (2, 1, 0, 0), "after the truncation");
    set.set_bonus(&store, id, &[9; 8]).expect("bonus");
    sync(&mut set, &mut store);
    assert_eq!(set.bonus(&store, id).expect("bonus"), vec![9; 8]);
    set.free_object(&store, id).expect("free");
    sync(&mut set, &mut store);
    assert!(matches!(
        set.object_info(&store, id),
        Err(ObjectError::NoSuchObject { .. })
    ));
    set.claim_object(&store, id, OBJECT_TYPE_PLAIN, 512, 0, 0)
        .expect("claim again");
    sync(&mut set, &mut store);
    let info = set.object_info(&store, id).expect("info");
    assert_eq!((info.data_block_size, info.maxblkid), (512, 0));
    assert_eq!(set.bonus(&store, id).expect("bonus"), Vec::<u8>::new());
}
