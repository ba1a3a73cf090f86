//! Intent-log records of volumes (ZFS's `TX_WRITE` and `TX_TRUNCATE` of a zvol): what a
//! volume write or a trim/write-zeroes did, in a form [`LogRecord::apply`] can do again
//! after a crash (docs/FORMAT.md "Intent log", volume records).
//!
//! Model: until its commit a change is kept in memory as a [`Change`] (where it went, no
//! bytes); the commit turns it into a [`LogRecord`] with [`Change::record`], reading a
//! write's bytes from the volume then (ZFS's `WR_NEED_COPY`), so writes nobody flushes cost
//! no copy. Those bytes may include later writes or zeroes of the same range; the records of
//! those come after, so replaying every record in order still ends in the flushed state.
//! Replay applies the records on the last committed state, in order: a volume write is a
//! pure function of (state, offset, bytes), a zero of (state, offset, length).
//!
//! Invariants: L1: a record names a range inside the volume when it was made (sizes change
//! only in a txg, and a txg drops every record made before it), so replay refuses one
//! outside the volume as corrupt rather than growing anything; L2: the type bytes (32-34)
//! are not those of filesystem records (1-15), so a record of one kind never decodes as
//! the other. Bytes from disk are input: garbage is [`DatasetError::Corrupt`], never a panic.
//!
//! Indirect writes (ZFS's `WR_INDIRECT`, `logbias=throughput`): [`Change::write_ahead_all`]
//! writes every dirty block a commit's writes touched ahead of its txg, in place in the pool,
//! in batches (`ObjectSet::write_ahead_many`: in parallel on devices that allow it), and
//! [`Change::records_indirect`] records only where each went ([`LogRecord::Indirect`]: the
//! range and the block pointer); the txg then adopts the block instead of writing it again.
//! Replay reads the block through its pointer (checksum verified) and writes the range
//! again ([`LogRecord::apply_indirect`]). A block whose write-ahead yields nothing (a hole,
//! zeros) is logged as a plain write.
//!
//! Not here: the chain of log blocks, commits, replay order and the claim of indirect
//! blocks (the engine's `zil` module), time stamps (a block device has none).

use tarn_format::BlockPtr;
use tarn_format::wire::{Reader, Writer};
use tarn_objects::ObjectSet;
use tarn_zio::BlockStore;

use crate::DatasetError;
use crate::volume;

/// Type byte of a volume write record.
pub const RECORD_WRITE: u8 = 32;
/// Type byte of a volume zero (trim, write-zeroes) record.
pub const RECORD_ZERO: u8 = 33;
/// Type byte of a volume indirect write record (feature `org.tarn:volume_log_indirect`).
pub const RECORD_INDIRECT: u8 = 34;

/// A volume change as kept in memory until its log commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    /// A zero (trim or write-zeroes) rather than a write.
    pub zero: bool,
    /// Byte offset in the volume.
    pub offset: u64,
    /// Bytes changed.
    pub len: u64,
}

/// One volume change as the log holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogRecord {
    /// `data` written at `offset`.
    Write {
        /// Byte offset in the volume.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// `[offset, offset + len)` zeroed: whole blocks become holes.
    Zero {
        /// Byte offset in the volume.
        offset: u64,
        /// Length in bytes.
        len: u64,
    },
    /// `len` bytes written at `offset`, found in `block` (the volume block holding them,
    /// written in place) from byte `offset % block.lsize` on.
    Indirect {
        /// Byte offset in the volume.
        offset: u64,
        /// Length in bytes, inside one block.
        len: u32,
        /// The block written ahead of its txg.
        block: BlockPtr,
    },
}

impl Change {
    /// Bytes the record will take in the log, about (a write's data plus a small record).
    #[must_use]
    pub fn log_bytes(&self) -> u64 {
        const SMALL: u64 = 32;
        if self.zero { SMALL } else { SMALL + self.len }
    }

    /// The record this change stands for, a write's bytes read from the volume now.
    pub fn record(
        &self,
        objset: &mut ObjectSet,
        store: &dyn BlockStore,
    ) -> Result<LogRecord, DatasetError> {
        if self.zero {
            return Ok(LogRecord::Zero {
                offset: self.offset,
                len: self.len,
            });
        }
        let len = usize::try_from(self.len)
            .map_err(|_| DatasetError::Corrupt("volume write longer than memory".into()))?;
        let mut data = tarn_base::buf::zeroed(len);
        volume::read(objset, store, self.offset, &mut data)?;
        Ok(LogRecord::Write {
            offset: self.offset,
            data,
        })
    }

