//! tarn-objects: object sets of dnodes, each object a copy-on-write tree of block pointers
//! (ZFS's DMU), and the ZAP key-value objects built on them.
//!
//! # Purpose
//! Give the dataset and POSIX layers numbered objects (byte arrays with a small bonus buffer)
//! that change in memory and reach disk atomically, one txg at a time, through
//! [`tarn_zio::BlockStore`]. Every block is reached through a block pointer that carries its
//! checksum and birth txg, so an object set is a Merkle tree rooted in one block pointer.
//!
//! # Model
//! ```text
//!  object-set root bp ──► ObjsetPhys (2 KiB: kind, meta-dnode)
//!                               │ meta-dnode = object 0, data block size 16 KiB
//!                               ▼
//!                    [ indirect blocks of object 0 ] (nlevels - 1 levels, 1024 bps each)
//!                               │
//!             ┌─────────────────┼──────────────────┐
//!             ▼                 ▼                  ▼
//!      dnode block 0      dnode block 1   ...   (32 dnodes of 512 bytes each;
//!      objects 0..31      objects 32..63         object N lives in slot N)
//!             │ dnode N: root bp, nlevels, block size, bonus
//!             ▼
//!      [ indirect blocks of object N ] ──► level-0 data blocks (holes are bps with no DVA)
//! ```
//! - An object's tree has `nlevels` levels; level 0 holds data blocks of `data_block_size`
//!   bytes, each indirect block holds `2^indirect_shift / 128` block pointers. Block `b` of
//!   an object lives at index `(b >> (bits * (L - 1))) & mask` of its level-`L` ancestor.
//! - Fill counts: a level-0 bp has fill 1 (0 for a hole); an indirect bp has the sum of its
//!   children. SEEK_DATA/SEEK_HOLE and sparse walks skip whole subtrees with them.
//! - [`zap`] objects store key-value pairs (directories, property lists) in their blocks.
//!
//! # State
//! In memory ([`ObjectSet`]): the meta-dnode's state, a map of objects changed since the last
//! sync (new dnode fields plus dirty level-0 blocks, or "freed"), the trees of freed objects
//! waiting to be released, its view of the clean-block cache (a bounded LRU of verified,
//! decompressed blocks keyed by block pointer: the set's own [`CacheStore`], or a domain of
//! one shared by every object set of the process, as the engine does, so that a hit is a
//! memory copy; `cache.rs`), and
//! where the last read of each of the recently read objects ended (`readahead`: reads of
//! several records are batched, and a sequential reader's next records, up to 1 MiB, are read
//! with them into the cache when the store reads in parallel).
//! A dirty level-0 block may be written ahead of its sync ([`ObjectSet::write_ahead`], ZFS's
//! `dmu_sync` for `logbias=throughput`): its block pointer, born in the txg the next sync
//! runs in, is kept beside the dirty bytes and adopted by that sync instead of a new write;
//! any change of the block drops it (the owner frees a block not adopted).
//! The engine's pre-write takes whole dirty records of data objects
//! ([`ObjectSet::prewrite_candidates`]: references to their bytes, which an edit meanwhile
//! copies instead of changing) and writes them without the pool lock; it records a block so
//! written only while the record still holds those very bytes
//! ([`ObjectSet::adopt_prewritten`]), and the sync then adopts it like any block written
//! ahead.
//! A dirty level-0 block may also be a clone ([`ObjectSet::clone_blocks`], block cloning):
//! the committed pointer of another object's block, which the sync turns into a new
//! reference (`BlockStore::clone_block`) instead of writing bytes; a read goes through it,
//! a partial write copies it.
//! A record of a data object (a file's or volume's; not metadata) dirtied by partial writes
//! is kept as its written pieces over its committed block or over zeros (`pieces`), not as
//! a whole copy: it costs the dirty limit ([`ObjectSet::dirty_bytes`]) the bytes written
//! plus a small overhead per piece, and its sync estimate a whole block. A read lays the
//! pieces over the committed block (read only when the pieces do not cover the range); the
//! sync, a write-ahead and every other user that needs the record whole merges it; a
//! whole-record write replaces the pieces, a punch or a zero write merges them into a copy
//! (so a record of zeros becomes a hole as it always did).
//! Indirect blocks are never dirty between syncs: [`ObjectSet::sync`] rebuilds the ones above
//! dirty blocks from the old indirect block and the new children. On disk: docs/FORMAT.md,
//! section "Objects" (dnode, object-set root, indirect blocks, ZAP).
//!
//! # Invariants
//! - I1: the clean-block cache never holds more than its byte limit; dirty buffers never live
//!   in it and are never evicted; every entry holds exactly the logical bytes of the block
//!   pointer it is keyed by, as the store verified them (or as this set wrote them at sync),
//!   and one domain's entries are never returned to another.
//! - I2: an object id is in exactly one state: free, allocated on disk, or in the changed map
//!   (live or freed); object 0 is the meta-dnode and never handed out.
//! - I3: a synced tree addresses `maxblkid` (`nlevels` grows at sync when it does not), and
//!   `nlevels <= INDIRECTION_LEVELS_MAX`; a non-hole root has level `nlevels - 1`.
//! - I4: `used_bytes` of a dnode equals the allocated size of every block in its tree;
//!   indirect fill equals the sum of its children's fill.
//! - I5: after a successful sync nothing is dirty; every block replaced or punched in the txg
//!   was passed to `free_block` exactly once, and no block still referenced ever was.
//! - I6: a block pointer read has birth txg <= the store's txg (temporal incursion check).
//!
//! # Concurrency and context
//! An [`ObjectSet`] is owned by one thread (the pool's sync thread or a test); methods take
//! `&mut self`. A shared [`CacheStore`] is the one thing several owners touch: its mutex is
//! held only for a lookup, an insert or a purge, never across a store read, and no other lock
//! is taken under it. Open-context changes and syncing are serialized by the owner: the pool
//! quiesces writers before calling `sync`, as ZFS does between the open and syncing txg
//! states.
//!
//! # Failure model
//! - Bytes from disk (dnodes, indirect blocks, ZAP blocks, the root) are input: bad ones are
//!   [`ObjectError::Corrupt`], never a panic. Unrecoverable reads surface as
//!   [`ObjectError::Io`] naming the object and offset.
//! - A partial write into a clean record reads its committed block first (through the
//!   cache), as ZFS reads a block before dirtying part of it: an unreadable record fails the
//!   write with [`ObjectError::Io`] and nothing is dirtied, exactly as with whole copies. The
//!   write keeps no copy: the sync merges over the committed block, from the cache or read
//!   again. Should it have gone bad within that txg (bit rot beyond parity between the
//!   write and the sync), the sync fails as it does for any unreadable block it must read
//!   (old indirect blocks): the set is poisoned, no block of the txg is committed, and no
//!   wrong byte is written; the pieces are lost with the rest of that txg's changes, which
//!   the owner replays from its intent log. Keeping the pieces dirty into the next txg
//!   instead was rejected: the txg would commit without them while the intent log that
//!   holds them is trimmed at that commit, so a crash would lose an acknowledged `fsync`.
//! - A failed `sync` leaves the in-memory set half-applied, so it is poisoned: every later
//!   call returns [`ObjectError::Poisoned`] and the owner reopens from the last committed root
//!   (which the copy-on-write discipline kept intact).
//! - An object set whose root block cannot be read is still given to its owner, as
//!   [`ObjectSet::unavailable`]: it keeps the root block pointer and refuses every call with
//!   [`ObjectError::Unavailable`], so one lost root costs that object set, not everything
//!   its owner holds (the engine imports the pool and fails only that dataset).
//! - A broken in-memory invariant is a bug and panics (`assert!`, on in release).
//!
//! # Not here
//! Snapshots, dead lists and deciding whether a freed block is reusable (the store and the
//! dataset layer); txg timing and the write throttle's policy (tarn-pool reads
//! [`ObjectSet::dirty_bytes`]); what an owner is (the [`SyncHook`] of `accounting` gets each
//! changed dnode's bonus and used bytes at sync; the POSIX layer keeps the counts); concurrent
//! access (the owner serializes).

