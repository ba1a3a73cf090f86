//! Block pointers: where a block lives (up to three DVAs), how big it is, how it is compressed,
//! its checksum and the txg it was born in. The checksum of a block lives in its parent's block
//! pointer, so the tree of block pointers is a Merkle tree rooted in the uberblock.
//!
//! On disk a block pointer is 128 bytes, little-endian (format version 1):
//!
//! ```text
//!   0  dva[0]   vdev u32 | asize_sectors u32 | offset u64      16 bytes each
//!  16  dva[1]
//!  32  dva[2]
//!  48  lsize u32 (logical bytes)   52  psize u32 (physical bytes before parity/padding)
//!  56  compression u8  57 checksum u8  58 object type u8  59 level u8  60 flags u8  61 pad[3]
//!  64  birth txg u64
//!  72  fill count u64 (non-hole data blocks beneath, for sparse walks)
//!  80  checksum [u64; 4]
//! 112  physical birth txg u64 (feature `org.tarn:block_cloning`; 0: the same as birth)
//! 120  reserved [u8; 8] (zero)
//! ```
//!
//! A block pointer made by cloning (`copy_file_range`, docs/FORMAT.md "Block cloning") names
//! a block written in an earlier txg: its `birth` is the txg of the clone (so snapshots, dead
//! lists, rollback and incremental sends see a new block), its physical birth the txg that
//! wrote the bytes (so a free of the last reference is deferred like any committed block).
//!
//! A DVA whose `asize_sectors` is zero is empty. A block pointer with no DVAs is a hole; its
//! birth txg is zero if the range was never written, or the txg in which it was punched.

use crate::FormatError;
use crate::checksum::{Checksum, ChecksumKind};
use crate::compress::CompressKind;
use crate::wire::{Reader, Writer};
use tarn_base::{Txg, VdevId};

/// Size of an encoded block pointer.
pub const BLKPTR_SIZE: usize = 128;
/// Unit of `asize` in a DVA: 512 bytes, whatever the pool's ashift.
pub const DVA_ASIZE_UNIT: u64 = 512;

/// Data virtual address: a top-level vdev, an offset in its address space (bytes) and the
/// allocated size there (including raidz parity and padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Dva {
    /// Top-level vdev index.
    pub vdev: VdevId,
    /// Byte offset in the top-level vdev's allocatable address space.
    pub offset: u64,
    /// Allocated bytes (a multiple of 512; zero means the DVA is empty).
    pub asize: u64,
}

impl Dva {
    /// True when this DVA does not point anywhere.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.asize == 0
    }
}

/// What kind of block a block pointer points at. Used by scrub, `tarn debug` and checkers to
/// interpret a block without knowing its parent's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum BlockType {
    /// Unused.
    #[default]
    None = 0,
    /// Pool root metadata (the block the uberblock points to).
    PoolRoot = 1,
    /// A space-log block (allocation and free records of one txg, or a condensed base).
    SpaceLog = 2,
    /// An object-set root (meta-dnode plus header).
    ObjectSet = 3,
    /// A block of dnodes.
    Dnode = 4,
    /// An indirect block (an array of block pointers).
    Indirect = 5,
    /// Plain file or volume data.
    Data = 6,
    /// Object metadata (directories, property lists, history, ...).
    Metadata = 7,
}

impl BlockType {
    /// Decodes the on-disk byte.
    pub fn from_u8(value: u8) -> Result<Self, FormatError> {
        Ok(match value {
            0 => BlockType::None,
            1 => BlockType::PoolRoot,
            2 => BlockType::SpaceLog,
            3 => BlockType::ObjectSet,
            4 => BlockType::Dnode,
            5 => BlockType::Indirect,
            6 => BlockType::Data,
            7 => BlockType::Metadata,
            _ => {
                return Err(FormatError::Invalid {
                    what: "block pointer",
                    why: "unknown block type",
                });
            }
        })
    }
}

