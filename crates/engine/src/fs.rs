//! Filesystem operations for front ends: one POSIX operation on one dataset, under the pool
//! lock, with write admission before and the write throttle after.
//!
//! The pool lock is taken without waiting for a txg's commit phase (`PoolHandle::lock_open`):
//! operations run in the open txg while the previous one commits; the throttle after each
//! one is [`crate::txg`]'s.
//!
//! A front end (the FUSE server) never sees an object set: it calls [`Engine::fs_op`] with a
//! closure over [`tarn_posix::Fs`], says what kind of operation it is ([`FsOp`]) so the engine
//! can refuse it up front (read-only pool or dataset, suspended pool, no space, quota), and
//! gets back an [`EngineError`] whose [`EngineError::errno`] is what the kernel should see.
//! Modifying operations are recorded for the dataset's intent log ([`crate::zil`]);
//! [`Engine::fs_sync`] and `sync=always` make them durable there without a txg.

use std::sync::MutexGuard;

use tarn_objects::Fetch;
use tarn_pool::DetachedReader;
use tarn_posix::{Fs, PosixError, Timespec};

use crate::datasets::SyncMode;
use crate::{Engine, EngineError, Imported, PoolError, PoolHandle};

/// What a planned read runs under the pool lock to name the blocks to fetch without it.
type Plan<'p> = &'p mut dyn FnMut(&mut Fs<'_>) -> Result<Option<Fetch>, PosixError>;

/// A read's device work, planned under the pool lock and done without it (crate docs,
/// "Reads off the lock"): the read's own blocks, read on the caller's thread, and its
/// read-ahead, a batch handed to a read-ahead thread that nobody waits for (tarn-objects
/// `readahead`, "Read-ahead that does not wait"). Each has a reader of its own, pinning the
/// txg its block pointers were found in.
pub(crate) struct OffLock {
    fetch: Fetch,
    /// `None` when the read's own blocks are all cached or on their way (the common case of
    /// a sequential reader): no pin and no pipeline copy for nothing.
    reader: Option<DetachedReader>,
    ahead: Option<std::sync::Arc<tarn_objects::Ahead>>,
}

impl OffLock {
    /// Under the pool lock (so that no other read plans the read-ahead's blocks too).
    pub(crate) fn new(mut fetch: Fetch, pool: &tarn_pool::Pool) -> OffLock {
        let ahead = if fetch.reads_ahead() {
            let reader = pool.detached_reader();
            fetch.start_ahead(Box::new(move |bps, feed_l2, each| {
                reader.read_blocks_each(bps, feed_l2, each);
            }))
        } else {
            None
        };
        let reader = (!fetch.blocks().is_empty()).then(|| pool.detached_reader());
        OffLock {
            fetch,
            reader,
            ahead,
        }
    }

    /// Without the pool lock: the read's own blocks, then the read-ahead handed on, then
    /// the batches already reading some of the read's own blocks waited for. Best effort:
    /// a block that fails is left for the read itself to report.
    pub(crate) fn run(self) {
        let OffLock {
            fetch,
            reader,
            ahead,
        } = self;
        if let Some(reader) = reader {
            fetch.fill(reader.read_blocks(fetch.blocks(), fetch.feeds_l2()));
        }
        if let Some(ahead) = ahead {
            tarn_zio::spawn_read_ahead(move || ahead.run());
        }
        fetch.wait();
    }
}

/// What [`Engine::fs_read_begin`] did: the whole read, or its plan with the device reads
/// still to do.
#[derive(Debug)]
pub enum ReadStep<R> {
    /// Everything was cached: the read's result.
    Done(R),
    /// Blocks must be read first: [`Engine::fs_read_finish`] does it.
    Pending(PendingRead),
}

/// A read planned under the pool lock whose blocks are still to be read (their block
/// pointers pinned by its readers), for [`Engine::fs_read_finish`] on any thread. Dropped
/// unfinished, it reads nothing and unpins.
pub struct PendingRead {
    handle: std::sync::Arc<PoolHandle>,
    dataset: DatasetId,
    off_lock: OffLock,
}

impl std::fmt::Debug for PendingRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingRead")
            .field("pool", &self.handle.name)
            .field("dataset", &self.dataset)
            .finish_non_exhaustive()
    }
}

/// A dataset of an imported pool, stable across renames: the MOS object number of its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DatasetId(pub u64);

