//! `tarn checksum`: a file's adler32, md5, sha256 or crc32c, read through the engine (not
//! through a mount) and cached with the file (tarn-posix `filesum`).
//!
//! A thin verb: the cache and its rule (an epoch begun before the data is read, stored only
//! if no write came between) are tarn-posix's; this reads the file in [`CHUNK`] pieces, one
//! filesystem operation each, so the pool lock is released between them and the hashing
//! runs outside it. A file written during the read is read again, up to [`ATTEMPTS`] times.
//! Where the cache cannot be written (a read-only pool or dataset, a full pool) the value
//! is computed and returned uncached.

use tarn_posix::filesum::{FileHasher, FileSumKind};
use tarn_posix::{Fs, Ino, ReadData};

use crate::{DatasetId, Engine, EngineError, FsOp, PoolError};

/// Bytes read per filesystem operation (the largest read FUSE sends, so the read-ahead of a
/// sequential reader applies).
pub const CHUNK: u32 = 1 << 20;
/// Reads of a file being written before giving up.
pub const ATTEMPTS: u32 = 3;

/// A file's checksum as `tarn checksum` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileChecksum {
    /// The checksum (big-endian for the 32-bit ones).
    pub value: Vec<u8>,
    /// The file's size when it was asked.
    pub size: u64,
    /// Whether the value came from the cache (no data was read).
    pub cached: bool,
    /// Whether the value is now cached (read-only datasets and full pools keep none).
    pub stored: bool,
    /// File bytes read and hashed for this answer (0 when cached).
    pub bytes_read: u64,
    /// The file's modification time (Unix seconds) when it was asked: XRootD's record
    /// keeps it to tell a stale value (`tarn checksum --xattr user.XrdCks.ALG`).
    pub mtime: i64,
}

impl FileChecksum {
    /// A value answered from the file's cache: no data read.
    fn from_cache(value: Vec<u8>, size: u64, mtime: i64) -> FileChecksum {
        FileChecksum {
            value,
            size,
            cached: true,
            stored: true,
            bytes_read: 0,
            mtime,
        }
    }

    /// A value computed from `bytes_read` bytes of data, not (yet) stored.
    fn computed(value: Vec<u8>, size: u64, bytes_read: u64, mtime: i64) -> FileChecksum {
        FileChecksum {
            value,
            size,
            cached: false,
            stored: false,
            bytes_read,
            mtime,
        }
    }
}

/// Who the file is: its inode, and what tells a reused inode number apart.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Identity {
    ino: Ino,
    generation: u64,
    crtime: tarn_posix::Timespec,
}

