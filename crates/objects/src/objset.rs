//! [`ObjectSet`]: the in-memory state of one object set (its meta-dnode, the objects changed
//! since the last sync, the clean-block cache) and the sync that turns it into a new root.

use crate::accounting::{SyncHook, UsedChange};
use crate::cache::BlockCache;
use crate::dnode_cache::DnodeCache;
use crate::readahead::{self, Fetch, Streams};
use crate::tree::{self, Dirty, ObjState, ReadCtx, TreeWalk};
use crate::{BlockContext, DnodeInfo, ObjectError, ObjsetWriteConfig, ReadOut, SyncEstimate};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use tarn_base::limits::BLOCK_SIZE_MAX;
use tarn_base::{ObjectId, Txg};
use tarn_format::dnode::{
    DNODE_BONUS_MAX, DNODE_FLAG_METADATA, DNODE_SIZE, Dnode, INDIRECT_SHIFT_DEFAULT,
    INDIRECT_SHIFT_MAX, INDIRECT_SHIFT_MIN, OBJECT_TYPE_META_DNODE, OBJECT_TYPE_NONE,
};
use tarn_format::objset::{
    DNODE_BLOCK_SIZE, DNODES_PER_BLOCK, OBJSET_PHYS_SIZE, ObjsetKind, ObjsetPhys,
};
use tarn_format::{BlockPtr, BlockType, ChecksumKind, CompressSetting};
use tarn_zio::{BlockStore, WriteProps};

/// Object ids are below this bound (ZFS's `DN_MAX_OBJECT`), so that the meta-dnode's tree
/// stays within its depth limit.
pub const OBJECT_ID_LIMIT: u64 = 1 << 48;
/// The meta-dnode's object id.
pub const META_DNODE_OBJECT: ObjectId = ObjectId(0);
/// Default byte limit of the clean-block cache.
pub const CACHE_BYTES_DEFAULT: u64 = 64 << 20;
/// Most blocks [`ObjectSet::write_ahead_all`] hands the store at once: enough to keep every
/// device busy (several batches of `BLOCKS_IN_FLIGHT_MAX`), few enough that their
/// compressed copies stay a small bound on memory.
pub const WRITE_AHEAD_BATCH: usize = 4 * tarn_base::limits::BLOCKS_IN_FLIGHT_MAX;

const _: () = assert!(OBJECT_ID_LIMIT / DNODES_PER_BLOCK < 1 << 50);

/// A dnode slot changed since the last sync.
#[derive(Debug)]
enum Slot {
    /// Freed: the slot is zeroed at sync.
    Free,
    /// Allocated (new or changed).
    Live(Box<ObjState>),
}

/// A whole dirty record taken for a pre-write ([`ObjectSet::prewrite_candidates`]): where it
/// is, a reference to its bytes (the identity [`ObjectSet::adopt_prewritten`] checks) and
/// the properties to write it with.
#[derive(Debug, Clone)]
pub struct PrewriteBlock {
    /// The object.
    pub object: ObjectId,
    /// The level-0 block.
    pub blkid: u64,
    /// The record's bytes as they were taken (shared with the dirty record).
    pub bytes: Arc<Vec<u8>>,
    /// What the sync would write it with.
    pub props: WriteProps,
}

/// One object set in memory. Changes stay in memory until [`ObjectSet::sync`].
#[derive(Debug)]
pub struct ObjectSet {
    kind: ObjsetKind,
    meta: ObjState,
    hot: BTreeMap<u64, Slot>,
    pending_frees: Vec<(ObjectId, Dnode)>,
    root: BlockPtr,
    pub(crate) cache: BlockCache,
    /// Decoded dnodes of objects not changed since the last sync (module `dnode_cache`).
    dnodes: DnodeCache,
    /// Sequential readers, for read-ahead (`readahead`).
    streams: Streams,
    config: ObjsetWriteConfig,
    dirty_bytes: u64,
    /// Sum of the changed objects' [`ObjState::estimate`] (kept in step by `mutate`).
    estimate: SyncEstimate,
    alloc_cursor: u64,
    poisoned: bool,
    /// Why the root block could not be read at open ([`ObjectSet::unavailable`]).
    unavailable: Option<String>,
}

fn invalid(object: ObjectId, what: &'static str, value: u64) -> ObjectError {
    ObjectError::InvalidArgument {
        object,
        what,
        value,
    }
}

fn check_block_size(object: ObjectId, size: u32) -> Result<(), ObjectError> {
    let size64 = u64::from(size);
    if !(512..=BLOCK_SIZE_MAX).contains(&size64) || !size64.is_multiple_of(512) {
        return Err(invalid(object, "data block size", size64));
    }
    Ok(())
}

/// The dirty bytes of block `blkid` of `state` for a write ahead of the sync: a whole dirty
/// block as it is, pieces merged over their base (read through `cache`); `None` for a
/// block without dirty data.
fn dirty_block_bytes<'s>(
    cache: &mut BlockCache,
    store: &dyn BlockStore,
    object: ObjectId,
    state: &'s ObjState,
    blkid: u64,
) -> Result<Option<Cow<'s, [u8]>>, ObjectError> {
    match state.dirty.get(&blkid) {
        Some(Dirty::Data(bytes)) => Ok(Some(Cow::Borrowed(bytes))),
        Some(Dirty::Pieces(pieces)) => {
            let mut ctx = ReadCtx {
                store,
                cache,
                object,
            };
            let bytes = tree::merge_pieces(&mut ctx, &state.dnode, blkid, pieces)?;
            Ok(Some(Cow::Owned(bytes)))
        }
        _ => Ok(None),
    }
}

/// Reads the dnode of `id` from the meta-dnode's data (not counting unsynced changes).
fn load_dnode(
    meta: &ObjState,
    cache: &mut BlockCache,
    store: &dyn BlockStore,
    id: ObjectId,
) -> Result<Dnode, ObjectError> {
    let mut bytes = [0u8; DNODE_SIZE];
    let mut ctx = ReadCtx {
        store,
        cache,
        object: META_DNODE_OBJECT,
    };
    tree::read(&mut ctx, meta, id.0 * DNODE_SIZE as u64, &mut bytes)?;
    Dnode::decode(&bytes).map_err(|source| ObjectError::Corrupt {
        object: id,
        why: "bad dnode",
        source: Some(source),
    })
}

impl ObjectSet {
    /// An empty object set of `kind`; nothing is on disk until [`ObjectSet::sync`].
    #[must_use]
    pub fn create(kind: ObjsetKind) -> Self {
        let mut meta = Dnode::new(
            OBJECT_TYPE_META_DNODE,
            DNODE_BLOCK_SIZE,
            INDIRECT_SHIFT_DEFAULT,
        );
        meta.flags = 0;
        let mut state = ObjState::new(meta);
        state.dnode_dirty = true;
        ObjectSet {
            kind,
            meta: state,
            hot: BTreeMap::new(),
            pending_frees: Vec::new(),
            root: BlockPtr::hole(Txg(0)),
            cache: BlockCache::new(CACHE_BYTES_DEFAULT),
            dnodes: DnodeCache::default(),
            streams: Streams::default(),
            config: ObjsetWriteConfig::default(),
            dirty_bytes: 0,
            estimate: SyncEstimate::default(),
            alloc_cursor: 1,
            poisoned: false,
            unavailable: None,
        }
    }