pub mod accounting;
mod cache;
mod dnode_cache;
pub mod objset;
mod pieces;
mod readahead;
mod readout;
mod send;
mod tree;
pub mod zap;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_pieces;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use accounting::{SyncHook, UsedChange, UsedState};
pub use cache::{
    CacheDomain, CachePolicy, CacheStats, CacheStore, ENTRY_OVERHEAD as CACHE_ENTRY_OVERHEAD,
};
pub use objset::{
    CACHE_BYTES_DEFAULT, META_DNODE_OBJECT, OBJECT_ID_LIMIT, ObjectSet, PrewriteBlock,
    WRITE_AHEAD_BATCH, visit_object_set, visit_object_set_born_after,
};
pub use readahead::{Ahead, EachBlock, Fetch, ReadJob};
pub use readout::{ReadOut, Run};
pub use send::{
    BlockChange, check_data_block, data_block_read, stored_block_read, stored_compressed,
};
pub use tarn_format::objset::ObjsetKind;
pub use zap::{ZAP_KEY_MAX, ZAP_VALUE_MAX, ZapByteEntries, ZapCursor, ZapEntries};

use tarn_base::ObjectId;
use tarn_format::{ChecksumKind, CompressSetting, FormatError};

/// An upper bound of what the next sync of an object set writes, in logical bytes before
/// compression, parity and padding: the blocks that get a dataset's data copies and those
/// that get its metadata copies ([`ObjsetWriteConfig::copies_for`]). Write admission turns
/// it into allocated bytes on the pool's vdevs, so that a txg it admitted always finds the
/// space it needs to commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncEstimate {
    /// Level-0 blocks of plain objects (file and volume data).
    pub data_blocks: u64,
    /// Their bytes.
    pub data_bytes: u64,
    /// Every other block: indirect blocks, dnode blocks, metadata objects, the root.
    pub meta_blocks: u64,
    /// Their bytes.
    pub meta_bytes: u64,
}