    /// Writes ahead (`ObjectSet::write_ahead_all`: in batches, compressed, checksummed and
    /// written in parallel on devices that allow it), every
    /// dirty volume block the writes among `changes` touch that `written` does not hold,
    /// before [`Change::records_indirect`] makes their records: it then finds each block in
    /// `written` instead of writing it alone. New blocks go to `written` and `new_blocks`
    /// (also those written before an error, which is returned after them).
    pub fn write_ahead_all<'a>(
        changes: impl Iterator<Item = &'a Change>,
        objset: &mut ObjectSet,
        writer: &mut dyn BlockStore,
        written: &mut std::collections::BTreeMap<u64, BlockPtr>,
        new_blocks: &mut Vec<(u64, BlockPtr)>,
    ) -> Result<(), DatasetError> {
        let block_size = u64::from(volume::info(objset, writer)?.block_size);
        let mut blkids = std::collections::BTreeSet::new();
        for change in changes.filter(|c| !c.zero && c.len > 0) {
            let last = (change.offset.saturating_add(change.len) - 1) / block_size;
            blkids.extend((change.offset / block_size..=last).filter(|b| !written.contains_key(b)));
        }
        let blkids: Vec<u64> = blkids.into_iter().collect();
        let (done, error) = objset.write_ahead_all(writer, volume::VOLUME_OBJECT, &blkids);
        for (blkid, bp) in done {
            written.insert(blkid, bp);
            new_blocks.push((blkid, bp));
        }
        error.map_or(Ok(()), |error| Err(error.into()))
    }

    /// The records this write stands for under `logbias=throughput`: per volume block it
    /// touches, an indirect record naming the block as written ahead now through `writer`
    /// (`written` holds the blocks of this commit, so several changes of one block share
    /// one), or a plain write when the block has no data to write ahead. New blocks are
    /// appended to `new_blocks` (block id, pointer): the caller flushes them and frees those
    /// the next txg does not adopt. A zero is its plain record.
    pub fn records_indirect(
        &self,
        objset: &mut ObjectSet,
        writer: &mut dyn BlockStore,
        written: &mut std::collections::BTreeMap<u64, BlockPtr>,
        new_blocks: &mut Vec<(u64, BlockPtr)>,
    ) -> Result<Vec<LogRecord>, DatasetError> {
        if self.zero || self.len == 0 {
            return Ok(vec![self.record(objset, writer)?]);
        }
        let block_size = u64::from(volume::info(objset, writer)?.block_size);
        let end = self.offset.saturating_add(self.len);
        let mut records = Vec::new();
        let mut position = self.offset;
        while position < end {
            let blkid = position / block_size;
            let next = (blkid + 1).saturating_mul(block_size).min(end);
            let len = u32::try_from(next - position)
                .map_err(|_| DatasetError::Corrupt("volume block larger than 4 GiB".into()))?;
            let block = match written.get(&blkid) {
                Some(bp) => Some(*bp),
                None => {
                    let bp = objset.write_ahead(writer, volume::VOLUME_OBJECT, blkid)?;
                    if let Some(bp) = bp {
                        written.insert(blkid, bp);
                        new_blocks.push((blkid, bp));
                    }
                    bp
                }
            };
            let record = match block {
                Some(block) => LogRecord::Indirect {
                    offset: position,
                    len,
                    block,
                },
                None => Change {
                    zero: false,
                    offset: position,
                    len: u64::from(len),
                }
                .record(objset, writer)?,
            };
            records.push(record);
            position = next;
        }
        Ok(records)
    }
}

