//! Damage met by a read, reported at once rather than by the next scrub.
//!
//! A block that no copy or reconstruction verifies, on vdevs that still have their devices
//! (damage, not a pool cut off from missing disks, which `suspend` handles), enters the
//! persistent error log as soon as a reader meets it and posts an `ereport.fs.zfs.data`
//! event, so `status -v` names the file and `events` shows it before any scrub runs. The
//! leaves that served the block's columns have counted checksum errors already (tarn-vdev),
//! which `events` reports as `ereport.fs.zfs.checksum`. A later scrub that no longer finds
//! the block (the file was deleted or rewritten) drops the entry, as for what a scrub found.
//!
//! [`Engine::block_placement`] says where a lost block's copies lay on the devices, and
//! [`EngineError::lost_copies`] which block an error lost: together they let the simulator
//! check that a loss sits where the devices were damaged, beyond what its vdev tolerates.

use std::ops::Range;

use tarn_format::Dva;
use tarn_format::objset::DNODE_BLOCK_SIZE;
use tarn_objects::{META_DNODE_OBJECT, ObjectError};

use crate::events::Event;
use crate::fs::DatasetId;
use crate::suspend::{missing_beyond, object_error, unreadable_block};
use crate::{Engine, EngineError, Imported};

/// One child's share of a block copy: the paths of the leaves that hold it (two while a
/// replace or a spare is attached) and the byte range on each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildShare {
    /// Leaf paths (a distributed spare by its name, `draid2-0-0`).
    pub leaves: Vec<String>,
    /// Device bytes, labels counted.
    pub range: Range<u64>,
    /// No member serves reads now (faulted, offline, removed), or one is being resilvered:
    /// the range may lack writes of its time away.
    pub impaired: bool,
}

/// Where one copy (DVA) of a block lies, and how many of its children the vdev survives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockPlacement {
    /// Children the copy's vdev can lose (mirror n-1, raidz p, disk 0).
    pub tolerated: usize,
    /// The children holding part of the copy.
    pub children: Vec<ChildShare>,
}

impl EngineError {
    /// The copies of the block this error lost: a block the I/O pipeline could read from
    /// no copy and no reconstruction, on the devices; `None` for any other error, and for
    /// a block bad in itself (born after the txg read).
    #[must_use]
    pub fn lost_copies(&self) -> Option<&[Dva]> {
        unreadable_block(self).filter(|copies| !copies.is_empty())
    }
}

impl Engine {
    /// Where copy `dva` of a block of pool `pool` lies on its leaves (what `zdb -R` works
    /// out by hand).
    pub fn block_placement(&self, pool: &str, dva: &Dva) -> Result<BlockPlacement, EngineError> {
        let handle = self.pool(pool)?;
        let inner = handle.lock();
        let invalid = |why: String| EngineError::InvalidArgument(format!("DVA {dva:?}: {why}"));
        let top = inner
            .pool
            .tops()
            .get(dva.vdev.0 as usize)
            .cloned()
            .ok_or_else(|| invalid("no such vdev".into()))?;
        let placement = top
            .placement(dva.offset, dva.asize)
            .map_err(|e| invalid(e.to_string()))?;
        let children = top.children();
        Ok(BlockPlacement {
            tolerated: top.layout().tolerated(children.len()),
            children: placement
                .into_iter()
                .map(|(child, range)| {
                    let child = &children[child];
                    ChildShare {
                        leaves: child.members().iter().map(|l| l.path()).collect(),
                        range,
                        impaired: !child.is_readable() || child.needs_resilver(),
                    }
                })
                .collect(),
        })
    }

    /// Records `error` met reading `dataset` of pool `pool` when it is damage (see the
    /// module doc); does nothing for any other error.
    pub(crate) fn note_damage(
        &self,
        pool: &str,
        inner: &mut Imported,
        dataset: DatasetId,
        error: &EngineError,
    ) {
        let Some(vdevs) = unreadable_block(error) else {
            return;
        };
        if !missing_beyond(&inner.pool, vdevs).is_empty() {
            return;
        }
        let Some((object, offset)) = failed_at(error) else {
            return;
        };
        let blkid = offset / block_size(inner, dataset, object);
        let key = format!("data/{}/{}/0/{blkid}", dataset.0, object.0);
        if !inner.pool.readonly() && inner.datasets.contains(dataset) {
            let Imported { pool, mos, .. } = inner;
            // A failure to log is not the reader's error: it still gets its EIO, and the
            // next scrub finds the block.
            let _ = mos.errlog_add(&pool.reader(), &key, pool.open_txg());
        }
        let payload = vec![
            ("zio_objset".to_string(), dataset.0.to_string()),
            ("zio_object".to_string(), object.0.to_string()),
            ("zio_level".to_string(), "0".to_string()),
            ("zio_blkid".to_string(), blkid.to_string()),
            ("zio_offset".to_string(), offset.to_string()),
        ];
        let now = self.clock.now_unix_secs();
        let mut log = self.events.lock().expect("event lock poisoned");
        // The checksum ereports of the leaves that served the block come first, as in ZFS.
        for leaf in inner.pool.tops().iter().flat_map(|t| t.leaves()) {
            log.counters(pool, &leaf, now);
        }
        log.post(Event {
            eid: 0,
            time: now,
            class: "ereport.fs.zfs.data".to_string(),
            pool: pool.to_string(),
            vdev_guid: 0,
            vdev_path: String::new(),
            payload,
        });
    }
}

impl Imported {
    /// At a writable import: every dataset whose object set could not be opened
    /// (`datasets`, "Unavailable datasets") enters the persistent error log under the key
    /// a scrub gives an object set it could not walk, so `status -v` names it at once; a
    /// scrub that reads it again (the devices repaired) drops the entry.
    pub(crate) fn log_unavailable(&mut self) {
        let root = tarn_objects::BlockContext::ROOT_LEVEL;
        for id in self.datasets.all() {
            if self.datasets.check_available(id).is_ok() {
                continue;
            }
            let key = format!("data/{}/0/{root}/0", id.0);
            let Imported { pool, mos, .. } = self;
            // A failure to log leaves the dataset refusing every call all the same.
            let _ = mos.errlog_add(&pool.reader(), &key, pool.open_txg());
        }
    }
}

/// The object and byte offset an unreadable block belongs to.
fn failed_at(error: &EngineError) -> Option<(tarn_base::ObjectId, u64)> {
    match object_error(error)? {
        ObjectError::Io { object, offset, .. } => Some((*object, *offset)),
        _ => None,
    }
}

/// The data block size of `object` (dnode blocks for the meta-dnode); 128 KiB when the
/// dnode itself cannot be read.
fn block_size(inner: &mut Imported, dataset: DatasetId, object: tarn_base::ObjectId) -> u64 {
    if object == META_DNODE_OBJECT {
        return u64::from(DNODE_BLOCK_SIZE);
    }
    if !inner.datasets.contains(dataset) {
        return 128 << 10;
    }
    let Imported { pool, datasets, .. } = inner;
    let objset = &mut datasets.node_mut(dataset).objset;
    objset
        .object_info(&pool.reader(), object)
        .map_or(128 << 10, |info| u64::from(info.data_block_size).max(512))
}
