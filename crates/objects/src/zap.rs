//! ZAP: key-value objects (string key up to 255 bytes, value up to 1 KiB), the storage of
//! directories and property lists.
//!
//! # Model
//! A ZAP object has 4 KiB blocks and starts in the *micro* form: block 0 holds every entry,
//! sorted by key. When an insert no longer fits, it upgrades to the *fat* form, extendible
//! hashing over `hash(key)` = the first 8 bytes of BLAKE3(key), read little-endian:
//!
//! ```text
//!  block 0: header (table_shift T, table location, counts)
//!  table:   2^T leaf block ids, indexed by the top T bits of the hash
//!  leaves:  entries sorted by (hash, key); a leaf of depth d owns every hash whose top d
//!           bits equal its prefix, i.e. 2^(T-d) consecutive table slots
//! ```
//! A full leaf splits on its next hash bit (the table doubles first when d == T); a removal
//! merges a leaf with its buddy when both fit in three quarters of a block, the table halves
//! when no leaf needs its last bit, and a fat ZAP of one leaf whose entries fit the micro form
//! goes back to it. Listing follows (hash, key) order in both forms, so a [`ZapCursor`] stays
//! valid across form changes and across inserts and removals of other keys.
//!
//! A lookup walks the encoded entries of one block without decoding it; an insert, a
//! removal and an update edit the block in place (the entries after the change move,
//! nothing else is re-encoded). Only splits, merges and form changes decode and re-encode.
//!
//! # Invariants
//! - Z1: every key is in exactly one leaf, the one the table names for its hash prefix.
//! - Z2: the header's entry and leaf counts match the leaves.
//! - Z3: every block in use (header, table, leaves) is non-zero, so the free blocks of a ZAP
//!   object are exactly its holes; leaves are allocated from the first hole.

use crate::{ObjectError, ObjectSet};
use std::cmp::Ordering;
use std::ops::Range;
use tarn_base::ObjectId;
use tarn_format::compress::is_all_zero;
use tarn_format::dnode::OBJECT_TYPE_NONE;
use tarn_zio::BlockStore;

/// Longest key in bytes.
pub const ZAP_KEY_MAX: usize = 255;
/// Longest value in bytes.
pub const ZAP_VALUE_MAX: usize = 1024;
/// Block size of ZAP objects.
pub const ZAP_BLOCK_SIZE: u32 = 4096;
/// Largest hash-table shift (2^24 leaves, over a billion typical entries).
pub const ZAP_TABLE_SHIFT_MAX: u8 = 24;

const BS: usize = ZAP_BLOCK_SIZE as usize;
const MICRO_MAGIC: u64 = 0x6f72_6369_6d70_617a; // "zapmicro"
const FAT_MAGIC: u64 = 0x7461_6672_6461_657a; // "zeadrfat"
const LEAF_MAGIC: u64 = 0x6661_656c_7061_7a74; // "tzapleaf"
const MICRO_HEADER: usize = 16;
const LEAF_HEADER: usize = 32;
const MICRO_ENTRY_OVERHEAD: usize = 3;
const LEAF_ENTRY_OVERHEAD: usize = 11;
/// Two leaves merge when together they fill at most this much of a block (hysteresis against
/// split/merge thrashing).
const MERGE_LIMIT: usize = BS * 3 / 4;

const _: () = assert!(LEAF_HEADER + 3 * (LEAF_ENTRY_OVERHEAD + ZAP_KEY_MAX + ZAP_VALUE_MAX) <= BS);
const _: () =
    assert!(MICRO_HEADER + 2 * (MICRO_ENTRY_OVERHEAD + ZAP_KEY_MAX + ZAP_VALUE_MAX) <= BS);

/// The hash of a key: the first 8 bytes of BLAKE3(key), little-endian.
#[must_use]
pub fn zap_hash(key: &[u8]) -> u64 {
    let digest = blake3::hash(key);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

/// Listed entries: (key, value) pairs.
pub type ZapEntries = Vec<(String, Vec<u8>)>;

/// Listed entries with byte keys.
pub type ZapByteEntries = Vec<(Vec<u8>, Vec<u8>)>;

/// Position in a listing: entries after (hash, key) come next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZapCursor {
    hash: u64,
    key: Vec<u8>,
}

impl ZapCursor {
    /// The position after every entry whose hash is at most `hash` (a key longer than any
    /// valid key sorts after all of them).
    #[must_use]
    pub fn after_hash(hash: u64) -> ZapCursor {
        ZapCursor {
            hash,
            key: vec![0xff; ZAP_KEY_MAX + 1],
        }
    }

    /// The hash of the entry this cursor points after.
    #[must_use]
    pub fn hash(&self) -> u64 {
        self.hash
    }
}

/// One decoded entry, borrowing its block.
#[derive(Clone, Copy, Debug)]
struct Entry<'a> {
    hash: u64,
    key: &'a [u8],
    value: &'a [u8],
}

impl Entry<'_> {
    fn order(&self, hash: u64, key: &[u8]) -> Ordering {
        (self.hash, self.key).cmp(&(hash, key))
    }
}

struct Leaf<'a> {
    prefix_len: u8,
    prefix: u64,
    entries: Vec<Entry<'a>>,
}

#[derive(Clone, Copy, Debug)]
struct Header {
    table_shift: u8,
    table_blkid: u64,
    table_blocks: u64,
    entries: u64,
    leaves: u64,
    free_hint: u64,
}

fn table_blocks_for(shift: u8) -> u64 {
    (8u64 << shift).div_ceil(BS as u64)
}

fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let mut word = [0u8; 8];
    word.copy_from_slice(bytes.get(at..at + 8)?);
    Some(u64::from_le_bytes(word))
}

fn le_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let mut word = [0u8; 4];
    word.copy_from_slice(bytes.get(at..at + 4)?);
    Some(u32::from_le_bytes(word))
}

fn le_u16(bytes: &[u8], at: usize) -> Option<u16> {
    let mut word = [0u8; 2];
    word.copy_from_slice(bytes.get(at..at + 2)?);
    Some(u16::from_le_bytes(word))
}

fn corrupt(object: ObjectId, why: &'static str) -> ObjectError {
    ObjectError::Corrupt {
        object,
        why,
        source: None,
    }
}

/// One encoded entry: where it ends, its stored hash (0 without one), its key and value.
struct RawEntry<'a> {
    end: usize,
    hash: u64,
    key: &'a [u8],
    value: Range<usize>,
}

/// The encoded entry at `at` (`with_hash` for leaves), its sizes and bounds checked: every
/// walk of a block's entries reads them through here.
fn entry_at(
    object: ObjectId,
    block: &[u8],
    mut at: usize,
    with_hash: bool,
) -> Result<RawEntry<'_>, ObjectError> {
    let bad = || corrupt(object, "bad ZAP entry");
    let hash = if with_hash {
        let hash = le_u64(block, at).ok_or_else(bad)?;
        at += 8;
        hash
    } else {
        0
    };
    let key_len = usize::from(*block.get(at).ok_or_else(bad)?);
    let value_len = usize::from(le_u16(block, at + 1).ok_or_else(bad)?);
    at += 3;
    if key_len == 0 || value_len > ZAP_VALUE_MAX {
        return Err(bad());
    }
    let key = block.get(at..at + key_len).ok_or_else(bad)?;
    let value = at + key_len..at + key_len + value_len;
    if value.end > block.len() {
        return Err(bad());
    }
    Ok(RawEntry {
        end: value.end,
        hash,
        key,
        value,
    })
}