impl SyncEstimate {
    /// Both estimates together.
    #[must_use]
    pub fn plus(self, other: SyncEstimate) -> SyncEstimate {
        SyncEstimate {
            data_blocks: self.data_blocks.saturating_add(other.data_blocks),
            data_bytes: self.data_bytes.saturating_add(other.data_bytes),
            meta_blocks: self.meta_blocks.saturating_add(other.meta_blocks),
            meta_bytes: self.meta_bytes.saturating_add(other.meta_bytes),
        }
    }

    /// `self` without `part`, which it must contain (a running total losing one term).
    fn minus(self, part: SyncEstimate) -> SyncEstimate {
        let sub = |a: u64, b: u64| {
            assert!(b <= a, "sync estimate term {b} larger than the total {a}");
            a - b
        };
        SyncEstimate {
            data_blocks: sub(self.data_blocks, part.data_blocks),
            data_bytes: sub(self.data_bytes, part.data_bytes),
            meta_blocks: sub(self.meta_blocks, part.meta_blocks),
            meta_bytes: sub(self.meta_bytes, part.meta_bytes),
        }
    }

    /// `count` metadata blocks of `size` bytes more.
    #[must_use]
    pub fn with_meta(self, count: u64, size: u64) -> SyncEstimate {
        self.plus(SyncEstimate {
            meta_blocks: count,
            meta_bytes: count.saturating_mul(size),
            ..SyncEstimate::default()
        })
    }
}
use tarn_zio::ZioError;

/// How an object set writes its blocks. Metadata (indirect blocks, dnode blocks, the root,
/// objects marked metadata) gets `metadata_extra_copies` more copies, up to three, like ZFS's
/// `redundant_metadata=all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjsetWriteConfig {
    /// Checksum of every block (never `Off`).
    pub checksum: ChecksumKind,
    /// Compression tried on every block.
    pub compression: CompressSetting,
    /// Copies of data blocks (1..=3).
    pub copies: u8,
    /// Extra copies of metadata blocks (those `redundant_metadata` picks).
    pub metadata_extra_copies: u8,
    /// Which metadata blocks get the extra copies (the dataset's `redundant_metadata`).
    pub redundant_metadata: RedundantMetadata,
    /// The dataset's `special_small_blocks`: file data blocks of at most this many physical
    /// bytes go to the special allocation class (0: none do; metadata always does).
    pub special_small_blocks: u64,
}

impl Default for ObjsetWriteConfig {
    fn default() -> Self {
        ObjsetWriteConfig {
            checksum: ChecksumKind::Fletcher4,
            compression: CompressSetting::Lz4,
            copies: 1,
            metadata_extra_copies: 1,
            redundant_metadata: RedundantMetadata::All,
            special_small_blocks: 0,
        }
    }
}

/// Which metadata blocks get extra copies (ZFS's `redundant_metadata`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RedundantMetadata {
    /// Every metadata block.
    #[default]
    All,
    /// All but the level-1 indirect blocks over file data (losing one loses only the data
    /// it points at).
    Most,
    /// Only the blocks whose loss takes every object with them: the object-set root and
    /// the dnode blocks.
    Some,
    /// None.
    None,
}

impl RedundantMetadata {
    /// The setting a `redundant_metadata` value names (`all`, `most`, `some`, `none`);
    /// anything else is `All`, the default.
    #[must_use]
    pub fn parse(value: &str) -> RedundantMetadata {
        match value {
            "most" => RedundantMetadata::Most,
            "some" => RedundantMetadata::Some,
            "none" => RedundantMetadata::None,
            _ => RedundantMetadata::All,
        }
    }
}

/// What a block is to its object set, for the copies it gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockRole {
    /// File or volume data (level 0).
    Data,
    /// A level-1 indirect block over file or volume data.
    DataIndirect,
    /// Other metadata: ZAP blocks, higher indirect blocks, bonus-heavy objects.
    Metadata,
    /// The object-set root and the meta-dnode's tree (every dnode).
    Critical,
}

