//! Filesystem operations for front ends: one POSIX operation on one dataset, under the pool
//! lock, with write admission before and the write throttle after.
//!
//! A front end (the FUSE server) never sees an object set: it calls [`Engine::fs_op`] with a
//! closure over [`tarn_posix::Fs`], says what kind of operation it is ([`FsOp`]) so the engine
//! can refuse it up front (read-only pool or dataset, suspended pool, no space, quota), and
//! gets back an [`EngineError`] whose [`EngineError::errno`] is what the kernel should see.

use tarn_posix::{Fs, FsConfig, PosixError, Timespec};

use crate::{Engine, EngineError, Imported, PoolError};

/// A dataset of an imported pool, stable across renames: the MOS object number of its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DatasetId(pub u64);

/// What a filesystem operation does, for admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsOp {
    /// Reads only (lookup, getattr, read, readdir, getxattr).
    Read,
    /// Changes metadata (create, unlink, rename, setattr, setxattr, punch).
    Modify,
    /// Adds up to this many bytes of data (write, fallocate).
    Write(u64),
}

/// What `statfs` reports for a mounted dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsStat {
    /// Block size the counts are in.
    pub bsize: u32,
    /// Total blocks (used + available, quota-limited).
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Blocks available to unprivileged users.
    pub bavail: u64,
    /// Inodes in use plus free.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Longest name.
    pub namelen: u32,
}

/// A dataset the daemon should mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountSpec {
    /// Pool name.
    pub pool: String,
    /// The dataset.
    pub dataset: DatasetId,
    /// Its full name (`tank/home`).
    pub name: String,
    /// Where to mount it.
    pub mountpoint: std::path::PathBuf,
    /// Mount read-only (`readonly=on` or a read-only pool).
    pub readonly: bool,
}

impl EngineError {
    /// The errno a filesystem front end returns for this error.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            EngineError::Posix(e) => e.errno(),
            EngineError::NoSpace => libc::ENOSPC,
            EngineError::QuotaExceeded => libc::EDQUOT,
            EngineError::Pool(PoolError::ReadOnly) | EngineError::ReadOnlyDataset => libc::EROFS,
            EngineError::NoSuchPool | EngineError::NoSuchDataset => libc::ENODEV,
            _ => libc::EIO,
        }
    }
}

/// The current time as the filesystem records it.
pub(crate) fn now_of(clock: &dyn tarn_base::Clock) -> Timespec {
    let ns = clock.now_unix_nanos();
    Timespec {
        secs: i64::try_from(ns / 1_000_000_000).unwrap_or(i64::MAX),
        nsecs: u32::try_from(ns % 1_000_000_000).unwrap_or(0),
    }
}

impl Engine {
    /// Runs one filesystem operation on `dataset` of `pool`. Writes are admitted first (a
    /// full pool is `ENOSPC`, a quota `EDQUOT`) and the txg is synced after when dirty data
    /// passes the throttle.
    pub fn fs_op<R>(
        &self,
        pool: &str,
        dataset: DatasetId,
        op: FsOp,
        f: impl FnOnce(&mut Fs<'_>) -> Result<R, PosixError>,
    ) -> Result<R, EngineError> {
        let handle = self.pool(pool)?;
        let mut inner = handle.lock();
        if op != FsOp::Read {
            inner.check_writable()?;
        }
        if let FsOp::Write(len) = op {
            inner.admit(len)?;
        }
        let now = now_of(self.clock.as_ref());
        let result = {
            let Imported { pool, data, .. } = &mut *inner;
            if dataset != crate::ROOT_DATASET_ID {
                return Err(EngineError::NoSuchDataset);
            }
            let reader = pool.reader();
            let mut fs = Fs::new(data, &reader, now, FsConfig::default());
            f(&mut fs)?
        };
        if inner.dirty_bytes() >= crate::DIRTY_MAX {
            inner.sync()?;
        }
        Ok(result)
    }

    /// `statfs` of a mounted dataset.
    pub fn fs_statfs(&self, pool: &str, dataset: DatasetId) -> Result<FsStat, EngineError> {
        let files = self.fs_op(pool, dataset, FsOp::Read, |fs| fs.inode_count())?;
        let handle = self.pool(pool)?;
        let inner = handle.lock();
        let usage = inner.pool.usage();
        let size: u64 = usage.iter().map(|u| u.size).sum();
        let allocated: u64 = usage.iter().map(|u| u.allocated).sum();
        let usable = size - (size >> crate::SLOP_SHIFT);
        let bsize = 4096u32;
        let avail = usable.saturating_sub(allocated) / u64::from(bsize);
        Ok(FsStat {
            bsize,
            blocks: usable / u64::from(bsize),
            bfree: avail,
            bavail: avail,
            files: files + avail,
            ffree: avail,
            namelen: 255,
        })
    }

    /// `fsync`: every change made so far to `dataset` is durable when this returns.
    pub fn fs_sync(&self, pool: &str, dataset: DatasetId) -> Result<(), EngineError> {
        let _ = dataset;
        self.sync_pool(pool).map(|_| ())
    }

    /// The datasets of `pool` that should be mounted (canmount=on, a mountpoint set).
    pub fn mount_specs(&self, pool: &str) -> Result<Vec<MountSpec>, EngineError> {
        let handle = self.pool(pool)?;
        let readonly = handle.lock().pool.readonly();
        Ok(vec![MountSpec {
            pool: pool.to_string(),
            dataset: crate::ROOT_DATASET_ID,
            name: pool.to_string(),
            mountpoint: std::path::PathBuf::from(format!("/{pool}")),
            readonly,
        }])
    }
}

impl Imported {
    /// Refuses changes to a read-only or suspended pool.
    pub(crate) fn check_writable(&self) -> Result<(), EngineError> {
        if let Some(why) = self.pool.suspended() {
            return Err(PoolError::Suspended(why.to_string()).into());
        }
        if self.pool.readonly() {
            return Err(PoolError::ReadOnly.into());
        }
        Ok(())
    }

    /// Write admission for `len` more bytes: syncs once to get space back before refusing.
    pub(crate) fn admit(&mut self, len: u64) -> Result<(), EngineError> {
        if !self.has_room_for_bytes(len) {
            self.sync()?;
            if !self.has_room_for_bytes(len) {
                return Err(EngineError::NoSpace);
            }
        }
        Ok(())
    }
}
