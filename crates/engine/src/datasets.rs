//! The dataset tree of an imported pool, in memory: every dataset's node, its local
//! properties and its open object set, with property inheritance and space accounting.
//!
//! ```text
//!  Tree ── nodes: DatasetId -> Node { name, parent, header, local props, ObjectSet }
//!           root = ROOT_DATASET_ID (MOS object 4), loaded by walking the children ZAPs
//! ```
//! The MOS is the truth; the tree mirrors it and is rebuilt at import. Changes go to both:
//! the MOS through `tarn_dataset::node`, the tree directly. At sync every object set with
//! changes is written through an accounting store that counts the bytes it allocates and
//! frees, and its node's header (new root, space counters) is rewritten in the MOS.
//!
//! Space (ZFS's model): `referenced` is what the dataset's own blocks take, deflated by the
//! parity of their vdevs; `used` adds what its refreservation holds unused and what its
//! children are charged; a child is charged `max(used, reservation)`. Space reserved but not
//! yet used is taken from what every other dataset sees as available.
//!
//! Settings cache: every filesystem request needs a few effective properties of its dataset
//! (`readonly`, `sync`, `recordsize`, `xattr`, `acltype`, `atime`, `relatime`) and its
//! per-owner quotas. Resolving them walks the inheritance chain, so `Tree::fs_settings`
//! keeps them per dataset. Everything they derive from changes only through `Tree` methods
//! (`set_local` for set, inherit and `pool create -O`; `rename_subtree`; `insert`;
//! `remove`), and each of those drops the whole cache: a property set on a parent reaches
//! every descendant, and such changes are rare. Builds with debug assertions (every test)
//! resolve again on each hit and assert the cached value is the same.
//!
//! Unavailable datasets: a dataset whose object-set root block cannot be read at import
//! (every copy and reconstruction failed) is loaded with `ObjectSet::unavailable`, which
//! keeps the root's block pointer and refuses every object call. The pool imports and every
//! other dataset works; this one cannot be mounted, read, written, snapshotted or sent (each
//! says why in one line), its header is never rewritten with another root (nothing in it
//! becomes dirty, and `sync` asserts so), its intent log is neither replayed nor freed, and
//! it can be destroyed (what lies below the lost root stays allocated: `leaked`), rolled
//! back to a snapshot, or read again after the devices are repaired and the pool imported.

use std::collections::BTreeMap;

use tarn_base::{Guid, ObjectId, Txg};
use tarn_dataset::clone::{self, Origin};
use tarn_dataset::node::{self, DatasetHeader};
use tarn_dataset::props::{self, PropKind, Source};
use tarn_dataset::snapshot::{self, NewSnapshot, Snapshot};
use tarn_format::BlockPtr;
use tarn_objects::{ObjectSet, ObjsetKind, ObjsetWriteConfig};
use tarn_posix::{AtimeMode, FsConfig};
use tarn_zio::{BlockStore, WriteProps, ZioError};

use crate::{DatasetId, EngineError, ROOT_DATASET_ID};

/// One dataset in memory.
pub(crate) struct Node {
    /// Full name (`tank/home`).
    pub(crate) name: String,
    pub(crate) parent: Option<DatasetId>,
    pub(crate) header: DatasetHeader,
    /// Locally set properties (normalized values).
    pub(crate) local: BTreeMap<String, String>,
    pub(crate) objset: ObjectSet,
    /// The header must be rewritten at the next sync even if the object set is clean.
    pub(crate) header_dirty: bool,
    /// Bytes and inodes admitted against per-owner quotas since the last sync.
    pub(crate) pending: tarn_posix::Pending,
    /// Its snapshots, oldest first (`tarn_dataset::snapshot`).
    pub(crate) snapshots: Vec<Snapshot>,
    /// A snapshot to take when the next sync has written the object set.
    pub(crate) snapshot_pending: Option<NewSnapshot>,
    /// A full receive is writing the object set: its syncs keep no per-owner counts (the
    /// stream's objects arrive in any state), which are recounted at its END (`send_ops`).
    pub(crate) receiving: bool,
    /// Its origin when it is a clone (`tarn_dataset::clone`).
    pub(crate) origin: Option<Origin>,
    /// Deflated bytes of the origin's blocks the clone let go of (`clone::origin_dead`,
    /// kept current by each sync; 0 for a dataset that is not a clone).
    pub(crate) origin_dead: u64,
}

/// Whether a dataset name is a receive's hidden one (a component starting with `%`, which
/// no valid name has): never listed, mounted or selected by `-r`.
pub(crate) fn is_hidden(name: &str) -> bool {
    name.split('/').any(|part| part.starts_with('%'))
}

