//! The uberblock: the root of everything a txg committed. One is written per txg into slot
//! `txg % slots` of the ring in every label of every leaf, after every block it references is
//! flushed. Import picks the valid uberblock with the highest txg (or the one asked for with
//! `-T`).
//!
//! Encoded in the first 1 KiB of a slot, little-endian (format version 1):
//!
//! ```text
//!    0 magic u64            8 version u64        16 txg u64          24 guid_sum u64
//!   32 timestamp u64 (unix seconds)              40 pool_guid u64
//!   48 root bp (128)       176 space-log bp (128)
//!  304 hostid u64         312 mmp sequence u64   320 mmp interval ms u64
//!  328 reserved ...
//!  992 sha256 of bytes 0..992 [u64; 4]
//! ```

use crate::blkptr::{BLKPTR_SIZE, BlockPtr};
use crate::checksum::{check_sha256, seal_sha256};
use crate::wire::{Reader, Writer};
use crate::{FORMAT_VERSION, FormatError};
use tarn_base::{Guid, Txg};

/// Encoded size of an uberblock (the rest of a slot is zero).
pub const UBERBLOCK_SIZE: usize = 1024;
const UBERBLOCK_MAGIC: u64 = 0x0062_7562_6e72_6174; // "tarnbub\0"
const CHECKSUM_OFFSET: usize = UBERBLOCK_SIZE - 32;

/// The root of a committed txg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uberblock {
    /// Format version the pool was written with.
    pub version: u64,
    /// The txg this uberblock commits.
    pub txg: Txg,
    /// Sum of all vdev GUIDs in the tree (detects a missing device at import).
    pub guid_sum: u64,
    /// Unix seconds when the txg was committed.
    pub timestamp: u64,
    /// GUID of the pool this uberblock belongs to.
    pub pool_guid: Guid,
    /// The pool root block.
    pub root: BlockPtr,
    /// Head of the space-log chain (allocation state as of this txg).
    pub space_log: BlockPtr,
    /// Host id of the writer (multihost protection).
    pub hostid: u64,
    /// Multihost heartbeat sequence.
    pub mmp_sequence: u64,
    /// Multihost heartbeat interval in milliseconds (0: multihost off).
    pub mmp_interval_ms: u64,
}

impl Uberblock {
    /// Encodes into [`UBERBLOCK_SIZE`] bytes with its embedded checksum.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(UBERBLOCK_MAGIC);
        w.u64(self.version);
        w.u64(self.txg.0);
        w.u64(self.guid_sum);
        w.u64(self.timestamp);
        w.u64(self.pool_guid.0);
        self.root.encode_into(&mut w);
        self.space_log.encode_into(&mut w);
        w.u64(self.hostid);
        w.u64(self.mmp_sequence);
        w.u64(self.mmp_interval_ms);
        w.pad_to(CHECKSUM_OFFSET);
        let mut bytes = w.finish();
        seal_sha256(&mut bytes);
        assert_eq!(bytes.len(), UBERBLOCK_SIZE, "uberblock encoding size");
        bytes
    }

    /// Decodes a slot. A blank slot, a torn write or bit rot are errors, never a panic.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "uberblock";
        let body = bytes
            .get(..CHECKSUM_OFFSET)
            .ok_or(FormatError::Truncated { what: WHAT })?;
        let mut r = Reader::new(bytes, WHAT);
        if r.u64()? != UBERBLOCK_MAGIC {
            return Err(FormatError::BadMagic { what: WHAT });
        }
        check_sha256(body, &bytes[CHECKSUM_OFFSET.min(bytes.len())..], WHAT)?;
        let version = r.u64()?;
        if version > FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: WHAT,
                version,
            });
        }
        let txg = Txg(r.u64()?);
        let guid_sum = r.u64()?;
        let timestamp = r.u64()?;
        let pool_guid = Guid(r.u64()?);
        let root = BlockPtr::decode(&mut Reader::new(r.take(BLKPTR_SIZE)?, WHAT))?;
        let space_log = BlockPtr::decode(&mut Reader::new(r.take(BLKPTR_SIZE)?, WHAT))?;
        Ok(Uberblock {
            version,
            txg,
            guid_sum,
            timestamp,
            pool_guid,
            root,
            space_log,
            hostid: r.u64()?,
            mmp_sequence: r.u64()?,
            mmp_interval_ms: r.u64()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_detects_damage() {
        let ub = Uberblock {
            version: FORMAT_VERSION,
            txg: Txg(42),
            guid_sum: 99,
            timestamp: 1_700_000_000,
            pool_guid: Guid(5),
            root: BlockPtr::hole(Txg(3)),
            space_log: BlockPtr::hole(Txg(4)),
            hostid: 7,
            mmp_sequence: 0,
            mmp_interval_ms: 0,
        };
        let mut bytes = ub.encode();
        assert_eq!(Uberblock::decode(&bytes).expect("decode"), ub);
        bytes[20] ^= 0x10;
        assert!(matches!(
            Uberblock::decode(&bytes),
            Err(FormatError::ChecksumMismatch { .. })
        ));
        assert!(Uberblock::decode(&[0u8; 1024]).is_err());
        assert!(Uberblock::decode(&[]).is_err());
    }
}
