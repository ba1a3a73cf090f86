//! Indirect write records of files (ZFS's `WR_INDIRECT`, `logbias=throughput`): an `fsync`
//! writes the file's dirty whole blocks in place, ahead of their txg, and logs block
//! pointers to them instead of their bytes ([`LogOp::WriteIndirect`], record type 16,
//! docs/FORMAT.md "Intent log").
//!
//! Model: [`records_throughput`] turns a commit's queue into records in three passes over
//! the object set: (1) which blocks the queued writes cover whole, per file (the union of
//! its queued ranges, so sixteen 8 KiB writes cover a 128 KiB record; a block counts as
//! whole when the ranges cover it up to the file's end); (2) those blocks written ahead in
//! batches through the open-context writer (`ObjectSet::write_ahead_all`, the same path as
//! volumes', born in the open txg, which adopts each block still current); (3) each queued
//! write split per block: a block written ahead (by this commit or an earlier one of the
//! same txg, while unchanged since) gives an indirect record, the rest is logged as data
//! as under `latency`. Replay reads the block through its pointer (checksum verified, by
//! the engine) and writes the range again ([`Fs::replay_indirect`]).
//!
//! Choices: partial blocks (a small write inside a record) and blocks of less than
//! [`INDIRECT_MIN`] bytes stay logged as data, as ZFS's `latency` logs small writes (ZFS's
//! `throughput` writes the whole record even then): writing a whole record to the pool for
//! a few changed bytes, and again at every later `fsync` of the same record, costs more
//! than copying the bytes into the log. Invariants: an indirect record
//! names a block that held the file's bytes of its range when the commit was written (the
//! objects layer drops a written-ahead pointer at any change of its block), and its range
//! is cut at the file's size then, as a data record's is.
//!
//! Failure model: an error writing a block ahead is returned (after the blocks written
//! before it were handed to the caller, who owns them: the next txg adopts or frees them);
//! the engine then commits a txg instead of the log. Not here: the chain, flushes, the
//! adoption or freeing of written blocks at the txg, and the reading of a block at replay
//! (the engine's `zil` module).

use std::collections::BTreeMap;

use tarn_format::BlockPtr;
use tarn_objects::ObjectSet;
use tarn_zio::BlockStore;

use crate::fs::{Fs, Result, oid};
use crate::{FsConfig, Ino, LogOp, LogRecord, Logged, PosixError, Timespec};

/// Fewest bytes of a file's block (inside the file) that are written ahead rather than
/// logged as data: below that a pointer record and a separate block write cost more than
/// the bytes in the log.
pub const INDIRECT_MIN: u64 = 4096;

/// A block a commit wrote ahead: the file's object, the block id and where it went.
pub type WrittenAhead = (tarn_base::ObjectId, u64, BlockPtr);

/// The records of `entries` (a commit's queue, oldest first) under `logbias=throughput`,
/// each with its entry's tag: every whole dirty block the queued writes cover written
/// ahead through `writer` (an open-context writer of the txg the entries went into) and
/// named by indirect records, the rest as [`Fs::log_record`] makes it. Blocks written go
/// to `new_blocks`, also when an error follows. `Ok(None)` when an entry cannot be turned
/// into a record (as [`Fs::log_record`]).
pub fn records_throughput<'e, T>(
    os: &mut ObjectSet,
    writer: &mut dyn BlockStore,
    config: FsConfig,
    entries: &'e [(T, Logged)],
    new_blocks: &mut Vec<WrittenAhead>,
) -> Result<Option<Vec<(&'e T, LogRecord)>>> {
    // Reads only: the time and the access-time mode do not matter.
    let now = Timespec { secs: 0, nsecs: 0 };
    let plan = Fs::new(os, &*writer, now, config).whole_blocks(entries)?;
    for (ino, blkids) in plan {
        let (done, error) = os.write_ahead_all(writer, oid(ino), &blkids);
        new_blocks.extend(done.into_iter().map(|(blkid, bp)| (oid(ino), blkid, bp)));
        if let Some(error) = error {
            return Err(error.into());
        }
    }
    let mut fs = Fs::new(os, &*writer, now, config);
    let mut records = Vec::new();
    for (tag, entry) in entries {
        let Some(made) = fs.log_records_indirect(entry)? else {
            return Ok(None);
        };
        records.extend(made.into_iter().map(|record| (tag, record)));
    }
    Ok(Some(records))
}

impl LogRecord {
    /// The block an indirect write record names (its bytes must be read for the replay).
    #[must_use]
    pub fn indirect_block(&self) -> Option<&BlockPtr> {
        match &self.op {
            LogOp::WriteIndirect { block, .. } => Some(block),
            _ => None,
        }
    }
}