impl Node {
    /// A node of a dataset read from (or just written to) the MOS, without snapshots.
    pub(crate) fn new(
        name: String,
        parent: Option<DatasetId>,
        header: DatasetHeader,
        objset: ObjectSet,
    ) -> Node {
        Node {
            name,
            parent,
            header,
            local: BTreeMap::new(),
            objset,
            header_dirty: false,
            pending: tarn_posix::Pending::default(),
            snapshots: Vec::new(),
            snapshot_pending: None,
            receiving: false,
            origin: None,
            origin_dead: 0,
        }
    }

    /// The txgs of its snapshots, ascending, after a clone's origin txg (the kill rule's
    /// input).
    pub(crate) fn snapshot_txgs(&self) -> Vec<Txg> {
        clone::kill_txgs(self.origin.as_ref(), &self.snapshots)
    }

    /// The origin's txg of a clone (blocks born up to it are the origin's), 0 otherwise.
    pub(crate) fn floor(&self) -> u64 {
        self.origin.map_or(0, |o| o.txg.0)
    }

    /// What a clone still shares with its origin (0 for other datasets).
    pub(crate) fn shared(&self) -> u64 {
        self.origin
            .map_or(0, |o| clone::shared(&o, self.origin_dead))
    }

    /// `usedbydataset`: `referenced` less what a clone shares with its origin.
    pub(crate) fn usedbydataset(&self) -> u64 {
        self.header.referenced.saturating_sub(self.shared())
    }

    /// The head's blocks born after `after` (every one with `None`), for a destroy or a
    /// rollback to free. Of an unavailable object set only its root, when born after: what
    /// lies below it cannot be found and stays allocated (ZFS's `leaked` space).
    pub(crate) fn head_blocks_born_after(
        &self,
        store: &dyn BlockStore,
        after: Option<Txg>,
    ) -> Result<Vec<BlockPtr>, EngineError> {
        let root = self.objset.root();
        if self.objset.unavailable_reason().is_some() {
            let born_after = after.is_none_or(|txg| root.birth > txg);
            return Ok(if born_after { vec![root] } else { Vec::new() });
        }
        let mut blocks = Vec::new();
        tarn_objects::visit_object_set_born_after(store, &root, after, &mut |bp, _| {
            blocks.push(*bp);
        })?;
        Ok(blocks)
    }

    /// Reads its origin and what it let go of from the MOS (after load, rollback, promote).
    pub(crate) fn load_origin(
        &mut self,
        mos: &mut ObjectSet,
        store: &dyn BlockStore,
    ) -> Result<(), EngineError> {
        self.origin = clone::load_origin(mos, store, &self.header)?;
        self.origin_dead = match self.origin {
            Some(o) => clone::origin_dead(mos, store, &self.header, &self.snapshots, o.txg)?,
            None => 0,
        };
        Ok(())
    }

    /// The snapshot called `name` (the part after `@`) and its index.
    pub(crate) fn snapshot(&self, name: &str) -> Option<(usize, &Snapshot)> {
        self.snapshots
            .iter()
            .enumerate()
            .find(|(_, s)| s.name == name)
    }
}

/// The dataset tree of one pool.
pub(crate) struct Tree {
    nodes: BTreeMap<DatasetId, Node>,
    /// Resolved filesystem settings per dataset (module doc, "Settings cache").
    settings: BTreeMap<DatasetId, FsSettings>,
    /// The pool's domain of the engine's clean-block cache, once given (`use_cache`).
    cache: Option<tarn_objects::CacheDomain>,
}

/// How a dataset's `sync` property treats modifying requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SyncMode {
    /// `standard`: logged, committed by fsync.
    Standard,
    /// `always`: logged and committed before the request returns.
    Always,
    /// `disabled`: not logged.
    Disabled,
}

/// What every filesystem request of a dataset needs from its properties, resolved once and
/// kept until a property, a name or a parent in the tree changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FsSettings {
    /// Effective `readonly=on` (the pool's own state is checked per request).
    pub(crate) readonly: bool,
    /// Effective `sync`.
    pub(crate) sync: SyncMode,
    /// Effective `logbias=throughput`: a volume's log commits write its blocks in place and
    /// log pointers to them (module `zil`).
    pub(crate) throughput: bool,
    /// The POSIX layer's settings before the read-only adjustment of `atime`.
    pub(crate) config: FsConfig,
    /// The dataset's per-owner quotas (`userquota@...`, local only).
    pub(crate) quotas: std::sync::Arc<tarn_posix::Quotas>,
}

/// Bytes of 128 KiB of data once allocated on each top-level vdev (parity and padding
/// included): the deflation table that turns allocated sizes into `used` figures.
pub(crate) type Deflate = Vec<u64>;