    /// The object set whose root block is `root` when that block could not be read (`why`,
    /// the read's error): a stand-in that keeps `root`, so that its owner never replaces the
    /// root it records, and refuses every call that would read or change an object with
    /// [`ObjectError::Unavailable`]. Nothing can become dirty, so a sync never writes it.
    /// Its kind is not known (the root holds it): it says [`ObjsetKind::Filesystem`].
    #[must_use]
    pub fn unavailable(root: &BlockPtr, why: String) -> Self {
        let mut set = ObjectSet::create(ObjsetKind::Filesystem);
        set.meta.dnode_dirty = false;
        set.root = *root;
        set.unavailable = Some(why);
        set
    }

    /// Why this object set could not be opened, for one made by [`ObjectSet::unavailable`].
    #[must_use]
    pub fn unavailable_reason(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// Opens the object set whose root block is `root`.
    pub fn open(store: &dyn BlockStore, root: &BlockPtr) -> Result<ObjectSet, ObjectError> {
        let object = META_DNODE_OBJECT;
        let bad = |why| ObjectError::Corrupt {
            object,
            why,
            source: None,
        };
        if root.is_hole() {
            return Err(bad("object-set root is a hole"));
        }
        if root.block_type != BlockType::ObjectSet {
            return Err(bad("root block pointer is not an object-set root"));
        }
        let bytes = tree::read_tree_block(store, None, object, root, 0, OBJSET_PHYS_SIZE as u64)?;
        let phys = ObjsetPhys::decode(&bytes).map_err(|source| ObjectError::Corrupt {
            object,
            why: "bad object-set root",
            source: Some(source),
        })?;
        let mut set = ObjectSet::create(phys.kind);
        set.meta = ObjState::new(phys.meta_dnode);
        set.root = *root;
        Ok(set)
    }

    /// Replaces the clean-block cache by one limited to `bytes`.
    #[must_use]
    pub fn with_cache_limit(mut self, bytes: u64) -> Self {
        self.cache = BlockCache::new(bytes);
        self
    }

    /// Reads and caches through `domain` of a shared [`crate::CacheStore`] from now on
    /// instead of the set's own cache (nothing changes when it already does). The policy
    /// set by [`ObjectSet::set_cache_policy`] stays.
    pub fn use_cache(&mut self, domain: &crate::CacheDomain) {
        self.cache.use_domain(domain);
    }

    /// Sets what the clean-block cache keeps from now on (`primarycache`).
    pub fn set_cache_policy(&mut self, policy: crate::CachePolicy) {
        self.cache.set_policy(policy);
    }

    /// Sets what reads of this object set may copy to the pool's cache devices from now on
    /// (`secondarycache`; blocks the cache devices hold are still served from them).
    pub fn set_secondary_cache_policy(&mut self, policy: crate::CachePolicy) {
        self.cache.set_secondary_policy(policy);
    }

    /// Sets how blocks are written from now on.
    pub fn set_write_config(&mut self, config: ObjsetWriteConfig) -> Result<(), ObjectError> {
        if config.copies == 0 || usize::from(config.copies) > tarn_base::limits::COPIES_MAX {
            return Err(invalid(
                META_DNODE_OBJECT,
                "copies",
                u64::from(config.copies),
            ));
        }
        if config.checksum == ChecksumKind::Off {
            return Err(invalid(META_DNODE_OBJECT, "checksum", 0));
        }
        self.config = config;
        Ok(())
    }

    /// How blocks are written.
    #[must_use]
    pub fn write_config(&self) -> ObjsetWriteConfig {
        self.config
    }

    /// What the object set holds.
    #[must_use]
    pub fn kind(&self) -> ObjsetKind {
        self.kind
    }

    /// Root block pointer of the last sync (a hole before the first).
    #[must_use]
    pub fn root(&self) -> BlockPtr {
        self.root
    }

    /// The meta-dnode as the last sync wrote it (object 0).
    pub(crate) fn meta_dnode(&self) -> Dnode {
        self.meta.dnode.clone()
    }

    /// Bytes of dirty buffers (data blocks plus changed dnodes) waiting for the next sync.
    #[must_use]
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_bytes
            + (self.hot.len() as u64 + self.pending_frees.len() as u64) * DNODE_SIZE as u64
    }

    /// An upper bound of what [`ObjectSet::sync`] would write now: the changed objects'
    /// blocks, the dnode blocks holding their dnodes (at most one per changed object, never
    /// more than their ids span), the meta-dnode's indirect blocks above those and the root.
    #[must_use]
    pub fn sync_estimate(&self) -> SyncEstimate {
        let root = self.estimate.with_meta(1, OBJSET_PHYS_SIZE as u64);
        let (Some(&first), Some(&last)) = (self.hot.keys().next(), self.hot.keys().next_back())
        else {
            return root;
        };
        let first = first / DNODES_PER_BLOCK;
        let last = last / DNODES_PER_BLOCK;
        let blocks = (self.hot.len() as u64).min(last - first + 1);
        let mut estimate = root.with_meta(blocks, u64::from(DNODE_BLOCK_SIZE));
        let meta = &self.meta.dnode;
        let bits = tree::bits_per_level(meta);
        let mut level = 1u32;
        // Level `level` exists while the level below has more than one block (or the tree
        // already has it); a one-block meta-dnode may grow its first indirect level.
        while u32::from(meta.nlevels).max(2) > level
            || last.checked_shr(bits * (level - 1)).unwrap_or(0) > 0
        {
            let span = last.checked_shr(bits * level).unwrap_or(0)
                - first.checked_shr(bits * level).unwrap_or(0);
            estimate = estimate.with_meta(blocks.min(span + 1), 1u64 << meta.indirect_shift);
            level += 1;
        }
        estimate
    }

    /// Bytes held by the clean-block cache (with a shared store: by every domain of it).
    #[must_use]
    pub fn cached_bytes(&self) -> u64 {
        self.cache.bytes()
    }

    pub(crate) fn check_usable(&self) -> Result<(), ObjectError> {
        if let Some(why) = &self.unavailable {
            return Err(ObjectError::Unavailable { why: why.clone() });
        }
        if self.poisoned {
            return Err(ObjectError::Poisoned);
        }
        Ok(())
    }

    fn check_id(id: ObjectId) -> Result<(), ObjectError> {
        if id.0 == 0 || id.0 >= OBJECT_ID_LIMIT {
            return Err(ObjectError::NoSuchObject { object: id });
        }
        Ok(())
    }