impl Fs<'_> {
    /// Per file of the queued writes, the ids of the dirty blocks they cover whole (up to
    /// the file's end) with at least [`INDIRECT_MIN`] bytes inside the file, ascending.
    fn whole_blocks<T>(&mut self, entries: &[(T, Logged)]) -> Result<BTreeMap<Ino, Vec<u64>>> {
        let mut ranges: BTreeMap<Ino, Vec<(u64, u64)>> = BTreeMap::new();
        for (_, entry) in entries {
            if let Logged::Write {
                ino, offset, len, ..
            } = entry
            {
                let end = offset.saturating_add(u64::from(*len));
                ranges.entry(*ino).or_default().push((*offset, end));
            }
        }
        let mut plan = BTreeMap::new();
        for (ino, mut spans) in ranges {
            let size = match self.regular(ino) {
                Ok(inode) => inode.size,
                Err(PosixError::NotFound | PosixError::IsDir | PosixError::Invalid(_)) => continue,
                Err(e) => return Err(e),
            };
            let block = u64::from(self.os.object_info(self.store, oid(ino))?.data_block_size);
            spans.sort_unstable();
            let mut blkids = Vec::new();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (start, end) in spans {
                match merged.last_mut() {
                    Some(last) if start <= last.1 => last.1 = last.1.max(end),
                    _ => merged.push((start, end)),
                }
            }
            for (start, end) in merged {
                let end = end.min(size);
                let mut blkid = start.div_ceil(block);
                while blkid.saturating_mul(block) < end {
                    let from = blkid * block;
                    let to = from.saturating_add(block).min(size);
                    if to > end {
                        break;
                    }
                    if to - from >= INDIRECT_MIN {
                        blkids.push(blkid);
                    }
                    blkid += 1;
                }
            }
            if !blkids.is_empty() {
                blkids.dedup();
                plan.insert(ino, blkids);
            }
        }
        Ok(plan)
    }

    /// The records `entry` stands for after its blocks were written ahead: a write split
    /// at the blocks that are, each such part an indirect record naming the block, the
    /// parts between them data records; anything else as [`Fs::log_record`].
    fn log_records_indirect(&mut self, entry: &Logged) -> Result<Option<Vec<LogRecord>>> {
        let Logged::Write {
            now,
            ino,
            offset,
            len,
        } = *entry
        else {
            return Ok(self.log_record(entry)?.map(|record| vec![record]));
        };
        let size = match self.regular(ino) {
            Ok(inode) => inode.size,
            Err(PosixError::NotFound | PosixError::IsDir | PosixError::Invalid(_)) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let end = offset.saturating_add(u64::from(len)).min(size);
        let block = u64::from(self.os.object_info(self.store, oid(ino))?.data_block_size);
        let mut records = Vec::new();
        // Where the bytes not yet recorded start (a data record covers them up to the next
        // indirect part).
        let mut run = offset;
        let mut position = offset;
        while position < end {
            let blkid = position / block;
            let next = blkid.saturating_add(1).saturating_mul(block).min(end);
            if let Some(bp) = self.os.written_ahead(oid(ino), blkid) {
                if run < position {
                    records.push(self.data_record(now, ino, run, position - run)?);
                }
                let op = LogOp::WriteIndirect {
                    ino,
                    offset: position,
                    len: u32::try_from(next - position).map_err(|_| PosixError::TooBig)?,
                    block: bp,
                };
                records.push(LogRecord { now, op });
                run = next;
            }
            position = next;
        }
        if records.is_empty() {
            return Ok(self.log_record(entry)?.map(|record| vec![record]));
        }
        if run < end {
            records.push(self.data_record(now, ino, run, end - run)?);
        }
        Ok(Some(records))
    }

    /// A data record of the file's `len` bytes at `offset` now (inside the file).
    fn data_record(&mut self, now: Timespec, ino: Ino, offset: u64, len: u64) -> Result<LogRecord> {
        let mut data =
            tarn_base::buf::zeroed(usize::try_from(len).map_err(|_| PosixError::TooBig)?);
        self.os.read(self.store, oid(ino), offset, &mut data)?;
        let op = LogOp::Write { ino, offset, data };
        Ok(LogRecord { now, op })
    }

    /// Replays `record` with `block`, the verified logical bytes of the block an indirect
    /// write names (the engine read them through its pointer); any other record is
    /// [`Fs::replay`]. A range that leaves the block is corrupt.
    pub fn replay_indirect(&mut self, record: &LogRecord, block: &[u8]) -> Result<()> {
        let LogOp::WriteIndirect {
            ino, offset, len, ..
        } = record.op
        else {
            return self.replay(record);
        };
        let data = tarn_format::intent_log::indirect_bytes(block, offset, len)
            .ok_or_else(|| crate::inode::corrupt(ino, "indirect write range outside its block"))?;
        let op = LogOp::Write {
            ino,
            offset,
            data: data.to_vec(),
        };
        self.replay(&LogRecord {
            now: record.now,
            op,
        })
    }
}