const DEFLATE_UNIT: u64 = 128 << 10;

/// The deflation table of a pool.
pub(crate) fn deflate_table(pool: &tarn_pool::Pool) -> Deflate {
    pool.tops()
        .iter()
        .map(|t| t.allocation_size(DEFLATE_UNIT).max(1))
        .collect()
}

/// How per-owner counts deflate allocated bytes: by the first top-level vdev's ratio, which
/// never changes for a pool (tarn_posix::UsedScale).
pub(crate) fn used_scale(deflate: &Deflate) -> tarn_posix::UsedScale {
    tarn_posix::UsedScale {
        numerator: DEFLATE_UNIT,
        denominator: deflate.first().copied().unwrap_or(DEFLATE_UNIT).max(1),
    }
}

/// A block's deflated allocated size: what it counts toward `used`.
pub(crate) fn dsize(deflate: &Deflate, bp: &BlockPtr) -> u64 {
    bp.dvas
        .iter()
        .filter(|d| d.asize > 0)
        .map(|d| {
            let alloc = deflate
                .get(d.vdev.0 as usize)
                .copied()
                .unwrap_or(DEFLATE_UNIT);
            u64::try_from(u128::from(d.asize) * u128::from(DEFLATE_UNIT) / u128::from(alloc))
                .unwrap_or(u64::MAX)
        })
        .sum()
}

/// A block store that counts what passes through it (the space a sync adds and frees).
struct Accounting<'a> {
    inner: &'a mut dyn BlockStore,
    deflate: &'a Deflate,
    referenced: i128,
    logical: i128,
    physical: i128,
}

impl Accounting<'_> {
    fn count(&mut self, bp: &BlockPtr, sign: i128) {
        if bp.is_hole() {
            return;
        }
        self.referenced += sign * i128::from(dsize(self.deflate, bp));
        self.logical += sign * i128::from(bp.lsize);
        self.physical += sign * i128::from(bp.psize);
    }
}

impl BlockStore for Accounting<'_> {
    fn txg(&self) -> Txg {
        self.inner.txg()
    }

    fn write_block(&mut self, data: &[u8], props: &WriteProps) -> Result<BlockPtr, ZioError> {
        let bp = self.inner.write_block(data, props)?;
        self.count(&bp, 1);
        Ok(bp)
    }

    fn write_block_shared(
        &mut self,
        data: &std::sync::Arc<Vec<u8>>,
        props: &WriteProps,
    ) -> Result<BlockPtr, ZioError> {
        let bp = self.inner.write_block_shared(data, props)?;
        self.count(&bp, 1);
        Ok(bp)
    }

    fn read_block(&self, bp: &BlockPtr) -> Result<Vec<u8>, ZioError> {
        self.inner.read_block(bp)
    }

    fn read_block_l2(&self, bp: &BlockPtr, feed_l2: bool) -> Result<Vec<u8>, ZioError> {
        self.inner.read_block_l2(bp, feed_l2)
    }

    fn free_block(&mut self, bp: &BlockPtr) {
        self.count(bp, -1);
        self.inner.free_block(bp);
    }

    fn keeps_freed(&self, bp: &BlockPtr) -> bool {
        self.inner.keeps_freed(bp)
    }

    /// A block written ahead and adopted counts as a write of this sync: without it a
    /// volume's `referenced` lost each such block (its old version was counted out), and
    /// a snapshot or clone took the short count (simulator seeds 5018 and 5026).
    fn adopt_block(&mut self, bp: &BlockPtr) {
        self.count(bp, 1);
        self.inner.adopt_block(bp);
    }

    /// A cloned block counts in full for the dataset that references it, as OpenZFS
    /// charges it (the pool counts it once: tarn-space `brt`).
    fn clone_block(&mut self, bp: &BlockPtr) -> Result<BlockPtr, ZioError> {
        let clone = self.inner.clone_block(bp)?;
        self.count(&clone, 1);
        Ok(clone)
    }
}

