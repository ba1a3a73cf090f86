//! The dnode: the 512-byte descriptor of one object (its type, block sizes, tree depth, root
//! block pointer and a small bonus buffer). Object sets store dnodes in arrays, 32 per 16 KiB
//! dnode block, as the data of their meta-dnode (object 0).
//!
//! Encoded little-endian in exactly [`DNODE_SIZE`] bytes (format version 1):
//!
//! ```text
//!   0 object type u8 (0 = free slot)     1 nlevels u8 (1 = root points at a data block)
//!   2 indirect block shift u8 (10..=17)  3 bonus type u8
//!   4 checksum override u8 (0 = inherit) 5 compression override u8 (0 = inherit)
//!   6 flags u8                           7 reserved u8 (zero)
//!   8 data block size u32 (bytes)       12 bonus length u16        14 reserved u16
//!  16 maxblkid u64                      24 used bytes u64
//!  32 reserved (zero) up to 64
//!  64 root block pointer (128 bytes)
//! 192 bonus buffer (320 bytes; bytes past the bonus length are zero)
//! ```
//!
//! A free slot is all zeros; decoding a free slot that is not all zeros is an error, so blank
//! space and garbage are told apart.

use crate::FormatError;
use crate::blkptr::{BLKPTR_SIZE, BlockPtr};
use crate::checksum::ChecksumKind;
use crate::compress::CompressSetting;
use crate::wire::{Reader, Writer};
use tarn_base::limits::{BLOCK_SIZE_MAX, BLOCK_SIZE_MIN, INDIRECTION_LEVELS_MAX};

/// Encoded size of a dnode.
pub const DNODE_SIZE: usize = 512;
/// Offset of the root block pointer in an encoded dnode.
pub const DNODE_ROOT_OFFSET: usize = 64;
/// Offset of the bonus buffer in an encoded dnode.
pub const DNODE_BONUS_OFFSET: usize = DNODE_ROOT_OFFSET + BLKPTR_SIZE;
/// Size of the bonus buffer.
pub const DNODE_BONUS_MAX: usize = DNODE_SIZE - DNODE_BONUS_OFFSET;
/// Smallest indirect block shift (1 KiB indirect blocks, 8 block pointers). Only tests and
/// tiny objects use it; it exists so that deep trees can be exercised cheaply.
pub const INDIRECT_SHIFT_MIN: u8 = 10;
/// Largest and default indirect block shift (128 KiB indirect blocks, 1024 block pointers).
pub const INDIRECT_SHIFT_MAX: u8 = 17;
/// Default indirect block shift.
pub const INDIRECT_SHIFT_DEFAULT: u8 = 17;
/// log2 of [`BLKPTR_SIZE`].
pub const BLKPTR_SHIFT: u8 = 7;
/// Flag bit: the object's level-0 blocks are metadata (written as `BlockType::Metadata` with
/// the extra metadata copies), e.g. ZAP objects.
pub const DNODE_FLAG_METADATA: u8 = 1;
/// All flag bits format version 1 knows.
pub const DNODE_FLAGS_KNOWN: u8 = DNODE_FLAG_METADATA;
/// Object type of a free dnode slot.
pub const OBJECT_TYPE_NONE: u8 = 0;
/// Object type of the meta-dnode (object 0, whose data are dnode blocks).
pub const OBJECT_TYPE_META_DNODE: u8 = 1;
/// Object type of a ZAP (key-value) object created by tarn-objects.
pub const OBJECT_TYPE_ZAP: u8 = 2;
/// Object type of a plain byte array (file or volume contents).
pub const OBJECT_TYPE_PLAIN: u8 = 3;

const _: () = assert!(DNODE_BONUS_MAX == 320);
const _: () = assert!(1usize << BLKPTR_SHIFT == BLKPTR_SIZE);
const _: () = assert!(INDIRECT_SHIFT_MIN > BLKPTR_SHIFT);
const _: () = assert!(INDIRECT_SHIFT_MIN <= INDIRECT_SHIFT_DEFAULT);
const _: () = assert!(INDIRECT_SHIFT_DEFAULT <= INDIRECT_SHIFT_MAX);
const _: () = assert!(INDIRECTION_LEVELS_MAX < 16);

/// Checksum override byte values: 0 inherits, otherwise the `ChecksumKind` byte.
const CHECKSUM_OVERRIDE_MAX: u8 = ChecksumKind::Blake3 as u8;
/// Compression override byte values: 0 inherit, 1 off, 2 lz4, 3 zstd (level 3), 4 zle.
const COMPRESS_OVERRIDE_MAX: u8 = 4;

