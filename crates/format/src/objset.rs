//! The object-set root block: the meta-dnode (object 0, whose data blocks are arrays of
//! dnodes) plus a small header. A dataset or the pool's MOS is named by the block pointer of
//! its root block.
//!
//! Encoded little-endian in exactly [`OBJSET_PHYS_SIZE`] bytes (format version 1):
//!
//! ```text
//!    0 magic u64 ("tarnobjs")    8 version u64 (1)
//!   16 object-set type u64 (1 = MOS, 2 = filesystem, 3 = volume)
//!   24 flags u64 (zero in version 1)
//!   32 reserved (zero) up to 64
//!   64 meta-dnode (512 bytes)
//!  576 user-accounting dnode (512 bytes; a free slot in version 1)
//! 1088 group-accounting dnode (512 bytes; a free slot in version 1)
//! 1600 reserved (zero) up to 2048
//! ```

use crate::dnode::{DNODE_SIZE, Dnode, OBJECT_TYPE_META_DNODE};
use crate::wire::{Reader, Writer};
use crate::{FORMAT_VERSION, FormatError};

/// Encoded size of an object-set root block.
pub const OBJSET_PHYS_SIZE: usize = 2048;
/// Logical size of a dnode block (a data block of the meta-dnode).
pub const DNODE_BLOCK_SIZE: u32 = 16 << 10;
/// Dnodes per dnode block.
pub const DNODES_PER_BLOCK: u64 = DNODE_BLOCK_SIZE as u64 / DNODE_SIZE as u64;
const OBJSET_MAGIC: u64 = 0x736a_626f_6e72_6174; // "tarnobjs"
const META_DNODE_OFFSET: usize = 64;
const RESERVED_OFFSET: usize = META_DNODE_OFFSET + 3 * DNODE_SIZE;

const _: () = assert!(RESERVED_OFFSET <= OBJSET_PHYS_SIZE);
const _: () = assert!(DNODES_PER_BLOCK == 32);

/// What an object set holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum ObjsetKind {
    /// The meta object set: pool-wide metadata.
    Mos = 1,
    /// A POSIX filesystem dataset.
    Filesystem = 2,
    /// A block volume dataset.
    Volume = 3,
}

impl ObjsetKind {
    /// Decodes the on-disk value.
    pub fn from_u64(value: u64) -> Result<Self, FormatError> {
        match value {
            1 => Ok(ObjsetKind::Mos),
            2 => Ok(ObjsetKind::Filesystem),
            3 => Ok(ObjsetKind::Volume),
            _ => Err(FormatError::Invalid {
                what: "object set",
                why: "unknown object-set type",
            }),
        }
    }
}

/// The object-set root block (see the module docs). Format version 1.
///
/// Invariants: the meta-dnode is allocated with type `OBJECT_TYPE_META_DNODE` and data block
/// size [`DNODE_BLOCK_SIZE`]; both accounting dnodes are free slots in version 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjsetPhys {
    /// What the object set holds.
    pub kind: ObjsetKind,
    /// The meta-dnode (object 0).
    pub meta_dnode: Dnode,
}

impl ObjsetPhys {
    /// Encodes into exactly [`OBJSET_PHYS_SIZE`] bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        assert_eq!(
            self.meta_dnode.object_type, OBJECT_TYPE_META_DNODE,
            "meta-dnode type"
        );
        assert_eq!(
            self.meta_dnode.data_block_size, DNODE_BLOCK_SIZE,
            "meta-dnode block size"
        );
        let mut w = Writer::new();
        w.u64(OBJSET_MAGIC);
        w.u64(FORMAT_VERSION);
        w.u64(self.kind as u64);
        w.u64(0);
        w.pad_to(META_DNODE_OFFSET);
        w.bytes(&self.meta_dnode.encode());
        w.bytes(&Dnode::default().encode());
        w.bytes(&Dnode::default().encode());
        w.pad_to(OBJSET_PHYS_SIZE);
        w.finish()
    }

    /// Decodes a root block. Garbage is an error, never a panic.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        let bad = |why| FormatError::Invalid {
            what: "object set",
            why,
        };
        if bytes.len() < OBJSET_PHYS_SIZE {
            return Err(FormatError::Truncated { what: "object set" });
        }
        let mut r = Reader::new(bytes, "object set");
        if r.u64()? != OBJSET_MAGIC {
            return Err(FormatError::BadMagic { what: "object set" });
        }
        let version = r.u64()?;
        if version == 0 || version > FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: "object set",
                version,
            });
        }
        let kind = ObjsetKind::from_u64(r.u64()?)?;
        if r.u64()? != 0 {
            return Err(bad("unknown flags"));
        }
        if r.take(META_DNODE_OFFSET - r.position())?
            .iter()
            .any(|&byte| byte != 0)
        {
            return Err(bad("reserved bytes not zero"));
        }
        let meta_dnode = Dnode::decode(r.take(DNODE_SIZE)?)?;
        if meta_dnode.object_type != OBJECT_TYPE_META_DNODE {
            return Err(bad("meta-dnode has the wrong type"));
        }
        if meta_dnode.data_block_size != DNODE_BLOCK_SIZE {
            return Err(bad("meta-dnode has the wrong block size"));
        }
        for _ in 0..2 {
            if !Dnode::decode(r.take(DNODE_SIZE)?)?.is_free() {
                return Err(bad("accounting dnode in use (needs a newer version)"));
            }
        }
        if r.take(OBJSET_PHYS_SIZE - RESERVED_OFFSET)?
            .iter()
            .any(|&byte| byte != 0)
        {
            return Err(bad("reserved bytes not zero"));
        }
        Ok(ObjsetPhys { kind, meta_dnode })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dnode::INDIRECT_SHIFT_DEFAULT;

    fn sample() -> ObjsetPhys {
        let mut meta = Dnode::new(
            OBJECT_TYPE_META_DNODE,
            DNODE_BLOCK_SIZE,
            INDIRECT_SHIFT_DEFAULT,
        );
        meta.maxblkid = 3;
        meta.nlevels = 2;
        ObjsetPhys {
            kind: ObjsetKind::Filesystem,
            meta_dnode: meta,
        }
    }

    #[test]
    fn round_trip() {
        let phys = sample();
        let bytes = phys.encode();
        assert_eq!(bytes.len(), OBJSET_PHYS_SIZE);
        assert_eq!(ObjsetPhys::decode(&bytes).expect("decode"), phys);
    }

    #[test]
    fn invalid_fields_are_errors() {
        let good = sample().encode();
        for (offset, value) in [
            (0usize, 0u8),
            (8, 2),
            (16, 4),
            (24, 1),
            (40, 1),
            (64, 3),
            (580, 1),
            (1700, 1),
        ] {
            let mut bytes = good.clone();
            bytes[offset] = value;
            assert!(
                ObjsetPhys::decode(&bytes).is_err(),
                "offset {offset} accepted"
            );
        }
        assert!(
            ObjsetPhys::decode(&good[..2000]).is_err(),
            "truncated root accepted"
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut rng = tarn_base::SeededRng::new(5);
        for _ in 0..500 {
            let mut bytes = vec![0u8; OBJSET_PHYS_SIZE];
            rng.fill(&mut bytes);
            assert!(ObjsetPhys::decode(&bytes).is_err(), "random bytes accepted");
            let mut mutated = sample().encode();
            let at = usize::try_from(rng.below(OBJSET_PHYS_SIZE as u64)).expect("index");
            mutated[at] ^= 0x5a;
            let _ = ObjsetPhys::decode(&mutated);
        }
    }
}