/// Decodes `count` entries starting at `at`; `with_hash` for leaves. Checks sizes, UTF-8 and
/// strict ordering, so a decoded list is always well-formed.
fn decode_entries(
    object: ObjectId,
    block: &[u8],
    mut at: usize,
    count: u32,
    with_hash: bool,
) -> Result<Vec<Entry<'_>>, ObjectError> {
    let mut entries: Vec<Entry<'_>> = Vec::with_capacity((count as usize).min(BS / 4));
    for _ in 0..count {
        // Leaves carry the hash; recomputing it on every decode would dominate the cost of
        // an operation, and the block's checksum already vouches for it. Micro entries get
        // their hash only where an order by hash is needed (listing).
        let raw = entry_at(object, block, at, with_hash)?;
        at = raw.end;
        let (hash, key) = (raw.hash, raw.key);
        let entry = Entry {
            hash,
            key,
            value: &block[raw.value],
        };
        if let Some(last) = entries.last() {
            let ordered = if with_hash {
                last.order(hash, key)
            } else {
                last.key.cmp(key)
            };
            if ordered != Ordering::Less {
                return Err(corrupt(object, "ZAP entries out of order"));
            }
        }
        entries.push(entry);
    }
    if block.get(at..).is_some_and(|rest| !is_all_zero(rest)) {
        return Err(corrupt(object, "ZAP block has bytes after its entries"));
    }
    Ok(entries)
}

/// Where a key sits among `count` encoded entries: [`seek_entry`]'s answer.
struct Seek {
    /// Offset of the first entry that does not sort before the key (the end of the walked
    /// entries when every one does): where the key is, or where it would go.
    start: usize,
    /// The byte range of the key's value, when the entry at `start` is the key (its entry
    /// ends where its value does).
    value: Option<Range<usize>>,
    /// How many entries come before `start`.
    index: u32,
}

/// Finds where `key` (whose hash is `hash`; ignored without `with_hash`) sits among the
/// `count` encoded entries at `at`, without decoding the block: entries are walked in their
/// stored order ((hash, key) in leaves, key in micro blocks) and the walk stops at the
/// first one that does not sort before the key, so a lookup reads half a block on average
/// and allocates nothing. Every entry walked is checked as [`decode_entries`] checks it
/// (sizes, bounds, strict order); the entries after the stop and the block's tail are not
/// looked at. Changes that go through here (inserts, removals and updates in place) rely on
/// the block's checksum for those; a split, a merge or a listing decodes the whole block
/// and still finds damage there.
fn seek_entry(
    object: ObjectId,
    block: &[u8],
    mut at: usize,
    count: u32,
    with_hash: bool,
    (hash, key): (u64, &[u8]),
) -> Result<Seek, ObjectError> {
    let target = (if with_hash { hash } else { 0 }, key);
    let mut last: Option<(u64, &[u8])> = None;
    for index in 0..count {
        let start = at;
        let RawEntry {
            end,
            hash: stored_hash,
            key: entry_key,
            value,
        } = entry_at(object, block, at, with_hash)?;
        at = end;
        let here = (stored_hash, entry_key);
        if last.is_some_and(|last| last >= here) {
            return Err(corrupt(object, "ZAP entries out of order"));
        }
        last = Some(here);
        match here.cmp(&target) {
            Ordering::Less => {}
            Ordering::Equal => {
                return Ok(Seek {
                    start,
                    value: Some(value),
                    index,
                });
            }
            Ordering::Greater => {
                return Ok(Seek {
                    start,
                    value: None,
                    index,
                });
            }
        }
    }
    Ok(Seek {
        start: at,
        value: None,
        index: count,
    })
}

/// Where the `count` micro entries from `at` on end, their sizes and bounds checked as
/// [`seek_entry`] checks them (a micro block keeps no byte total).
fn micro_entries_end(
    object: ObjectId,
    block: &[u8],
    mut at: usize,
    count: u32,
) -> Result<usize, ObjectError> {
    for _ in 0..count {
        at = entry_at(object, block, at, false)?.end;
    }
    Ok(at)
}

