//! The space log: the persistent form of the allocation state.
//!
//! Every txg appends one or more *delta* blocks listing, in order, every allocation and free
//! it made, including the allocation of the delta blocks themselves. Each block names the one
//! before it, and the uberblock names the newest, so the chain is part of the Merkle tree.
//! From time to time a *base* (all allocated extents, condensed) restarts the chain, and the
//! old chain's blocks are freed.
//!
//! ```text
//!  uberblock.space_log -> delta(T) -> delta(T-1) -> ... -> delta(B+1) -> base(B) -> hole
//! ```
//!
//! Block layout (little-endian, format version 1; size a multiple of 512):
//!
//! ```text
//!    0 magic u64 ("tarnslog")   8 kind u8 (0 delta, 1 base) + pad[7]
//!   16 txg u64                 24 record count u64
//!   32 previous block pointer (128 bytes; a hole for a base)
//!  160 records, 24 bytes each: vdev u32 | op u32 | offset u64 | asize u64
//! ```
//!
//! Ops: 1 alloc, 2 free; with feature `org.tarn:block_cloning`, 3 and 4 add and drop one
//! reference of the block reference table (module [`crate::brt`]) to the allocated extent
//! `(vdev, offset, asize)`: they move no space.

use crate::SpaceError;
use tarn_base::{Txg, VdevId};
use tarn_format::BlockPtr;
use tarn_format::blkptr::BLKPTR_SIZE;
use tarn_format::wire::{Reader, Writer};

const LOG_MAGIC: u64 = 0x676f_6c73_6e72_6174; // "tarnslog"
/// Bytes before the first record.
pub(crate) const HEADER_SIZE: usize = 32 + BLKPTR_SIZE;
/// Bytes per record.
pub(crate) const RECORD_SIZE: usize = 24;
/// Largest log block.
pub(crate) const LOG_BLOCK_MAX: usize = 128 << 10;
/// Records that fit in the largest log block.
pub(crate) const RECORDS_PER_BLOCK: usize = (LOG_BLOCK_MAX - HEADER_SIZE) / RECORD_SIZE;

const _: () = assert!(RECORDS_PER_BLOCK > 1000);

/// One change to the allocation state, or to the block reference table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Allocation (true) or free (false); for a `clone_ref` record, a reference added (true)
    /// or dropped (false).
    pub alloc: bool,
    /// A change of the block reference table (ops 3 and 4), not of the allocated set.
    pub clone_ref: bool,
    /// Top-level vdev.
    pub vdev: VdevId,
    /// Offset in its address space.
    pub offset: u64,
    /// Allocated size.
    pub asize: u64,
}

/// Whether a log block is a delta or a condensed base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogKind {
    /// Changes made by one txg.
    Delta,
    /// Every allocated extent as of one txg.
    Base,
}

/// A decoded log block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogBlock {
    /// Delta or base.
    pub kind: LogKind,
    /// Txg that wrote it.
    pub txg: Txg,
    /// The block before it in the chain (a hole ends the chain).
    pub prev: BlockPtr,
    /// Its records, in order.
    pub records: Vec<Record>,
}

/// Encoded size of a block holding `records` records, padded to 512 bytes.
#[must_use]
pub(crate) fn encoded_size(records: usize) -> u64 {
    ((HEADER_SIZE + records * RECORD_SIZE) as u64).next_multiple_of(512)
}

impl LogBlock {
    /// Encodes, padded to `encoded_size(records.len())`.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        assert!(
            self.records.len() <= RECORDS_PER_BLOCK,
            "log block overfull"
        );
        let mut w = Writer::new();
        w.u64(LOG_MAGIC);
        w.u8(match self.kind {
            LogKind::Delta => 0,
            LogKind::Base => 1,
        });
        w.pad_to(16);
        w.u64(self.txg.0);
        w.u64(self.records.len() as u64);
        self.prev.encode_into(&mut w);
        for record in &self.records {
            w.u32(record.vdev.0);
            w.u32(match (record.clone_ref, record.alloc) {
                (false, true) => 1,
                (false, false) => 2,
                (true, true) => 3,
                (true, false) => 4,
            });
            w.u64(record.offset);
            w.u64(record.asize);
        }
        w.pad_to(encoded_size(self.records.len()) as usize);
        w.finish()
    }

    /// Decodes a block read from disk (already checksum-verified, but still input).
    pub fn decode(bytes: &[u8]) -> Result<Self, SpaceError> {
        let corrupt = |why: &'static str| SpaceError::CorruptLog { why };
        let mut r = Reader::new(bytes, "space log");
        if r.u64().map_err(|_| corrupt("truncated header"))? != LOG_MAGIC {
            return Err(corrupt("bad magic"));
        }
        let kind = match r.u8().map_err(|_| corrupt("truncated header"))? {
            0 => LogKind::Delta,
            1 => LogKind::Base,
            _ => return Err(corrupt("unknown kind")),
        };
        r.take(7).map_err(|_| corrupt("truncated header"))?;
        let txg = Txg(r.u64().map_err(|_| corrupt("truncated header"))?);
        let count = r.u64().map_err(|_| corrupt("truncated header"))?;
        if count > RECORDS_PER_BLOCK as u64 {
            return Err(corrupt("too many records"));
        }
        let prev = BlockPtr::decode(&mut r).map_err(|_| corrupt("bad previous pointer"))?;
        let mut records = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let vdev = VdevId(r.u32().map_err(|_| corrupt("truncated records"))?);
            let (clone_ref, alloc) = match r.u32().map_err(|_| corrupt("truncated records"))? {
                1 => (false, true),
                2 => (false, false),
                3 => (true, true),
                4 => (true, false),
                _ => return Err(corrupt("unknown record op")),
            };
            let offset = r.u64().map_err(|_| corrupt("truncated records"))?;
            let asize = r.u64().map_err(|_| corrupt("truncated records"))?;
            if asize == 0 || offset.checked_add(asize).is_none() {
                return Err(corrupt("record range overflows"));
            }
            records.push(Record {
                alloc,
                clone_ref,
                vdev,
                offset,
                asize,
            });
        }
        Ok(LogBlock {
            kind,
            txg,
            prev,
            records,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let block = LogBlock {
            kind: LogKind::Delta,
            txg: Txg(9),
            prev: BlockPtr::hole(Txg(0)),
            records: vec![
                Record {
                    alloc: true,
                    clone_ref: false,
                    vdev: VdevId(0),
                    offset: 4096,
                    asize: 8192,
                },
                Record {
                    alloc: false,
                    clone_ref: false,
                    vdev: VdevId(3),
                    offset: 0,
                    asize: 512,
                },
                Record {
                    alloc: true,
                    clone_ref: true,
                    vdev: VdevId(3),
                    offset: 0,
                    asize: 512,
                },
                Record {
                    alloc: false,
                    clone_ref: true,
                    vdev: VdevId(3),
                    offset: 0,
                    asize: 512,
                },
            ],
        };
        let bytes = block.encode();
        assert_eq!(bytes.len() as u64, encoded_size(4));
        assert_eq!(LogBlock::decode(&bytes).expect("decode"), block);
        let mut rng = tarn_base::SeededRng::new(5);
        for _ in 0..500 {
            let mut junk = bytes.clone();
            let at = rng.below(junk.len() as u64) as usize;
            junk[at] ^= 1 << rng.below(8);
            let _ = LogBlock::decode(&junk);
            let _ = LogBlock::decode(&junk[..at]);
        }
    }
}