/// One dnode (see the module docs for the byte layout). Format version 1.
///
/// Invariants of a decoded or encodable allocated dnode: `1 <= nlevels <=
/// INDIRECTION_LEVELS_MAX`; the indirect shift lies in `INDIRECT_SHIFT_MIN..=
/// INDIRECT_SHIFT_MAX`; the data block size is a multiple of 512 in `512..=16 MiB`;
/// `bonus_len <= 320`; `maxblkid` is addressable by a tree of `INDIRECTION_LEVELS_MAX` levels;
/// a non-hole root has level `nlevels - 1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dnode {
    /// Object type; [`OBJECT_TYPE_NONE`] marks a free slot.
    pub object_type: u8,
    /// Levels in the block-pointer tree: 1 means the root points at the only data block.
    pub nlevels: u8,
    /// log2 of the indirect block size.
    pub indirect_shift: u8,
    /// Type of the bonus buffer contents (the upper layer's business).
    pub bonus_type: u8,
    /// Checksum override: 0 inherits the object set's setting, else a `ChecksumKind` byte.
    pub checksum: u8,
    /// Compression override: 0 inherit, 1 off, 2 lz4, 3 zstd, 4 zle.
    pub compression: u8,
    /// Flags ([`DNODE_FLAG_METADATA`]).
    pub flags: u8,
    /// Logical size of every level-0 block, in bytes.
    pub data_block_size: u32,
    /// Bytes of the bonus buffer in use.
    pub bonus_len: u16,
    /// Highest level-0 block id ever written (0 for an empty object).
    pub maxblkid: u64,
    /// Allocated bytes (all copies) of every block in the tree.
    pub used_bytes: u64,
    /// Root of the block-pointer tree.
    pub root: BlockPtr,
    /// Bonus buffer; only the first `bonus_len` bytes are meaningful, the rest are zero.
    pub bonus: [u8; DNODE_BONUS_MAX],
}

impl Default for Dnode {
    fn default() -> Self {
        Dnode {
            object_type: OBJECT_TYPE_NONE,
            nlevels: 0,
            indirect_shift: 0,
            bonus_type: 0,
            checksum: 0,
            compression: 0,
            flags: 0,
            data_block_size: 0,
            bonus_len: 0,
            maxblkid: 0,
            used_bytes: 0,
            root: BlockPtr::default(),
            bonus: [0; DNODE_BONUS_MAX],
        }
    }
}

/// Number of level-0 blocks a tree of `nlevels` levels with `indirect_shift` can address, or
/// `None` when that exceeds `u64` (such a tree addresses every block id).
#[must_use]
pub fn tree_capacity(nlevels: u8, indirect_shift: u8) -> Option<u64> {
    assert!(
        nlevels >= 1,
        "tree_capacity: nlevels {nlevels} must be >= 1"
    );
    assert!(
        indirect_shift > BLKPTR_SHIFT,
        "tree_capacity: indirect shift {indirect_shift}"
    );
    let bits = u32::from(nlevels - 1) * u32::from(indirect_shift - BLKPTR_SHIFT);
    1u64.checked_shl(bits).filter(|_| bits < 64)
}

impl Dnode {
    /// A fresh allocated dnode with an empty tree (one level, hole root).
    #[must_use]
    pub fn new(object_type: u8, data_block_size: u32, indirect_shift: u8) -> Self {
        Dnode {
            object_type,
            nlevels: 1,
            indirect_shift,
            data_block_size,
            ..Dnode::default()
        }
    }

    /// True for a free slot.
    #[must_use]
    pub fn is_free(&self) -> bool {
        self.object_type == OBJECT_TYPE_NONE
    }

    /// Block pointers per indirect block.
    #[must_use]
    pub fn pointers_per_indirect(&self) -> u64 {
        1u64 << (self.indirect_shift - BLKPTR_SHIFT)
    }

    /// The checksum override, if any.
    #[must_use]
    pub fn checksum_override(&self) -> Option<ChecksumKind> {
        if self.checksum == 0 {
            None
        } else {
            ChecksumKind::from_u8(self.checksum).ok()
        }
    }

    /// The compression override, if any.
    #[must_use]
    pub fn compression_override(&self) -> Option<CompressSetting> {
        match self.compression {
            1 => Some(CompressSetting::Off),
            2 => Some(CompressSetting::Lz4),
            3 => Some(CompressSetting::Zstd(3)),
            4 => Some(CompressSetting::Zle),
            _ => None,
        }
    }

    /// The override byte for a compression setting (zstd at any level encodes as zstd-3).
    #[must_use]
    pub fn compression_override_byte(setting: Option<CompressSetting>) -> u8 {
        match setting {
            None => 0,
            Some(CompressSetting::Off) => 1,
            Some(CompressSetting::Lz4) => 2,
            Some(CompressSetting::Zstd(_)) => 3,
            Some(CompressSetting::Zle) => 4,
        }
    }