fn micro_size(entries: &[Entry<'_>]) -> usize {
    MICRO_HEADER
        + entries
            .iter()
            .map(|e| MICRO_ENTRY_OVERHEAD + e.key.len() + e.value.len())
            .sum::<usize>()
}

fn leaf_size(entries: &[Entry<'_>]) -> usize {
    LEAF_HEADER
        + entries
            .iter()
            .map(|e| LEAF_ENTRY_OVERHEAD + e.key.len() + e.value.len())
            .sum::<usize>()
}

fn put_entry(out: &mut Vec<u8>, entry: &Entry<'_>, with_hash: bool) {
    if with_hash {
        out.extend_from_slice(&entry.hash.to_le_bytes());
    }
    out.push(entry.key.len() as u8);
    out.extend_from_slice(&(entry.value.len() as u16).to_le_bytes());
    out.extend_from_slice(entry.key);
    out.extend_from_slice(entry.value);
}

/// Encodes a micro block from entries sorted by key.
/// The block of an empty micro ZAP (what [`ObjectSet::zap_create`] writes).
pub(crate) fn empty_micro() -> Vec<u8> {
    encode_micro(&[])
}

fn encode_micro(entries: &[Entry<'_>]) -> Vec<u8> {
    assert!(micro_size(entries) <= BS, "micro ZAP overflow");
    let mut out = Vec::with_capacity(BS);
    out.extend_from_slice(&MICRO_MAGIC.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    for entry in entries {
        put_entry(&mut out, entry, false);
    }
    out.resize(BS, 0);
    out
}

fn encode_leaf(prefix_len: u8, prefix: u64, entries: &[Entry<'_>]) -> Vec<u8> {
    assert!(leaf_size(entries) <= BS, "ZAP leaf overflow");
    let mut out = Vec::with_capacity(BS);
    out.extend_from_slice(&LEAF_MAGIC.to_le_bytes());
    out.push(prefix_len);
    out.extend_from_slice(&[0; 7]);
    out.extend_from_slice(&prefix.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    out.extend_from_slice(&((leaf_size(entries) - LEAF_HEADER) as u32).to_le_bytes());
    for entry in entries {
        put_entry(&mut out, entry, true);
    }
    out.resize(BS, 0);
    out
}

/// The fixed fields of a leaf.
struct LeafHead {
    prefix_len: u8,
    prefix: u64,
    count: u32,
    entry_bytes: usize,
}

fn leaf_head(object: ObjectId, block: &[u8]) -> Result<LeafHead, ObjectError> {
    let bad = || corrupt(object, "bad ZAP leaf header");
    if le_u64(block, 0) != Some(LEAF_MAGIC) {
        return Err(corrupt(object, "ZAP leaf has a bad magic number"));
    }
    let prefix_len = *block.get(8).ok_or_else(bad)?;
    let prefix = le_u64(block, 16).ok_or_else(bad)?;
    let count = le_u32(block, 24).ok_or_else(bad)?;
    let entry_bytes = le_u32(block, 28).ok_or_else(bad)? as usize;
    if prefix_len > 64 || (prefix_len < 64 && prefix >> prefix_len != 0) {
        return Err(bad());
    }
    if LEAF_HEADER + entry_bytes > BS {
        return Err(bad());
    }
    Ok(LeafHead {
        prefix_len,
        prefix,
        count,
        entry_bytes,
    })
}

fn decode_leaf(object: ObjectId, block: &[u8]) -> Result<Leaf<'_>, ObjectError> {
    let LeafHead {
        prefix_len,
        prefix,
        count,
        entry_bytes,
    } = leaf_head(object, block)?;
    let entries = decode_entries(object, block, LEAF_HEADER, count, true)?;
    if leaf_size(&entries) != LEAF_HEADER + entry_bytes {
        return Err(corrupt(
            object,
            "ZAP leaf byte count does not match its entries",
        ));
    }
    if entries
        .iter()
        .any(|e| prefix_len > 0 && e.hash >> (64 - u32::from(prefix_len)) != prefix)
    {
        return Err(corrupt(object, "ZAP entry in the wrong leaf"));
    }
    Ok(Leaf {
        prefix_len,
        prefix,
        entries,
    })
}

fn encode_header(header: &Header) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&FAT_MAGIC.to_le_bytes());
    out.push(header.table_shift);
    out.extend_from_slice(&[0; 7]);
    for word in [
        header.table_blkid,
        header.table_blocks,
        header.entries,
        header.leaves,
        header.free_hint,
    ] {
        out.extend_from_slice(&word.to_le_bytes());
    }
    out
}

fn decode_header(object: ObjectId, bytes: &[u8]) -> Result<Header, ObjectError> {
    let bad = || corrupt(object, "bad ZAP header");
    let field = |at| le_u64(bytes, at).ok_or_else(bad);
    let header = Header {
        table_shift: *bytes.get(8).ok_or_else(bad)?,
        table_blkid: field(16)?,
        table_blocks: field(24)?,
        entries: field(32)?,
        leaves: field(40)?,
        free_hint: field(48)?,
    };
    if header.table_shift > ZAP_TABLE_SHIFT_MAX
        || header.table_blkid == 0
        || header.table_blocks != table_blocks_for(header.table_shift)
        || header.leaves == 0
        || header.leaves > 1 << header.table_shift
        || header.free_hint == 0
    {
        return Err(bad());
    }
    Ok(header)
}

/// Which form block 0 is in.
enum Form {
    Micro,
    Fat(Header),
}

/// Where [`ObjectSet::zap_find`] looked for a key: the block (micro block 0 or a leaf) and,
/// when the key is there, where its value starts in the block and a copy of it.
struct Found {
    blkid: u64,
    value: Option<(usize, Vec<u8>)>,
}

/// An edit of a ZAP block in place ([`leaf_splice`], [`micro_splice`]): `bytes` go at
/// `offset` of the block and `head` (the header's entry count, and a leaf's byte total) at
/// `head_at`.
struct Splice {
    offset: usize,
    bytes: Vec<u8>,
    head_at: usize,
    head: Vec<u8>,
}

/// The bytes from `range.start` on of a block whose entries run from `first` to `used`, once
/// the entries in `range` are replaced by `new` (none: a removal): the entries after the
/// range move, the bytes they leave are zeroed. Also where the entries then end. Only the
/// bytes from the change on are rewritten: no decode and no re-encode of the block, whose
/// insert and removal are the cost of every create and unlink.
fn splice_entries(
    id: ObjectId,
    block: &[u8],
    (first, used): (usize, usize),
    range: Range<usize>,
    new: Option<&Entry<'_>>,
    with_hash: bool,
) -> Result<(Vec<u8>, usize), ObjectError> {
    if range.start < first || range.end < range.start || range.end > used || used > block.len() {
        return Err(corrupt(id, "ZAP block's entries end before the edit"));
    }
    let mut bytes = Vec::with_capacity(BS - range.start);
    if let Some(new) = new {
        put_entry(&mut bytes, new, with_hash);
    }
    bytes.extend_from_slice(&block[range.end..used]);
    let new_used = range.start + bytes.len();
    assert!(new_used <= BS, "ZAP block overflow");
    bytes.resize(bytes.len().max(used - range.start), 0);
    Ok((bytes, new_used))
}

/// [`splice_entries`] in a leaf, which then holds `count` entries.
fn leaf_splice(
    id: ObjectId,
    block: &[u8],
    head: &LeafHead,
    range: Range<usize>,
    new: Option<&Entry<'_>>,
    count: u32,
) -> Result<Splice, ObjectError> {
    let used = LEAF_HEADER + head.entry_bytes;
    let offset = range.start;
    let (bytes, new_used) = splice_entries(id, block, (LEAF_HEADER, used), range, new, true)?;
    let mut fields = count.to_le_bytes().to_vec();
    fields.extend_from_slice(&((new_used - LEAF_HEADER) as u32).to_le_bytes());
    Ok(Splice {
        offset,
        bytes,
        head_at: 24,
        head: fields,
    })
}

/// [`splice_entries`] in a micro block whose entries end at `used`, which then holds
/// `count` entries.
fn micro_splice(
    id: ObjectId,
    block: &[u8],
    used: usize,
    range: Range<usize>,
    new: Option<&Entry<'_>>,
    count: u32,
) -> Result<Splice, ObjectError> {
    let offset = range.start;
    let (bytes, _) = splice_entries(id, block, (MICRO_HEADER, used), range, new, false)?;
    Ok(Splice {
        offset,
        bytes,
        head_at: 8,
        head: count.to_le_bytes().to_vec(),
    })
}

fn hash_index(hash: u64, shift: u8) -> u64 {
    if shift == 0 {
        0
    } else {
        hash >> (64 - u32::from(shift))
    }
}

impl ObjectSet {
    fn zap_check(
        &self,
        object: ObjectId,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), ObjectError> {
        if key.is_empty() || key.len() > ZAP_KEY_MAX {
            return Err(ObjectError::InvalidArgument {
                object,
                what: "ZAP key length",
                value: key.len() as u64,
            });
        }
        if let Some(value) = value
            && value.len() > ZAP_VALUE_MAX
        {
            return Err(ObjectError::InvalidArgument {
                object,
                what: "ZAP value length",
                value: value.len() as u64,
            });
        }
        Ok(())
    }

    /// Runs `f` on ZAP block `blkid` in place (a hole reads as zeros, which no ZAP block
    /// is). Block ids come from ZAP blocks on disk: an absurd one is corruption, not overflow.
    fn zap_with_block<R>(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        blkid: u64,
        f: impl FnOnce(&[u8]) -> Result<R, ObjectError>,
    ) -> Result<R, ObjectError> {
        static HOLE: [u8; BS] = [0; BS];
        if blkid
            .checked_mul(BS as u64)
            .and_then(|offset| offset.checked_add(BS as u64))
            .is_none()
        {
            return Err(corrupt(id, "ZAP block id out of range"));
        }
        self.with_block(store, id, blkid, |block| match block {
            None => f(&HOLE),
            Some(block) if block.len() == BS => f(block),
            Some(_) => Err(corrupt(id, "ZAP object has the wrong block size")),
        })
    }

    /// A copy of ZAP block `blkid`, for the changes that decode a whole block.
    fn zap_block(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        blkid: u64,
    ) -> Result<Vec<u8>, ObjectError> {
        self.zap_with_block(store, id, blkid, |block| Ok(block.to_vec()))
    }

    fn zap_form(&mut self, store: &dyn BlockStore, id: ObjectId) -> Result<Form, ObjectError> {
        self.zap_with_block(store, id, 0, |block| match le_u64(block, 0) {
            Some(MICRO_MAGIC) => Ok(Form::Micro),
            Some(FAT_MAGIC) => Ok(Form::Fat(decode_header(id, block)?)),
            _ => Err(corrupt(id, "ZAP block 0 has a bad magic number")),
        })
    }

    fn zap_put_header(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        header: &Header,
    ) -> Result<(), ObjectError> {
        self.write(store, id, 0, &encode_header(header))
    }

    fn zap_table_get(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        header: &Header,
        index: u64,
    ) -> Result<u64, ObjectError> {
        let at = header
            .table_blkid
            .checked_mul(BS as u64)
            .and_then(|start| start.checked_add(index.checked_mul(8)?))
            .ok_or_else(|| corrupt(id, "ZAP table out of range"))?;
        let within = (at % BS as u64) as usize;
        let blkid = self.zap_with_block(store, id, at / BS as u64, |table| {
            le_u64(table, within).ok_or_else(|| corrupt(id, "ZAP table out of range"))
        })?;
        let table_end = header.table_blkid + header.table_blocks;
        if blkid == 0 || (header.table_blkid..table_end).contains(&blkid) {
            return Err(corrupt(id, "ZAP table names a bad leaf"));
        }
        Ok(blkid)
    }

    fn zap_table_set_range(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        header: &Header,
        first: u64,
        count: u64,
        blkid: u64,
    ) -> Result<(), ObjectError> {
        let bytes: Vec<u8> = (0..count).flat_map(|_| blkid.to_le_bytes()).collect();
        self.write(
            store,
            id,
            header.table_blkid * BS as u64 + first * 8,
            &bytes,
        )
    }

    /// Checks that a leaf of depth `prefix_len` and prefix `prefix` may sit at table slot
    /// `index` (Z1); returns its first slot and its number of slots.
    fn zap_leaf_slots(
        id: ObjectId,
        header: &Header,
        (prefix_len, prefix): (u8, u64),
        index: u64,
    ) -> Result<(u64, u64), ObjectError> {
        if prefix_len > header.table_shift {
            return Err(corrupt(id, "ZAP leaf deeper than the table"));
        }
        let spare = u32::from(header.table_shift - prefix_len);
        if index >> spare != prefix {
            return Err(corrupt(id, "ZAP leaf prefix does not match its table slot"));
        }
        Ok((prefix << spare, 1u64 << spare))
    }

    /// Writes `splice` into block `blkid`.
    fn zap_apply_splice(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        blkid: u64,
        splice: &Splice,
    ) -> Result<(), ObjectError> {
        let base = blkid * BS as u64;
        self.write(store, id, base + splice.offset as u64, &splice.bytes)?;
        self.write(store, id, base + splice.head_at as u64, &splice.head)
    }

    /// A fresh ZAP object (micro form, empty) of `object_type`.
    pub fn zap_create(
        &mut self,
        store: &dyn BlockStore,
        object_type: u8,
    ) -> Result<ObjectId, ObjectError> {
        self.zap_create_where(store, object_type, &|_| true)
    }

    /// [`ObjectSet::zap_create`] at the lowest free id `usable` accepts
    /// ([`ObjectSet::allocate_object_where`]).
    pub fn zap_create_where(
        &mut self,
        store: &dyn BlockStore,
        object_type: u8,
        usable: &dyn Fn(u64) -> bool,
    ) -> Result<ObjectId, ObjectError> {
        let shape = (object_type, ZAP_BLOCK_SIZE, OBJECT_TYPE_NONE, 0);
        let id = self.allocate_object_where(store, shape, usable)?;
        self.set_metadata(store, id, true)?;
        self.write(store, id, 0, &encode_micro(&[]))?;
        Ok(id)
    }

    /// Inserts a new key; [`ObjectError::KeyExists`] when it is present.
    pub fn zap_insert(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        key: impl AsRef<[u8]>,
        value: &[u8],
    ) -> Result<(), ObjectError> {
        let key = key.as_ref();
        self.zap_put(store, id, key, value, false)
    }

    /// Inserts or replaces a key.
    pub fn zap_update(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        key: impl AsRef<[u8]>,
        value: &[u8],
    ) -> Result<(), ObjectError> {
        let key = key.as_ref();
        self.zap_put(store, id, key, value, true)
    }

    /// [`ObjectSet::zap_insert`] of a little-endian u64.
    pub fn zap_insert_u64(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        key: impl AsRef<[u8]>,
        value: u64,
    ) -> Result<(), ObjectError> {
        let key = key.as_ref();
        self.zap_put(store, id, key, &value.to_le_bytes(), false)
    }

    /// [`ObjectSet::zap_update`] of a little-endian u64.
    pub fn zap_update_u64(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        key: impl AsRef<[u8]>,
        value: u64,
    ) -> Result<(), ObjectError> {
        let key = key.as_ref();
        self.zap_put(store, id, key, &value.to_le_bytes(), true)
    }

    /// The value of `key`, if present.
    pub fn zap_lookup(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<Vec<u8>>, ObjectError> {
        let key = key.as_ref();
        self.zap_check(id, key, None)?;
        let hash = zap_hash(key);
        Ok(self
            .zap_find(store, id, hash, key)?
            .value
            .map(|(_, value)| value))
    }

    /// The block that holds or would hold `key` (hash `hash`) and where its value sits in
    /// it. Found by walking the encoded block (`seek_entry`), not by decoding all of it: a
    /// lookup is the most frequent ZAP operation (every path component, every create).
    fn zap_find(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        hash: u64,
        key: &[u8],
    ) -> Result<Found, ObjectError> {
        let (blkid, at, with_hash) = match self.zap_form(store, id)? {
            Form::Micro => (0, MICRO_HEADER, false),
            Form::Fat(header) => {
                let index = hash_index(hash, header.table_shift);
                let blkid = self.zap_table_get(store, id, &header, index)?;
                (blkid, LEAF_HEADER, true)
            }
        };
        self.zap_with_block(store, id, blkid, |block| {
            let count = if with_hash {
                leaf_head(id, block)?.count
            } else {
                micro_count(id, block)?
            };
            let seek = seek_entry(id, block, at, count, with_hash, (hash, key))?;
            Ok(Found {
                blkid,
                value: seek.value.map(|value| (value.start, block[value].to_vec())),
            })
        })
    }

    /// Adds `delta` to the little-endian u64 value of `key` (saturating at 0 and at
    /// `u64::MAX`) and returns the new value: one walk of one block and a write of its
    /// 8 bytes in place, for counters updated on every create and unlink.
    pub fn zap_add_u64(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        key: impl AsRef<[u8]>,
        delta: i64,
    ) -> Result<u64, ObjectError> {
        let key = key.as_ref();
        self.zap_check(id, key, None)?;
        let found = self.zap_find(store, id, zap_hash(key), key)?;
        let Some((at, old)) = found.value else {
            return Err(ObjectError::NoSuchKey {
                object: id,
                key: String::from_utf8_lossy(key).into_owned(),
            });
        };
        let old = le_u64(&old, 0)
            .filter(|_| old.len() == 8)
            .ok_or_else(|| corrupt(id, "ZAP value is not a u64"))?;
        let new = old.saturating_add_signed(delta);
        if new != old {
            let offset = found.blkid * BS as u64 + at as u64;
            self.write(store, id, offset, &new.to_le_bytes())?;
        }
        Ok(new)
    }

    /// The value of `key` as a little-endian u64 (a value of another length is corrupt).
    pub fn zap_lookup_u64(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<u64>, ObjectError> {
        let key = key.as_ref();
        match self.zap_lookup(store, id, key)? {
            None => Ok(None),
            Some(bytes) => le_u64(&bytes, 0)
                .filter(|_| bytes.len() == 8)
                .map(Some)
                .ok_or_else(|| corrupt(id, "ZAP value is not a u64")),
        }
    }

    /// Number of entries.
    pub fn zap_count(&mut self, store: &dyn BlockStore, id: ObjectId) -> Result<u64, ObjectError> {
        match self.zap_form(store, id)? {
            Form::Micro => {
                let block = self.zap_block(store, id, 0)?;
                Ok(decode_micro(id, &block)?.len() as u64)
            }
            Form::Fat(header) => Ok(header.entries),
        }
    }

    fn zap_put(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        key: &[u8],
        value: &[u8],
        replace: bool,
    ) -> Result<(), ObjectError> {
        self.zap_check(id, key, Some(value))?;
        let hash = zap_hash(key);
        if replace {
            // A value replaced by one of the same length keeps the block's layout: only its
            // bytes change, in place, with no decode and no re-encode of the block (a
            // counter such as the POSIX layer's inode count is updated on every create).
            let found = self.zap_find(store, id, hash, key)?;
            if let Some((at, old)) = found.value.filter(|(_, old)| old.len() == value.len()) {
                if old == value {
                    return Ok(());
                }
                return self.write(store, id, found.blkid * BS as u64 + at as u64, value);
            }
        }
        let new = Entry { hash, key, value };
        let header = match self.zap_form(store, id)? {
            Form::Fat(header) => header,
            Form::Micro => return self.zap_micro_put(store, id, new, replace),
        };
        self.zap_fat_put(store, id, header, new, replace)
            .map(|_| ())
    }

    /// Puts `new` into the micro ZAP `id` in place; one that no longer fits becomes fat.
    fn zap_micro_put(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        new: Entry<'_>,
        replace: bool,
    ) -> Result<(), ObjectError> {
        let edit = self.zap_with_block(store, id, 0, |block| {
            let count = micro_count(id, block)?;
            let seek = seek_entry(id, block, MICRO_HEADER, count, false, (0, new.key))?;
            if seek.value.is_some() && !replace {
                let key = String::from_utf8_lossy(new.key).into_owned();
                return Err(ObjectError::KeyExists { object: id, key });
            }
            let found = u32::from(seek.value.is_some());
            let old_end = seek.value.map_or(seek.start, |value| value.end);
            let rest = count.saturating_sub(seek.index + found);
            let used = micro_entries_end(id, block, old_end, rest)?;
            let size = MICRO_ENTRY_OVERHEAD + new.key.len() + new.value.len();
            if (used + size).saturating_sub(old_end - seek.start) > BS {
                return Ok(None);
            }
            let count = count - found + 1;
            let range = seek.start..old_end;
            micro_splice(id, block, used, range, Some(&new), count).map(Some)
        })?;
        if let Some(splice) = edit {
            return self.zap_apply_splice(store, id, 0, &splice);
        }
        // It does not fit: the micro form ends here.
        let block = self.zap_block(store, id, 0)?;
        let mut entries = decode_micro(id, &block)?;
        match entries.binary_search_by(|e| e.key.cmp(new.key)) {
            Ok(at) => entries[at] = new,
            Err(at) => entries.insert(at, new),
        }
        let owned: Vec<(Vec<u8>, Vec<u8>)> = entries
            .iter()
            .map(|e| (e.key.to_vec(), e.value.to_vec()))
            .collect();
        self.zap_upgrade(store, id, &owned)
    }

    /// Rewrites a micro ZAP as a fat one holding `entries`: header in block 0, a one-slot
    /// table in block 1, one leaf in block 2, then every entry inserted (splitting as needed).
    fn zap_upgrade(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        entries: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<(), ObjectError> {
        let mut header = Header {
            table_shift: 0,
            table_blkid: 1,
            table_blocks: 1,
            entries: 0,
            leaves: 1,
            free_hint: 3,
        };
        let mut block0 = encode_header(&header);
        block0.resize(BS, 0);
        self.write(store, id, 0, &block0)?;
        let mut table = 2u64.to_le_bytes().to_vec();
        table.resize(BS, 0);
        self.write(store, id, BS as u64, &table)?;
        self.write(store, id, 2 * BS as u64, &encode_leaf(0, 0, &[]))?;
        for (key, value) in entries {
            let entry = Entry {
                hash: zap_hash(key),
                key,
                value,
            };
            header = self.zap_fat_put(store, id, header, entry, false)?;
        }
        assert_eq!(
            header.entries,
            entries.len() as u64,
            "Z2: upgrade lost entries"
        );
        Ok(())
    }

    fn zap_fat_put(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        mut header: Header,
        new: Entry<'_>,
        replace: bool,
    ) -> Result<Header, ObjectError> {
        loop {
            let index = hash_index(new.hash, header.table_shift);
            let blkid = self.zap_table_get(store, id, &header, index)?;
            let edit = self.zap_with_block(store, id, blkid, |block| {
                let head = leaf_head(id, block)?;
                Self::zap_leaf_slots(id, &header, (head.prefix_len, head.prefix), index)?;
                let target = (new.hash, new.key);
                let seek = seek_entry(id, block, LEAF_HEADER, head.count, true, target)?;
                if seek.value.is_some() && !replace {
                    let key = String::from_utf8_lossy(new.key).into_owned();
                    return Err(ObjectError::KeyExists { object: id, key });
                }
                let added = seek.value.is_none();
                let old_end = seek.value.map_or(seek.start, |value| value.end);
                let size = LEAF_ENTRY_OVERHEAD + new.key.len() + new.value.len();
                let used = LEAF_HEADER + head.entry_bytes;
                if (used + size).saturating_sub(old_end - seek.start) > BS {
                    return Ok(None);
                }
                let count = head.count + u32::from(added);
                let range = seek.start..old_end;
                Ok(Some((
                    leaf_splice(id, block, &head, range, Some(&new), count)?,
                    added,
                )))
            })?;
            if let Some((splice, added)) = edit {
                self.zap_apply_splice(store, id, blkid, &splice)?;
                if added {
                    header.entries += 1;
                    self.zap_put_header(store, id, &header)?;
                }
                return Ok(header);
            }
            let block = self.zap_block(store, id, blkid)?;
            let leaf = decode_leaf(id, &block)?;
            if leaf.prefix_len == header.table_shift {
                header = self.zap_grow_table(store, id, header)?;
                continue;
            }
            header = self.zap_split(store, id, header, blkid, &leaf)?;
        }
    }

    /// Splits a full leaf on its next hash bit; the upper half moves to a new leaf block.
    fn zap_split(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        mut header: Header,
        blkid: u64,
        leaf: &Leaf<'_>,
    ) -> Result<Header, ObjectError> {
        assert!(
            leaf.prefix_len < header.table_shift,
            "Z1: split of a leaf as deep as the table"
        );
        let bit = 63 - u32::from(leaf.prefix_len);
        let (upper, lower): (Vec<Entry<'_>>, Vec<Entry<'_>>) =
            leaf.entries.iter().partition(|e| (e.hash >> bit) & 1 == 1);
        let depth = leaf.prefix_len + 1;
        let new_blkid = self.zap_allocate_leaf(store, id, &mut header)?;
        self.write(
            store,
            id,
            new_blkid * BS as u64,
            &encode_leaf(depth, (leaf.prefix << 1) | 1, &upper),
        )?;
        self.write(
            store,
            id,
            blkid * BS as u64,
            &encode_leaf(depth, leaf.prefix << 1, &lower),
        )?;
        let spare = u32::from(header.table_shift - depth);
        let first = ((leaf.prefix << 1) | 1) << spare;
        self.zap_table_set_range(store, id, &header, first, 1 << spare, new_blkid)?;
        header.leaves += 1;
        self.zap_put_header(store, id, &header)?;
        Ok(header)
    }

    /// The first free (hole) block at or after the free hint (Z3).
    fn zap_allocate_leaf(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        header: &mut Header,
    ) -> Result<u64, ObjectError> {
        let offset = self.next_hole(store, id, header.free_hint.max(1) * BS as u64)?;
        let blkid = offset / BS as u64;
        assert!(blkid >= 1, "Z3: leaf allocated over the header");
        header.free_hint = blkid + 1;
        Ok(blkid)
    }

    /// Doubles the pointer table into a fresh region past every block in use.
    fn zap_grow_table(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        mut header: Header,
    ) -> Result<Header, ObjectError> {
        if header.table_shift >= ZAP_TABLE_SHIFT_MAX {
            return Err(ObjectError::LimitReached {
                object: id,
                what: "ZAP hash table",
            });
        }
        let old = self.zap_read_table(store, id, &header)?;
        let mut bytes = Vec::with_capacity(old.len() * 16);
        for blkid in &old {
            bytes.extend_from_slice(&blkid.to_le_bytes());
            bytes.extend_from_slice(&blkid.to_le_bytes());
        }
        let info = self.object_info(store, id)?;
        let region = info.maxblkid + 1;
        self.write(store, id, region * BS as u64, &bytes)?;
        self.free_range(
            store,
            id,
            header.table_blkid * BS as u64,
            header.table_blocks * BS as u64,
        )?;
        header.free_hint = header.free_hint.min(header.table_blkid);
        header.table_shift += 1;
        header.table_blkid = region;
        header.table_blocks = table_blocks_for(header.table_shift);
        self.zap_put_header(store, id, &header)?;
        Ok(header)
    }

    fn zap_read_table(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        header: &Header,
    ) -> Result<Vec<u64>, ObjectError> {
        let mut bytes = vec![0u8; 8usize << header.table_shift];
        self.read(store, id, header.table_blkid * BS as u64, &mut bytes)?;
        Ok(bytes
            .chunks_exact(8)
            .filter_map(|word| le_u64(word, 0))
            .collect())
    }

    /// Removes `key`; [`ObjectError::NoSuchKey`] when it is absent.
    pub fn zap_remove(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        key: impl AsRef<[u8]>,
    ) -> Result<(), ObjectError> {
        let key = key.as_ref();
        self.zap_check(id, key, None)?;
        let hash = zap_hash(key);
        let missing = || ObjectError::NoSuchKey {
            object: id,
            key: String::from_utf8_lossy(key).into_owned(),
        };
        let mut header = match self.zap_form(store, id)? {
            Form::Micro => {
                let splice = self.zap_with_block(store, id, 0, |block| {
                    let count = micro_count(id, block)?;
                    let seek = seek_entry(id, block, MICRO_HEADER, count, false, (hash, key))?;
                    let value = seek.value.ok_or_else(missing)?;
                    let rest = count.saturating_sub(seek.index + 1);
                    let used = micro_entries_end(id, block, value.end, rest)?;
                    micro_splice(id, block, used, seek.start..value.end, None, count - 1)
                })?;
                return self.zap_apply_splice(store, id, 0, &splice);
            }
            Form::Fat(header) => header,
        };
        let index = hash_index(hash, header.table_shift);
        let blkid = self.zap_table_get(store, id, &header, index)?;
        let splice = self.zap_with_block(store, id, blkid, |block| {
            let head = leaf_head(id, block)?;
            Self::zap_leaf_slots(id, &header, (head.prefix_len, head.prefix), index)?;
            let seek = seek_entry(id, block, LEAF_HEADER, head.count, true, (hash, key))?;
            let value = seek.value.ok_or_else(missing)?;
            leaf_splice(
                id,
                block,
                &head,
                seek.start..value.end,
                None,
                head.count - 1,
            )
        })?;
        self.zap_apply_splice(store, id, blkid, &splice)?;
        // Counts from disk are input: a header that counts fewer entries than its leaves
        // hold is damage, not an underflow.
        header.entries = header
            .entries
            .checked_sub(1)
            .ok_or_else(|| corrupt(id, "ZAP header counts fewer entries than its leaves"))?;
        self.zap_put_header(store, id, &header)?;
        if self.zap_merge(store, id, &mut header, blkid)? {
            self.zap_shrink(store, id, header)?;
        }
        Ok(())
    }

    /// Merges the leaf at `blkid` with its buddy while both fit; true when any merge happened.
    fn zap_merge(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        header: &mut Header,
        mut blkid: u64,
    ) -> Result<bool, ObjectError> {
        let mut merged_any = false;
        loop {
            let head = self.zap_with_block(store, id, blkid, |block| leaf_head(id, block))?;
            if head.prefix_len == 0 || head.prefix_len > header.table_shift {
                return Ok(merged_any);
            }
            let spare = u32::from(header.table_shift - head.prefix_len);
            let buddy_blkid = self.zap_table_get(store, id, header, (head.prefix ^ 1) << spare)?;
            let buddy_head =
                self.zap_with_block(store, id, buddy_blkid, |block| leaf_head(id, block))?;
            // Decide from the headers alone: most removals merge nothing, and decoding two
            // leaves for nothing would double their cost.
            let merged_size = LEAF_HEADER + head.entry_bytes + buddy_head.entry_bytes;
            if buddy_head.prefix_len != head.prefix_len
                || buddy_blkid == blkid
                || merged_size > MERGE_LIMIT
            {
                return Ok(merged_any);
            }
            let block = self.zap_block(store, id, blkid)?;
            let buddy_block = self.zap_block(store, id, buddy_blkid)?;
            let leaf = decode_leaf(id, &block)?;
            let buddy = decode_leaf(id, &buddy_block)?;
            let (low, high, low_blkid, high_blkid) = if leaf.prefix & 1 == 0 {
                (&leaf, &buddy, blkid, buddy_blkid)
            } else {
                (&buddy, &leaf, buddy_blkid, blkid)
            };
            let mut entries = low.entries.clone();
            entries.extend_from_slice(&high.entries);
            if leaf_size(&entries) > MERGE_LIMIT {
                return Ok(merged_any);
            }
            let depth = leaf.prefix_len - 1;
            let prefix = leaf.prefix >> 1;
            self.write(
                store,
                id,
                low_blkid * BS as u64,
                &encode_leaf(depth, prefix, &entries),
            )?;
            self.free_range(store, id, high_blkid * BS as u64, BS as u64)?;
            let spare = u32::from(header.table_shift - depth);
            self.zap_table_set_range(store, id, header, prefix << spare, 1 << spare, low_blkid)?;
            header.leaves -= 1;
            header.free_hint = header.free_hint.min(high_blkid);
            self.zap_put_header(store, id, header)?;
            merged_any = true;
            blkid = low_blkid;
        }
    }

    /// Halves the table while no leaf needs its last bit, then returns to the micro form when
    /// one leaf remains and its entries fit.
    fn zap_shrink(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        mut header: Header,
    ) -> Result<(), ObjectError> {
        while header.table_shift > 0 {
            let table = self.zap_read_table(store, id, &header)?;
            if table.chunks_exact(2).any(|pair| pair[0] != pair[1]) {
                break;
            }
            let bytes: Vec<u8> = table
                .iter()
                .step_by(2)
                .flat_map(|blkid| blkid.to_le_bytes())
                .collect();
            let region = self.object_info(store, id)?.maxblkid + 1;
            self.write(store, id, region * BS as u64, &bytes)?;
            self.free_range(
                store,
                id,
                header.table_blkid * BS as u64,
                header.table_blocks * BS as u64,
            )?;
            header.free_hint = header.free_hint.min(header.table_blkid);
            header.table_shift -= 1;
            header.table_blkid = region;
            header.table_blocks = table_blocks_for(header.table_shift);
            self.zap_put_header(store, id, &header)?;
        }
        if header.leaves != 1 || header.table_shift != 0 {
            return Ok(());
        }
        let blkid = self.zap_table_get(store, id, &header, 0)?;
        let block = self.zap_block(store, id, blkid)?;
        let leaf = decode_leaf(id, &block)?;
        let mut entries = leaf.entries.clone();
        entries.sort_by(|a, b| a.key.cmp(b.key));
        if micro_size(&entries) > BS {
            return Ok(());
        }
        let micro = encode_micro(&entries);
        self.free_range(store, id, BS as u64, u64::MAX)?;
        self.write(store, id, 0, &micro)
    }

    /// Up to `max` entries after `cursor` (from the start when `None`) in (hash, key) order,
    /// and the cursor to continue from (`None` when the listing is complete). Keys must be
    /// UTF-8 (property lists, directories of the MOS); [`ObjectSet::zap_list_bytes`] lists
    /// any keys.
    pub fn zap_list(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        cursor: Option<&ZapCursor>,
        max: usize,
    ) -> Result<(ZapEntries, Option<ZapCursor>), ObjectError> {
        let (entries, next) = self.zap_list_bytes(store, id, cursor, max)?;
        let entries = entries
            .into_iter()
            .map(|(key, value)| {
                String::from_utf8(key)
                    .map(|key| (key, value))
                    .map_err(|_| corrupt(id, "ZAP key is not UTF-8"))
            })
            .collect::<Result<ZapEntries, ObjectError>>()?;
        Ok((entries, next))
    }

    /// [`ObjectSet::zap_list`] with keys as bytes (file names need not be UTF-8).
    pub fn zap_list_bytes(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
        cursor: Option<&ZapCursor>,
        max: usize,
    ) -> Result<(ZapByteEntries, Option<ZapCursor>), ObjectError> {
        let after =
            |e: &Entry<'_>| cursor.is_none_or(|c| e.order(c.hash, &c.key) == Ordering::Greater);
        let mut out: ZapByteEntries = Vec::new();
        let push = |e: &Entry<'_>, out: &mut ZapByteEntries| -> Result<(), ObjectError> {
            out.push((e.key.to_vec(), e.value.to_vec()));
            Ok(())
        };
        let last = |out: &ZapByteEntries| {
            out.last().map(|(key, _)| ZapCursor {
                hash: zap_hash(key),
                key: key.clone(),
            })
        };
        match self.zap_form(store, id)? {
            Form::Micro => {
                let block = self.zap_block(store, id, 0)?;
                let mut entries = decode_micro(id, &block)?;
                for entry in &mut entries {
                    entry.hash = zap_hash(entry.key);
                }
                entries.sort_by(|a, b| a.order(b.hash, b.key));
                for entry in entries.iter().filter(|e| after(e)) {
                    if out.len() == max {
                        let next = last(&out);
                        return Ok((out, next));
                    }
                    push(entry, &mut out)?;
                }
            }
            Form::Fat(header) => {
                let slots = 1u64 << header.table_shift;
                let mut index = cursor.map_or(0, |c| hash_index(c.hash, header.table_shift));
                while index < slots {
                    let blkid = self.zap_table_get(store, id, &header, index)?;
                    let block = self.zap_block(store, id, blkid)?;
                    let leaf = decode_leaf(id, &block)?;
                    let (first, count) =
                        Self::zap_leaf_slots(id, &header, (leaf.prefix_len, leaf.prefix), index)?;
                    for entry in leaf.entries.iter().filter(|e| after(e)) {
                        if out.len() == max {
                            let next = last(&out);
                            return Ok((out, next));
                        }
                        push(entry, &mut out)?;
                    }
                    index = first + count;
                }
            }
        }
        Ok((out, None))
    }

    /// Every entry, sorted by key (collects the whole ZAP; use [`ObjectSet::zap_list`] for
    /// incremental listing of large ones).
    pub fn zap_list_sorted(
        &mut self,
        store: &dyn BlockStore,
        id: ObjectId,
    ) -> Result<Vec<(String, Vec<u8>)>, ObjectError> {
        let (mut all, _) = self.zap_list(store, id, None, usize::MAX)?;
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(all)
    }
}

/// The entry count of a micro block, after checking its fixed fields.
fn micro_count(object: ObjectId, block: &[u8]) -> Result<u32, ObjectError> {
    if le_u64(block, 0) != Some(MICRO_MAGIC) {
        return Err(corrupt(object, "micro ZAP has a bad magic number"));
    }
    let count = le_u32(block, 8).ok_or_else(|| corrupt(object, "micro ZAP truncated"))?;
    if le_u32(block, 12) != Some(0) {
        return Err(corrupt(object, "micro ZAP reserved bytes not zero"));
    }
    Ok(count)
}

fn decode_micro(object: ObjectId, block: &[u8]) -> Result<Vec<Entry<'_>>, ObjectError> {
    let count = micro_count(object, block)?;
    decode_entries(object, block, MICRO_HEADER, count, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_blocks_are_errors_not_panics() {
        let object = ObjectId(7);
        let mut rng = tarn_base::SeededRng::new(17);
        let key = b"name".as_slice();
        let good_leaf = encode_leaf(
            0,
            0,
            &[Entry {
                hash: zap_hash(key),
                key,
                value: b"v",
            }],
        );
        let good_micro = encode_micro(&[Entry {
            hash: zap_hash(key),
            key,
            value: b"v",
        }]);
        assert!(decode_leaf(object, &good_leaf).is_ok());
        assert!(decode_micro(object, &good_micro).is_ok());
        for _ in 0..2000 {
            let mut bytes = vec![0u8; BS];
            rng.fill(&mut bytes);
            assert!(decode_leaf(object, &bytes).is_err());
            assert!(decode_micro(object, &bytes).is_err());
            assert!(decode_header(object, &bytes).is_err() || le_u64(&bytes, 0) != Some(FAT_MAGIC));
            for good in [&good_leaf, &good_micro] {
                let mut mutated = good.clone();
                let at = rng.below(64) as usize;
                mutated[at] ^= 1 + rng.below(255) as u8;
                let _ = decode_leaf(object, &mutated);
                let _ = decode_micro(object, &mutated);
                let _ = decode_header(object, &mutated);
            }
        }
    }

    /// Keys `file-0000` to `file-0059`.
    fn sixty_keys() -> Vec<Vec<u8>> {
        (0..60)
            .map(|i| format!("file-{i:04}").into_bytes())
            .collect()
    }

    /// A leaf and a micro block holding every key of `keys`, each key its own value.
    fn blocks_of(keys: &[Vec<u8>]) -> (Vec<u8>, Vec<u8>) {
        let mut entries: Vec<Entry<'_>> = keys
            .iter()
            .map(|k| Entry {
                hash: zap_hash(k),
                key: k,
                value: k,
            })
            .collect();
        entries.sort_by(|a, b| a.order(b.hash, b.key));
        let leaf = encode_leaf(0, 0, &entries);
        entries.sort_by(|a, b| a.key.cmp(b.key));
        (leaf, encode_micro(&entries))
    }

    /// `block` with one byte among its first `within` changed, and a key of `keys`.
    fn damaged<'k>(
        rng: &mut tarn_base::SeededRng,
        block: &[u8],
        within: u64,
        keys: &'k [Vec<u8>],
    ) -> (Vec<u8>, &'k [u8]) {
        let mut mutated = block.to_vec();
        mutated[rng.below(within) as usize] ^= 1 + rng.below(255) as u8;
        (mutated, &keys[rng.below(keys.len() as u64) as usize])
    }

    /// Goal: the walking lookup (`seek_entry`) answers as the decoded block does, for every
    /// key present and for absent ones, in leaves and in micro blocks; on damaged blocks it
    /// errs or answers, never panics. Method: 60 entries encoded both ways, every key looked
    /// up; then 2,000 single-byte mutations of the leaf, each looked up.
    #[test]
    fn seek_entry_agrees_with_decoding() {
        let object = ObjectId(7);
        let keys = sixty_keys();
        let (leaf, micro) = blocks_of(&keys);
        let count = keys.len() as u32;
        let absent: [&[u8]; 3] = [b"absent", b"zzz", b"\0"];
        for key in keys.iter().map(Vec::as_slice).chain(absent) {
            let want = keys.iter().any(|k| k == key).then_some(key);
            let target = (zap_hash(key), key);
            let in_leaf = seek_entry(object, &leaf, LEAF_HEADER, count, true, target);
            let in_micro = seek_entry(object, &micro, MICRO_HEADER, count, false, target);
            assert_eq!(in_leaf.unwrap().value.map(|at| &leaf[at]), want);
            assert_eq!(in_micro.unwrap().value.map(|at| &micro[at]), want);
        }
        let mut rng = tarn_base::SeededRng::new(5);
        for _ in 0..2000 {
            let (mutated, key) = damaged(&mut rng, &leaf, BS as u64, &keys);
            let target = (zap_hash(key), key);
            let _ = seek_entry(object, &mutated, LEAF_HEADER, count, true, target);
            let _ = seek_entry(object, &mutated, LEAF_HEADER, u32::MAX, true, target);
        }
    }

    /// Goal: an in-place edit of a damaged block (one that still passes its checksum) is an
    /// error or a well-formed edit, never a panic. Method: a leaf and a micro block of 60
    /// entries; 3,000 single-byte mutations of each one's header and first entries, each put
    /// through the insert, update and removal edits as `zap_put` and `zap_remove` make them.
    #[test]
    fn edits_of_damaged_blocks_are_errors_not_panics() {
        let object = ObjectId(7);
        let keys = sixty_keys();
        let (leaf, micro) = blocks_of(&keys);
        let mut rng = tarn_base::SeededRng::new(9);
        for _ in 0..3000 {
            let (mutated, key) = damaged(&mut rng, &leaf, 256, &keys);
            let new = Entry {
                hash: zap_hash(key),
                key,
                value: b"a new value",
            };
            let Ok(head) = leaf_head(object, &mutated) else {
                continue;
            };
            let target = (new.hash, new.key);
            let Ok(seek) = seek_entry(object, &mutated, LEAF_HEADER, head.count, true, target)
            else {
                continue;
            };
            let end = seek.value.as_ref().map_or(seek.start, |value| value.end);
            let size = LEAF_ENTRY_OVERHEAD + new.key.len() + new.value.len();
            let used = LEAF_HEADER + head.entry_bytes;
            if (used + size).saturating_sub(end - seek.start) <= BS {
                let count = head.count.saturating_add(1);
                let _ = leaf_splice(object, &mutated, &head, seek.start..end, Some(&new), count);
            }
            if seek.value.is_some() {
                let count = head.count.saturating_sub(1);
                let _ = leaf_splice(object, &mutated, &head, seek.start..end, None, count);
            }
        }
        for _ in 0..3000 {
            let (mutated, key) = damaged(&mut rng, &micro, 256, &keys);
            let new = Entry {
                hash: 0,
                key,
                value: b"a new value",
            };
            let Ok(count) = micro_count(object, &mutated) else {
                continue;
            };
            let target = (0, key);
            let Ok(seek) = seek_entry(object, &mutated, MICRO_HEADER, count, false, target) else {
                continue;
            };
            let found = u32::from(seek.value.is_some());
            let end = seek.value.as_ref().map_or(seek.start, |value| value.end);
            let rest = count.saturating_sub(seek.index + found);
            let Ok(used) = micro_entries_end(object, &mutated, end, rest) else {
                continue;
            };
            let size = MICRO_ENTRY_OVERHEAD + new.key.len() + new.value.len();
            if (used + size).saturating_sub(end - seek.start) <= BS {
                let _ = micro_splice(object, &mutated, used, seek.start..end, Some(&new), count);
            }
            let _ = micro_splice(object, &mutated, used, seek.start..end, None, count);
        }
    }

    #[test]
    fn hash_is_the_documented_function() {
        let digest = blake3::hash(b"hello");
        let expected = u64::from_le_bytes(digest.as_bytes()[..8].try_into().expect("8 bytes"));
        assert_eq!(zap_hash(b"hello"), expected);
    }
}
