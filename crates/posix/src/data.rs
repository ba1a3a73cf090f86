//! File contents: reads, writes that grow a small file's block up to `recordsize`,
//! truncation, fallocate (holes and zeroed ranges) and SEEK_DATA/SEEK_HOLE.
//!
//! A read that lies wholly in a hole ([`Fs::read_data`]) is answered without a buffer: one
//! SEEK_DATA walk of the block tree finds no data before its end, and the front end replies
//! from [`ZEROS`], zeros allocated once on first use and never written. A file that is
//! almost all hole then reads at the speed of the reply path, without a 1 MiB allocation,
//! its page faults and a fill per request. (Not a `static` array: an immutable zeroed array
//! lands in the binary's read-only data, and its pages were read from the executable's file
//! whenever the page cache had dropped them.)

use std::borrow::Cow;
use std::sync::LazyLock;

use tarn_objects::{Fetch, ReadOut};

use crate::fs::{Fs, Result, oid};
use crate::inode::{FLAG_CHECKSUM_CURRENT, Inode};
use crate::intent::LogOp;
use crate::{Fallocate, FileKind, Ino, PosixError, Seek};

/// Largest file size (2^56 bytes: far below what a tree of records can address).
pub const FILE_SIZE_MAX: u64 = 1 << 56;

/// Longest read answered as [`ReadData::Hole`] (the FUSE front end's largest request).
pub const HOLE_READ_MAX: usize = 1 << 20;

/// [`HOLE_READ_MAX`] zeros for replies to reads of holes (module docs); never written.
pub static ZEROS: LazyLock<Box<[u8]>> =
    LazyLock::new(|| vec![0u8; HOLE_READ_MAX].into_boxed_slice());

/// What [`Fs::read_data`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadData {
    /// The bytes read (short at end of file), as the blocks they lie in: the caller joins
    /// them ([`ReadData::into_bytes`]) after it let go of the pool lock (tarn-objects
    /// `readout`).
    Blocks(ReadOut),
    /// This many bytes, all in a hole: they read as zeros, and no buffer was made.
    Hole(usize),
}

impl ReadData {
    /// The bytes, zeros from [`ZEROS`] for a hole.
    #[must_use]
    pub fn into_bytes(self) -> Cow<'static, [u8]> {
        match self {
            ReadData::Blocks(out) => Cow::Owned(out.into_vec()),
            ReadData::Hole(len) => Cow::Borrowed(&ZEROS[..len]),
        }
    }

    /// Hands the bytes to `reply`, copied only when they lie in more than one block (a
    /// read inside one cached block is passed on from the cache itself).
    pub fn reply_with<R>(self, reply: impl FnOnce(&[u8]) -> R) -> R {
        if let ReadData::Blocks(out) = &self
            && let Some(bytes) = out.contiguous()
        {
            return reply(bytes);
        }
        reply(&self.into_bytes())
    }
}

