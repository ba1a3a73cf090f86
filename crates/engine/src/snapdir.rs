//! Snapshots read through a mount (`<mountpoint>/.tarn/snapshot/<snap>`, ZFS's `.zfs`): the
//! list a front end shows and read-only [`Fs`] calls on a snapshot's committed object set.
//!
//! A snapshot is named by its GUID, not its name, so a front end that kept a number for it
//! never reads another snapshot that took the name later. Each call opens the snapshot's
//! object set from its root block pointer (blocks come through the pool's cache) and drops
//! it after: nothing of a snapshot is held in memory between requests, and nothing is ever
//! written (the access time is off, the object set is never synced).

use tarn_base::Guid;
use tarn_objects::ObjectSet;
use tarn_posix::{AtimeMode, Fs, PosixError};

use crate::fs::now_of;
use crate::{DatasetId, Engine, EngineError};

/// What `.tarn/snapshot` of a mounted dataset shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotDir {
    /// `snapdir=visible`: `.tarn` is listed in the root directory.
    pub visible: bool,
    /// The dataset's snapshots, oldest first: name (after `@`) and GUID.
    pub snapshots: Vec<(String, Guid)>,
}

impl Engine {
    /// The `snapdir` setting and the snapshots of `dataset` of `pool`.
    pub fn fs_snapshot_dir(
        &self,
        pool: &str,
        dataset: DatasetId,
    ) -> Result<SnapshotDir, EngineError> {
        let handle = self.pool(pool)?;
        let inner = handle.lock_open();
        if !inner.datasets.contains(dataset) {
            return Err(EngineError::NoSuchDataset);
        }
        Ok(SnapshotDir {
            visible: inner.datasets.effective(dataset, "snapdir").0 == "visible",
            snapshots: inner
                .datasets
                .node(dataset)
                .snapshots
                .iter()
                .map(|s| (s.name.clone(), s.header.guid))
                .collect(),
        })
    }

    /// Runs `f` on the snapshot of `dataset` whose GUID is `snapshot`, read-only: a snapshot
    /// destroyed meanwhile is `ENOENT` (`PosixError::NotFound`). Whatever `f` changes stays
    /// in an object set that is dropped on return; front ends call only reading methods.
    pub fn fs_snapshot_read<R>(
        &self,
        pool: &str,
        dataset: DatasetId,
        snapshot: Guid,
        f: impl FnOnce(&mut Fs<'_>) -> Result<R, PosixError>,
    ) -> Result<R, EngineError> {
        let handle = self.pool(pool)?;
        let mut inner = handle.lock_open();
        if !inner.datasets.contains(dataset) {
            return Err(EngineError::NoSuchDataset);
        }
        let Some(root) = inner
            .datasets
            .node(dataset)
            .snapshots
            .iter()
            .find(|s| s.header.guid == snapshot)
            .map(|s| s.header.objset)
        else {
            return Err(PosixError::NotFound.into());
        };
        let mut config = inner.datasets.fs_settings(dataset).config;
        config.atime = AtimeMode::Off;
        let now = now_of(self.clock.as_ref());
        let reader = inner.pool.reader();
        let mut objset = ObjectSet::open(&reader, &root)?;
        let mut fs = Fs::new(&mut objset, &reader, now, config);
        Ok(f(&mut fs)?)
    }
}