/// A block pointer (see the module docs for the byte layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct BlockPtr {
    /// Up to three copies; empty DVAs are at the end.
    pub dvas: [Dva; 3],
    /// Logical (uncompressed) size in bytes.
    pub lsize: u32,
    /// Physical (stored, possibly compressed) size in bytes, before sector rounding.
    pub psize: u32,
    /// How the stored bytes are compressed.
    pub compression: CompressKind,
    /// Checksum algorithm.
    pub checksum_kind: ChecksumKind,
    /// Kind of block pointed at.
    pub block_type: BlockType,
    /// Level in its tree: 0 for data, 1+ for indirect blocks.
    pub level: u8,
    /// The txg in which this block was written (or this hole punched), or cloned: the
    /// logical birth that snapshots, dead lists and incremental sends go by.
    pub birth: Txg,
    /// The txg that wrote the bytes when it is older than `birth` (a cloned block); zero
    /// otherwise. Read it through [`BlockPtr::physical_birth`].
    pub birth_physical: Txg,
    /// Number of non-hole level-0 blocks beneath (1 for a data block).
    pub fill: u64,
    /// Checksum of the stored (physical) bytes.
    pub checksum: Checksum,
}

impl BlockPtr {
    /// True when the pointer points at no data (never written, or punched).
    #[must_use]
    pub fn is_hole(&self) -> bool {
        self.dvas[0].is_empty()
    }

    /// A hole born in `birth` (zero for never written).
    #[must_use]
    pub fn hole(birth: Txg) -> Self {
        BlockPtr {
            birth,
            ..BlockPtr::default()
        }
    }

    /// The txg whose sync wrote the block's bytes: `birth` unless the pointer was made by
    /// cloning an older block.
    #[must_use]
    pub fn physical_birth(&self) -> Txg {
        if self.birth_physical.0 == 0 {
            self.birth
        } else {
            self.birth_physical
        }
    }

    /// The DVAs that point somewhere.
    pub fn copies(&self) -> impl Iterator<Item = &Dva> {
        self.dvas.iter().filter(|dva| !dva.is_empty())
    }

    /// Allocated bytes over all copies.
    #[must_use]
    pub fn asize_total(&self) -> u64 {
        self.copies().map(|dva| dva.asize).sum()
    }

    /// Encodes into exactly [`BLKPTR_SIZE`] bytes.
    pub fn encode_into(&self, writer: &mut Writer) {
        let start = writer.len();
        for dva in &self.dvas {
            assert!(
                dva.asize % DVA_ASIZE_UNIT == 0,
                "DVA asize {} not in 512-byte units",
                dva.asize
            );
            let sectors =
                u32::try_from(dva.asize / DVA_ASIZE_UNIT).expect("I1: asize fits 32 bits");
            writer.u32(dva.vdev.0);
            writer.u32(sectors);
            writer.u64(dva.offset);
        }
        writer.u32(self.lsize);
        writer.u32(self.psize);
        writer.u8(self.compression as u8);
        writer.u8(self.checksum_kind as u8);
        writer.u8(self.block_type as u8);
        writer.u8(self.level);
        writer.u8(0);
        writer.bytes(&[0; 3]);
        writer.u64(self.birth.0);
        writer.u64(self.fill);
        for word in self.checksum.0 {
            writer.u64(word);
        }
        writer.u64(self.birth_physical.0);
        writer.pad_to(start + BLKPTR_SIZE);
    }

    /// Encodes into a fresh array.
    #[must_use]
    pub fn encode(&self) -> [u8; BLKPTR_SIZE] {
        let mut writer = Writer::new();
        self.encode_into(&mut writer);
        let mut out = [0u8; BLKPTR_SIZE];
        out.copy_from_slice(&writer.finish());
        out
    }