impl ObjsetWriteConfig {
    /// Copies for a block of `role`: `copies`, plus `metadata_extra_copies` for the metadata
    /// `redundant_metadata` picks, at most `COPIES_MAX`.
    #[must_use]
    pub fn copies_for(&self, role: BlockRole) -> u8 {
        assert!(self.copies >= 1, "write config with zero copies");
        let max = tarn_base::limits::COPIES_MAX as u8;
        let extra = match (self.redundant_metadata, role) {
            (_, BlockRole::Data) | (RedundantMetadata::None, _) => false,
            (RedundantMetadata::All, _) | (_, BlockRole::Critical) => true,
            (RedundantMetadata::Most, role) => role == BlockRole::Metadata,
            (RedundantMetadata::Some, _) => false,
        };
        let copies = match extra {
            true => self.copies.saturating_add(self.metadata_extra_copies),
            false => self.copies,
        };
        copies.min(max)
    }
}

/// Where a visited block pointer sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockContext {
    /// Object owning the tree (0 for the meta-dnode and the root).
    pub object: ObjectId,
    /// Level in the tree (0 = data), or [`BlockContext::ROOT_LEVEL`] for the root block.
    pub level: u8,
    /// Block id at that level.
    pub blkid: u64,
}

impl BlockContext {
    /// Level reported for the object-set root block.
    pub const ROOT_LEVEL: u8 = u8::MAX;
}

/// Facts about one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DnodeInfo {
    /// Object type.
    pub object_type: u8,
    /// Logical size of each data block.
    pub data_block_size: u32,
    /// log2 of the indirect block size.
    pub indirect_shift: u8,
    /// Levels of the tree as of the last sync.
    pub nlevels: u8,
    /// Highest block id ever written.
    pub maxblkid: u64,
    /// Allocated bytes of the tree as of the last sync.
    pub used_bytes: u64,
    /// Bonus buffer type.
    pub bonus_type: u8,
    /// Bonus buffer length.
    pub bonus_len: u16,
    /// Level-0 blocks are written as metadata.
    pub metadata: bool,
}

/// Why an object operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ObjectError {
    /// A block of the object could not be read or written.
    #[error("object {} at offset {offset}: {source}", object.0)]
    Io {
        /// Object whose block failed.
        object: ObjectId,
        /// Byte offset in the object (0 for metadata blocks).
        offset: u64,
        /// What the I/O pipeline reported.
        source: ZioError,
    },
    /// The object is not allocated.
    #[error("object {} does not exist", object.0)]
    NoSuchObject {
        /// Object asked for.
        object: ObjectId,
    },
    /// The object id is already allocated.
    #[error("object {} is already in use", object.0)]
    ObjectInUse {
        /// Object asked for.
        object: ObjectId,
    },
    /// An argument is out of range.
    #[error("object {}: invalid {what} {value}", object.0)]
    InvalidArgument {
        /// Object concerned (0 when none).
        object: ObjectId,
        /// Which argument.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// Bytes read from disk do not decode (a dnode, an indirect block, a ZAP block).
    #[error("object {} is corrupt: {why}", object.0)]
    Corrupt {
        /// Object whose metadata is bad.
        object: ObjectId,
        /// What was wrong.
        why: &'static str,
        /// The decoding error, when there is one.
        source: Option<FormatError>,
    },
    /// `zap_insert` of a key that exists.
    #[error("object {}: key {key:?} already exists", object.0)]
    KeyExists {
        /// ZAP object.
        object: ObjectId,
        /// The key.
        key: String,
    },
    /// `zap_remove` of a key that does not exist.
    #[error("object {}: no key {key:?}", object.0)]
    NoSuchKey {
        /// ZAP object.
        object: ObjectId,
        /// The key.
        key: String,
    },
    /// A structural limit was reached (object ids, ZAP hash table size).
    #[error("object {}: {what} limit reached", object.0)]
    LimitReached {
        /// Object concerned.
        object: ObjectId,
        /// Which limit.
        what: &'static str,
    },
    /// A previous sync failed half-way; reopen the object set from its last committed root.
    #[error("object set is unusable after a failed sync")]
    Poisoned,
    /// The object set's root block could not be read when it was opened
    /// ([`ObjectSet::unavailable`]): nothing of it can be read or changed.
    #[error("its object set cannot be read ({why})")]
    Unavailable {
        /// The error of the root block's read.
        why: String,
    },
}

impl ObjectError {
    /// An I/O error of a block whose place in the object was not known where it happened
    /// (offset 0) placed at byte `offset`; any other error unchanged.
    #[must_use]
    pub(crate) fn at_offset(self, offset: u64) -> ObjectError {
        match self {
            ObjectError::Io {
                object,
                offset: 0,
                source,
            } => ObjectError::Io {
                object,
                offset,
                source,
            },
            other => other,
        }
    }
}