impl Fs<'_> {
    /// Inode `ino`, which must be a regular file.
    pub(crate) fn regular(&mut self, ino: Ino) -> Result<Inode> {
        let inode = self.inode(ino)?;
        match inode.kind {
            FileKind::Regular => Ok(inode),
            FileKind::Directory => Err(PosixError::IsDir),
            _ => Err(PosixError::Invalid("data operation on a special file")),
        }
    }

    /// Reads up to `len` bytes at `offset` (short at end of file).
    pub fn read(&mut self, ino: Ino, offset: u64, len: u32) -> Result<Vec<u8>> {
        let inode = self.regular(ino)?;
        if offset >= inode.size {
            return Ok(Vec::new());
        }
        let len = u64::from(len).min(inode.size - offset);
        let mut buf = tarn_base::buf::zeroed(usize::try_from(len).map_err(|_| PosixError::TooBig)?);
        self.os.read(self.store, oid(ino), offset, &mut buf)?;
        Ok(buf)
    }

    /// The device reads a coming [`Fs::read`] of `len` bytes at `offset` of `ino` needs, for
    /// a caller that does them without the pool lock (`ObjectSet::plan_read`); `None` when
    /// there are none.
    pub fn plan_read(&mut self, ino: Ino, offset: u64, len: u32) -> Result<Option<Fetch>> {
        let inode = self.regular(ino)?;
        if offset >= inode.size {
            return Ok(None);
        }
        let len = u64::from(len).min(inode.size - offset);
        Ok(self.os.plan_read(self.store, oid(ino), offset, len)?)
    }

    /// [`Fs::read`], except that a read of up to [`HOLE_READ_MAX`] bytes that lies wholly in
    /// a hole returns [`ReadData::Hole`] without reading or filling a buffer, and that the
    /// bytes of clean records are not copied yet ([`ReadData::Blocks`]).
    pub fn read_data(&mut self, ino: Ino, offset: u64, len: u32) -> Result<ReadData> {
        let inode = self.regular(ino)?;
        if offset >= inode.size {
            return Ok(ReadData::Blocks(ReadOut::default()));
        }
        let len = u64::from(len).min(inode.size - offset);
        if len <= HOLE_READ_MAX as u64 {
            let data = self.os.next_data(self.store, oid(ino), offset)?;
            if data.is_none_or(|at| at >= offset + len) {
                return Ok(ReadData::Hole(len as usize));
            }
        }
        let len = usize::try_from(len).map_err(|_| PosixError::TooBig)?;
        Ok(ReadData::Blocks(self.os.read_out(
            self.store,
            oid(ino),
            offset,
            len,
        )?))
    }

    /// Grows the block of a file that has at most one block so that `end` fits in it, up to
    /// `recordsize` (ZFS's growing first block: small files take small blocks).
    fn grow_block(&mut self, ino: Ino, end: u64) -> Result<()> {
        let info = self.os.object_info(self.store, oid(ino))?;
        let block = u64::from(info.data_block_size);
        let record = u64::from(self.config.recordsize);
        if info.maxblkid != 0 || block >= record || end <= block {
            return Ok(());
        }
        let wanted = end.next_power_of_two().clamp(512, record);
        let wanted = u32::try_from(wanted).map_err(|_| PosixError::TooBig)?;
        self.os.set_block_size(self.store, oid(ino), wanted)?;
        Ok(())
    }

    /// Writes `data` at `offset`, extending the file; mtime and ctime become now.
    pub fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<u32> {
        let mut inode = self.regular(ino)?;
        let len = u32::try_from(data.len()).map_err(|_| PosixError::TooBig)?;
        let end = offset
            .checked_add(u64::from(len))
            .filter(|end| *end <= FILE_SIZE_MAX)
            .ok_or(PosixError::TooBig)?;
        if !data.is_empty() {
            self.admit_bytes(&inode, u64::from(len))?;
            self.grow_block(ino, end)?;
            self.os.write(self.store, oid(ino), offset, data)?;
        }
        inode.size = inode.size.max(end);
        inode.mtime = self.now;
        inode.ctime = self.now;
        inode.flags &= !FLAG_CHECKSUM_CURRENT;
        self.put(ino, &inode)?;
        self.record_write(ino, offset, len);
        Ok(len)
    }

    /// Sets the size of regular file `ino` (whose inode is `inode`, updated here): shrinking
    /// frees whole blocks past the end and zeroes the rest of the last one, so bytes past
    /// the end always read as zeros when the file grows again.
    pub(crate) fn truncate(&mut self, ino: Ino, inode: &mut Inode, size: u64) -> Result<()> {
        if size > FILE_SIZE_MAX {
            return Err(PosixError::TooBig);
        }
        if size < inode.size {
            self.os
                .free_range(self.store, oid(ino), size, inode.size - size)?;
        }
        if size != inode.size {
            inode.size = size;
            inode.mtime = self.now;
            inode.flags &= !FLAG_CHECKSUM_CURRENT;
        }
        Ok(())
    }

    /// fallocate: preallocate (copy-on-write cannot reserve blocks for later overwrites, so
    /// this only extends the size unless `keep_size`), punch a hole, or zero a range.
    pub fn fallocate(&mut self, ino: Ino, offset: u64, len: u64, mode: Fallocate) -> Result<()> {
        let mut inode = self.regular(ino)?;
        if len == 0 {
            return Err(PosixError::Invalid("fallocate length 0"));
        }
        let end = offset
            .checked_add(len)
            .filter(|end| *end <= FILE_SIZE_MAX)
            .ok_or(PosixError::TooBig)?;
        if mode.punch_hole && (!mode.keep_size || mode.zero_range) {
            return Err(PosixError::Invalid("PUNCH_HOLE needs KEEP_SIZE alone"));
        }
        if mode.punch_hole || mode.zero_range {
            let stop = end.min(inode.size);
            if offset < stop {
                self.os
                    .free_range(self.store, oid(ino), offset, stop - offset)?;
            }
            inode.mtime = self.now;
        }
        if !mode.keep_size && end > inode.size {
            inode.size = end;
            inode.mtime = self.now;
        }
        inode.ctime = self.now;
        inode.flags &= !FLAG_CHECKSUM_CURRENT;
        self.put(ino, &inode)?;
        self.record(|| LogOp::Fallocate {
            ino,
            offset,
            len,
            mode,
        });
        Ok(())
    }

    /// SEEK_DATA / SEEK_HOLE from `offset`.
    pub fn seek(&mut self, ino: Ino, offset: u64, whence: Seek) -> Result<u64> {
        let inode = self.regular(ino)?;
        if offset >= inode.size {
            return Err(PosixError::NoSuchOffset);
        }
        match whence {
            Seek::Data => match self.os.next_data(self.store, oid(ino), offset)? {
                Some(found) if found < inode.size => Ok(found.max(offset)),
                _ => Err(PosixError::NoSuchOffset),
            },
            Seek::Hole => {
                let found = self.os.next_hole(self.store, oid(ino), offset)?;
                Ok(found.max(offset).min(inode.size))
            }
        }
    }
}
