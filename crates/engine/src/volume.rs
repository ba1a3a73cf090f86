//! Volume verbs for front ends (the NBD server) and the admin verbs only volumes have
//! (`create -V`, `set volsize`): thin doors to `tarn_dataset::volume` under the pool lock,
//! with the same admission, throttle and refusals as file writes.
//!
//! Durability (ZFS's zvol and ZIL): every write and zero is recorded for the volume's intent
//! log (module [`crate::zil`], records `tarn_dataset::volume_log`) without its bytes; a
//! flush (and a FUA write, and every change under `sync=always`) commits the volume's
//! pending records to its log, on log devices when the pool has them, before it returns,
//! and an import after a crash replays them. A flush therefore costs a log write and a
//! device flush rather than a txg (docs/PERFORMANCE.md "Volumes"); the first flush of a
//! volume without a chain, and a commit larger than `zil::COMMIT_BYTES_MAX`, commit a txg
//! instead. A flush covers every write acknowledged before it on any connection: the log
//! is per volume, not per client. `sync=disabled` records nothing and makes a flush a
//! no-op, as on ZFS.

use std::sync::MutexGuard;

use tarn_dataset::volume::{self, Extent};
use tarn_dataset::volume_log::Change;
use tarn_objects::{ObjsetKind, ReadOut, Run};

use crate::dataset_ops::invalid;
use crate::datasets::SyncMode;
use crate::{DatasetId, Engine, EngineError, FsOp, Imported, PoolHandle};

/// What a front end needs to know to serve a volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeStat {
    /// Pool name.
    pub pool: String,
    /// The volume's dataset.
    pub dataset: DatasetId,
    /// Its full name (`tank/vol`).
    pub name: String,
    /// `volsize` in bytes.
    pub size: u64,
    /// `volblocksize` in bytes.
    pub block_size: u32,
    /// Writes are refused (`readonly=on`, a read-only pool).
    pub readonly: bool,
    /// Front ends expose it as a device: `volmode` is not `none` (ZFS: a zvol with
    /// `volmode=none` has no device node; the NBD server neither lists nor opens it).
    pub exposed: bool,
}

/// How `tarn create -V` makes a volume.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeSpec {
    /// `volsize` as typed (`10G`).
    pub size: String,
    /// `-b` as typed; `None`: `-o volblocksize=` or the default.
    pub block_size: Option<String>,
    /// `-s`: no refreservation.
    pub sparse: bool,
}

/// Most extents one [`Engine::volume_extents`] call returns.
pub const EXTENTS_MAX: usize = 4096;

impl Imported {
    /// Refuses `dataset` unless it is a volume of this pool.
    pub(crate) fn check_volume(&self, dataset: DatasetId) -> Result<(), EngineError> {
        if !self.datasets.contains(dataset) {
            return Err(EngineError::NoSuchDataset);
        }
        self.datasets.check_available(dataset)?;
        if self.datasets.node(dataset).objset.kind() != ObjsetKind::Volume {
            return Err(invalid("not a volume"));
        }
        Ok(())
    }

    /// Size and block size of volume `dataset`.
    pub(crate) fn volume_info(
        &mut self,
        dataset: DatasetId,
    ) -> Result<volume::VolumeInfo, EngineError> {
        self.check_volume(dataset)?;
        let Imported { pool, datasets, .. } = self;
        let reader = pool.reader();
        Ok(volume::info(
            &mut datasets.node_mut(dataset).objset,
            &reader,
        )?)
    }
}

impl Engine {
    /// The volume called `name`.
    pub fn volume_stat(&self, name: &str) -> Result<VolumeStat, EngineError> {
        let (pool, dataset) = self.find_dataset(name)?;
        let handle = self.pool(&pool)?;
        let mut inner = handle.lock_open();
        stat_of(&mut inner, &pool, dataset)
    }

    /// Every volume of `pool`, parents first.
    pub fn volumes(&self, pool: &str) -> Result<Vec<VolumeStat>, EngineError> {
        let handle = self.pool(pool)?;
        let mut inner = handle.lock_open();
        let ids: Vec<DatasetId> = inner
            .datasets
            .all()
            .into_iter()
            .filter(|id| inner.datasets.node(*id).objset.kind() == ObjsetKind::Volume)
            .collect();
        ids.into_iter()
            .map(|id| stat_of(&mut inner, pool, id))
            .collect()
    }

    /// Reads `buf.len()` bytes of volume `dataset` at `offset` (holes cost no I/O):
    /// [`Engine::volume_read_out`] copied into `buf`.
    pub fn volume_read(
        &self,
        pool: &str,
        dataset: DatasetId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), EngineError> {
        let out = self.volume_read_out(pool, dataset, offset, buf.len())?;
        let mut at = 0;
        for run in out.runs() {
            let len = match run {
                Run::Bytes(bytes) => {
                    buf[at..at + bytes.len()].copy_from_slice(bytes);
                    bytes.len()
                }
                Run::Zeros(len) => {
                    buf[at..at + len].fill(0);
                    len
                }
            };
            at += len;
        }
        assert_eq!(at, buf.len(), "R2: the runs cover the read");
        Ok(())
    }