    /// The current dnode of `id`, or `None` for a free slot.
    pub(crate) fn current_dnode(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
    ) -> Result<Option<Dnode>, ObjectError> {
        Self::check_id(id)?;
        match self.hot.get(&id.0) {
            Some(Slot::Free) => Ok(None),
            Some(Slot::Live(state)) => Ok(Some(state.dnode.clone())),
            None => {
                let dnode = match self.dnodes.get(id) {
                    Some(dnode) => dnode.clone(),
                    None => {
                        let dnode = load_dnode(&self.meta, &mut self.cache, store, id)?;
                        self.dnodes.insert(id, &dnode);
                        dnode
                    }
                };
                Ok((!dnode.is_free()).then_some(dnode))
            }
        }
    }

    fn is_free(&mut self, store: &dyn BlockStore, id: ObjectId) -> Result<bool, ObjectError> {
        Ok(self.current_dnode(store, id)?.is_none())
    }

    /// Runs `op` on the object's state, bringing it into the changed set first and keeping
    /// the dirty-byte total exact.
    fn mutate<R>(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        op: impl FnOnce(&mut ReadCtx<'_>, &mut ObjState) -> Result<R, ObjectError>,
    ) -> Result<R, ObjectError> {
        self.check_usable()?;
        if !self.hot.contains_key(&id.0) {
            let Some(dnode) = self.current_dnode(store, id)? else {
                return Err(ObjectError::NoSuchObject { object: id });
            };
            self.hot
                .insert(id.0, Slot::Live(Box::new(ObjState::new(dnode))));
        }
        let Some(Slot::Live(state)) = self.hot.get_mut(&id.0) else {
            return Err(ObjectError::NoSuchObject { object: id });
        };
        let before = (state.dirty_bytes, state.estimate());
        let mut ctx = ReadCtx {
            store,
            cache: &mut self.cache,
            object: id,
        };
        let result = op(&mut ctx, state);
        self.dirty_bytes = self.dirty_bytes - before.0 + state.dirty_bytes;
        self.estimate = self.estimate.minus(before.1).plus(state.estimate());
        result
    }

    /// Runs `op` on the object's current state without changing it.
    pub(crate) fn inspect<R>(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        op: impl FnOnce(&mut ReadCtx<'_>, &ObjState) -> Result<R, ObjectError>,
    ) -> Result<R, ObjectError> {
        self.check_usable()?;
        let loaded = if self.hot.contains_key(&id.0) {
            None
        } else {
            let Some(dnode) = self.current_dnode(store, id)? else {
                return Err(ObjectError::NoSuchObject { object: id });
            };
            Some(ObjState::new(dnode))
        };
        let state = match (&loaded, self.hot.get(&id.0)) {
            (Some(state), _) => state,
            (None, Some(Slot::Live(state))) => state,
            _ => return Err(ObjectError::NoSuchObject { object: id }),
        };
        let mut ctx = ReadCtx {
            store,
            cache: &mut self.cache,
            object: id,
        };
        op(&mut ctx, state)
    }

    fn new_dnode(
        id: ObjectId,
        object_type: u8,
        data_block_size: u32,
        bonus_type: u8,
        bonus_len: u16,
    ) -> Result<Dnode, ObjectError> {
        if object_type == OBJECT_TYPE_NONE || object_type == OBJECT_TYPE_META_DNODE {
            return Err(invalid(id, "object type", u64::from(object_type)));
        }
        check_block_size(id, data_block_size)?;
        if usize::from(bonus_len) > DNODE_BONUS_MAX {
            return Err(invalid(id, "bonus length", u64::from(bonus_len)));
        }
        let mut dnode = Dnode::new(object_type, data_block_size, INDIRECT_SHIFT_DEFAULT);
        dnode.bonus_type = bonus_type;
        dnode.bonus_len = bonus_len;
        Ok(dnode)
    }

    fn install(&mut self, id: ObjectId, dnode: Dnode) {
        let mut state = ObjState::new(dnode);
        state.dnode_dirty = true;
        let previous = self.hot.insert(id.0, Slot::Live(Box::new(state)));
        assert!(
            !matches!(previous, Some(Slot::Live(_))),
            "I2: installing object {} over a live one",
            id.0
        );
    }

    /// Allocates the lowest free object id (>= 1) with an empty tree and a zeroed bonus
    /// buffer of `bonus_len` bytes.
    pub fn allocate_object(
        &mut self,
        store: &dyn BlockStore,
        object_type: u8,
        data_block_size: u32,
        bonus_type: u8,
        bonus_len: u16,
    ) -> Result<ObjectId, ObjectError> {
        let shape = (object_type, data_block_size, bonus_type, bonus_len);
        self.allocate_object_where(store, shape, &|_| true)
    }

    /// [`ObjectSet::allocate_object`] of the lowest free id that `usable` accepts; `shape` is
    /// (object type, data block size, bonus type, bonus length). Free ids it passes over
    /// stay where the next allocation finds them. A front end passes the ids a client still
    /// holds for objects freed meanwhile (the FUSE kernel's inode numbers until FORGET),
    /// replay the id its log recorded.
    pub fn allocate_object_where(
        &mut self,
        store: &dyn BlockStore,
        shape: (u8, u32, u8, u16),
        usable: &dyn Fn(u64) -> bool,
    ) -> Result<ObjectId, ObjectError> {
        let (object_type, data_block_size, bonus_type, bonus_len) = shape;
        self.check_usable()?;
        let dnode = Self::new_dnode(
            ObjectId(0),
            object_type,
            data_block_size,
            bonus_type,
            bonus_len,
        )?;
        let mut id = self.alloc_cursor.max(1);
        let mut passed = None;
        loop {
            let free = self.is_free(store, ObjectId(id))?;
            if free && usable(id) {
                break;
            }
            if free && passed.is_none() {
                passed = Some(id);
            }
            id += 1;
            if id >= OBJECT_ID_LIMIT {
                return Err(ObjectError::LimitReached {
                    object: META_DNODE_OBJECT,
                    what: "object ids",
                });
            }
        }
        self.alloc_cursor = passed.unwrap_or(id + 1);
        self.install(ObjectId(id), dnode);
        Ok(ObjectId(id))
    }

    /// Allocates object `id` (which must be free).
    pub fn claim_object(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        object_type: u8,
        data_block_size: u32,
        bonus_type: u8,
        bonus_len: u16,
    ) -> Result<(), ObjectError> {
        self.check_usable()?;
        Self::check_id(id)?;
        let dnode = Self::new_dnode(id, object_type, data_block_size, bonus_type, bonus_len)?;
        if !self.is_free(store, id)? {
            return Err(ObjectError::ObjectInUse { object: id });
        }
        self.install(id, dnode);
        Ok(())
    }

    /// Frees object `id`; its blocks are freed at the next sync.
    pub fn free_object(&mut self, store: &dyn BlockStore, id: ObjectId) -> Result<(), ObjectError> {
        self.check_usable()?;
        let state = match self.hot.remove(&id.0) {
            Some(Slot::Live(state)) => *state,
            Some(Slot::Free) => {
                self.hot.insert(id.0, Slot::Free);
                return Err(ObjectError::NoSuchObject { object: id });
            }
            None => match self.current_dnode(store, id)? {
                Some(dnode) => ObjState::new(dnode),
                None => return Err(ObjectError::NoSuchObject { object: id }),
            },
        };
        self.dirty_bytes -= state.dirty_bytes;
        self.estimate = self.estimate.minus(state.estimate());
        if !state.dnode.root.is_hole() {
            // The sync walks the tree as the last sync wrote it, so it needs that sync's
            // block size: `set_block_size` in this txg changed only the dnode in memory
            // (the root, the levels and the indirect shift change only at sync).
            let committed = load_dnode(&self.meta, &mut self.cache, store, id)?;
            assert_eq!(
                committed.root, state.dnode.root,
                "I5: object {id:?} with blocks has the committed root until its sync"
            );
            let mut dnode = state.dnode;
            dnode.data_block_size = committed.data_block_size;
            self.pending_frees.push((id, dnode));
        }
        self.hot.insert(id.0, Slot::Free);
        self.alloc_cursor = self.alloc_cursor.min(id.0);
        Ok(())
    }

    /// Facts about object `id`. `nlevels` and `used_bytes` are as of the last sync.
    pub fn object_info(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
    ) -> Result<DnodeInfo, ObjectError> {
        self.check_usable()?;
        let Some(dnode) = self.current_dnode(store, id)? else {
            return Err(ObjectError::NoSuchObject { object: id });
        };
        Ok(DnodeInfo {
            object_type: dnode.object_type,
            data_block_size: dnode.data_block_size,
            indirect_shift: dnode.indirect_shift,
            nlevels: dnode.nlevels,
            maxblkid: dnode.maxblkid,
            used_bytes: dnode.used_bytes,
            bonus_type: dnode.bonus_type,
            bonus_len: dnode.bonus_len,
            metadata: dnode.flags & DNODE_FLAG_METADATA != 0,
        })
    }

    /// The object's bonus bytes.
    pub fn bonus(&mut self, store: &dyn BlockStore, id: ObjectId) -> Result<Vec<u8>, ObjectError> {
        self.check_usable()?;
        let Some(dnode) = self.current_dnode(store, id)? else {
            return Err(ObjectError::NoSuchObject { object: id });
        };
        Ok(dnode.bonus_bytes().to_vec())
    }

    /// Replaces the bonus bytes (at most 320) and the bonus length.
    pub fn set_bonus(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        bytes: &[u8],
    ) -> Result<(), ObjectError> {
        if bytes.len() > DNODE_BONUS_MAX {
            return Err(invalid(id, "bonus length", bytes.len() as u64));
        }
        self.mutate(store, id, |_, state| {
            state.dnode.bonus = [0; DNODE_BONUS_MAX];
            state.dnode.bonus[..bytes.len()].copy_from_slice(bytes);
            state.dnode.bonus_len = bytes.len() as u16;
            state.dnode_dirty = true;
            Ok(())
        })
    }

    /// Marks the object's level-0 blocks as metadata (extra copies, `BlockType::Metadata`).
    pub fn set_metadata(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        metadata: bool,
    ) -> Result<(), ObjectError> {
        self.mutate(store, id, |_, state| {
            if metadata {
                state.dnode.flags |= DNODE_FLAG_METADATA;
            } else {
                state.dnode.flags &= !DNODE_FLAG_METADATA;
            }
            state.dnode_dirty = true;
            Ok(())
        })
    }

    /// Per-object checksum and compression overrides (`None`: inherit the write config).
    pub fn set_overrides(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        checksum: Option<ChecksumKind>,
        compression: Option<CompressSetting>,
    ) -> Result<(), ObjectError> {
        if checksum == Some(ChecksumKind::Off) {
            return Err(invalid(id, "checksum", 0));
        }
        self.mutate(store, id, |_, state| {
            state.dnode.checksum = checksum.map_or(0, |kind| kind as u8);
            state.dnode.compression = Dnode::compression_override_byte(compression);
            state.dnode_dirty = true;
            Ok(())
        })
    }

    /// Sets the indirect block shift of an object whose tree is still empty (tests use small
    /// shifts to build deep trees cheaply).
    pub fn set_indirect_shift(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        shift: u8,
    ) -> Result<(), ObjectError> {
        if !(INDIRECT_SHIFT_MIN..=INDIRECT_SHIFT_MAX).contains(&shift) {
            return Err(invalid(id, "indirect block shift", u64::from(shift)));
        }
        self.mutate(store, id, |_, state| {
            let empty =
                state.dirty.is_empty() && state.dnode.root.is_hole() && state.dnode.maxblkid == 0;
            if !empty || state.dnode.nlevels != 1 {
                return Err(invalid(
                    id,
                    "indirect shift change on a non-empty object",
                    u64::from(shift),
                ));
            }
            state.dnode.indirect_shift = shift;
            state.dnode_dirty = true;
            Ok(())
        })
    }

    /// Changes the data block size of an object that has at most one block (block 0); its
    /// contents are kept up to the smaller of the two sizes.
    pub fn set_block_size(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        size: u32,
    ) -> Result<(), ObjectError> {
        check_block_size(id, size)?;
        self.mutate(store, id, |ctx, state| {
            if state.dnode.maxblkid != 0 {
                return Err(invalid(
                    id,
                    "block size change on an object with blocks past 0",
                    u64::from(size),
                ));
            }
            assert_eq!(
                state.dnode.nlevels, 1,
                "I3: object with maxblkid 0 has one level"
            );
            let old = tree::block_data(ctx, state, 0)?.bytes().map(<[u8]>::to_vec);
            let had_block = state.dirty.contains_key(&0) || !state.dnode.root.is_hole();
            state.written_ahead.clear();
            state.replace(0, None);
            state.dnode.data_block_size = size;
            state.dnode_dirty = true;
            if had_block {
                let entry = match old {
                    Some(mut bytes) if !tarn_format::compress::is_all_zero(&bytes) => {
                        bytes.resize(size as usize, 0);
                        if tarn_format::compress::is_all_zero(&bytes) {
                            Dirty::Hole
                        } else {
                            Dirty::Data(std::sync::Arc::new(bytes))
                        }
                    }
                    _ => Dirty::Hole,
                };
                state.set_dirty(0, entry);
            }
            Ok(())
        })
    }

    /// The next allocated object after `after`, in id order.
    pub fn next_object(
        &mut self,
        store: &dyn BlockStore,
        after: ObjectId,
    ) -> Result<Option<ObjectId>, ObjectError> {
        self.check_usable()?;
        let hot_next = self
            .hot
            .range(after.0.saturating_add(1)..)
            .find(|(_, slot)| matches!(slot, Slot::Live(_)))
            .map(|(&id, _)| id);
        let mut from = after.0.saturating_add(1);
        let per_block = DNODES_PER_BLOCK;
        let on_disk = loop {
            if from >= OBJECT_ID_LIMIT || hot_next.is_some_and(|hot| from >= hot) {
                break None;
            }
            let mut ctx = ReadCtx {
                store,
                cache: &mut self.cache,
                object: META_DNODE_OBJECT,
            };
            let Some(block) = tree::next_block(&mut ctx, &self.meta, from / per_block, true)?
            else {
                break None;
            };
            let first = from.max(block * per_block);
            let mut found = None;
            for id in first..(block + 1) * per_block {
                if id == 0 || self.hot.contains_key(&id) {
                    continue;
                }
                if !load_dnode(&self.meta, &mut self.cache, store, ObjectId(id))?.is_free() {
                    found = Some(id);
                    break;
                }
            }
            if found.is_some() {
                break found;
            }
            from = (block + 1) * per_block;
        };
        Ok(match (hot_next, on_disk) {
            (Some(a), Some(b)) => Some(ObjectId(a.min(b))),
            (a, b) => a.or(b).map(ObjectId),
        })
    }

    /// Reads `buf.len()` bytes at `offset`. Holes and never-written ranges read as zeros.
    pub fn read(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), ObjectError> {
        self.read_with(store, id, offset, buf.len(), |ctx, state| {
            tree::read(ctx, state, offset, buf)
        })
    }

    /// [`ObjectSet::read`] of `len` bytes as the blocks they lie in, for a caller that
    /// copies them into its buffer after letting go of its lock (module `readout`).
    pub fn read_out(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        offset: u64,
        len: usize,
    ) -> Result<ReadOut, ObjectError> {
        self.read_with(store, id, offset, len, |ctx, state| {
            tree::read_out(ctx, state, offset, len)
        })
    }

    /// A read of `len` bytes at `offset` of `id` by `read`: the access noted for read-ahead
    /// first, and the read-ahead started.
    fn read_with<R>(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        offset: u64,
        len: usize,
        read: impl FnOnce(&mut ReadCtx<'_>, &ObjState) -> Result<R, ObjectError>,
    ) -> Result<R, ObjectError> {
        if offset.checked_add(len as u64).is_none() {
            return Err(invalid(id, "read offset", offset));
        }
        let len = len as u64;
        // The store is asked only for a sequential reader: answering walks the vdev tree,
        // which a small random read served from the cache should not pay for.
        let ahead = (self.streams.note(id, offset, len)).filter(|_| store.reads_in_parallel());
        self.inspect(store, id, |ctx, state| {
            readahead::prefetch(ctx, state, offset, len, ahead);
            read(ctx, state)
        })
    }

    /// Reads into the cache, in one batch, the only block of each object of `ids` that has
    /// one (one level, block 0: a micro ZAP, a small list) and is not cached yet: for a
    /// caller about to read many small objects in turn (the property lists of a dataset's
    /// snapshots at import), which would otherwise wait for each block's device read in
    /// turn. Best effort: an object that cannot be found, or a block that fails, is left
    /// for the reads that follow to report. A store that reads one block at a time is left
    /// alone.
    pub fn prefetch_single_blocks(&mut self, store: &dyn BlockStore, ids: &[ObjectId]) {
        if !store.reads_in_parallel() {
            return;
        }
        let mut bps = Vec::new();
        for &id in ids {
            let Ok(Some(dnode)) = self.current_dnode(store, id) else {
                continue;
            };
            let bp = dnode.root;
            if dnode.nlevels == 1 && !bp.is_hole() && !self.cache.contains(&bp) {
                bps.push(bp);
            }
        }
        if bps.len() < 2 {
            return;
        }
        for (bp, result) in bps.iter().zip(store.read_blocks(&bps)) {
            if let Ok(bytes) = result
                && bytes.len() as u64 == u64::from(bp.lsize)
            {
                self.cache.insert(bp, Arc::new(bytes));
            }
        }
    }

    /// The first half of a read of `len` bytes at `offset` of `id` that does its device
    /// I/O without the caller's lock: the blocks the read (and its read-ahead) needs from
    /// the devices, or `None` when it needs none (or its store reads synchronously, as the
    /// simulator's does). The caller reads them with its store's batch read while no one
    /// can reuse their space, [`Fetch::fill`]s the cache with the results, and then reads
    /// with [`ObjectSet::read_planned`], which finds them there.
    pub fn plan_read(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        offset: u64,
        len: u64,
    ) -> Result<Option<Fetch>, ObjectError> {
        if offset.checked_add(len).is_none() {
            return Err(invalid(id, "read offset", offset));
        }
        let ahead = (self.streams.note(id, offset, len)).filter(|_| store.reads_in_parallel());
        self.inspect(store, id, |ctx, state| {
            Ok(readahead::plan(ctx, state, offset, len, ahead))
        })
    }

    /// The second half of a read begun with [`ObjectSet::plan_read`]: [`ObjectSet::read`]
    /// without noting the access again and without read-ahead (the plan did both).
    pub fn read_planned(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), ObjectError> {
        if offset.checked_add(buf.len() as u64).is_none() {
            return Err(invalid(id, "read offset", offset));
        }
        self.inspect(store, id, |ctx, state| tree::read(ctx, state, offset, buf))
    }

    /// [`ObjectSet::read_planned`] as [`ObjectSet::read_out`] does it: the bytes as the
    /// blocks they lie in, clean blocks shared with the cache rather than copied.
    pub fn read_out_planned(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        offset: u64,
        len: usize,
    ) -> Result<ReadOut, ObjectError> {
        if offset.checked_add(len as u64).is_none() {
            return Err(invalid(id, "read offset", offset));
        }
        self.inspect(store, id, |ctx, state| {
            tree::read_out(ctx, state, offset, len)
        })
    }

    /// Runs `f` on block `blkid` of `id` as a read would see it now, in place (`None`: a
    /// hole): no copy of the block, no readahead. For structures that walk a few bytes of a
    /// block per operation (ZAP lookups).
    pub(crate) fn with_block<R>(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        blkid: u64,
        f: impl FnOnce(Option<&[u8]>) -> Result<R, ObjectError>,
    ) -> Result<R, ObjectError> {
        self.inspect(store, id, |ctx, state| {
            f(tree::block_data(ctx, state, blkid)?.bytes())
        })
    }

    /// Writes `data` at `offset`; partial blocks are read, modified and rewritten.
    pub fn write(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        offset: u64,
        data: &[u8],
    ) -> Result<(), ObjectError> {
        let Some(end) = offset.checked_add(data.len() as u64) else {
            return Err(invalid(id, "write offset", offset));
        };
        self.mutate(store, id, |ctx, state| {
            let block_size = u64::from(state.dnode.data_block_size);
            if !data.is_empty() {
                let last = (end - 1) / block_size;
                if tree::blkid_limit(&state.dnode).is_some_and(|limit| last >= limit) {
                    return Err(invalid(
                        id,
                        "write beyond the deepest tree at offset",
                        offset,
                    ));
                }
            }
            tree::write(ctx, state, offset, data)
        })
    }

    /// [`ObjectSet::write`] of the whole level-0 block `blkid` of `id`, taking `data` as the
    /// dirty block instead of copying it (a received stream's block: tarn-dataset `send`).
    /// `data` must be exactly the object's block size; all zeros make a hole, as a write
    /// does.
    pub fn write_block_owned(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        blkid: u64,
        data: Vec<u8>,
    ) -> Result<(), ObjectError> {
        self.mutate(store, id, |_, state| {
            let block_size = u64::from(state.dnode.data_block_size);
            let offset = blkid.saturating_mul(block_size);
            if data.len() as u64 != block_size {
                return Err(invalid(
                    id,
                    "whole-block write of another size at offset",
                    offset,
                ));
            }
            if tree::blkid_limit(&state.dnode).is_some_and(|limit| blkid >= limit) {
                return Err(invalid(
                    id,
                    "write beyond the deepest tree at offset",
                    offset,
                ));
            }
            tree::write_whole(state, blkid, data);
            Ok(())
        })
    }

    /// Writes dirty level-0 block `blkid` of `id` now, through `store` (an open-context
    /// writer whose txg is the one the next sync runs in), and returns its block pointer;
    /// that sync adopts it instead of writing the block, unless the block changes before
    /// (ZFS's `dmu_sync` and its override). `None` when the block has no dirty data (clean,
    /// a hole, or zeros). The caller owns a block the sync does not adopt
    /// ([`ObjectSet::written_ahead`] tells which) and frees it.
    pub fn write_ahead(
        &mut self,
        store: &mut dyn BlockStore,
        id: ObjectId,
        blkid: u64,
    ) -> Result<Option<BlockPtr>, ObjectError> {
        self.check_usable()?;
        let config = self.config;
        let Some(Slot::Live(state)) = self.hot.get_mut(&id.0) else {
            return Ok(None);
        };
        if let Some(bp) = state.written_ahead.get(&blkid) {
            return Ok(Some(*bp));
        }
        let Some(bytes) = dirty_block_bytes(&mut self.cache, &*store, id, state, blkid)? else {
            return Ok(None);
        };
        let props = tree::write_props(&config, &state.dnode, 0, BlockType::Data, 1);
        let bp = store
            .write_block(&bytes, &props)
            .map_err(|source| ObjectError::Io {
                object: id,
                offset: blkid.saturating_mul(u64::from(state.dnode.data_block_size)),
                source,
            })?;
        if bp.is_hole() {
            return Ok(None);
        }
        assert_eq!(
            bp.birth,
            store.txg(),
            "a block written ahead is born in its txg"
        );
        state.written_ahead.insert(blkid, bp);
        Ok(Some(bp))
    }

    /// [`ObjectSet::write_ahead`] of distinct level-0 blocks `blkids` of `id` at once, through
    /// [`BlockStore::write_blocks`] (in parallel on devices that allow it): the blocks
    /// written (holes and blocks without dirty data give none), in the order of `blkids`,
    /// and the first error. Blocks written before an error are recorded as written ahead
    /// and returned all the same: the caller owns them either way.
    pub fn write_ahead_many(
        &mut self,
        store: &mut dyn BlockStore,
        id: ObjectId,
        blkids: &[u64],
    ) -> (Vec<(u64, BlockPtr)>, Option<ObjectError>) {
        if let Err(e) = self.check_usable() {
            return (Vec::new(), Some(e));
        }
        let config = self.config;
        let Some(Slot::Live(state)) = self.hot.get_mut(&id.0) else {
            return (Vec::new(), None);
        };
        let props = tree::write_props(&config, &state.dnode, 0, BlockType::Data, 1);
        let mut wanted = Vec::new();
        let mut contents = Vec::new();
        let mut error = None;
        for &blkid in blkids {
            if state.written_ahead.contains_key(&blkid) {
                continue;
            }
            match dirty_block_bytes(&mut self.cache, &*store, id, state, blkid) {
                Ok(Some(bytes)) => {
                    wanted.push(blkid);
                    contents.push(bytes);
                }
                Ok(None) => {}
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        let blocks: Vec<_> = contents.iter().map(|bytes| (&bytes[..], &props)).collect();
        let results = store.write_blocks(&blocks);
        drop(blocks);
        drop(contents);
        let block_size = u64::from(state.dnode.data_block_size);
        let mut written = Vec::new();
        for (blkid, result) in wanted.into_iter().zip(results) {
            match result {
                Ok(bp) if bp.is_hole() => {}
                Ok(bp) => {
                    assert_eq!(
                        bp.birth,
                        store.txg(),
                        "a block written ahead is born in its txg"
                    );
                    state.written_ahead.insert(blkid, bp);
                    written.push((blkid, bp));
                }
                Err(source) => {
                    error.get_or_insert(ObjectError::Io {
                        object: id,
                        offset: blkid.saturating_mul(block_size),
                        source,
                    });
                }
            }
        }
        (written, error)
    }

    /// [`ObjectSet::write_ahead_many`] of any number of distinct level-0 blocks of `id`, in
    /// batches of [`WRITE_AHEAD_BATCH`] (the intent log's `logbias=throughput` commits, of
    /// volumes and of files alike): the blocks written, in order, and the first error, after
    /// which no further batch is written.
    pub fn write_ahead_all(
        &mut self,
        store: &mut dyn BlockStore,
        id: ObjectId,
        blkids: &[u64],
    ) -> (Vec<(u64, BlockPtr)>, Option<ObjectError>) {
        let mut written = Vec::new();
        for batch in blkids.chunks(WRITE_AHEAD_BATCH) {
            let (done, error) = self.write_ahead_many(store, id, batch);
            written.extend(done);
            if error.is_some() {
                return (written, error);
            }
        }
        (written, None)
    }

    /// The whole dirty records of data objects (files and volumes, not metadata) that a
    /// pre-write may write ahead of the sync without the pool lock: each with a reference to
    /// its bytes (no copy; `Dirty` docs) and the properties its sync would write it with.
    /// Pieces, holes and clones are left to the sync, and so are records already written
    /// ahead (the intent log's `logbias=throughput` blocks), and records whose bytes `taken`
    /// says an earlier pre-write holds already (unchanged since). At most `limit` bytes; none
    /// from an object set that cannot be written.
    #[must_use]
    pub fn prewrite_candidates(
        &self,
        limit: u64,
        taken: &dyn Fn(&Arc<Vec<u8>>) -> bool,
    ) -> Vec<PrewriteBlock> {
        let mut out = Vec::new();
        if self.check_usable().is_err() {
            return out;
        }
        let mut bytes = 0u64;
        for (&object, slot) in &self.hot {
            let Slot::Live(state) = slot else { continue };
            if state.dnode.flags & DNODE_FLAG_METADATA != 0 {
                continue;
            }
            let props = tree::write_props(&self.config, &state.dnode, 0, BlockType::Data, 1);
            for (&blkid, entry) in &state.dirty {
                let tree::Dirty::Data(data) = entry else {
                    continue;
                };
                if state.written_ahead.contains_key(&blkid) || taken(data) {
                    continue;
                }
                bytes += data.len() as u64;
                if bytes > limit {
                    return out;
                }
                out.push(PrewriteBlock {
                    object: ObjectId(object),
                    blkid,
                    bytes: Arc::clone(data),
                    props,
                });
            }
        }
        out
    }

    /// Records `bp`, written ahead of the sync from `block` ([`ObjectSet::prewrite_candidates`]),
    /// as the block the next sync adopts, if the record still holds the very bytes that were
    /// written (pointer identity: any edit since replaced or copied them) and nothing else
    /// was written ahead for it meanwhile. Returns whether it did; the caller frees a block
    /// that was not recorded, and one recorded that a later change drops
    /// ([`ObjectSet::written_ahead`] says which).
    pub fn adopt_prewritten(&mut self, block: &PrewriteBlock, bp: &BlockPtr) -> bool {
        if self.check_usable().is_err() || bp.is_hole() {
            return false;
        }
        let Some(Slot::Live(state)) = self.hot.get_mut(&block.object.0) else {
            return false;
        };
        let same = matches!(
            state.dirty.get(&block.blkid),
            Some(tree::Dirty::Data(data)) if Arc::ptr_eq(data, &block.bytes)
        );
        if !same || state.written_ahead.contains_key(&block.blkid) {
            return false;
        }
        assert_eq!(
            u64::from(bp.lsize),
            block.bytes.len() as u64,
            "a pre-written block is its record"
        );
        state.written_ahead.insert(block.blkid, *bp);
        true
    }

    /// The block pointer the next sync adopts for level-0 block `blkid` of `id`, if one was
    /// written ahead and the block has not changed since ([`ObjectSet::write_ahead`]).
    #[must_use]
    pub fn written_ahead(&self, id: ObjectId, blkid: u64) -> Option<BlockPtr> {
        match self.hot.get(&id.0) {
            Some(Slot::Live(state)) => state.written_ahead.get(&blkid).copied(),
            _ => None,
        }
    }

    /// The committed block pointers of level-0 blocks `first..first + count` of `id`, for
    /// cloning them elsewhere (block cloning): holes as holes. `None` when one of them is
    /// dirty (its committed pointer is not its current contents; the caller syncs a txg
    /// and asks again, as OpenZFS's clone waits for a txg).
    pub fn block_pointers(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        first: u64,
        count: u64,
    ) -> Result<Option<Vec<BlockPtr>>, ObjectError> {
        let end = first
            .checked_add(count)
            .ok_or_else(|| invalid(id, "block range", first))?;
        self.inspect(store, id, |ctx, state| {
            if state.dirty.range(first..end).next().is_some() {
                return Ok(None);
            }
            let mut bps = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
            for blkid in first..end {
                bps.push(tree::synced_bp(ctx, &state.dnode, 0, blkid)?);
            }
            Ok(Some(bps))
        })
    }

    /// Makes level-0 blocks `first..` of `id` clones of `bps` (holes stay holes): the next
    /// sync gives each block a new reference to the same bytes (`BlockStore::clone_block`)
    /// instead of writing them. Every pointer must be a level-0 block of the object's block
    /// size; the caller reads them with [`ObjectSet::block_pointers`] from an object set of
    /// the same pool.
    pub fn clone_blocks(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        first: u64,
        bps: &[BlockPtr],
    ) -> Result<(), ObjectError> {
        self.mutate(store, id, |_, state| {
            let block_size = u64::from(state.dnode.data_block_size);
            if let Some(bp) = bps
                .iter()
                .find(|bp| !bp.is_hole() && (u64::from(bp.lsize) != block_size || bp.level != 0))
            {
                return Err(invalid(id, "clone of a block of size", u64::from(bp.lsize)));
            }
            let last = first.saturating_add(bps.len() as u64).saturating_sub(1);
            if tree::blkid_limit(&state.dnode).is_some_and(|limit| last >= limit) {
                return Err(invalid(id, "clone beyond the deepest tree at block", last));
            }
            for (blkid, bp) in (first..).zip(bps) {
                let entry = if bp.is_hole() {
                    tree::Dirty::Hole
                } else {
                    tree::Dirty::Clone(*bp)
                };
                state.set_dirty(blkid, entry);
                state.note_written(blkid);
            }
            Ok(())
        })
    }

    /// Punches `[offset, offset + len)`: whole blocks become holes, partial blocks are
    /// zeroed. `len` may run past the end (`u64::MAX` punches everything from `offset`).
    pub fn free_range(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        offset: u64,
        len: u64,
    ) -> Result<(), ObjectError> {
        let end = offset.saturating_add(len);
        self.mutate(store, id, |ctx, state| {
            tree::free_range(ctx, state, offset, end)
        })
    }

    /// SEEK_DATA: the first offset `>= offset` inside a data block, or `None`.
    pub fn next_data(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        offset: u64,
    ) -> Result<Option<u64>, ObjectError> {
        self.inspect(store, id, |ctx, state| {
            let block_size = u64::from(state.dnode.data_block_size);
            let found = tree::next_block(ctx, state, offset / block_size, true)?;
            Ok(found.map(|blkid| offset.max(blkid.saturating_mul(block_size))))
        })
    }

    /// SEEK_HOLE: the first offset `>= offset` inside a hole (past the last data block
    /// everything is a hole).
    pub fn next_hole(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        offset: u64,
    ) -> Result<u64, ObjectError> {
        self.inspect(store, id, |ctx, state| {
            let block_size = u64::from(state.dnode.data_block_size);
            let found = tree::next_block(ctx, state, offset / block_size, false)?;
            Ok(found.map_or(u64::MAX, |blkid| {
                offset.max(blkid.saturating_mul(block_size))
            }))
        })
    }

    /// Writes every dirty block bottom-up (data, indirect blocks, dnode blocks, the root),
    /// frees every replaced or punched block once, and returns the new root. After an error
    /// the object set is poisoned: reopen it from the last committed root.
    pub fn sync(&mut self, store: &mut dyn BlockStore) -> Result<BlockPtr, ObjectError> {
        self.sync_with(store, None)
    }

    /// [`ObjectSet::sync`] with an accounting hook: every object except the hook's deferred
    /// ones is written first; the hook then sees what changed and updates its objects, which
    /// a second pass writes (crate::accounting).
    pub fn sync_with(
        &mut self,
        store: &mut dyn BlockStore,
        hook: Option<&mut dyn SyncHook>,
    ) -> Result<BlockPtr, ObjectError> {
        // The sync rewrites the meta-dnode: no decoded dnode read before or during it
        // survives it, whether it succeeds or not (D1 of `dnode_cache`).
        self.dnodes.clear();
        let synced = self.sync_passes(store, hook);
        self.dnodes.clear();
        synced
    }

    /// The body of [`ObjectSet::sync_with`].
    fn sync_passes(
        &mut self,
        store: &mut dyn BlockStore,
        hook: Option<&mut dyn SyncHook>,
    ) -> Result<BlockPtr, ObjectError> {
        self.check_usable()?;
        self.poisoned = true;
        self.free_pending(store)?;
        let mut first = std::mem::take(&mut self.hot);
        let deferred: BTreeMap<u64, Slot> = match hook.as_deref() {
            Some(hook) => {
                let ids: Vec<u64> = first
                    .keys()
                    .copied()
                    .filter(|id| hook.is_deferred(ObjectId(*id)))
                    .collect();
                ids.iter().filter_map(|id| first.remove_entry(id)).collect()
            }
            None => BTreeMap::new(),
        };
        let mut changes = Vec::new();
        for (id, slot) in first.iter_mut() {
            let before = match hook {
                Some(_) => Some(load_dnode(
                    &self.meta,
                    &mut self.cache,
                    &*store,
                    ObjectId(*id),
                )?),
                None => None,
            };
            let slot = std::mem::replace(slot, Slot::Free);
            let after = self.sync_slot(store, *id, slot)?;
            if let Some(before) = before {
                changes.extend(UsedChange::between(ObjectId(*id), &before, after.as_ref()));
            }
        }
        if let Some(hook) = hook {
            self.hot = deferred;
            self.poisoned = false;
            let accounted = hook.account(self, &*store, &changes);
            self.poisoned = true;
            accounted?;
            self.free_pending(store)?;
            for (id, slot) in std::mem::take(&mut self.hot) {
                assert!(
                    !first.contains_key(&id),
                    "accounting hook changed object {id}, written in the first pass"
                );
                self.sync_slot(store, id, slot)?;
            }
        }
        self.sync_root(store)
    }

    /// Frees the trees of objects freed since the last sync.
    fn free_pending(&mut self, store: &mut dyn BlockStore) -> Result<(), ObjectError> {
        for (id, dnode) in std::mem::take(&mut self.pending_frees) {
            let mut walk = TreeWalk::new(id, &dnode);
            while let Some((bp, _)) = walk.next(&*store)? {
                tree::forget_freed(store, &mut self.cache, &bp);
            }
        }
        Ok(())
    }

    /// Writes one changed object's tree and its dnode into the meta-dnode; returns the dnode
    /// now committed (`None` for a freed slot).
    fn sync_slot(
        &mut self,
        store: &mut dyn BlockStore,
        id: u64,
        slot: Slot,
    ) -> Result<Option<Dnode>, ObjectError> {
        let object = ObjectId(id);
        let config = self.config;
        let (bytes, committed) = match slot {
            Slot::Free => ([0u8; DNODE_SIZE], None),
            Slot::Live(mut state) => {
                tree::sync_tree(
                    store,
                    &mut self.cache,
                    object,
                    &mut state,
                    &config,
                    BlockType::Data,
                )?;
                assert!(
                    state.dirty.is_empty(),
                    "I5: object {id} still dirty after sync"
                );
                (state.dnode.encode(), Some(state.dnode))
            }
        };
        // The accounting hook reads dnodes between the two passes (D1 of `dnode_cache`).
        self.dnodes.forget(object);
        let mut ctx = ReadCtx {
            store: &*store,
            cache: &mut self.cache,
            object: META_DNODE_OBJECT,
        };
        tree::write(&mut ctx, &mut self.meta, id * DNODE_SIZE as u64, &bytes)?;
        Ok(committed)
    }

    /// Writes the meta-dnode's tree and the object-set root; ends a sync.
    fn sync_root(&mut self, store: &mut dyn BlockStore) -> Result<BlockPtr, ObjectError> {
        let config = self.config;
        tree::sync_tree(
            store,
            &mut self.cache,
            META_DNODE_OBJECT,
            &mut self.meta,
            &config,
            BlockType::Dnode,
        )?;
        let phys = ObjsetPhys {
            kind: self.kind,
            meta_dnode: self.meta.dnode.clone(),
        };
        let props = WriteProps {
            block_type: BlockType::ObjectSet,
            level: 0,
            checksum: config.checksum,
            compression: config.compression,
            copies: config.copies_for(crate::BlockRole::Critical),
            fill: 1,
            special_small_blocks: config.special_small_blocks,
        };
        let root = store
            .write_block(&phys.encode(), &props)
            .map_err(|source| ObjectError::Io {
                object: META_DNODE_OBJECT,
                offset: 0,
                source,
            })?;
        assert!(!root.is_hole(), "I6: object-set root written as a hole");
        if !self.root.is_hole() {
            let root = self.root;
            tree::forget_freed(store, &mut self.cache, &root);
        }
        self.root = root;
        self.meta.dnode_dirty = false;
        self.dirty_bytes = 0;
        self.estimate = SyncEstimate::default();
        self.poisoned = false;
        Ok(root)
    }

    /// Calls `visit` for every non-hole block pointer reachable from the last synced root
    /// (see [`visit_object_set`]).
    pub fn visit_blocks(
        &self,
        store: &dyn BlockStore,
        visit: &mut dyn FnMut(&BlockPtr, BlockContext),
    ) -> Result<(), ObjectError> {
        visit_object_set(store, &self.root, visit)
    }
}

/// Calls `visit` for every non-hole block pointer reachable from the object-set root `root`:
/// the root itself (object 0, level [`BlockContext::ROOT_LEVEL`]), the meta-dnode's tree
/// (object 0), then each allocated object's tree, parents before children. The walk keeps an
/// explicit stack of at most two trees' depth; nothing is cached.
pub fn visit_object_set(
    store: &dyn BlockStore,
    root: &BlockPtr,
    visit: &mut dyn FnMut(&BlockPtr, BlockContext),
) -> Result<(), ObjectError> {
    visit_object_set_born_after(store, root, None, visit)
}

/// [`visit_object_set`] of only the blocks born after txg `after` (every block with
/// `None`): a subtree whose block pointer was born in `after` or earlier is skipped whole,
/// since copy-on-write rewrites every ancestor of a block it writes. What a snapshot taken
/// in `after` does not hold, in time proportional to that, not to the object set's size.
pub fn visit_object_set_born_after(
    store: &dyn BlockStore,
    root: &BlockPtr,
    after: Option<Txg>,
    visit: &mut dyn FnMut(&BlockPtr, BlockContext),
) -> Result<(), ObjectError> {
    if root.is_hole() || after.is_some_and(|txg| root.birth <= txg) {
        return Ok(());
    }
    let object = META_DNODE_OBJECT;
    visit(
        root,
        BlockContext {
            object,
            level: BlockContext::ROOT_LEVEL,
            blkid: 0,
        },
    );
    let bytes = tree::read_tree_block(store, None, object, root, 0, OBJSET_PHYS_SIZE as u64)?;
    let phys = ObjsetPhys::decode(&bytes).map_err(|source| ObjectError::Corrupt {
        object,
        why: "bad object-set root",
        source: Some(source),
    })?;
    let mut meta_walk = TreeWalk::new(object, &phys.meta_dnode).born_after(after);
    while let Some((bp, context)) = meta_walk.next(store)? {
        visit(&bp, context);
        if context.level != 0 {
            continue;
        }
        let block =
            tree::read_tree_block(store, None, object, &bp, 0, u64::from(DNODE_BLOCK_SIZE))?;
        for (slot, bytes) in block.chunks_exact(DNODE_SIZE).enumerate() {
            let id = ObjectId(context.blkid * DNODES_PER_BLOCK + slot as u64);
            let dnode = Dnode::decode(bytes).map_err(|source| ObjectError::Corrupt {
                object: id,
                why: "bad dnode",
                source: Some(source),
            })?;
            if dnode.is_free() {
                continue;
            }
            let mut walk = TreeWalk::new(id, &dnode).born_after(after);
            while let Some((child, child_context)) = walk.next(store)? {
                visit(&child, child_context);
            }
        }
    }
    Ok(())
}