impl Engine {
    /// The `kind` checksum of the regular file at `path` (from the dataset's root) of
    /// `dataset`: from its cache when current, else read whole and cached.
    pub fn file_checksum(
        &self,
        pool: &str,
        dataset: DatasetId,
        path: &str,
        kind: FileSumKind,
    ) -> Result<FileChecksum, EngineError> {
        let (file, size, mtime, cached) = self.fs_read(pool, dataset, |fs| {
            let ino = crate::project::resolve(fs, path)?;
            let attr = fs.getattr(ino)?;
            let cached = fs.checksum_cached(ino, kind)?;
            let file = Identity {
                ino,
                generation: attr.generation,
                crtime: attr.crtime,
            };
            Ok((file, attr.size, attr.mtime.secs, cached))
        })?;
        if let Some(value) = cached {
            return Ok(FileChecksum::from_cache(value, size, mtime));
        }
        for _ in 0..ATTEMPTS {
            let same = |fs: &mut tarn_posix::Fs<'_>| -> Result<bool, tarn_posix::PosixError> {
                let attr = fs.getattr(file.ino)?;
                Ok(attr.generation == file.generation && attr.crtime == file.crtime)
            };
            let begun = self.fs_op(pool, dataset, FsOp::Modify, |fs| {
                if !same(fs)? {
                    return Err(tarn_posix::PosixError::NotFound);
                }
                fs.checksum_begin(file.ino)
            });
            let epoch = match begun {
                Ok(epoch) => Some(epoch),
                Err(error) if uncacheable(&error) => None,
                Err(error) => return Err(error),
            };
            let (value, bytes_read) = self.hash_file(pool, dataset, file.ino, kind)?;
            let mut answer = FileChecksum::computed(value, size, bytes_read, mtime);
            let Some(epoch) = epoch else {
                return Ok(answer);
            };
            answer.stored = self.fs_op(pool, dataset, FsOp::Modify, |fs| {
                Ok(same(fs)? && fs.checksum_store(file.ino, epoch, kind, &answer.value)?)
            })?;
            if answer.stored {
                return Ok(answer);
            }
        }
        Err(EngineError::FileChanging(ATTEMPTS))
    }

    /// Sets user attribute `name` of the file at `path` to `value` (`tarn checksum --xattr`:
    /// a copy of the checksum where a grid middleware reads it). A user's change like any
    /// other (ctime, intent log); a later write leaves it stale, as it would any copy.
    pub fn file_set_xattr(
        &self,
        pool: &str,
        dataset: DatasetId,
        path: &str,
        name: &str,
        value: &[u8],
    ) -> Result<(), EngineError> {
        self.fs_op(pool, dataset, FsOp::Modify, |fs| {
            let ino = crate::project::resolve(fs, path)?;
            fs.setxattr(ino, name.as_bytes(), value, tarn_posix::XattrSet::Either)
        })
    }

    /// The `kind` checksum of the file at `path` (from the snapshot's root) in the snapshot
    /// of `dataset` whose GUID is `snapshot` (`tarn checksum` of a file under
    /// `.tarn/snapshot/SNAP/`): the value the file carried into the snapshot if it had one
    /// (a snapshot's data never changes, so it stays current), else read whole. Nothing is
    /// stored: a snapshot is read-only. A snapshot destroyed meanwhile is `NotFound`.
    pub fn snapshot_file_checksum(
        &self,
        pool: &str,
        dataset: DatasetId,
        snapshot: tarn_base::Guid,
        path: &str,
        kind: FileSumKind,
    ) -> Result<FileChecksum, EngineError> {
        let (ino, attr, cached) = self.fs_snapshot_read(pool, dataset, snapshot, |fs| {
            let ino = crate::project::resolve(fs, path)?;
            Ok((ino, fs.getattr(ino)?, fs.checksum_cached(ino, kind)?))
        })?;
        let (size, mtime) = (attr.size, attr.mtime.secs);
        if let Some(value) = cached {
            return Ok(FileChecksum::from_cache(value, size, mtime));
        }
        // Each piece is read under the pool lock (a snapshot's reads have no off-lock plan
        // yet) and hashed outside it.
        let (value, bytes_read) = hash_pieces(kind, |offset| {
            self.fs_snapshot_read(pool, dataset, snapshot, |fs| {
                fs.read_data(ino, offset, CHUNK)
            })
        })?;
        Ok(FileChecksum::computed(value, size, bytes_read, mtime))
    }

    /// Reads file `ino` from its start to its end, [`CHUNK`] bytes per operation, hashing
    /// each piece outside the pool lock: the value and the bytes read.
    fn hash_file(
        &self,
        pool: &str,
        dataset: DatasetId,
        ino: Ino,
        kind: FileSumKind,
    ) -> Result<(Vec<u8>, u64), EngineError> {
        hash_pieces(kind, |offset| {
            // The device reads of each piece happen without the pool lock, as a mount's do.
            let plan = |fs: &mut Fs<'_>| fs.plan_read(ino, offset, CHUNK);
            let read = |fs: &mut Fs<'_>| fs.read_data(ino, offset, CHUNK);
            self.fs_read_planned(pool, dataset, plan, read)
        })
    }
}

/// Hashes the pieces `read(offset)` returns from offset 0 until an empty one: the value and
/// the bytes hashed.
fn hash_pieces(
    kind: FileSumKind,
    mut read: impl FnMut(u64) -> Result<ReadData, EngineError>,
) -> Result<(Vec<u8>, u64), EngineError> {
    let mut hasher = FileHasher::new(kind);
    let mut offset = 0u64;
    loop {
        let bytes = read(offset)?.into_bytes();
        if bytes.is_empty() {
            return Ok((hasher.finish(), offset));
        }
        hasher.update(&bytes);
        offset += bytes.len() as u64;
    }
}

/// Refusals of a change that mean "read, but keep no cache here".
fn uncacheable(error: &EngineError) -> bool {
    matches!(
        error,
        EngineError::Pool(PoolError::ReadOnly)
            | EngineError::ReadOnlyDataset
            | EngineError::NoSpace
            | EngineError::QuotaExceeded
    )
}