    /// Reads `len` bytes of volume `dataset` at `offset` as the blocks they lie in (holes
    /// cost no I/O), for a front end that sends them on from there: the clean blocks are
    /// the cache's own, so nothing is copied under the pool lock or after it (a dirty
    /// block's part is copied, since it may change once the lock is let go). The device
    /// reads happen without the pool lock (crate docs, "Reads off the lock"): the blocks
    /// missing from the cache are found under it, read and verified after it is released,
    /// and collected from the cache under it again.
    pub fn volume_read_out(
        &self,
        pool: &str,
        dataset: DatasetId,
        offset: u64,
        len: usize,
    ) -> Result<ReadOut, EngineError> {
        let handle = self.pool(pool)?;
        let mut inner = handle.lock_open();
        inner.check_volume(dataset)?;
        let fetch = {
            let Imported { pool, datasets, .. } = &mut *inner;
            let objset = &mut datasets.node_mut(dataset).objset;
            volume::plan_read(objset, &pool.reader(), offset, len as u64)?
                .map(|fetch| crate::fs::OffLock::new(fetch, pool))
        };
        // Nothing to read from the devices: no reason to let go of the lock.
        if let Some(off_lock) = fetch {
            drop(inner);
            off_lock.run();
            inner = handle.lock_open();
            // The volume may have gone meanwhile.
            inner.check_volume(dataset)?;
        }
        let Imported { pool, datasets, .. } = &mut *inner;
        let reader = pool.reader();
        let objset = &mut datasets.node_mut(dataset).objset;
        Ok(volume::read_out_planned(objset, &reader, offset, len)?)
    }

    /// Writes `data` at `offset`; with `fua` it is durable when this returns.
    pub fn volume_write(
        &self,
        pool: &str,
        dataset: DatasetId,
        offset: u64,
        data: &[u8],
        fua: bool,
    ) -> Result<(), EngineError> {
        let change = Change {
            zero: false,
            offset,
            len: data.len() as u64,
        };
        self.volume_change(pool, dataset, change, fua, |objset, reader| {
            volume::write(objset, reader, offset, data)
        })
    }

    /// [`Engine::volume_write`] of `pieces`, in order from `offset`, kept as they are: a
    /// piece that is one whole block of the volume becomes its dirty record without a copy
    /// (tarn-dataset `volume::write_owned`). One change for the intent log, as one write:
    /// its commit reads the bytes back from the volume, so nothing here is copied for it.
    pub fn volume_write_owned(
        &self,
        pool: &str,
        dataset: DatasetId,
        offset: u64,
        pieces: Vec<Vec<u8>>,
        fua: bool,
    ) -> Result<(), EngineError> {
        let change = Change {
            zero: false,
            offset,
            len: pieces.iter().map(|piece| piece.len() as u64).sum(),
        };
        self.volume_change(pool, dataset, change, fua, |objset, reader| {
            volume::write_owned(objset, reader, offset, pieces)
        })
    }

    /// Trim or write-zeroes of `[offset, offset + len)`: whole blocks become holes.
    pub fn volume_zero(
        &self,
        pool: &str,
        dataset: DatasetId,
        offset: u64,
        len: u64,
        fua: bool,
    ) -> Result<(), EngineError> {
        let change = Change {
            zero: true,
            offset,
            len,
        };
        self.volume_change(pool, dataset, change, fua, |objset, reader| {
            volume::zero(objset, reader, offset, len)
        })
    }

    /// Every write acknowledged so far on volume `dataset` is durable when this returns.
    pub fn volume_flush(&self, pool: &str, dataset: DatasetId) -> Result<(), EngineError> {
        let handle = self.pool(pool)?;
        let inner = handle.lock_for_write()?;
        inner.check_volume(dataset)?;
        if inner.pool.readonly() || inner.datasets.effective(dataset, "sync").0 == "disabled" {
            return Ok(());
        }
        log_commit(&handle, inner, dataset)
    }

    /// Holes and data of `[offset, offset + len)` from the block pointers, at most
    /// [`EXTENTS_MAX`] runs.
    pub fn volume_extents(
        &self,
        pool: &str,
        dataset: DatasetId,
        offset: u64,
        len: u64,
    ) -> Result<Vec<Extent>, EngineError> {
        let handle = self.pool(pool)?;
        let mut inner = handle.lock_open();
        inner.check_volume(dataset)?;
        let Imported { pool, datasets, .. } = &mut *inner;
        let reader = pool.reader();
        let objset = &mut datasets.node_mut(dataset).objset;
        Ok(volume::extents(objset, &reader, offset, len, EXTENTS_MAX)?)
    }

