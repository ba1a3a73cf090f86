//! Block cloning of file ranges (`copy_file_range`, OpenZFS 2.2's `zfs_clone_range`): the
//! block pointers of a source range are read from its committed tree and installed in the
//! destination file as clones, so the next sync makes new references to the same blocks
//! (tarn-objects `ObjectSet::clone_blocks`, counted by tarn-space's block reference table)
//! instead of copying bytes.
//!
//! The range is split in two steps, [`Fs::clone_source`] on the source file's view and
//! [`Fs::clone_into`] on the destination's, so that the engine can clone between datasets
//! of one pool without holding two views at once.
//!
//! Rules, as OpenZFS has them: both offsets are multiples of the block size, and the length
//! is too unless the range ends at the source's end (the last block is cloned whole: bytes
//! past a file's end are always zeros) and the destination holds nothing past the range's
//! end. Both files have the same block size, except that an empty destination takes the
//! source's. Anything else is [`PosixError::CannotClone`] (EXDEV), and the caller copies
//! the bytes instead (the kernel falls back to a copy, as `cp` does). A source range that
//! is dirty (written since the last sync) has no committed pointers yet: the caller syncs a
//! txg and asks again.
//!
//! The pointers read are safe to clone only while the txg they were read in is open: only
//! a sync frees blocks, and the sync of that txg takes the clones' references in order with
//! its frees (tarn-space `SpaceManager::clone_ref`). A sync between the two halves (a
//! caller's admission may commit a txg) could free a source block before the clone names
//! it, so [`Fs::clone_into`] installs nothing when the open txg moved, and says so.
//!
//! Not here: the intent log of a clone. A clone's record would name blocks that later
//! txgs may free, so a clone is queued as [`crate::Logged::Clone`], which makes the queue
//! unloggable: the next `fsync` of the dataset commits a txg instead (tarn-engine `zil`).

use tarn_base::Txg;
use tarn_format::BlockPtr;

use crate::fs::{Fs, Result, oid};
use crate::inode::FLAG_CHECKSUM_CURRENT;
use crate::{Ino, PosixError};

/// A source range read for cloning ([`Fs::clone_source`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloneSource {
    /// Block size of the source file.
    pub block_size: u32,
    /// The committed pointers of its blocks over the range (holes as holes).
    pub bps: Vec<BlockPtr>,
    /// Bytes of the range (clamped to the source's end).
    pub len: u64,
    /// The open txg they were read in: they may be cloned only in that txg (module docs).
    pub txg: Txg,
}

impl Fs<'_> {
    /// Reads the block pointers of `[offset, offset + len)` of regular file `ino` for a
    /// clone (module docs): `None` when part of the range is dirty.
    pub fn clone_source(&mut self, ino: Ino, offset: u64, len: u64) -> Result<Option<CloneSource>> {
        let inode = self.regular(ino)?;
        let info = self.os.object_info(self.store, oid(ino))?;
        let block_size = info.data_block_size;
        let len = len.min(inode.size.saturating_sub(offset));
        if len == 0 {
            return Ok(Some(CloneSource {
                block_size,
                bps: Vec::new(),
                len: 0,
                txg: self.store.txg(),
            }));
        }
        let size = u64::from(block_size);
        if !offset.is_multiple_of(size) {
            return Err(PosixError::CannotClone("source offset inside a block"));
        }
        let end = offset + len;
        if !end.is_multiple_of(size) && end != inode.size {
            return Err(PosixError::CannotClone("range ends inside a block"));
        }
        let count = len.div_ceil(size);
        let bps = self
            .os
            .block_pointers(self.store, oid(ino), offset / size, count)?;
        Ok(bps.map(|bps| CloneSource {
            block_size,
            bps,
            len,
            txg: self.store.txg(),
        }))
    }

    /// Makes `[offset, offset + source.len)` of regular file `ino` a clone of `source`
    /// (module docs); the file grows to the range's end, mtime and ctime become now.
    /// Returns the bytes cloned, or `None` (nothing changed) when the txg `source` was read
    /// in is no longer open: the caller reads the source again.
    pub fn clone_into(
        &mut self,
        ino: Ino,
        offset: u64,
        source: &CloneSource,
    ) -> Result<Option<u64>> {
        let mut inode = self.regular(ino)?;
        if source.txg != self.store.txg() {
            return Ok(None);
        }
        if source.len == 0 {
            return Ok(Some(0));
        }
        let size = u64::from(source.block_size);
        let end = offset
            .checked_add(source.len)
            .filter(|end| *end <= crate::FILE_SIZE_MAX)
            .ok_or(PosixError::TooBig)?;
        if !offset.is_multiple_of(size) {
            return Err(PosixError::CannotClone("destination offset inside a block"));
        }
        if !end.is_multiple_of(size) && end < inode.size {
            return Err(PosixError::CannotClone(
                "a partial last block over destination data",
            ));
        }
        let info = self.os.object_info(self.store, oid(ino))?;
        if info.data_block_size != source.block_size {
            if inode.size != 0 || info.maxblkid != 0 {
                return Err(PosixError::CannotClone("files of different block sizes"));
            }
            self.os
                .set_block_size(self.store, oid(ino), source.block_size)?;
        }
        self.admit_bytes(&inode, source.len)?;
        self.os
            .clone_blocks(self.store, oid(ino), offset / size, &source.bps)?;
        inode.size = inode.size.max(end);
        inode.mtime = self.now;
        inode.ctime = self.now;
        inode.flags &= !FLAG_CHECKSUM_CURRENT;
        self.put(ino, &inode)?;
        self.record_clone(ino);
        Ok(Some(source.len))
    }
}

#[cfg(test)]
mod tests {
    use crate::FileKind;
    use crate::tests::{ME, World};

    #[test]
    fn a_clone_needs_committed_pointers_and_the_txg_it_read_them_in() {
        // Goal: the module's rules for callers: a dirty source has no committed pointers
        // (`None`: sync and ask again); pointers read in a txg that is no longer open are
        // not installed (a sync between the halves could have freed them) and nothing
        // changes; in the same txg the clone reads as its source before any sync. Method:
        // a memory store whose open txg the test moves.
        let mut world = World::new();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let len = data.len() as u64;
        let (src, dst) = {
            let mut fs = world.fs();
            let root = fs.root().unwrap();
            let src = fs
                .mknod(root, b"src", FileKind::Regular, 0o644, 0, ME)
                .unwrap();
            let dst = fs
                .mknod(root, b"dst", FileKind::Regular, 0o644, 0, ME)
                .unwrap();
            fs.write(src.ino, 0, &data).unwrap();
            (src.ino, dst.ino)
        };
        assert_eq!(world.fs().clone_source(src, 0, len).unwrap(), None, "dirty");
        world.sync_and_reopen();
        let source = world.fs().clone_source(src, 0, len).unwrap().unwrap();
        assert_eq!(source.bps.len(), 3);
        world.store.next_txg();
        assert_eq!(world.fs().clone_into(dst, 0, &source).unwrap(), None);
        assert!(
            world.fs().read(dst, 0, 1 << 20).unwrap().is_empty(),
            "nothing changed"
        );
        let source = world.fs().clone_source(src, 0, len).unwrap().unwrap();
        assert_eq!(world.fs().clone_into(dst, 0, &source).unwrap(), Some(len));
        assert_eq!(world.fs().read(dst, 0, 1 << 20).unwrap(), data);
    }
}