/// Writes the object set of `node` and applies what its sync allocated, freed and killed
/// to the header (and the dead list).
fn sync_objset(
    node: &mut Node,
    mos: &mut ObjectSet,
    ctx: &mut dyn BlockStore,
    deflate: &Deflate,
) -> Result<(), EngineError> {
    let txgs = node.snapshot_txgs();
    let mut kill = tarn_dataset::deadlist::KillStore::new(&mut *ctx, &txgs);
    let mut counted = Accounting {
        inner: &mut kill,
        deflate,
        referenced: 0,
        logical: 0,
        physical: 0,
    };
    // A filesystem keeps per-owner counts at sync (tarn_posix::UsedByHook). One whose
    // master node cannot be read keeps its counts as they were: a damaged filesystem must
    // not stop the pool's txgs.
    let scale = used_scale(deflate);
    // A receiving dataset is recounted at its end; a volume's object 1 is its data, not a
    // master node: neither has counts to keep.
    let mut hook = if node.receiving || node.objset.kind() == ObjsetKind::Volume {
        None
    } else {
        tarn_posix::UsedByHook::load(&mut node.objset, &*counted.inner, scale)
            .ok()
            .flatten()
    };
    let hook = hook.as_mut().map(|h| h as &mut dyn tarn_objects::SyncHook);
    let root = node.objset.sync_with(&mut counted, hook)?;
    node.pending.clear();
    let (referenced, logical, physical) = (counted.referenced, counted.logical, counted.physical);
    let dead = kill.into_dead();
    let header = &mut node.header;
    header.objset = root;
    header.referenced = apply_delta(header.referenced, referenced);
    header.logical = apply_delta(header.logical, logical);
    header.physical = apply_delta(header.physical, physical);
    if !dead.is_empty() {
        assert!(
            header.snap.is_present(),
            "S4: only a dataset with snapshots keeps killed blocks"
        );
        let sizer = |bp: &BlockPtr| dsize(deflate, bp);
        let floor = node.origin.map_or(0, |o| o.txg.0);
        for (key, bps) in dead {
            let list = header.snap.deadlist;
            let added = tarn_dataset::deadlist::insert(mos, &*ctx, list, key, &bps, &sizer)
                .map_err(corrupt)?;
            // A clone's buckets up to its origin's txg hold the origin's blocks: not its
            // snapshots' space, but no longer shared (tarn_dataset::clone).
            if key <= floor {
                node.origin_dead += added.used;
            } else {
                header.snap.used += added.used;
            }
        }
    }
    Ok(())
}

fn apply_delta(value: u64, delta: i128) -> u64 {
    u64::try_from((i128::from(value) + delta).max(0)).unwrap_or(u64::MAX)
}

fn corrupt(e: tarn_dataset::DatasetError) -> EngineError {
    EngineError::from(e)
}

impl Tree {
    /// The tree of a new pool: its root dataset, already a formatted empty filesystem.
    pub(crate) fn create(
        mos: &mut ObjectSet,
        store: &dyn BlockStore,
        pool_name: &str,
        now: u64,
        guid: Guid,
    ) -> Result<Tree, EngineError> {
        let header = DatasetHeader {
            creation_time: now,
            creation_txg: store.txg(),
            guid,
            ..DatasetHeader::default()
        };
        let id = node::create_node(mos, store, Some(ObjectId(ROOT_DATASET_ID.0)), header)
            .map_err(corrupt)?;
        let header = node::read_header(mos, store, id).map_err(corrupt)?;
        let mut tree = Tree {
            nodes: BTreeMap::new(),
            settings: BTreeMap::new(),
            cache: None,
        };
        let mut node = Node::new(
            pool_name.to_string(),
            None,
            header,
            ObjectSet::create(ObjsetKind::Filesystem),
        );
        node.header_dirty = true;
        tree.nodes.insert(ROOT_DATASET_ID, node);
        Ok(tree)
    }

    /// Loads the tree of an imported pool from its MOS.
    pub(crate) fn load(
        mos: &mut ObjectSet,
        store: &dyn BlockStore,
        pool_name: &str,
    ) -> Result<Tree, EngineError> {
        let mut tree = Tree {
            nodes: BTreeMap::new(),
            settings: BTreeMap::new(),
            cache: None,
        };
        let mut pending = vec![(ROOT_DATASET_ID, None, pool_name.to_string())];
        while let Some((id, parent, name)) = pending.pop() {
            if tree.nodes.contains_key(&id) || tree.nodes.len() > 1 << 20 {
                return Err(EngineError::Corrupt(format!(
                    "dataset {name} appears twice in the dataset tree"
                )));
            }
            let header = node::read_header(mos, store, ObjectId(id.0)).map_err(corrupt)?;
            let local = node::local_props(mos, store, &header).map_err(corrupt)?;
            for (child, child_id) in node::children(mos, store, &header).map_err(corrupt)? {
                pending.push((DatasetId(child_id.0), Some(id), format!("{name}/{child}")));
            }
            let objset = if header.objset.is_hole() {
                ObjectSet::create(ObjsetKind::Filesystem)
            } else {
                // A root block no copy of which reads costs this dataset, not the pool
                // (module doc, "Unavailable datasets").
                ObjectSet::open(store, &header.objset)
                    .unwrap_or_else(|e| ObjectSet::unavailable(&header.objset, e.to_string()))
            };
            let mut node = Node::new(name, parent, header, objset);
            node.local = local;
            // A receive's hidden dataset left by `receive -s` (or a crash) is still partial.
            node.receiving = is_hidden(&node.name);
            node.snapshots = snapshot::load(mos, store, &header).map_err(corrupt)?;
            node.load_origin(mos, store)?;
            tree.nodes.insert(id, node);
        }
        let ids: Vec<DatasetId> = tree.nodes.keys().copied().collect();
        for id in ids {
            tree.apply_objset_config(id)?;
        }
        Ok(tree)
    }

