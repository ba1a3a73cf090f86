//! Volume verbs for front ends (the NBD server) and the admin verbs only volumes have
//! (`create -V`, `set volsize`): thin doors to `tarn_dataset::volume` under the pool lock,
//! with the same admission, throttle and refusals as file writes.
//!
//! Durability: a flush (and a FUA write, and every write under `sync=always`) commits a txg
//! before it returns; volume writes are not yet recorded in the intent log, so a flush costs
//! a txg commit rather than a log write (docs/PERFORMANCE.md "Volumes" says what that
//! costs). `sync=disabled` makes a flush a no-op, as on ZFS.

use std::sync::MutexGuard;

use tarn_dataset::volume::{self, Extent};
use tarn_objects::ObjsetKind;

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

    /// Reads `buf.len()` bytes of volume `dataset` at `offset` (holes cost no I/O).
    pub fn volume_read(
        &self,
        pool: &str,
        dataset: DatasetId,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), EngineError> {
        let handle = self.pool(pool)?;
        let mut inner = handle.lock_open();
        inner.check_volume(dataset)?;
        let Imported { pool, datasets, .. } = &mut *inner;
        let reader = pool.reader();
        volume::read(&mut datasets.node_mut(dataset).objset, &reader, offset, buf)?;
        Ok(())
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
        self.volume_change(pool, dataset, data.len() as u64, fua, |objset, reader| {
            volume::write(objset, reader, offset, data)
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
        self.volume_change(pool, dataset, 0, fua, |objset, reader| {
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
        flush_locked(&handle, inner)
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

    /// One change of a volume: refusals, admission of `len` bytes, the change, then a txg
    /// commit (FUA, `sync=always`) or the throttle.
    fn volume_change(
        &self,
        pool: &str,
        dataset: DatasetId,
        len: u64,
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
        // Trim and zeroes give space back (len 0): admitted into half the slop, as deletes.
        let op = if len > 0 {
            FsOp::Write(len)
        } else {
            FsOp::Free
        };
        inner.admit(dataset, op)?;
        {
            let Imported { pool, datasets, .. } = &mut *inner;
            let reader = pool.reader();
            f(&mut datasets.node_mut(dataset).objset, &reader)?;
        }
        let durable =
            settings.sync == SyncMode::Always || (fua && settings.sync != SyncMode::Disabled);
        if durable {
            return flush_locked(&handle, inner);
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

/// Commits the open txg (durable when it returns); the lock is released on return.
fn flush_locked(handle: &PoolHandle, inner: MutexGuard<'_, Imported>) -> Result<(), EngineError> {
    let mut inner = handle.wait_commit(inner)?;
    // Always a txg, even one without dirty bytes: a trim's holes are changes that count
    // no dirty bytes.
    inner.sync()?;
    Ok(())
}

fn stat_of(
    inner: &mut Imported,
    pool: &str,
    dataset: DatasetId,
) -> Result<VolumeStat, EngineError> {
    let info = inner.volume_info(dataset)?;
    let readonly = inner.pool.readonly() || inner.datasets.fs_settings(dataset).readonly;
    Ok(VolumeStat {
        pool: pool.to_string(),
        dataset,
        name: inner.datasets.node(dataset).name.clone(),
        size: info.size,
        block_size: info.block_size,
        readonly,
    })
}