    /// One change of a volume: refusals, admission of its bytes, the change and its
    /// intent-log record, then a log commit (FUA, `sync=always`) or the throttle.
    fn volume_change(
        &self,
        pool: &str,
        dataset: DatasetId,
        change: Change,
        fua: bool,
        f: impl FnOnce(
            &mut tarn_objects::ObjectSet,
            &tarn_pool::PoolReader<'_>,
        ) -> Result<(), tarn_dataset::DatasetError>,
    ) -> Result<(), EngineError> {
        let handle = self.pool(pool)?;
        let mut inner = handle.lock_for_write()?;
        inner.check_volume(dataset)?;
        inner.check_writable()?;
        let settings = inner.datasets.fs_settings(dataset);
        if settings.readonly {
            return Err(EngineError::ReadOnlyDataset);
        }
        // Trim and zeroes give space back: admitted into half the slop, as deletes.
        let op = if change.zero {
            FsOp::Free
        } else {
            FsOp::Write(change.len)
        };
        inner.admit(dataset, op)?;
        {
            let Imported { pool, datasets, .. } = &mut *inner;
            let reader = pool.reader();
            f(&mut datasets.node_mut(dataset).objset, &reader)?;
        }
        if settings.sync != SyncMode::Disabled {
            let open_txg = inner.pool.open_txg();
            inner.logs.add_volume(dataset, open_txg, change);
        }
        let durable =
            settings.sync == SyncMode::Always || (fua && settings.sync != SyncMode::Disabled);
        if durable {
            return log_commit(&handle, inner, dataset);
        }
        self.throttle(&handle, inner)
    }

    /// `tarn set volsize=SIZE NAME` (`force`: shrinking allowed). A refused change changes
    /// nothing.
    pub fn set_volsize(
        &self,
        name: &str,
        value: &str,
        force: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        let _admin = self.admin();
        self.set_volsize_locked(name, value, force, command)
    }

    /// [`Engine::set_volsize`] for a caller that holds the admin lock.
    pub(crate) fn set_volsize_locked(
        &self,
        name: &str,
        value: &str,
        force: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        let (pool, dataset) = self.find_dataset(name)?;
        let handle = self.pool(&pool)?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        let current = inner.volume_info(dataset)?;
        let size = volume::parse_size_for(value, current.block_size)?;
        if size < current.size && !force {
            return Err(invalid(
                "shrinking a volume destroys the data past its new end (use -f to shrink)",
            ));
        }
        // A thick volume's refreservation follows its size (ZFS: when it covered the size).
        let refreservation = inner.datasets.size_prop(dataset, "refreservation");
        let follow = refreservation >= current.size;
        if follow && size > current.size {
            let pool_free = crate::dataset_ops::pool_free_deflated(&inner);
            if size - current.size > inner.datasets.available(dataset, pool_free) {
                return Err(invalid("size is greater than available space"));
            }
        }
        {
            let Imported { pool, datasets, .. } = &mut *inner;
            let reader = pool.reader();
            volume::set_size(&mut datasets.node_mut(dataset).objset, &reader, size)?;
        }
        if follow {
            inner.set_local(dataset, "refreservation", Some(&size.to_string()))?;
        }
        inner.datasets.node_mut(dataset).header_dirty = true;
        self.commit(&mut inner, command)
    }
}

/// Commits the volume's pending records to its intent log (or a txg, module
/// [`crate::zil`]): every change of `dataset` made so far is durable when it returns. When
/// the commit suspends the pool and `failmode=wait`, waits for `clear` and commits again
/// (the records of the txg `clear` committed are gone, those of the open txg pending), as
/// `fsync` does. The lock is released on return.
fn log_commit(
    handle: &PoolHandle,
    inner: MutexGuard<'_, Imported>,
    dataset: DatasetId,
) -> Result<(), EngineError> {
    let committed = handle.log_commit(inner, dataset);
    let Err(error) = committed else {
        return Ok(());
    };
    handle.wait_resumed(error)?;
    let inner = handle.lock_for_write()?;
    inner.check_volume(dataset)?;
    handle.log_commit(inner, dataset)
}

fn stat_of(
    inner: &mut Imported,
    pool: &str,
    dataset: DatasetId,
) -> Result<VolumeStat, EngineError> {
    let info = inner.volume_info(dataset)?;
    let readonly = inner.pool.readonly() || inner.datasets.fs_settings(dataset).readonly;
    let exposed = inner.datasets.effective(dataset, "volmode").0 != "none";
    Ok(VolumeStat {
        pool: pool.to_string(),
        dataset,
        name: inner.datasets.node(dataset).name.clone(),
        size: info.size,
        block_size: info.block_size,
        readonly,
        exposed,
    })
}