    /// Refuses a dataset whose object set could not be opened at import (module doc,
    /// "Unavailable datasets").
    pub(crate) fn check_available(&self, id: DatasetId) -> Result<(), EngineError> {
        let node = self.node(id);
        match node.objset.unavailable_reason() {
            None => Ok(()),
            Some(why) => Err(EngineError::DatasetUnavailable {
                name: node.name.clone(),
                why: why.to_string(),
            }),
        }
    }

    pub(crate) fn node(&self, id: DatasetId) -> &Node {
        self.nodes.get(&id).expect("dataset id from this tree")
    }

    pub(crate) fn node_mut(&mut self, id: DatasetId) -> &mut Node {
        self.nodes.get_mut(&id).expect("dataset id from this tree")
    }

    pub(crate) fn contains(&self, id: DatasetId) -> bool {
        self.nodes.contains_key(&id)
    }

    /// The hidden children of `id`: partial receives (`send_ops`), destroyed with it.
    pub(crate) fn hidden_children(&self, id: DatasetId) -> Vec<DatasetId> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.parent == Some(id) && is_hidden(&n.name))
            .map(|(child, _)| *child)
            .collect()
    }

    /// [`Tree::by_name`] for a verb: a name that is not a dataset is `NoSuchDataset`.
    pub(crate) fn lookup(&self, name: &str) -> Result<DatasetId, EngineError> {
        self.by_name(name).ok_or(EngineError::NoSuchDataset)
    }

    /// The dataset called `name`.
    pub(crate) fn by_name(&self, name: &str) -> Option<DatasetId> {
        self.nodes
            .iter()
            .find(|(_, n)| n.name == name)
            .map(|(id, _)| *id)
    }

    /// Children of `id`, sorted by name.
    pub(crate) fn children(&self, id: DatasetId) -> Vec<DatasetId> {
        let mut children: Vec<(&str, DatasetId)> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.parent == Some(id) && !is_hidden(&n.name))
            .map(|(child, n)| (n.name.as_str(), *child))
            .collect();
        children.sort_unstable();
        children.into_iter().map(|(_, child)| child).collect()
    }

    /// `id` and its descendants, parents first, with their depth below `id`.
    pub(crate) fn subtree(&self, id: DatasetId) -> Vec<(DatasetId, usize)> {
        let mut out = Vec::new();
        let mut stack = vec![(id, 0)];
        while let Some((next, depth)) = stack.pop() {
            out.push((next, depth));
            for child in self.children(next).into_iter().rev() {
                stack.push((child, depth + 1));
            }
        }
        out
    }

    /// `id` alone, or with `recursive` `id` and every descendant, parents first (what a
    /// verb's `-r` selects).
    pub(crate) fn selected(&self, id: DatasetId, recursive: bool) -> Vec<DatasetId> {
        match recursive {
            true => self.subtree(id).into_iter().map(|(d, _)| d).collect(),
            false => vec![id],
        }
    }

    /// Every dataset, parents first, siblings by name; a receive's hidden datasets last
    /// (their blocks count for scrub, the leak check and a space rebuild; callers that list
    /// or mount skip them by name, `is_hidden`).
    pub(crate) fn all(&self) -> Vec<DatasetId> {
        let mut out: Vec<DatasetId> = self
            .subtree(ROOT_DATASET_ID)
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        out.extend(
            self.nodes
                .iter()
                .filter(|(_, n)| is_hidden(&n.name))
                .map(|(id, _)| *id),
        );
        out
    }

    /// Reads every dataset's origin again (after `promote` moved snapshots between
    /// datasets).
    pub(crate) fn reload_origins(
        &mut self,
        mos: &mut ObjectSet,
        store: &dyn BlockStore,
    ) -> Result<(), EngineError> {
        for node in self.nodes.values_mut() {
            node.load_origin(mos, store)?;
        }
        Ok(())
    }

    /// `id` and its ancestors up to the root.
    pub(crate) fn lineage(&self, id: DatasetId) -> Vec<DatasetId> {
        let mut out = vec![id];
        let mut at = id;
        while let Some(parent) = self.node(at).parent {
            out.push(parent);
            at = parent;
        }
        out
    }

    pub(crate) fn insert(&mut self, id: DatasetId, node: Node) {
        assert!(self.nodes.insert(id, node).is_none(), "dataset id reused");
        self.settings.clear();
    }

    pub(crate) fn remove(&mut self, id: DatasetId) -> Option<Node> {
        // An id may come back (MOS object numbers are reused): nothing of the old dataset
        // may stay cached under it.
        self.settings.clear();
        self.nodes.remove(&id)
    }

    /// Moves `id` under `new_parent` and renames it and its descendants from `old` to `new`
    /// (full names), hidden ones too (a receive's partial state, or a held new dataset below
    /// a held new parent being published: `receive_atomic`); what they inherit may change,
    /// so the settings cache is dropped.
    pub(crate) fn rename_subtree(
        &mut self,
        id: DatasetId,
        new_parent: DatasetId,
        old: &str,
        new: &str,
    ) {
        assert!(
            self.node(id).name == old,
            "rename of {old} names another dataset"
        );
        self.settings.clear();
        let moved = self.node_mut(id);
        moved.parent = Some(new_parent);
        moved.header.parent = ObjectId(new_parent.0);
        moved.header_dirty = true;
        let mut below = vec![id];
        while let Some(at) = below.pop() {
            below.extend(self.children(at));
            below.extend(self.hidden_children(at));
            let node = self.node_mut(at);
            node.name = format!("{new}{}", &node.name[old.len()..]);
        }
    }

    /// The filesystem settings of `id`, from the cache when nothing changed since they were
    /// resolved. Every request through `Engine::fs_op` asks, so this must not walk the tree;
    /// builds with debug assertions resolve again and compare, which checks every
    /// invalidation path on every request of every test.
    pub(crate) fn fs_settings(&mut self, id: DatasetId) -> FsSettings {
        if let Some(cached) = self.settings.get(&id) {
            debug_assert_eq!(
                *cached,
                self.resolve_settings(id),
                "stale settings of dataset {}",
                self.node(id).name
            );
            return cached.clone();
        }
        let settings = self.resolve_settings(id);
        self.settings.insert(id, settings.clone());
        settings
    }

    /// Resolves the filesystem settings of `id` through the inheritance chain.
    fn resolve_settings(&self, id: DatasetId) -> FsSettings {
        let sync = match self.effective(id, "sync").0.as_str() {
            "always" => SyncMode::Always,
            "disabled" => SyncMode::Disabled,
            _ => SyncMode::Standard,
        };
        FsSettings {
            readonly: self.effective(id, "readonly").0 == "on",
            sync,
            throughput: self.effective(id, "logbias").0 == "throughput",
            config: self.fs_config(id),
            quotas: std::sync::Arc::new(crate::userspace::quotas_of(self.node(id))),
        }
    }

    /// A property's effective normalized value and its source. Statistics are not resolved
    /// here (the engine computes them).
    pub(crate) fn effective(&self, id: DatasetId, name: &str) -> (String, Source) {
        let user = props::is_user_prop(name);
        let def = props::find(name);
        let inherit = user || def.is_some_and(|d| d.inherit);
        for (depth, at) in self.lineage(id).into_iter().enumerate() {
            if depth > 0 && !inherit {
                break;
            }
            let node = self.node(at);
            if let Some(value) = node.local.get(name) {
                let source = if depth == 0 {
                    Source::Local
                } else {
                    Source::Inherited(node.name.clone())
                };
                if name == "mountpoint" && depth > 0 {
                    return (
                        inherited_mountpoint(value, &node.name, &self.node(id).name),
                        source,
                    );
                }
                return (value.clone(), source);
            }
        }
        if user {
            return ("-".into(), Source::None);
        }
        if name == "mountpoint" {
            return (format!("/{}", self.node(id).name), Source::Default);
        }
        (def.map_or("", |d| d.default).to_string(), Source::Default)
    }

    /// How the object set of `id` writes blocks (compression, checksum, copies).
    pub(crate) fn write_config(&self, id: DatasetId) -> ObjsetWriteConfig {
        props::write_config(
            &self.effective(id, "compression").0,
            &self.effective(id, "checksum").0,
            &self.effective(id, "copies").0,
            &self.effective(id, "special_small_blocks").0,
            &self.effective(id, "redundant_metadata").0,
        )
    }

    /// Makes every object set of the tree, and every one added later, read through `domain`
    /// of the engine's shared clean-block cache.
    pub(crate) fn use_cache(&mut self, domain: tarn_objects::CacheDomain) {
        for node in self.nodes.values_mut() {
            node.objset.use_cache(&domain);
        }
        self.cache = Some(domain);
    }

    /// Ends every read-ahead batch of the pool's cache domain (run here or waited for), so
    /// that none still holds a reader of its devices: before they close (export, destroy).
    pub(crate) fn finish_reads_ahead(&self) {
        if let Some(domain) = &self.cache {
            domain.finish_reads_ahead();
        }
    }

    /// Gives the object set of `id` its effective write config and cache policies
    /// (`primarycache`, `secondarycache`), after a property change anywhere above it.
    pub(crate) fn apply_objset_config(&mut self, id: DatasetId) -> Result<(), EngineError> {
        let config = self.write_config(id);
        let policy = tarn_objects::CachePolicy::parse(&self.effective(id, "primarycache").0);
        let secondary = tarn_objects::CachePolicy::parse(&self.effective(id, "secondarycache").0);
        let domain = self.cache.clone();
        let objset = &mut self.node_mut(id).objset;
        if let Some(domain) = &domain {
            objset.use_cache(domain);
        }
        objset.set_cache_policy(policy);
        objset.set_secondary_cache_policy(secondary);
        Ok(objset.set_write_config(config)?)
    }

    /// The POSIX layer's settings for `id`.
    pub(crate) fn fs_config(&self, id: DatasetId) -> FsConfig {
        FsConfig {
            recordsize: self
                .effective(id, "recordsize")
                .0
                .parse()
                .unwrap_or(128 << 10),
            xattr: self.effective(id, "xattr").0 == "on",
            acl: self.effective(id, "acltype").0 == "posix",
            atime: match (
                self.effective(id, "atime").0.as_str(),
                self.effective(id, "relatime").0.as_str(),
            ) {
                ("off", _) => AtimeMode::Off,
                (_, "off") => AtimeMode::Strict,
                _ => AtimeMode::Relative,
            },
        }
    }

    /// A size property's value in bytes (0 when unset).
    pub(crate) fn size_prop(&self, id: DatasetId, name: &str) -> u64 {
        debug_assert!(props::find(name).is_some_and(|d| d.kind == PropKind::Quota));
        self.effective(id, name).0.parse().unwrap_or(0)
    }

    /// Dirty bytes of every object set.
    pub(crate) fn dirty_bytes(&self) -> u64 {
        self.nodes.values().map(|n| n.objset.dirty_bytes()).sum()
    }

    /// Dirty bytes of `id` and its descendants.
    pub(crate) fn dirty_bytes_under(&self, id: DatasetId) -> u64 {
        let below: u64 = self
            .charged_children(id)
            .map(|c| self.dirty_bytes_under(c))
            .sum();
        self.node(id).objset.dirty_bytes() + below
    }

    /// The datasets `id`'s `usedbychildren` is made of: its children and its partial
    /// receives (hidden), which are charged to it as ZFS's `%recv` is: their blocks are
    /// allocated, and the quotas above them must see them.
    fn charged_children(&self, id: DatasetId) -> impl Iterator<Item = DatasetId> {
        self.children(id)
            .into_iter()
            .chain(self.hidden_children(id))
    }

    /// Writes every changed object set and rewrites the headers of changed nodes. A dataset
    /// with snapshots writes through the kill rule (`tarn_dataset::deadlist::KillStore`):
    /// what a snapshot still holds goes to its dead list instead of being freed. A snapshot
    /// asked for is taken once its object set is written, in the same txg.
    pub(crate) fn sync(
        &mut self,
        mos: &mut ObjectSet,
        ctx: &mut dyn BlockStore,
        deflate: &Deflate,
    ) -> Result<(), EngineError> {
        for (id, node) in &mut self.nodes {
            let changed = node.objset.dirty_bytes() > 0 || node.objset.root().is_hole();
            assert!(
                !changed || node.objset.unavailable_reason().is_none(),
                "U1: an unavailable object set never changes"
            );
            if changed {
                sync_objset(node, mos, ctx, deflate)?;
            }
            if let Some(new) = node.snapshot_pending.take() {
                let object = ObjectId(id.0);
                let taken =
                    snapshot::take(mos, &*ctx, object, &mut node.header, &new).map_err(corrupt)?;
                node.snapshots.push(taken);
                node.header_dirty = true;
            }
            if changed || node.header_dirty {
                node::write_header(mos, &*ctx, ObjectId(id.0), &node.header).map_err(corrupt)?;
                node.header_dirty = false;
            }
        }
        Ok(())
    }

    /// Sets (`Some`) or removes (`None`) a local property of `id` (value already
    /// validated), in the MOS and here, and refreshes the write settings of the object sets
    /// that inherit it.
    pub(crate) fn set_local(
        &mut self,
        mos: &mut ObjectSet,
        store: &dyn BlockStore,
        id: DatasetId,
        name: &str,
        value: Option<&str>,
    ) -> Result<(), EngineError> {
        let node = self.node_mut(id);
        node::set_local_prop(mos, store, &node.header, name, value).map_err(corrupt)?;
        match value {
            Some(value) => node.local.insert(name.to_string(), value.to_string()),
            None => node.local.remove(name),
        };
        // Inherited by the whole subtree: drop every dataset's settings, not only `id`'s.
        self.settings.clear();
        for (at, _) in self.subtree(id) {
            self.apply_objset_config(at)?;
        }
        Ok(())
    }

    // ---- space accounting (module doc) ----

    fn usedbyrefreservation(&self, id: DatasetId) -> u64 {
        self.size_prop(id, "refreservation")
            .saturating_sub(self.node(id).usedbydataset())
    }

    /// `usedbychildren`: what the children are charged.
    pub(crate) fn usedbychildren(&self, id: DatasetId) -> u64 {
        self.charged_children(id).map(|c| self.charged(c)).sum()
    }

    /// `used`.
    pub(crate) fn used(&self, id: DatasetId) -> u64 {
        let node = self.node(id);
        node.usedbydataset()
            + node.header.snap.used
            + self.usedbyrefreservation(id)
            + self.usedbychildren(id)
    }

    /// What `id` takes from its parent: its use, or its reservation if larger.
    fn charged(&self, id: DatasetId) -> u64 {
        self.used(id).max(self.size_prop(id, "reservation"))
    }

    /// What `id`'s reservation holds beyond its use (`charged - used`). Without a
    /// reservation it is zero and `used`, which walks the whole subtree, is not computed:
    /// admission asks this for every ancestor of every write.
    fn reservation_headroom(&self, id: DatasetId) -> u64 {
        match self.size_prop(id, "reservation") {
            0 => 0,
            reservation => reservation.saturating_sub(self.used(id)),
        }
    }

    /// Reserved space of `id` not yet used (its own reservation headroom plus its unused
    /// refreservation).
    fn headroom(&self, id: DatasetId) -> u64 {
        self.reservation_headroom(id) + self.usedbyrefreservation(id)
    }

    /// Space reserved across the pool but not allocated.
    fn reserved_unused(&self) -> u64 {
        self.nodes.keys().map(|id| self.headroom(*id)).sum()
    }

    /// `available`, given the pool's free space (deflated, slop already taken off).
    pub(crate) fn available(&self, id: DatasetId, pool_free: u64) -> u64 {
        let mut avail = pool_free.saturating_sub(self.reserved_unused());
        for at in self.lineage(id) {
            avail = avail.saturating_add(self.reservation_headroom(at));
        }
        avail = avail.saturating_add(self.usedbyrefreservation(id));
        let refquota = self.size_prop(id, "refquota");
        if refquota > 0 {
            avail = avail.min(refquota.saturating_sub(self.node(id).header.referenced));
        }
        for at in self.lineage(id) {
            let quota = self.size_prop(at, "quota");
            if quota > 0 {
                avail = avail.min(quota.saturating_sub(self.used(at)));
            }
        }
        avail
    }

    /// Checks that `len` more bytes written into `id` stay within every quota that applies.
    pub(crate) fn check_quota(&self, id: DatasetId, len: u64) -> Result<(), EngineError> {
        let refquota = self.size_prop(id, "refquota");
        let own = self.node(id).objset.dirty_bytes();
        if refquota > 0 && self.node(id).header.referenced + own + len > refquota {
            return Err(EngineError::QuotaExceeded);
        }
        for at in self.lineage(id) {
            let quota = self.size_prop(at, "quota");
            if quota > 0 && self.used(at) + self.dirty_bytes_under(at) + len > quota {
                return Err(EngineError::QuotaExceeded);
            }
        }
        Ok(())
    }
}

/// The mountpoint a dataset inherits from `ancestor` whose value is `value`: the ancestor's
/// path with the rest of the name appended (`none` and `legacy` pass down unchanged).
fn inherited_mountpoint(value: &str, ancestor: &str, name: &str) -> String {
    if value == "none" || value == "legacy" {
        return value.to_string();
    }
    let rest = name.strip_prefix(ancestor).unwrap_or("");
    let base = value.trim_end_matches('/');
    format!("{base}{rest}")
}

#[cfg(test)]
mod tests {
    use super::inherited_mountpoint;

    #[test]
    fn mountpoints_inherit_with_the_relative_path() {
        assert_eq!(
            inherited_mountpoint("/mnt/t", "tank", "tank/a/b"),
            "/mnt/t/a/b"
        );
        assert_eq!(inherited_mountpoint("/", "tank", "tank/a"), "/a");
        assert_eq!(inherited_mountpoint("none", "tank", "tank/a"), "none");
    }
}