    /// Decodes one block pointer. Garbage yields an error, never a panic; a decoded pointer
    /// is structurally valid (sizes in range, DVAs packed at the front).
    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, FormatError> {
        let bad = |why| FormatError::Invalid {
            what: "block pointer",
            why,
        };
        let mut dvas = [Dva::default(); 3];
        for dva in &mut dvas {
            let vdev = VdevId(reader.u32()?);
            let sectors = reader.u32()?;
            let offset = reader.u64()?;
            *dva = Dva {
                vdev,
                offset,
                asize: u64::from(sectors) * DVA_ASIZE_UNIT,
            };
        }
        let lsize = reader.u32()?;
        let psize = reader.u32()?;
        let compression = CompressKind::from_u8(reader.u8()?)?;
        let checksum_kind = ChecksumKind::from_u8(reader.u8()?)?;
        let block_type = BlockType::from_u8(reader.u8()?)?;
        let level = reader.u8()?;
        let _flags = reader.u8()?;
        reader.take(3)?;
        let birth = Txg(reader.u64()?);
        let fill = reader.u64()?;
        let mut words = [0u64; 4];
        for word in &mut words {
            *word = reader.u64()?;
        }
        let birth_physical = Txg(reader.u64()?);
        reader.take(8)?;
        if birth_physical.0 != 0 && birth_physical >= birth {
            return Err(bad("physical birth not before the birth"));
        }
        let bp = BlockPtr {
            dvas,
            lsize,
            psize,
            compression,
            checksum_kind,
            block_type,
            level,
            birth,
            birth_physical,
            fill,
            checksum: Checksum(words),
        };
        let mut seen_empty = false;
        for dva in &bp.dvas {
            if dva.is_empty() {
                seen_empty = true;
            } else if seen_empty {
                return Err(bad("DVA after an empty one"));
            }
        }
        if !bp.is_hole() {
            if u64::from(lsize) > tarn_base::limits::BLOCK_SIZE_MAX || lsize == 0 {
                return Err(bad("logical size out of range"));
            }
            if psize == 0 || psize > lsize {
                return Err(bad("physical size out of range"));
            }
            if usize::from(level) > tarn_base::limits::INDIRECTION_LEVELS_MAX {
                return Err(bad("level out of range"));
            }
        }
        Ok(bp)
    }

    /// Decodes from a byte slice of at least [`BLKPTR_SIZE`] bytes.
    pub fn decode_bytes(bytes: &[u8]) -> Result<Self, FormatError> {
        BlockPtr::decode(&mut Reader::new(bytes, "block pointer"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let bp = BlockPtr {
            dvas: [
                Dva {
                    vdev: VdevId(1),
                    offset: 1 << 40,
                    asize: 8192,
                },
                Dva {
                    vdev: VdevId(2),
                    offset: 4096,
                    asize: 12288,
                },
                Dva::default(),
            ],
            lsize: 131_072,
            psize: 4000,
            compression: CompressKind::Lz4,
            checksum_kind: ChecksumKind::Blake3,
            block_type: BlockType::Data,
            level: 0,
            birth: Txg(77),
            birth_physical: Txg(0),
            fill: 1,
            checksum: Checksum([1, 2, 3, 4]),
        };
        let bytes = bp.encode();
        assert_eq!(BlockPtr::decode_bytes(&bytes).expect("decode"), bp);
        assert_eq!(bp.asize_total(), 20480);
    }

    #[test]
    fn a_cloned_pointer_keeps_its_physical_birth() {
        let mut bp = BlockPtr::hole(Txg(0));
        bp.dvas[0] = Dva {
            vdev: VdevId(0),
            offset: 8192,
            asize: 4096,
        };
        (bp.lsize, bp.psize, bp.birth) = (4096, 4096, Txg(40));
        assert_eq!(bp.physical_birth(), Txg(40));
        bp.birth_physical = Txg(12);
        let decoded = BlockPtr::decode_bytes(&bp.encode()).expect("decode");
        assert_eq!(
            (decoded.birth, decoded.physical_birth()),
            (Txg(40), Txg(12))
        );
        // A physical birth at or after the birth is corruption, reported as such.
        bp.birth_physical = Txg(40);
        assert!(BlockPtr::decode_bytes(&bp.encode()).is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut rng = tarn_base::SeededRng::new(3);
        for len in [0usize, 10, 127, 128, 200] {
            for _ in 0..100 {
                let mut bytes = vec![0u8; len];
                rng.fill(&mut bytes);
                let _ = BlockPtr::decode_bytes(&bytes);
            }
        }
    }
}
