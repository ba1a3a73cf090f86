//! The filesystem operations over one object set (SKELETON: signatures are the contract the
//! engine and the FUSE front end build on; bodies are filled in by the posix work).

use tarn_objects::ObjectSet;
use tarn_zio::BlockStore;

use crate::{
    Attr, Creds, DirEntry, Fallocate, FileKind, FsConfig, Ino, PosixError, RenameFlags, Seek,
    SetAttr, Timespec, XattrSet,
};

type Result<T> = std::result::Result<T, PosixError>;

#[allow(dead_code)] // SKELETON: used once the operations are filled in.
/// A filesystem view of one dataset's object set for the duration of one operation. The
/// engine builds one per call, under the pool lock.
pub struct Fs<'a> {
    os: &'a mut ObjectSet,
    store: &'a dyn BlockStore,
    now: Timespec,
    config: FsConfig,
}

#[allow(unused_variables, clippy::unused_self)]
impl<'a> Fs<'a> {
    /// A view of `os` with `now` as the time of every change it makes.
    pub fn new(
        os: &'a mut ObjectSet,
        store: &'a dyn BlockStore,
        now: Timespec,
        config: FsConfig,
    ) -> Self {
        Fs {
            os,
            store,
            now,
            config,
        }
    }

    /// Makes an empty object set a filesystem: the master node and a root directory owned
    /// by `owner` with permissions 0755.
    pub fn format(&mut self, owner: Creds) -> Result<()> {
        Ok(())
    }

    /// Frees every inode left on the unlinked set (called when a dataset is mounted, as ZFS
    /// drains its unlinked set: files deleted while open whose owner died).
    pub fn drain_unlinked(&mut self) -> Result<u64> {
        Ok(0)
    }

    /// The root directory's inode.
    pub fn root(&mut self) -> Result<Ino> {
        Err(PosixError::NotSupported)
    }

    /// Looks up `name` in directory `parent`.
    pub fn lookup(&mut self, parent: Ino, name: &[u8]) -> Result<Attr> {
        Err(PosixError::NotSupported)
    }

    /// The attributes of `ino`.
    pub fn getattr(&mut self, ino: Ino) -> Result<Attr> {
        Err(PosixError::NotSupported)
    }

    /// Changes attributes (chmod, chown, truncate, utimens); ctime becomes now.
    pub fn setattr(&mut self, ino: Ino, changes: &SetAttr) -> Result<Attr> {
        Err(PosixError::NotSupported)
    }

    /// Creates a regular file, FIFO, socket or device node `name` in `parent`.
    pub fn mknod(
        &mut self,
        parent: Ino,
        name: &[u8],
        kind: FileKind,
        perm: u32,
        rdev: u64,
        creds: Creds,
    ) -> Result<Attr> {
        Err(PosixError::NotSupported)
    }

    /// Creates directory `name` in `parent`.
    pub fn mkdir(&mut self, parent: Ino, name: &[u8], perm: u32, creds: Creds) -> Result<Attr> {
        Err(PosixError::NotSupported)
    }

    /// Creates symlink `name` in `parent` pointing at `target`.
    pub fn symlink(
        &mut self,
        parent: Ino,
        name: &[u8],
        target: &[u8],
        creds: Creds,
    ) -> Result<Attr> {
        Err(PosixError::NotSupported)
    }

    /// The target of symlink `ino`.
    pub fn readlink(&mut self, ino: Ino) -> Result<Vec<u8>> {
        Err(PosixError::NotSupported)
    }

    /// Adds hard link `newname` in `newparent` to `ino` (not a directory).
    pub fn link(&mut self, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        Err(PosixError::NotSupported)
    }

    /// Removes `name` (not a directory) from `parent`. Returns the inode if its link count
    /// reached zero: it is then on the unlinked set until [`Fs::reclaim`].
    pub fn unlink(&mut self, parent: Ino, name: &[u8]) -> Result<Option<Ino>> {
        Err(PosixError::NotSupported)
    }

    /// Removes the empty directory `name` from `parent`. Returns its inode, which is on the
    /// unlinked set until [`Fs::reclaim`].
    pub fn rmdir(&mut self, parent: Ino, name: &[u8]) -> Result<Ino> {
        Err(PosixError::NotSupported)
    }

    /// Frees an inode whose link count is zero (the front end calls this when nothing holds
    /// it open any more). An inode with links is left alone.
    pub fn reclaim(&mut self, ino: Ino) -> Result<()> {
        Err(PosixError::NotSupported)
    }

    /// renameat2. Returns the inode that lost its last link when the target was replaced.
    pub fn rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<Option<Ino>> {
        Err(PosixError::NotSupported)
    }

    /// Reads up to `len` bytes at `offset` (short at end of file).
    pub fn read(&mut self, ino: Ino, offset: u64, len: u32) -> Result<Vec<u8>> {
        Err(PosixError::NotSupported)
    }

    /// Writes `data` at `offset`, extending the file; mtime and ctime become now.
    pub fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Result<u32> {
        Err(PosixError::NotSupported)
    }

    /// Up to `max` entries of directory `ino` after `cookie` (0 starts with `.` and `..`).
    pub fn readdir(&mut self, ino: Ino, cookie: u64, max: usize) -> Result<Vec<DirEntry>> {
        Err(PosixError::NotSupported)
    }

    /// fallocate: preallocate (a no-op for copy-on-write beyond extending the size unless
    /// `keep_size`), punch a hole, or zero a range.
    pub fn fallocate(&mut self, ino: Ino, offset: u64, len: u64, mode: Fallocate) -> Result<()> {
        Err(PosixError::NotSupported)
    }

    /// SEEK_DATA / SEEK_HOLE from `offset`.
    pub fn seek(&mut self, ino: Ino, offset: u64, whence: Seek) -> Result<u64> {
        Err(PosixError::NotSupported)
    }

    /// The value of extended attribute `name` (full name with namespace, e.g. `user.x`).
    pub fn getxattr(&mut self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        Err(PosixError::NotSupported)
    }

    /// Sets extended attribute `name`.
    pub fn setxattr(&mut self, ino: Ino, name: &[u8], value: &[u8], how: XattrSet) -> Result<()> {
        Err(PosixError::NotSupported)
    }

    /// Names of the extended attributes of `ino`.
    pub fn listxattr(&mut self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        Err(PosixError::NotSupported)
    }

    /// Removes extended attribute `name`.
    pub fn removexattr(&mut self, ino: Ino, name: &[u8]) -> Result<()> {
        Err(PosixError::NotSupported)
    }

    /// Inodes in use (for statfs's file count).
    pub fn inode_count(&mut self) -> Result<u64> {
        Err(PosixError::NotSupported)
    }
}
