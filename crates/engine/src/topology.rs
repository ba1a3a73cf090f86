//! `tarn pool add` and `tarn pool remove`: changing which top-level vdevs and spares a pool
//! has. The pool layer checks and applies the change (`tarn_pool::Pool::add`, its module
//! `change`); here each verb is recorded in the history and committed in one txg, so the new
//! config reaches every label crash-safely (the pool layer's module comment says why either
//! the old or the new pool imports after a crash at any point).
//!
//! Removing a log device drains it first, as ZFS does: allocation there stops, txgs are
//! committed until the intent log moved to other vdevs and its freed blocks left the
//! deferral window (each sync gives an active dataset a new chain, so at most
//! [`LOG_DRAIN_TXGS`] txgs), then a txg with a condensed space log, then the txg that drops
//! the device from the config. Removing a data or special top-level vdev needs device
//! evacuation and is refused.

use tarn_pool::{CreateSpec, PoolError};

use crate::status::{self, VdevNode};
use crate::{Engine, EngineError, Imported, devices};

/// Most txgs committed while waiting for a log device being removed to empty: the log's
/// chains move at the first sync, their old blocks are reusable `TXG_DEFER` txgs later.
pub(crate) const LOG_DRAIN_TXGS: u64 = tarn_space::TXG_DEFER + 3;

impl Engine {
    /// `tarn pool add [-n] [-f] POOL VDEVSPEC...`: adds data, log and special top-level
    /// vdevs and spares (`spec.name` and `spec.ashift` are ignored). With `dry_run`, checks
    /// everything and returns the layout the pool would have, changing nothing.
    pub fn add_vdevs(
        &self,
        name: &str,
        spec: &CreateSpec,
        dry_run: bool,
        command: &str,
    ) -> Result<Option<VdevNode>, EngineError> {
        let _admin = self.admin();
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        devices::writable(&inner)?;
        if dry_run {
            drop(inner.pool.check_add(spec, self.provider.as_ref())?);
            return Ok(Some(status::add_layout(name, &inner.pool, spec)));
        }
        let mut rng = self.rng.lock().expect("rng lock poisoned").clone();
        inner.pool.add(spec, self.provider.as_ref(), &mut rng)?;
        *self.rng.lock().expect("rng lock poisoned") = rng;
        inner.history.push(self.history_record(command, false));
        inner.sync()?;
        Ok(None)
    }

    /// `tarn pool remove POOL DEVICE`: removes an unused hot spare or a log device. A data
    /// or special top-level vdev is refused (that needs device evacuation).
    pub fn remove_vdev(&self, name: &str, device: &str, command: &str) -> Result<(), EngineError> {
        let _admin = self.admin();
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        devices::writable(&inner)?;
        let is_spare = inner
            .pool
            .spares()
            .iter()
            .any(|s| s.path() == device || s.guid().0.to_string() == device);
        let is_cache = inner
            .pool
            .caches()
            .iter()
            .any(|c| c.path() == device || c.guid().0.to_string() == device);
        let cleared = if is_spare || is_cache {
            let removed = if is_spare {
                inner.pool.remove_spare_device(device)?
            } else {
                inner.pool.remove_cache_device(device)?
            };
            inner.history.push(self.history_record(command, false));
            inner.sync()?;
            removed.into_iter().collect()
        } else {
            self.remove_log(&mut inner, device, command)?
        };
        // The devices are no longer in the committed config: their labels would only make
        // them look in use (ZFS clears them too). A failure here changes nothing that matters.
        for device in cleared {
            let _ = tarn_pool::labels::clear_labels(device.as_ref());
        }
        Ok(())
    }

    /// The log-device part of [`Engine::remove_vdev`] (module comment): drain, condense,
    /// drop. Returns the devices to clear.
    fn remove_log(
        &self,
        inner: &mut Imported,
        device: &str,
        command: &str,
    ) -> Result<Vec<std::sync::Arc<dyn tarn_device::Device>>, EngineError> {
        let index = inner.pool.begin_remove_log(device)?;
        let mut drained = false;
        for _ in 0..LOG_DRAIN_TXGS {
            if let Err(e) = inner.sync() {
                inner.pool.cancel_remove_log(index);
                return Err(e);
            }
            if inner.pool.vdev_allocated(index) == 0 {
                drained = true;
                break;
            }
        }
        if !drained {
            inner.pool.cancel_remove_log(index);
            return Err(PoolError::CannotRemove(
                "the log device still holds intent-log blocks; try again".into(),
            )
            .into());
        }
        inner.pool.condense_space_log();
        inner.sync()?;
        let devices = inner.pool.finish_remove_log(index);
        inner.history.push(self.history_record(command, false));
        inner.sync()?;
        Ok(devices)
    }
}