/// What a filesystem operation does, for admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsOp {
    /// Reads only (lookup, getattr, read, readdir, getxattr).
    Read,
    /// Changes metadata that may grow it (create, mkdir, link, rename, setattr): admitted
    /// while the pool keeps its whole slop free.
    Modify,
    /// Gives space back (unlink, rmdir, the reclaim of an unlinked inode, removexattr,
    /// punching a hole): admitted into half the slop, so that a full pool can be emptied.
    Free,
    /// Adds up to this many bytes of data (write, fallocate).
    Write(u64),
    /// Clones `len` bytes of existing blocks (`Engine::fs_clone_range`): quotas count
    /// `len`, as the dataset's `referenced` grows by it, but the pool only gains the
    /// metadata that names `blocks` block pointers, so only that must fit in its free space.
    Clone {
        /// Bytes the clone adds to the file.
        len: u64,
        /// Block pointers it installs.
        blocks: u64,
    },
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
    /// Allow executing files (`exec`; otherwise mount `noexec`).
    pub exec: bool,
    /// Honour setuid bits (`setuid`; otherwise `nosuid`).
    pub setuid: bool,
    /// Allow device nodes (`devices`; otherwise `nodev`).
    pub devices: bool,
    /// POSIX ACLs enforced by the kernel (`acltype=posix`).
    pub acl: bool,
    /// Extended attributes allowed (`xattr`).
    pub xattr: bool,
    /// Access times recorded (`atime`; otherwise mount `noatime`).
    pub atime: bool,
    /// Access times recorded relatime-style (`relatime`; otherwise `strictatime`).
    pub relatime: bool,
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
    /// passes the throttle. The `Fs` sees the dataset's `atime`/`relatime` as
    /// [`tarn_posix::FsConfig::atime`], `Off` when the pool or dataset is read-only (or the
    /// pool suspended), so that an access recorded by a `Read` operation never writes there.
    ///
    /// `f` runs once: a `Read` whose block cannot be read fails. Front ends read through
    /// [`Engine::fs_read`], which waits for `clear` under `failmode=wait` and reads again.
    pub fn fs_op<R>(
        &self,
        pool: &str,
        dataset: DatasetId,
        op: FsOp,
        f: impl FnOnce(&mut Fs<'_>) -> Result<R, PosixError>,
    ) -> Result<R, EngineError> {
        let mut once = Some(f);
        self.fs_call(pool, dataset, op, false, |fs| {
            let f = once
                .take()
                .expect("fs_call runs f again only when told it may");
            f(fs)
        })
    }

    /// [`Engine::fs_op`] of a [`FsOp::Read`] that may run `f` again: when a block cannot be
    /// read because devices are missing, under `failmode=wait`, the pool is suspended and
    /// the call waits (pool lock released) for `clear`, then runs `f` again; `export -f`
    /// ends it with EIO. Damage with every device present, or `failmode=continue`, fails at
    /// once (module `suspend`).
    pub fn fs_read<R>(
        &self,
        pool: &str,
        dataset: DatasetId,
        f: impl FnMut(&mut Fs<'_>) -> Result<R, PosixError>,
    ) -> Result<R, EngineError> {
        self.fs_call(pool, dataset, FsOp::Read, true, f)
    }

    /// [`Engine::fs_read`] whose device reads happen without the pool lock (crate docs,
    /// "Reads off the lock"): `plan` names, under the lock, the blocks `f` (and its
    /// read-ahead) will need that are not cached (`Fs::plan_read`); they are read, verified
    /// and cached with the lock released, and `f` then runs under it again and copies them
    /// from the cache. When nothing is missing `f` runs without letting go of the lock.
    /// Best effort: a plan that fails is left for `f` to report with its usual context.
    pub fn fs_read_planned<R>(
        &self,
        pool: &str,
        dataset: DatasetId,
        plan: impl FnMut(&mut Fs<'_>) -> Result<Option<Fetch>, PosixError>,
        mut f: impl FnMut(&mut Fs<'_>) -> Result<R, PosixError>,
    ) -> Result<R, EngineError> {
        match self.fs_read_begin(pool, dataset, plan, &mut f)? {
            ReadStep::Done(result) => Ok(result),
            ReadStep::Pending(pending) => self.fs_read_finish(pending, f),
        }
    }

    /// The first half of [`Engine::fs_read_planned`], for a front end that finishes a read
    /// whose blocks must come from the devices on another thread (so that the thread which
    /// took the request can take the next one meanwhile): `plan` runs under the pool lock,
    /// and when nothing is missing so does `f`, without letting go of the lock
    /// ([`ReadStep::Done`]). Otherwise nothing has been read yet and the caller hands the
    /// [`PendingRead`] to [`Engine::fs_read_finish`] with the same `f`, on any thread.
    pub fn fs_read_begin<R>(
        &self,
        pool: &str,
        dataset: DatasetId,
        mut plan: impl FnMut(&mut Fs<'_>) -> Result<Option<Fetch>, PosixError>,
        f: impl FnMut(&mut Fs<'_>) -> Result<R, PosixError>,
    ) -> Result<ReadStep<R>, EngineError> {
        let handle = self.pool(pool)?;
        let mut inner = handle.lock_open();
        if let Some(off_lock) = self.fetch_for(&mut inner, dataset, &mut plan) {
            drop(inner);
            return Ok(ReadStep::Pending(PendingRead {
                handle,
                dataset,
                off_lock,
            }));
        }
        self.fs_locked(&handle, inner, dataset, FsOp::Read, true, f)
            .map(ReadStep::Done)
    }

    /// The second half of [`Engine::fs_read_planned`]: reads, verifies and caches the
    /// blocks `pending` names without the pool lock, then runs `f` under it.
    pub fn fs_read_finish<R>(
        &self,
        pending: PendingRead,
        f: impl FnMut(&mut Fs<'_>) -> Result<R, PosixError>,
    ) -> Result<R, EngineError> {
        let PendingRead {
            handle,
            dataset,
            off_lock,
        } = pending;
        off_lock.run();
        let inner = handle.lock_open();
        self.fs_locked(&handle, inner, dataset, FsOp::Read, true, f)
    }

    /// The blocks `plan` finds missing, with readers to fetch them off the lock (`None`:
    /// nothing to fetch, or the plan failed).
    fn fetch_for(
        &self,
        inner: &mut Imported,
        dataset: DatasetId,
        plan: Plan<'_>,
    ) -> Option<OffLock> {
        let Imported { pool, datasets, .. } = inner;
        if !datasets.contains(dataset) {
            return None;
        }
        let reader = pool.reader();
        let config = datasets.fs_settings(dataset).config;
        let node = datasets.node_mut(dataset);
        let now = now_of(self.clock.as_ref());
        let fetch = plan(&mut Fs::new(&mut node.objset, &reader, now, config)).ok()??;
        Some(OffLock::new(fetch, pool))
    }

    /// [`Engine::fs_op`] and [`Engine::fs_read`]: `wait` says whether a failed read may
    /// wait for `clear` and run `f` again.
    fn fs_call<R>(
        &self,
        pool: &str,
        dataset: DatasetId,
        op: FsOp,
        wait: bool,
        f: impl FnMut(&mut Fs<'_>) -> Result<R, PosixError>,
    ) -> Result<R, EngineError> {
        let handle = self.pool(pool)?;
        // A change to a suspended pool waits here for `clear` under failmode=wait, with the
        // pool lock released (module `suspend`).
        let inner = if op == FsOp::Read {
            handle.lock_open()
        } else {
            handle.lock_for_write()?
        };
        self.fs_locked(&handle, inner, dataset, op, wait, f)
    }

    /// Runs `f` under the pool lock `inner` (a read that fails runs again after `clear`
    /// when `wait` says so), then the dirty check and throttle of [`Engine::after_change`].
    fn fs_locked<'h, R>(
        &self,
        handle: &'h PoolHandle,
        mut inner: MutexGuard<'h, Imported>,
        dataset: DatasetId,
        op: FsOp,
        wait: bool,
        mut f: impl FnMut(&mut Fs<'_>) -> Result<R, PosixError>,
    ) -> Result<R, EngineError> {
        assert!(
            !wait || op == FsOp::Read,
            "only a read runs again after clear"
        );
        let pool = handle.name.as_str();
        let (result, always) = loop {
            match fs_run(self, &mut inner, dataset, op, &mut f) {
                Ok(done) => break done,
                Err(error) => {
                    self.note_damage(pool, &mut inner, dataset, &error);
                    if !wait {
                        return Err(error);
                    }
                    inner = handle.read_failed(inner, error)?;
                }
            }
        };
        self.after_change(handle, inner, dataset, always)?;
        Ok(result)
    }

    /// `statfs` of a mounted dataset: its referenced bytes plus what it may still write
    /// (quotas and reservations applied, as `df` on a ZFS dataset shows).
    pub fn fs_statfs(&self, pool: &str, dataset: DatasetId) -> Result<FsStat, EngineError> {
        let files = self.fs_op(pool, dataset, FsOp::Read, |fs| fs.inode_count())?;
        let handle = self.pool(pool)?;
        let inner = handle.lock_open();
        // Dirty data counts as used at once (its real, compressed size is known at sync), so
        // `df` moves as files are written rather than every few seconds.
        let dirty = inner.datasets.node(dataset).objset.dirty_bytes();
        let avail = inner
            .datasets
            .available(dataset, crate::dataset_ops::pool_free_deflated(&inner))
            .saturating_sub(dirty);
        let referenced = inner.datasets.node(dataset).header.referenced + dirty;
        let bsize = 4096u32;
        let free_blocks = avail / u64::from(bsize);
        Ok(FsStat {
            bsize,
            blocks: (referenced + avail).div_ceil(u64::from(bsize)),
            bfree: free_blocks,
            bavail: free_blocks,
            files: files + free_blocks,
            ffree: free_blocks,
            namelen: 255,
        })
    }

    /// `fsync`: every change made so far to `dataset` is durable when this returns
    /// (`sync=disabled` makes it a no-op, as on ZFS): written to its intent log, or by a txg
    /// sync when it has no log chain yet (module [`crate::zil`]). Other datasets' changes
    /// are not forced out.
    pub fn fs_sync(&self, pool: &str, dataset: DatasetId) -> Result<(), EngineError> {
        let handle = self.pool(pool)?;
        let inner = handle.lock_open();
        if !inner.datasets.contains(dataset) {
            return Err(EngineError::NoSuchDataset);
        }
        if inner.datasets.effective(dataset, "sync").0 == "disabled" || inner.pool.readonly() {
            return Ok(());
        }
        drop(inner);
        // Waits for `clear` under failmode=wait (module `suspend`).
        let inner = handle.lock_for_write()?;
        if !inner.datasets.contains(dataset) {
            return Err(EngineError::NoSuchDataset);
        }
        inner.check_writable()?;
        let committed = Self::log_commit_after_sync(&handle, inner, dataset);
        match committed {
            // A commit suspended the pool: once `clear` committed the kept txg, the records
            // of that txg are trimmed and those of the open txg are still pending.
            Err(error) => {
                handle.wait_resumed(error)?;
                let inner = handle.lock_for_write()?;
                Self::log_commit_after_sync(&handle, inner, dataset)
            }
            Ok(()) => Ok(()),
        }
    }

    /// The datasets of `pool` to mount: `canmount=on` with a path mountpoint, parents first.
    pub fn mount_specs(&self, pool: &str) -> Result<Vec<MountSpec>, EngineError> {
        let handle = self.pool(pool)?;
        let inner = handle.lock();
        let tree = &inner.datasets;
        Ok(tree
            .all()
            .into_iter()
            .filter(|id| !crate::datasets::is_hidden(&tree.node(*id).name))
            .filter(|id| tree.effective(*id, "canmount").0 == "on")
            .filter_map(|id| mount_spec(&inner, pool, id))
            .collect())
    }

    /// The mount of one dataset (`None` when its mountpoint is `none` or `legacy`);
    /// `canmount` is not consulted, so `tarn mount` can mount a `noauto` dataset.
    pub fn dataset_mount_spec(&self, name: &str) -> Result<Option<MountSpec>, EngineError> {
        let (pool, id) = self.find_dataset(name)?;
        let handle = self.pool(&pool)?;
        let inner = handle.lock();
        if inner.datasets.node(id).objset.kind() == tarn_objects::ObjsetKind::Volume {
            return Err(EngineError::InvalidArgument(
                "operation does not apply to volumes".into(),
            ));
        }
        if inner.datasets.effective(id, "canmount").0 == "off" {
            return Err(EngineError::InvalidArgument(
                "'canmount' property is set to 'off'".into(),
            ));
        }
        Ok(mount_spec(&inner, &pool, id))
    }
}

fn mount_spec(inner: &Imported, pool: &str, id: DatasetId) -> Option<MountSpec> {
    let tree = &inner.datasets;
    // A volume is a block device for the NBD server, never a FUSE mount.
    if tree.node(id).objset.kind() == tarn_objects::ObjsetKind::Volume {
        return None;
    }
    let mountpoint = tree.effective(id, "mountpoint").0;
    if !mountpoint.starts_with('/') {
        return None;
    }
    let on = |name: &str| tree.effective(id, name).0 == "on";
    Some(MountSpec {
        pool: pool.to_string(),
        dataset: id,
        name: tree.node(id).name.clone(),
        mountpoint: std::path::PathBuf::from(mountpoint),
        readonly: inner.pool.readonly() || on("readonly"),
        exec: on("exec"),
        setuid: on("setuid"),
        devices: on("devices"),
        acl: tree.effective(id, "acltype").0 == "posix",
        xattr: on("xattr"),
        atime: on("atime"),
        relatime: on("relatime"),
    })
}

impl Engine {
    /// What a change of `dataset` costs once it is made: its intent-log commit under
    /// `sync=always` (`always`), then the throttle (module [`crate::txg`]). `inner` is the
    /// pool lock of `handle`; it is released on return.
    fn commit_change(
        &self,
        handle: &PoolHandle,
        inner: MutexGuard<'_, Imported>,
        dataset: DatasetId,
        always: bool,
    ) -> Result<(), EngineError> {
        let inner = if always {
            handle.log_commit(inner, dataset)?;
            handle.lock_open()
        } else {
            inner
        };
        self.throttle(handle, inner)
    }

    /// [`Engine::commit_change`], and when that ends in a suspension, the wait for `clear`
    /// (failmode=wait): the change is in memory (the open txg), and the txg `clear` commits
    /// is the one before it, so under `sync=always` (`always`) it is logged again after.
    pub(crate) fn after_change(
        &self,
        handle: &PoolHandle,
        inner: MutexGuard<'_, Imported>,
        dataset: DatasetId,
        always: bool,
    ) -> Result<(), EngineError> {
        let Err(error) = self.commit_change(handle, inner, dataset, always) else {
            return Ok(());
        };
        handle.wait_resumed(error)?;
        if always {
            let inner = handle.lock_for_write()?;
            self.commit_change(handle, inner, dataset, true)?;
        }
        Ok(())
    }

    /// Commits `dataset`'s intent log once no txg is syncing (the log's chain is the one the
    /// syncing txg's header names, module `zil`); waits for the commit and writes the log
    /// without the lock.
    fn log_commit_after_sync(
        handle: &PoolHandle,
        inner: MutexGuard<'_, Imported>,
        dataset: DatasetId,
    ) -> Result<(), EngineError> {
        handle.log_commit(inner, dataset)
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
}

/// One run of [`Engine::fs_op`]'s operation under the pool lock: the refusals, the closure,
/// the intent-log records. Returns its result and whether the dataset has `sync=always`
/// for a change.
pub(crate) fn fs_run<R>(
    engine: &Engine,
    inner: &mut Imported,
    dataset: DatasetId,
    op: FsOp,
    f: &mut impl FnMut(&mut Fs<'_>) -> Result<R, PosixError>,
) -> Result<(R, bool), EngineError> {
    if !inner.datasets.contains(dataset) {
        return Err(EngineError::NoSuchDataset);
    }
    inner.datasets.check_available(dataset)?;
    if inner.datasets.node(dataset).objset.kind() == tarn_objects::ObjsetKind::Volume {
        return Err(EngineError::InvalidArgument("not a filesystem".into()));
    }
    // Resolved once per dataset and kept until a property or the tree changes
    // (`Tree::fs_settings`): no walk of the inheritance chain per request.
    let settings = inner.datasets.fs_settings(dataset);
    if op != FsOp::Read {
        inner.check_writable()?;
        if settings.readonly {
            return Err(EngineError::ReadOnlyDataset);
        }
    }
    if op != FsOp::Read {
        inner.admit(dataset, op)?;
    }
    if let FsOp::Write(len) | FsOp::Clone { len, .. } = op {
        inner.admit_owner(dataset, len)?;
    }
    let now = now_of(engine.clock.as_ref());
    let mut config = settings.config;
    if settings.readonly || inner.check_writable().is_err() {
        // Nothing may be written here, not even an access time.
        config.atime = tarn_posix::AtimeMode::Off;
    }
    let quotas = (op != FsOp::Read && !settings.quotas.is_empty()).then_some(&*settings.quotas);
    let logged = op != FsOp::Read && settings.sync != SyncMode::Disabled;
    // Every modifying call is recorded for the intent log (none with sync=disabled, as
    // ZFS), even when the closure fails after it: the change is in memory either way.
    let mut records = Vec::new();
    let result = {
        let Imported { pool, datasets, .. } = &mut *inner;
        let reader = pool.reader();
        let node = datasets.node_mut(dataset);
        let mut fs = Fs::new(&mut node.objset, &reader, now, config);
        if let Some(quotas) = quotas {
            fs = fs.with_quotas(quotas, &mut node.pending);
        }
        if logged {
            fs = fs.with_log(&mut records);
        }
        f(&mut fs)
    };
    let open_txg = inner.pool.open_txg();
    inner.logs.add(dataset, open_txg, records);
    let always = op != FsOp::Read && settings.sync == SyncMode::Always;
    Ok((result?, always))
}