    /// The meaningful bonus bytes.
    #[must_use]
    pub fn bonus_bytes(&self) -> &[u8] {
        let len = usize::from(self.bonus_len).min(DNODE_BONUS_MAX);
        self.bonus.get(..len).unwrap_or(&[])
    }

    /// Checks the field invariants listed on the type.
    pub fn validate(&self) -> Result<(), FormatError> {
        let bad = |why| Err(FormatError::Invalid { what: "dnode", why });
        if self.is_free() {
            return if *self == Dnode::default() {
                Ok(())
            } else {
                bad("free slot not zeroed")
            };
        }
        if self.nlevels == 0 || usize::from(self.nlevels) > INDIRECTION_LEVELS_MAX {
            return bad("nlevels out of range");
        }
        if !(INDIRECT_SHIFT_MIN..=INDIRECT_SHIFT_MAX).contains(&self.indirect_shift) {
            return bad("indirect block shift out of range");
        }
        let size = u64::from(self.data_block_size);
        if !(BLOCK_SIZE_MIN..=BLOCK_SIZE_MAX).contains(&size) || size % BLOCK_SIZE_MIN != 0 {
            return bad("data block size out of range");
        }
        if usize::from(self.bonus_len) > DNODE_BONUS_MAX {
            return bad("bonus length out of range");
        }
        if self
            .bonus
            .iter()
            .skip(usize::from(self.bonus_len))
            .any(|&byte| byte != 0)
        {
            return bad("bonus bytes past the bonus length");
        }
        if self.checksum > CHECKSUM_OVERRIDE_MAX || self.compression > COMPRESS_OVERRIDE_MAX {
            return bad("unknown checksum or compression override");
        }
        if self.flags & !DNODE_FLAGS_KNOWN != 0 {
            return bad("unknown flags");
        }
        let levels_max = u8::try_from(INDIRECTION_LEVELS_MAX).unwrap_or(u8::MAX);
        if let Some(capacity) = tree_capacity(levels_max, self.indirect_shift)
            && self.maxblkid >= capacity
        {
            return bad("maxblkid beyond the deepest tree");
        }
        if !self.root.is_hole() && self.root.level + 1 != self.nlevels {
            return bad("root level does not match nlevels");
        }
        Ok(())
    }

    /// Encodes into exactly [`DNODE_SIZE`] bytes. Panics (a bug) on an invalid dnode.
    #[must_use]
    pub fn encode(&self) -> [u8; DNODE_SIZE] {
        if let Err(error) = self.validate() {
            panic!("encoding an invalid dnode ({error}): {self:?}");
        }
        let mut w = Writer::new();
        w.u8(self.object_type);
        w.u8(self.nlevels);
        w.u8(self.indirect_shift);
        w.u8(self.bonus_type);
        w.u8(self.checksum);
        w.u8(self.compression);
        w.u8(self.flags);
        w.u8(0);
        w.u32(self.data_block_size);
        w.u16(self.bonus_len);
        w.u16(0);
        w.u64(self.maxblkid);
        w.u64(self.used_bytes);
        w.pad_to(DNODE_ROOT_OFFSET);
        self.root.encode_into(&mut w);
        w.bytes(&self.bonus);
        let bytes = w.finish();
        assert_eq!(bytes.len(), DNODE_SIZE, "dnode encoding size");
        let mut out = [0u8; DNODE_SIZE];
        out.copy_from_slice(&bytes);
        out
    }