impl LogRecord {
    /// Encodes the record (its length is not included): type u8, offset u64, then a
    /// write's data (u32 length and the bytes), a zero's length (u64), or an indirect
    /// write's length (u32) and block pointer (128 bytes).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        match self {
            LogRecord::Write { offset, data } => {
                w.u8(RECORD_WRITE);
                w.u64(*offset);
                w.u32(u32::try_from(data.len()).unwrap_or(u32::MAX));
                w.bytes(data);
            }
            LogRecord::Zero { offset, len } => {
                w.u8(RECORD_ZERO);
                w.u64(*offset);
                w.u64(*len);
            }
            LogRecord::Indirect { offset, len, block } => {
                w.u8(RECORD_INDIRECT);
                w.u64(*offset);
                w.u32(*len);
                block.encode_into(&mut w);
            }
        }
        w.finish()
    }

    /// Decodes one record (all of `bytes`).
    pub fn decode(bytes: &[u8]) -> Result<LogRecord, DatasetError> {
        let bad = |why: &str| DatasetError::Corrupt(format!("volume log record: {why}"));
        let mut r = Reader::new(bytes, "volume log record");
        let truncated = |_| bad("truncated");
        let code = r.u8().map_err(truncated)?;
        let offset = r.u64().map_err(truncated)?;
        let record = match code {
            RECORD_WRITE => {
                let len = r.u32().map_err(truncated)? as usize;
                if len > r.remaining() {
                    return Err(bad("data longer than the record"));
                }
                let data = r.take(len).map_err(truncated)?.to_vec();
                LogRecord::Write { offset, data }
            }
            RECORD_ZERO => LogRecord::Zero {
                offset,
                len: r.u64().map_err(truncated)?,
            },
            RECORD_INDIRECT => {
                let len = r.u32().map_err(truncated)?;
                let block = BlockPtr::decode(&mut r).map_err(|_| bad("bad block pointer"))?;
                if !tarn_format::intent_log::indirect_inside(offset, len, &block) {
                    return Err(bad("indirect range outside its block"));
                }
                LogRecord::Indirect { offset, len, block }
            }
            _ => return Err(bad("unknown record type")),
        };
        if r.remaining() != 0 {
            return Err(bad("trailing bytes"));
        }
        Ok(record)
    }

    /// Does the change again on `objset` (replay). A range outside the volume is refused
    /// (L1). An indirect write needs its block's bytes: [`LogRecord::apply_indirect`].
    pub fn apply(
        &self,
        objset: &mut ObjectSet,
        store: &dyn BlockStore,
    ) -> Result<(), DatasetError> {
        match self {
            LogRecord::Write { offset, data } => volume::write(objset, store, *offset, data),
            LogRecord::Zero { offset, len } => volume::zero(objset, store, *offset, *len),
            LogRecord::Indirect { .. } => Err(DatasetError::Corrupt(
                "an indirect volume write replayed without its block".into(),
            )),
        }
    }

    /// Replays an indirect write with `block`, the verified logical bytes of the block its
    /// record names; any other record is [`LogRecord::apply`].
    pub fn apply_indirect(
        &self,
        objset: &mut ObjectSet,
        store: &dyn BlockStore,
        block: &[u8],
    ) -> Result<(), DatasetError> {
        let LogRecord::Indirect { offset, len, .. } = self else {
            return self.apply(objset, store);
        };
        let data = tarn_format::intent_log::indirect_bytes(block, *offset, *len)
            .ok_or_else(|| DatasetError::Corrupt("indirect range outside its block".into()))?;
        volume::write(objset, store, *offset, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(record: &LogRecord) {
        let bytes = record.encode();
        assert_eq!(LogRecord::decode(&bytes).ok().as_ref(), Some(record));
        // Every cut and every extra byte is an error, never a panic.
        for cut in 0..bytes.len() {
            assert!(LogRecord::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(LogRecord::decode(&longer).is_err());
    }

    #[test]
    fn records_round_trip_and_garbage_is_an_error() {
        check(&LogRecord::Write {
            offset: 4096,
            data: vec![7; 100],
        });
        check(&LogRecord::Write {
            offset: 0,
            data: Vec::new(),
        });
        check(&LogRecord::Zero {
            offset: 1 << 40,
            len: 65536,
        });
        let block = BlockPtr {
            lsize: 4096,
            psize: 4096,
            birth: tarn_base::Txg(9),
            fill: 1,
            dvas: [
                tarn_format::Dva {
                    vdev: tarn_base::VdevId(0),
                    offset: 1 << 20,
                    asize: 4096,
                },
                tarn_format::Dva::default(),
                tarn_format::Dva::default(),
            ],
            ..BlockPtr::default()
        };
        check(&LogRecord::Indirect {
            offset: 3 * 4096 + 100,
            len: 3996,
            block,
        });
        // A range that leaves its block, or a hole, is corrupt.
        for (offset, len, block) in [
            (3 * 4096 + 100, 3997, block),
            (0, 1, BlockPtr::hole(tarn_base::Txg(9))),
        ] {
            let bytes = LogRecord::Indirect { offset, len, block }.encode();
            assert!(LogRecord::decode(&bytes).is_err(), "{offset} {len}");
        }
        // A filesystem record's type byte (a write, 1) is not a volume record (L2).
        let mut bytes = LogRecord::Zero { offset: 0, len: 1 }.encode();
        bytes[0] = 1;
        assert!(LogRecord::decode(&bytes).is_err());
        // A length past the record.
        let mut bytes = LogRecord::Write {
            offset: 0,
            data: vec![1; 4],
        }
        .encode();
        bytes[9] = 200;
        assert!(LogRecord::decode(&bytes).is_err());
    }
}