    /// Decodes one dnode from the first [`DNODE_SIZE`] bytes. Garbage is an error, never a
    /// panic; a decoded dnode satisfies [`Dnode::validate`].
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        let mut r = Reader::new(bytes, "dnode");
        let object_type = r.u8()?;
        let nlevels = r.u8()?;
        let indirect_shift = r.u8()?;
        let bonus_type = r.u8()?;
        let checksum = r.u8()?;
        let compression = r.u8()?;
        let flags = r.u8()?;
        let reserved_a = r.u8()?;
        let data_block_size = r.u32()?;
        let bonus_len = r.u16()?;
        let reserved_b = r.u16()?;
        let maxblkid = r.u64()?;
        let used_bytes = r.u64()?;
        let reserved_c = r.take(DNODE_ROOT_OFFSET - r.position())?;
        if reserved_a != 0 || reserved_b != 0 || reserved_c.iter().any(|&byte| byte != 0) {
            return Err(FormatError::Invalid {
                what: "dnode",
                why: "reserved bytes not zero",
            });
        }
        let root = BlockPtr::decode(&mut r)?;
        let mut bonus = [0u8; DNODE_BONUS_MAX];
        bonus.copy_from_slice(r.take(DNODE_BONUS_MAX)?);
        let dnode = Dnode {
            object_type,
            nlevels,
            indirect_shift,
            bonus_type,
            checksum,
            compression,
            flags,
            data_block_size,
            bonus_len,
            maxblkid,
            used_bytes,
            root,
            bonus,
        };
        dnode.validate()?;
        Ok(dnode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blkptr::{BlockType, Dva};
    use crate::checksum::Checksum;
    use crate::compress::CompressKind;
    use tarn_base::{Txg, VdevId};

    fn sample() -> Dnode {
        let mut dnode = Dnode::new(OBJECT_TYPE_PLAIN, 131_072, INDIRECT_SHIFT_DEFAULT);
        dnode.nlevels = 2;
        dnode.bonus_type = 9;
        dnode.checksum = ChecksumKind::Blake3 as u8;
        dnode.compression = 2;
        dnode.flags = DNODE_FLAG_METADATA;
        dnode.maxblkid = 5000;
        dnode.used_bytes = 1 << 30;
        dnode.bonus_len = 5;
        dnode.bonus[..5].copy_from_slice(b"hello");
        dnode.root = BlockPtr {
            dvas: [
                Dva {
                    vdev: VdevId(0),
                    offset: 8192,
                    asize: 4096,
                },
                Dva::default(),
                Dva::default(),
            ],
            lsize: 131_072,
            psize: 4096,
            compression: CompressKind::Lz4,
            checksum_kind: ChecksumKind::Fletcher4,
            block_type: BlockType::Indirect,
            level: 1,
            birth: Txg(4),
            birth_physical: Txg(0),
            fill: 4,
            checksum: Checksum([9, 8, 7, 6]),
        };
        dnode
    }

    #[test]
    fn round_trip() {
        let dnode = sample();
        let bytes = dnode.encode();
        assert_eq!(Dnode::decode(&bytes).expect("decode"), dnode);
        assert_eq!(&bytes[192..197], b"hello");
        assert_eq!(dnode.checksum_override(), Some(ChecksumKind::Blake3));
        assert_eq!(dnode.compression_override(), Some(CompressSetting::Lz4));
        let free = Dnode::default();
        assert_eq!(Dnode::decode(&free.encode()).expect("free"), free);
    }

    #[test]
    fn invalid_fields_are_errors() {
        let good = sample().encode();
        // (offset, byte) pairs that each break one invariant.
        let cases: &[(usize, u8)] = &[
            (1, 0),    // nlevels 0
            (1, 9),    // nlevels beyond the maximum
            (2, 9),    // indirect shift too small
            (2, 18),   // indirect shift too large
            (4, 7),    // unknown checksum
            (5, 9),    // unknown compression
            (6, 0x80), // unknown flag
            (7, 1),    // reserved byte
            (9, 1),    // block size not a multiple of 512 (131072 + 256)
            (13, 2),   // bonus length 0x0205 > 320
            (40, 1),   // reserved area
            (200, 1),  // bonus byte past bonus_len
            (123, 3),  // root level byte (64 + 59): level 3 does not match nlevels 2
        ];
        for &(offset, value) in cases {
            let mut bytes = good;
            bytes[offset] = value;
            assert!(
                Dnode::decode(&bytes).is_err(),
                "offset {offset} value {value} accepted"
            );
        }
        let mut free = [0u8; DNODE_SIZE];
        free[300] = 1;
        assert!(Dnode::decode(&free).is_err(), "non-zero free slot accepted");
        assert!(
            Dnode::decode(&good[..511]).is_err(),
            "truncated dnode accepted"
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut rng = tarn_base::SeededRng::new(11);
        for len in [0usize, 1, 64, 511, 512, 600] {
            for _ in 0..200 {
                let mut bytes = vec![0u8; len];
                rng.fill(&mut bytes);
                let _ = Dnode::decode(&bytes);
                // Mutations of a valid dnode reach deeper into the validation.
                let mut mutated = sample().encode();
                let at = usize::try_from(rng.below(512)).expect("index");
                mutated[at] ^= u8::try_from(rng.below(255) + 1).expect("byte");
                if let Ok(dnode) = Dnode::decode(&mutated) {
                    assert_eq!(Dnode::decode(&dnode.encode()).expect("re-decode"), dnode);
                }
            }
        }
    }

    #[test]
    fn capacity() {
        assert_eq!(tree_capacity(1, 17), Some(1));
        assert_eq!(tree_capacity(2, 17), Some(1024));
        assert_eq!(tree_capacity(3, 10), Some(64));
        assert_eq!(tree_capacity(8, 17), None);
    }
}
